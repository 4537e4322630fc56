"""Streamed exports stay in constant memory, give back what the database holds, neutralise
formula-like CSV cells and fail loudly; result exports are well formed."""

from __future__ import annotations

import csv
import gc
import io
import json
import os
import time

import pytest
from sqlalchemy import func, select

from app.models import Annotator, Assignment, Hit, HitPosition, Item, Judgment
from app.results import exports
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.studytypes.nextword import exports as nextword_exports
from tests.factories import StudyFactory, answered_study, broken_study, bulk_judgments


def _rss() -> int:
    """Resident memory of this process in bytes (Linux), without tracing overhead."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _stream_peak(chunks) -> tuple[int, int, int]:
    """(bytes produced, lines, peak growth of resident memory) while consuming `chunks`.

    Resident memory counts everything (Python objects, the driver, SQLite's sorter);
    sampled after every chunk."""
    gc.collect()
    base = peak = _rss()
    total = lines = 0
    for chunk in chunks:
        total += len(chunk)
        lines += chunk.count("\n")
        peak = max(peak, _rss())
    return total, lines, peak - base


@pytest.mark.sqlite  # one backend is enough for the 200k-row memory bound (PostgreSQL below)
def test_judgment_export_of_200k_judgments_streams_in_bounded_memory(session):
    f = StudyFactory(session, "big")
    started = time.perf_counter()
    n = bulk_judgments(session, f, n_hits=2000, per_hit=10, replicas=10, n_annotators=100)
    assert n == 200_000
    inserted = time.perf_counter() - started
    total, lines, growth = _stream_peak(nextword_exports.judgments_csv(session, f.study))
    assert lines == n + 1
    # The file is ~70 MB (several times that as Python objects); a streamed export holds
    # one batch of 2,000 rows at a time.
    assert total > 60_000_000
    assert growth < 25_000_000, f"grew {growth / 1e6:.1f} MB (insert took {inserted:.1f} s)"


def test_streaming_on_postgres_uses_batches(session, backend):
    f = StudyFactory(session, "mid")
    n = bulk_judgments(session, f, n_hits=300, per_hit=10, replicas=2, n_annotators=20)
    chunks = list(nextword_exports.judgments_jsonl(session, f.study))
    assert len(chunks) == -(-n // 2000)  # one chunk per fetched batch
    records = [json.loads(line) for c in chunks for line in c.splitlines()]
    assert len(records) == n and records[0]["study"] == "mid"
    assert [r["judgment_id"] for r in records] == sorted(r["judgment_id"] for r in records)
    items = list(csv.DictReader(io.StringIO("".join(exports.items_csv(session, f.study)))))
    assert len(items) == 3000


def test_results_csv_has_one_row_per_figure_and_variant(session, handmade):
    res = study_results(session, handmade.study, ResultQuery(b=200))
    rows = list(csv.DictReader(io.StringIO(nextword_exports.results_csv(res))))
    assert list(rows[0]) == nextword_exports.RESULT_FIELDS
    per_variant = len(res.results.cgd) + len(res.results.ratios)
    assert len(rows) == 2 * per_variant
    assert {r["exclusions"] for r in rows} == {"on", "off"}


def test_streaming_leaves_the_connection_as_it_was(session, handmade):
    chunks = nextword_exports.judgments_csv(session, handmade.study)
    next(chunks)
    list(chunks)
    # A later statement on the same connection is an ordinary one.
    assert session.connection().get_execution_options().get("yield_per") is None


# --------------------------------------------------------------------------- round trip


def _stored_judgments(session, study) -> list[dict]:
    """The judgments as the database holds them, in judgment-id order."""
    rows = session.execute(
        select(
            Judgment.id,
            Judgment.item_id,
            Judgment.position,
            Judgment.option,
            Judgment.chosen_rank,
            Judgment.chosen_word,
            Judgment.d,
            Judgment.client_ms,
            Annotator.label,
            Annotator.external_id,
            HitPosition.choice_order,
            Item.choices,
            Item.words,
        )
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .join(Item, Item.id == Judgment.item_id)
        .join(
            HitPosition,
            (HitPosition.hit_id == Hit.id) & (HitPosition.position == Judgment.position),
        )
        .where(Hit.study_id == study.id)
        .order_by(Judgment.id)
    ).all()
    return [r._asdict() for r in rows]


def _uncell(v: str) -> str:
    """A CSV text cell back to the stored text (the documented rule)."""
    return v[1:] if v[:1] == "'" and v[1:].startswith(exports.FORMULA_START) else v


def _same_as_stored(records: list[dict], stored: list[dict]) -> None:
    assert [r["judgment_id"] for r in records] == [s["id"] for s in stored]
    for rec, s in zip(records, stored, strict=True):
        words = [c["word"] for c in s["choices"]]
        assert rec["item_id"] == s["item_id"] and rec["position"] == s["position"]
        assert rec["option"] == s["option"] and rec["chosen_rank"] == s["chosen_rank"]
        assert rec["chosen_word"] == s["chosen_word"] and rec["d"] == s["d"]
        assert rec["client_ms"] == s["client_ms"]
        assert rec["annotator_label"] == s["label"] and rec["worker_id"] == s["external_id"]
        assert rec["displayed_ranks"] == s["choice_order"] and rec["choices"] == words
        shown = [None if r == "none" else words[r] for r in s["choice_order"]]
        assert rec["displayed_words"] == shown
        assert rec["is_none"] == (s["chosen_rank"] is None)
        # What was on screen and what was chosen give d back.
        assert rec["displayed_words"][rec["option"]] == rec["chosen_word"]
        assert rec["d"] == float(rec["chosen_word"] != rec["top1_word"])


def test_judgments_of_a_study_built_by_build_hits_round_trip(session):
    study = answered_study(session)
    stored = _stored_judgments(session, study)
    assert len(stored) == 33 and all(s["choice_order"][-1] == "none" for s in stored)
    assert any(s["chosen_rank"] is None for s in stored)  # "none" was chosen

    jsonl = "".join(nextword_exports.judgments_jsonl(session, study))
    _same_as_stored([json.loads(line) for line in jsonl.splitlines()], stored)

    text = "".join(nextword_exports.judgments_csv(session, study))
    rows = list(csv.DictReader(io.StringIO(text)))
    as_records = []
    for row in rows:
        rec = {k: _uncell(v) for k, v in row.items()}
        for k in ("judgment_id", "item_id", "position", "option", "client_ms"):
            rec[k] = int(rec[k])
        rec["chosen_rank"] = int(rec["chosen_rank"]) if rec["chosen_rank"] else None
        rec["chosen_word"] = rec["chosen_word"] or None
        rec["d"] = float(rec["d"])
        rec["is_none"] = {"true": True, "false": False}[rec["is_none"]]
        for k in ("displayed_ranks", "displayed_words", "choices"):
            rec[k] = json.loads(rec[k])
        as_records.append(rec)
    _same_as_stored(as_records, stored)


def test_items_of_a_study_built_by_build_hits_export(session):
    study = answered_study(session)
    placed = dict(session.execute(select(HitPosition.item_id, HitPosition.choice_order)).all())
    records = [
        json.loads(line) for line in "".join(exports.items_jsonl(session, study)).split("\n")[:-1]
    ]
    rows = list(csv.DictReader(io.StringIO("".join(exports.items_csv(session, study)))))
    n_items = session.scalar(select(func.count(Item.id)).where(Item.study_id == study.id))
    assert len(records) == len(rows) == n_items
    for rec, row in zip(records, rows, strict=True):
        if rec["item_id"] in placed:
            assert rec["displayed_ranks"] == placed[rec["item_id"]]
            assert rec["displayed_words"][-1] is None
            assert sorted(rec["displayed_words"][:-1]) == sorted(rec["choices"])
        assert _uncell(row["words"]) == rec["words"]
        assert json.loads(row["choices"]) == rec["choices"]


def test_csv_cells_that_start_like_formulas_are_neutralised(session):
    study = answered_study(session)
    for text in (
        "".join(nextword_exports.judgments_csv(session, study)),
        "".join(exports.items_csv(session, study)),
    ):
        rows = list(csv.reader(io.StringIO(text)))
        cells = [c for row in rows for c in row]
        assert not [c for c in cells if c.startswith(exports.FORMULA_START)]
        assert any(c.startswith("'") for c in cells)
    text = "".join(nextword_exports.judgments_csv(session, study))
    rows = list(csv.DictReader(io.StringIO(text)))
    labels = {r["annotator_label"] for r in rows}
    assert labels == {'\'=HYPERLINK("http://x.test")', "'@SUM(A1)", "'\tlab member"}
    assert {r["worker_id"] for r in rows} >= {"'-A1", "'+A2"}
    chosen = {r["chosen_word"] for r in rows}
    assert chosen & {"'=1+1", "'+44", "'-A1", "'@SUM(A1)"}  # dataset words, neutralised
    # Numbers we write stay numbers.
    for r in rows:
        float(r["d"]), int(r["position"]), int(r["option"]), int(r["client_ms"])


# --------------------------------------------------------------------------- failures

STREAMED = {
    "judgments_csv": nextword_exports.judgments_csv,
    "judgments_jsonl": nextword_exports.judgments_jsonl,
    "items_csv": exports.items_csv,
    "items_jsonl": exports.items_jsonl,
}


@pytest.mark.parametrize("export", ["judgments_csv", "judgments_jsonl", "items_csv", "items_jsonl"])
def test_a_failure_in_the_first_batch_raises_before_any_byte(session, export):
    f = broken_study(session, last=False)
    chunks = STREAMED[export](session, f.study)
    with pytest.raises(TypeError):
        next(chunks)


@pytest.mark.parametrize("export", ["judgments_csv", "judgments_jsonl", "items_csv", "items_jsonl"])
def test_a_failure_later_ends_the_file_with_an_error_record_and_raises(session, export):
    f = broken_study(session, last=True)
    got = []
    with pytest.raises(TypeError):
        for chunk in STREAMED[export](session, f.study):
            got.append(chunk)
    lines = "".join(got).splitlines()
    last = lines[-1]
    if export.endswith("csv"):
        assert len(lines) == 1 + 2000 + 1  # header, the first batch, the error row
        (cell,) = next(csv.reader([last]))
        assert cell.startswith("ERROR: the export failed after 2000 rows")
    else:
        assert len(lines) == 2000 + 1
        assert json.loads(last)["error"].startswith("ERROR: the export failed after 2000 rows")
    assert "incomplete" in last
