"""A study's forced-prefix samples as the pages, the API and the downloads show them (issue 34),
and the ratings study that has people rate a language model's samples.

The worker makes and stores them (`worker.samples`, `app.precompute.samples`); this module only
reads.  Services never commit.
"""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy.orm import Session

from app.models import Study
from app.results import queries
from app.results.samples import (
    BLEU_NOTE,
    SAMPLE_FIELDS,
    Sample,
    samples_csv,
    samples_latex,
    stored_samples,
)
from app.results.schemas import ForcedSampleOut, ForcedSamplesOut, ResultQuery, SampleBleuOut
from app.studies.service import config_of

SCORE_NAME = "forced_samples"  # the worker's StudyScore (app.precompute.samples)
HIDDEN_ERROR = "the samples could not be made"  # what a viewer reads of a failure


def forced_samples(session: Session, study: Study) -> ForcedSamplesOut:
    """The study's samples in the section's order of kinds, with each cell's corpus BLEU."""
    config = config_of(study)
    section = config.samples
    kinds = section.kinds_for(config.task)
    rows = queries.forced_samples(session, study)
    order = {kind: i for i, kind in enumerate(kinds)}
    rows.sort(key=lambda r: (r.length, order.get(r.kind, len(order)), r.kind, r.index))
    samples = stored_samples(rows)
    score = queries.latest_score(session, study, SCORE_NAME)
    doc = score.scores if score is not None else {}
    return ForcedSamplesOut(
        study=study.slug,
        per_kind=section.per_kind,
        lengths=list(section.lengths),
        kinds=kinds,
        made=len(samples),
        skipped=len(rows) - len(samples),
        error=doc.get("error"),
        bleu=[SampleBleuOut(**cell) for cell in doc.get("bleu", [])],
        bleu_note=BLEU_NOTE,
        samples=[ForcedSampleOut(**asdict(s)) for s in samples],
    )


def error_hidden(out: ForcedSamplesOut) -> ForcedSamplesOut:
    """``out`` for one who may only view the study: the worker's exception text (it may name
    the worker's paths) becomes `HIDDEN_ERROR`."""
    return out.model_copy(update={"error": HIDDEN_ERROR}) if out.error else out


def forced_samples_csv(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    """One line per sample (`SAMPLE_FIELDS`), text cells neutralised."""
    out = forced_samples(session, study)
    return samples_csv([_as_sample(s) for s in out.samples])


def forced_samples_tex(session: Session, study: Study, query: ResultQuery, paper: bool) -> str:
    """The paper's table: kind, source, prompt, the forced prefix underlined, continuation."""
    out = forced_samples(session, study)
    caption = f"Forced-prefix samples of {study.model_name} ({study.slug})."
    return samples_latex([_as_sample(s) for s in out.samples], caption)


def _as_sample(s: ForcedSampleOut) -> Sample:
    return Sample(**{name: getattr(s, name) for name in SAMPLE_FIELDS})
