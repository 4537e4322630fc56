"""The studies as the API and the downloads describe them: a summary per study, the
detail (configuration and counts), the provenance manifest of its figures, and the label
of its row in a results table (:func:`app.results.exports.task_label`). Services read; they
never commit."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app import __version__
from app.models import Study
from app.results import queries
from app.results.schemas import (
    CountsOut,
    ManifestOut,
    ResultQuery,
    SoftwareOut,
    StudyDetailOut,
    StudySummaryOut,
)
from app.software import software
from app.studies.service import config_of


def study_summary(study: Study) -> StudySummaryOut:
    return StudySummaryOut(
        slug=study.slug,
        title=study.title,
        task=str(study.task.value),
        status=str(study.status.value),
        model=study.model_name,
        prefix_lengths=list(study.prefix_lengths),
        kinds=list(study.kinds),
        created_at=study.created_at,
    )


def study_summaries(studies: Iterable[Study]) -> list[StudySummaryOut]:
    return [study_summary(s) for s in studies]


def study_detail(session: Session, study: Study) -> StudyDetailOut:
    return StudyDetailOut(
        **study_summary(study).model_dump(),
        description=study.description,
        config=config_of(study).model_dump(mode="json"),
        counts=CountsOut(**queries.study_counts(session, study)),
    )


def manifest(session: Session, study: Study) -> ManifestOut:
    """The provenance manifest: what the study's figures were computed from."""
    config = config_of(study).model_dump(mode="json")
    examples = queries.provenance_examples(session, study)
    made_with: list[dict] = []
    for prov in examples.values():
        if isinstance(prov, dict) and prov.get("software") and prov["software"] not in made_with:
            made_with.append(prov["software"])
    return ManifestOut(
        study=study.slug,
        title=study.title,
        task=str(study.task.value),
        service="ebc-judge",
        service_version=__version__,
        generated_at=datetime.now(UTC),
        model={"name": study.model_name, "revision": study.model_revision},
        tokenizer=study.tokenizer_name or study.model_name,
        dataset={
            "path": study.dataset_path,
            "format": study.dataset_format,
            "sha256": study.dataset_sha256,
        },
        seeds={"study": study.seed, "results_default": ResultQuery().seed},
        decoding=dict(study.decoding),
        config=config,
        counts=CountsOut(**queries.study_counts(session, study)),
        item_provenance=examples,
        results_defaults=ResultQuery(),
        software=SoftwareOut(**software()),
        precompute_software=[SoftwareOut(**s) for s in made_with],
    )
