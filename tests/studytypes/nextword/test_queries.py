"""load_judgments and the streamed export queries, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from app.models import Assignment, Item, Judgment
from app.results import queries as shared
from app.results.queries import kind_codes
from app.studytypes.nextword import queries
from app.studytypes.nextword.queries import load_judgments
from tests.factories import StudyFactory


def test_judgment_columns_follow_the_stats_coding(session, handmade):
    j = load_judgments(session, handmade.study)
    assert len(j) == 25
    assert j.kinds[:2] == ["data", "model"] and j.kinds[-1] == "attention"
    a_id = handmade.annotators["A"].id
    a = j.annotator == a_id
    # A on HIT1: ranks [0, 1, 2, 0, 0] -> choice = rank + 1; d = 0 only for the top-1.
    assert j.choice[a].tolist() == [1, 2, 3, 1, 1]
    assert j.d[a].tolist() == [0, 1, 1, 0, 0]
    assert j.kind[a].tolist() == [0, 0, 1, 1, 0]
    assert j.attention[a].tolist() == [False, False, False, False, True]
    assert j.too_fast[a].tolist() == [False, True, False, False, False]
    # Screen slot s shows rank (s + p) % 5, so the slot chosen is (rank - p) % 5.
    assert j.option[a].tolist() == [0, 0, 0, 2, 1]
    assert j.client_ms[a][:4].tolist() == [3000, 400, 5000, 6000]
    assert math.isnan(j.client_ms[a][4])
    assert set(j.length.tolist()) == {10}
    # B chose "none" twice: choice 0, option k.
    b = j.annotator == handmade.annotators["B"].id
    assert j.choice[b].tolist() == [1, 0, 0, 4, 1]
    assert j.option[b].tolist() == [0, 5, 5, 0, 1]
    # True next word: D1 top-1, D2 rank 2 (1-based), D3 top-1, D4 not shown; model items 0.
    assert j.true_rank[a].tolist() == [1, 2, 0, 0, 1]
    assert j.true_rank[b].tolist() == [1, 0, 0, 0, 1]
    assert j.top1_is_true[a].tolist() == [True, False, False, False, True]
    # Per-annotator columns.
    blocked = dict(zip(j.annotator_labels, j.annotator_blocked.tolist(), strict=True))
    assert blocked == {"A": False, "B": False, "C": True, "E": False, "F": False}
    assert set(j.annotator_channels) == {"local"}


def test_judgments_come_in_judgment_id_order_and_skip_skipped_items(session, handmade):
    f = handmade.factory
    skipped = f.item("model", skip_reason="special_top1")
    hit = f.hit([f.item("data"), skipped])
    f.answer(f.annotator("G"), hit, [0, 0])
    j = load_judgments(session, handmade.study)
    assert len(j) == 26  # the judgment on the skipped item is left out
    assert np.all(np.diff(j.item[j.annotator == handmade.annotators["A"].id]) > 0)


@pytest.mark.postgres
def test_packed_and_fetched_columns_agree(session, handmade, backend):
    codes = {k: i for i, k in enumerate(kind_codes(handmade.study))}
    dialect = session.get_bind().dialect.name
    specs = (queries._judgment_spec(), queries._judgment_spec(dialect))
    for spec in (*specs, queries._item_spec(codes, 5, dialect)):
        stmt = (
            shared.select_spec(spec)
            .join_from(Judgment, Assignment, Assignment.id == Judgment.assignment_id)
            .join(Item, Item.id == Judgment.item_id)
            .where(Item.study_id == handmade.study.id)
        )
        fetched = {}
        rows = session.connection().execute(stmt).all()
        for k, (name, *_rest) in enumerate(spec):
            fetched[name] = np.array([r[k] for r in rows], dtype=float)
        copied = shared.packed_columns(session, stmt, spec)
        assert len(rows) == 25
        key = "id" if "id" in fetched else "id_item"
        order_f, order_c = np.argsort(fetched[key]), np.argsort(copied[key])
        for name in fetched:
            np.testing.assert_array_equal(
                fetched[name][order_f], copied[name][order_c].astype(float), err_msg=name
            )


# Words the JSON writer escapes (non-ASCII, quote, slash, <>), plain words that occur in the
# JSON text without being a choice (a key, part of a word), and words that do not occur.
CHOICE_WORDS = ["café", "the", 'a"b', "x/y", "<unk>"]
TRUE_RANKS = {
    "café": 1,
    "the": 2,
    'a"b': 3,
    "x/y": 4,
    "<unk>": 5,
    "there": 0,
    "th": 0,
    "word": 0,
    "prob": 0,
    "caf": 0,
    "100%": 0,
    None: 0,
}


def test_true_rank_of_escaped_and_plain_words(session, handmade):
    """The rank of the true next word among the choices, with PostgreSQL's substring
    prefilter and without it (SQLite), equals the rank found in Python."""
    f = handmade.factory
    ids = {}
    for word in TRUE_RANKS:
        item = f.item("data")
        item.choices = [{"word": w, "prob": 0.1} for w in CHOICE_WORDS]
        item.true_next_word = word
        ids[word] = item.id
    session.flush()
    codes = {k: i for i, k in enumerate(kind_codes(handmade.study))}
    dialect = session.get_bind().dialect.name
    for spec in (
        queries._item_spec(codes, 5, dialect),
        queries._item_spec(codes, 5, "sqlite"),  # the portable CASE, no prefilter
    ):
        stmt = shared.select_spec(spec).where(Item.id.in_(list(ids.values())))
        cols = shared.spec_columns(session, stmt, spec)
        got = dict(zip(cols["id"].tolist(), cols["true_rank"].tolist(), strict=True))
        assert {w: got[i] for w, i in ids.items()} == TRUE_RANKS


def test_item_columns_are_reused_until_the_items_change(session, handmade):
    queries.clear_item_cache()
    load_judgments(session, handmade.study)
    assert len(queries._ITEM_CACHE) == 1
    load_judgments(session, handmade.study)
    assert len(queries._ITEM_CACHE) == 1  # same key: reused
    # An item promoted to attention (as the HIT builder does) changes the key.
    item = session.get(Item, int(load_judgments(session, handmade.study).item[0]))
    item.is_attention = True
    session.flush()
    j = load_judgments(session, handmade.study)
    assert len(queries._ITEM_CACHE) == 2
    assert j.attention[j.item == item.id].all()


def test_empty_study_loads_empty_columns(session):
    f = StudyFactory(session, "empty")
    j = load_judgments(session, f.study)
    assert len(j) == 0 and j.choice.dtype.kind == "i"


def test_export_rows_carry_everything_a_reanalysis_needs(session, handmade):
    batches = list(queries.iter_judgment_rows(session, handmade.study))
    rows = [dict(zip(keys, r, strict=True)) for keys, batch in batches for r in batch]
    assert len(rows) == 25
    first = rows[0]
    order = first["choice_order"]  # raw: JSON text on SQLite, parsed by psycopg
    assert (json.loads(order) if isinstance(order, str) else order) == [0, 1, 2, 3, 4, "none"]
    assert first["kind"] == "data" and first["annotator_label"] == "A"
    assert first["external_assignment_id"].startswith("asg-")
    batches = list(shared.iter_item_rows(session, handmade.study))
    items = [dict(zip(keys, r, strict=True)) for keys, batch in batches for r in batch]
    assert len(items) == 10 and all(r["hit_id"] is not None for r in items)


def test_study_counts(session, handmade):
    counts = shared.study_counts(session, handmade.study)
    assert counts == {
        "items": 8,
        "attention_items": 2,
        "skipped_items": 0,
        "hits": 2,
        "assignments_submitted": 5,
        "judgments": 25,
        "annotators": 5,
    }
