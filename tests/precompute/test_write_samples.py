"""Storing forced-prefix samples (`write_samples`) on SQLite and PostgreSQL (`--db=all`): more
rows than one INSERT may bind (PostgreSQL takes 65,535 parameters, ~5,000 samples) are stored
in chunks, once each, and a second write of the same rows stores nothing."""

from __future__ import annotations

from sqlalchemy import delete, func, select

from app.models import ForcedSample
from app.precompute.samples import WRITE_CHUNK, write_samples
from tests.hits.factory import make_study

LENGTHS, KINDS, PER_KIND = (1, 2, 3), ("data", "model"), 1000  # 6,000 rows: 78,000 parameters


def _rows() -> list[dict]:
    return [
        {
            "length": length,
            "kind": kind,
            "index": i,
            "source": None,
            "prompt": None,
            "prefix": f"w{i}",
            "continuation": f"c{i}",
            "reference": None,
            "skip_reason": None,
            "provenance": {"line": i + 1},
        }
        for length in LENGTHS
        for kind in KINDS
        for i in range(PER_KIND)
    ]


def _count(session, study) -> int:
    return session.scalar(
        select(func.count()).select_from(ForcedSample).where(ForcedSample.study_id == study.id)
    )


def test_thousands_of_samples_are_stored_in_chunks_once(session):
    study = make_study(session, slug="many", lengths=(3,), per_cell=2, build=False)
    rows = _rows()
    assert len(rows) * 13 > 65_535 and len(rows) > 5 * WRITE_CHUNK
    assert write_samples(session, study.id, rows) == len(rows)
    assert _count(session, study) == len(rows)
    assert write_samples(session, study.id, rows) == 0
    session.execute(
        delete(ForcedSample).where(ForcedSample.study_id == study.id, ForcedSample.length == 2)
    )
    assert write_samples(session, study.id, rows) == 2 * PER_KIND
    assert _count(session, study) == len(rows)
    assert write_samples(session, study.id, []) == 0
