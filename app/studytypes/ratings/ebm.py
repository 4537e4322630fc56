"""EB-M of a ratings study: a results job that scores its continuations and stores the
document (``study_scores``, name "ebm"), and the stored document read back.

The job runs from ``ebc results score STUDY`` or in the worker when a ratings study's
precompute job ends (``worker.runner``); never in a web request (the scores take seconds
and need the dataset). The statistics are :func:`app.results.stats.ebm.ebm_scores`.

References: the data continuation of each prompt is read from the study's dataset, the
line the item's provenance names (``line``): its words ``[p + l, p + l + l_gen)`` after the
prompt's ``p`` words and ``l`` more (for a data prefix, exactly the words that follow it). A
gap kind's (``data_shuffled+gap@g``, ``data_corrupted@c+gap@g``: EB-M_gap) are those of the
clean prefix of l + g words, ``[p + l + g, p + l + g + l_gen)``, the data item of length l + g
from the same line. A translation's (a seq2seq study) is the reference's rest after its first l
words, scored with sacrebleu's BLEU, sentence BLEU and chrF (``SCORE_SETS``).
The dataset must be the one the items were made from: its sha256 is checked against the
study's, and each reference against what the worker recorded (a data-line item's
``provenance["data_continuation"]``, a data item's true next word). Model prefixes' prompts
come from lines the worker only needs ``p`` words of; one whose line ends before
``p + l + l_gen`` words has no data continuation and counts only in the entropy.
Services flush; the caller commits.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.models import Study, StudyScore
from app.precompute.datasets import Dataset, DatasetError, load_dataset
from app.results.queries import latest_score
from app.results.schemas import EBMOut
from app.results.stats import jsonable
from app.results.stats.ebm import SCORE_SETS, EBMScores, KindTexts, ebm_scores
from app.software import package_version, software
from app.studies.kinds import gap_of
from app.studies.schemas import config_from_columns
from app.studytypes.ratings import queries
from app.studytypes.ratings.queries import Continuation

NAME = "ebm"
DEFAULT_B = 1000
SCORE_PACKAGES = ("sacrebleu", "nltk")
REFERENCES = {
    "lm": "the dataset line's words [p + l, p + l + l_gen) after the prompt; a gap kind's "
    "[p + l + g, p + l + g + l_gen), the data prefix of l + g words' (EB-M_gap)",
    "seq2seq": "the reference's words after its first l (the rest of the translation)",
}


class ScoreError(ValueError):
    """The scores cannot be computed, with a message meant for the researcher."""


def _dataset(study: Study, dataset: Dataset | None) -> Dataset:
    if dataset is None:
        if not Path(study.dataset_path).is_file():
            raise ScoreError(
                f"the dataset {study.dataset_path} is not here: EB-M reads the data "
                "continuations from it (run the job where the worker reads it)"
            )
        try:
            dataset = load_dataset(study.dataset_path, study.dataset_format)
        except DatasetError as exc:
            raise ScoreError(str(exc)) from exc
    if study.dataset_sha256 and dataset.sha256 != study.dataset_sha256:
        raise ScoreError(
            f"{study.dataset_path} changed since the items were made (sha256 "
            f"{dataset.sha256[:12]}… instead of {study.dataset_sha256[:12]}…)"
        )
    return dataset


def reference_of(
    c: Continuation, words_of_line: dict[int, tuple[str, ...]], p: int, l_gen: int | None
):
    """The data continuation of `c`'s prompt (None: its line is too short, or it has none).

    A gap kind's is the line's l_gen words after its clean l + g words (the references of the
    data prefix of l + g words: EB-M_gap). ``l_gen`` None: the rest of the line (a
    translation's reference after its first l words)."""
    words = words_of_line.get(c.line) if c.line is not None else None
    start = p + c.length + (gap_of(c.kind) or 0)
    end = len(words) if words is not None and l_gen is None else start + (l_gen or 0)
    if words is None or len(words) < end or end <= start:
        return None
    ref = words[start:end]
    changed = c.data_continuation is not None and c.data_continuation.split() != list(ref)
    if changed or (c.kind == "data" and c.true_next_word not in (None, ref[0])):
        raise ScoreError(
            f"item {c.item_id}: the dataset's line {c.line} does not continue its prefix as "
            "when it was made (the dataset changed?)"
        )
    return " ".join(ref)


def _prompt_key(c: Continuation) -> str:
    """A prompt is its dataset line; without one (no prompt), each item is its own."""
    return f"line:{c.line}" if c.line is not None else f"item:{c.item_id}"


def texts_by_cell(
    rows: list[Continuation], dataset: Dataset, *, prompt_words: int, l_gen: int | None
) -> dict[int, dict[str, KindTexts]]:
    """The statistics' input: per length and kind, continuations, references, prompt keys."""
    words_of_line = {row.line: row.words for row in dataset.rows}
    grouped: dict[tuple[int, str], list[Continuation]] = defaultdict(list)
    for c in rows:
        grouped[(c.length, c.kind)].append(c)
    cells: dict[int, dict[str, KindTexts]] = defaultdict(dict)
    for (length, kind), group in sorted(grouped.items()):
        cells[length][kind] = KindTexts(
            continuations=[c.continuation for c in group],
            references=[reference_of(c, words_of_line, prompt_words, l_gen) for c in group],
            prompts=[_prompt_key(c) for c in group],
        )
    return dict(cells)


def score_study(
    session: Session,
    study: Study,
    *,
    b: int = DEFAULT_B,
    seed: int = 0,
    by: Actor | None,
    dataset: Dataset | None = None,
) -> StudyScore:
    """Compute `study`'s EB-M document and store it as its current "ebm" scores.

    `dataset`: the study's dataset when the caller has it loaded (the worker); else it is
    read from the study's path. Raises `ScoreError` for one without continuations yet, or a
    dataset that is missing or changed.
    """
    if not 2 <= b <= 100_000:
        raise ScoreError("the bootstrap needs between 2 and 100,000 resamples")
    rows = queries.load_continuations(session, study)
    if not rows:
        raise ScoreError(f"{study.slug} has no continuations yet: precompute it first")
    data = _dataset(study, dataset)
    config = config_from_columns(study)
    task = str(study.task.value)
    # A language model's continuation has l_gen words; a translation's runs to its end, and
    # is scored against the reference's rest.
    l_gen = config.ratings.words_per_continuation(config)
    cells = texts_by_cell(rows, data, prompt_words=study.prompt_words, l_gen=l_gen)
    gaps = {k: g for k in study.kinds if (g := gap_of(k))}
    doc = ebm_scores(cells, b=b, seed=seed, names=SCORE_SETS[task], gaps=gaps)
    provenance = {
        "software": software(),
        "libraries": {name: package_version(name) for name in SCORE_PACKAGES},
        "b": b,
        "seed": seed,
        "level": doc.level,
        "settings": doc.settings,
        "continuation_words": l_gen,
        "prompt_words": study.prompt_words,
        "continuation_top_k": config.ratings.continuation_top_k,
        "references": REFERENCES[task],
        "dataset": data.provenance(),
        "items": len(rows),
    }
    row = StudyScore(study_id=study.id, name=NAME, scores=jsonable(doc), provenance=provenance)
    session.add(row)
    record_by(session, by, "score", study=study, name=NAME, b=b, seed=seed, items=len(rows))
    session.flush()
    return row


_SCORES = TypeAdapter(EBMScores)


def stored_ebm(session: Session, study: Study) -> EBMOut | None:
    """The current stored EB-M document of `study` (None: none yet)."""
    row = latest_score(session, study, NAME)
    if row is None:
        return None
    return EBMOut(
        computed_at=row.computed_at,
        provenance=row.provenance,
        scores=_SCORES.validate_python(row.scores),
    )


__all__ = [
    "DEFAULT_B",
    "NAME",
    "ScoreError",
    "score_study",
    "stored_ebm",
    "texts_by_cell",
]
