"""Storing a study's forced-prefix samples (issue 34; `worker.samples` makes them).

Like items, samples are written with insert-or-ignore on their unique key (study, length,
kind, index), so a re-run, or two workers finishing the last shards together, stores nothing
twice.  A translation's sentence BLEU is computed as its row is stored, each cell's corpus
BLEU after (a `StudyScore` named `SCORE_NAME`); a failure is recorded the same way, so the
samples page says why a study that asked for samples has none.  Services flush; the caller
commits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, null, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.models import ForcedSample, Study, StudyScore, utcnow
from app.results.forced import SCORE_NAME
from app.results.queries import forced_samples
from app.results.samples import cell_bleu, scored, sentence_bleu, stored_samples
from app.software import software
from app.studies.service import config_of


def missing_cells(session: Session, study: Study) -> list[tuple[int, str]]:
    """The (length, kind) cells of the study's ``[samples]`` that have fewer than
    ``per_kind`` stored samples, in the section's order ([] without samples)."""
    config = config_of(study)
    section = config.samples
    if not section.per_kind:
        return []
    counts = {
        (length, kind): n
        for length, kind, n in session.execute(
            select(ForcedSample.length, ForcedSample.kind, func.count())
            .where(ForcedSample.study_id == study.id)
            .group_by(ForcedSample.length, ForcedSample.kind)
        )
    }
    return [
        (length, kind)
        for length in section.lengths
        for kind in section.kinds_for(config.task)
        if counts.get((length, kind), 0) < section.per_kind
    ]


def sample_scores(kind: str, prefix: str, continuation: str | None, reference: str | None):
    """A sample's ``scores`` column: its sentence BLEU where it gets one, else None."""
    if continuation is None or not scored(kind, reference):
        return None
    text = " ".join(p for p in (prefix, continuation) if p)
    return {"bleu": sentence_bleu(text, reference)}


# Rows per INSERT: a multi-row insert binds ~13 parameters a row, and PostgreSQL's protocol
# takes at most 65,535 in one statement (psycopg refuses more).
WRITE_CHUNK = 1000


def write_samples(session: Session, study_id: int, rows: list[dict[str, Any]]) -> int:
    """Insert samples (`ForcedSample`'s columns), ignoring any that exist, `WRITE_CHUNK` rows
    a statement; returns how many were new.  A row without ``scores`` gets its sentence BLEU
    (`sample_scores`)."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    now = utcnow()
    new = 0
    for start in range(0, len(rows), WRITE_CHUNK):
        values = []
        for r in rows[start : start + WRITE_CHUNK]:
            scores = r.get("scores") or sample_scores(
                r["kind"], r["prefix"], r["continuation"], r.get("reference")
            )
            row = {"study_id": study_id, "created_at": now, **r}
            values.append(row | {"scores": scores or null()})
        stmt = (
            insert(ForcedSample)
            .values(values)
            .on_conflict_do_nothing(index_elements=["study_id", "length", "kind", "index"])
            .returning(ForcedSample.id)
        )
        # The new rows' ids (a multi-row insert's rowcount is -1 on PostgreSQL's driver).
        new += len(session.execute(stmt).all())
    return new


def score_samples(session: Session, study: Study, *, error: str | None = None) -> StudyScore:
    """Each cell's corpus BLEU over the stored samples (or the ``error`` that stopped them),
    stored as the study's current `SCORE_NAME` score."""
    doc: dict[str, Any] = (
        {"error": error}
        if error
        else {"bleu": cell_bleu(stored_samples(forced_samples(session, study)))}
    )
    row = StudyScore(
        study_id=study.id,
        name=SCORE_NAME,
        scores=doc,
        provenance={"software": software(), "bleu": "sacrebleu, app.results.samples"},
    )
    session.add(row)
    session.flush()
    return row
