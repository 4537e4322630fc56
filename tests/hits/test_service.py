"""HIT building: exact mix, every item once, stored permutations, leftovers, determinism."""

from collections import Counter

import pytest
from sqlalchemy import func, select

from app.hits.service import HitBuildError, build_hits, load_attention_items
from app.models import Hit, HitPosition, Item
from tests.hits.factory import make_study


def _hits(session, study):
    rows = session.execute(
        select(Hit, HitPosition, Item)
        .join(HitPosition, HitPosition.hit_id == Hit.id)
        .join(Item, Item.id == HitPosition.item_id)
        .where(Hit.study_id == study.id)
        .order_by(Hit.index, HitPosition.position)
    ).all()
    out: dict[int, list] = {}
    for hit, pos, item in rows:
        out.setdefault(hit.index, []).append((hit, pos, item))
    return out


def test_every_hit_has_the_exact_mix_of_one_length_and_every_item_once(session):
    study = make_study(session, per_cell=20, overlap_share=0.25)
    hits = _hits(session, study)
    assert len(hits) == 8  # 20 // 5 per length, two lengths
    placed = []
    for rows in hits.values():
        hit = rows[0][0]
        assert {item.length for _, _, item in rows} == {hit.length}
        kinds = Counter("attention" if item.is_attention else item.kind for _, _, item in rows)
        assert kinds == {"data": 5, "model": 5, "attention": 1}
        assert [pos.position for _, pos, _ in rows] == list(range(11))
        for _, pos, item in rows:
            assert pos.choice_order[-1] == "none"
            assert sorted(pos.choice_order[:-1]) == list(range(len(item.choices)))
        placed += [item.id for _, _, item in rows]
    assert len(placed) == len(set(placed))
    total = session.scalar(select(func.count()).select_from(Item).where(Item.study_id == study.id))
    assert len(placed) == total  # nothing left over here
    # overlap subset: 25% of each length's 4 HITs, done by 3 annotators
    overlap = Counter(rows[0][0].length for rows in hits.values() if rows[0][0].is_overlap)
    assert overlap == {10: 1, 20: 1}
    assert {rows[0][0].replicas for rows in hits.values() if rows[0][0].is_overlap} == {3}
    assert {rows[0][0].replicas for rows in hits.values() if not rows[0][0].is_overlap} == {1}


def test_the_same_seed_and_items_give_the_same_hits(session):
    a = make_study(session, slug="a")
    b = make_study(session, slug="b")  # same seed, same items by (length, kind, index)

    def shape(study):
        return [
            [(i.length, i.kind, i.index, i.is_attention, tuple(p.choice_order)) for _, p, i in rows]
            for rows in _hits(session, study).values()
        ]

    assert shape(a) == shape(b)


def test_permutations_and_positions_are_shuffled(session):
    study = make_study(session, per_cell=100, attention=0)
    orders = Counter()
    top_slot = Counter()
    for rows in _hits(session, study).values():
        for _, pos, _ in rows:
            orders[tuple(pos.choice_order)] += 1
            top_slot[pos.choice_order.index(0)] += 1
    assert len(orders) > 30  # many different screen orders
    assert set(top_slot) == set(range(5))


def test_leftovers_are_reported_and_a_rebuild_places_only_new_items(session):
    study = make_study(session, per_cell=23, build=False, attention_items=10)
    report = build_hits(session, study)
    assert report.hits == 8
    by_len = {r.length: r for r in report.lengths}
    assert by_len[10].leftovers == {"data": 3, "model": 3}
    assert by_len[10].attention_placed == 4 and by_len[10].attention_missing == 0
    assert any("leftover items: data 3, model 3" in line for line in report.lines())
    again = build_hits(session, study)
    assert again.hits == 0 and again.leftovers == 12
    assert (
        session.scalar(select(func.count()).select_from(Hit).where(Hit.study_id == study.id)) == 8
    )


def test_attention_items_come_from_clear_surplus_data_items_when_short(session):
    study = make_study(session, per_cell=20, build=False, attention_items=0)
    # make 3 surplus-able data items at l=10 clear (top-1 = true word, p >= 0.9)
    extra = session.scalars(
        select(Item).where(Item.study_id == study.id, Item.length == 10, Item.kind == "data")
    ).all()
    for i, item in enumerate(extra[:25]):
        item.choices = [{"word": "x", "prob": 0.95}, *item.choices[1:]]
        item.true_next_word = "x"
        item.index = 100 + i
    for i in range(5):  # 5 more data items so there is a surplus
        session.add(
            Item(
                study_id=study.id,
                length=10,
                kind="data",
                index=200 + i,
                words="a b c d e f g h i j",
                true_next_word="y",
                choices=[{"word": "y", "prob": 0.99}, *extra[0].choices[1:]],
                provenance={},
            )
        )
    session.flush()
    report = build_hits(session, study)
    l10 = next(r for r in report.lengths if r.length == 10)
    assert l10.hits == 4 and l10.attention_promoted == 4 and l10.attention_missing == 0
    assert l10.leftovers["data"] == 1
    l20 = next(r for r in report.lengths if r.length == 20)
    assert l20.attention_missing == 4  # nothing clear to promote: reported
    promoted = session.scalars(
        select(Item).where(Item.study_id == study.id, Item.is_attention.is_(True))
    ).all()
    assert len(promoted) == 4


def test_attention_file(session):
    study = make_study(session, per_cell=5, build=False, attention_items=0)
    ten = "one two three four five six seven eight nine ten"
    n = load_attention_items(
        session,
        study,
        [
            {"words": ten, "answer": "eleven", "distractors": ["a", "b", "c", "d"]},
        ],
    )
    assert n == 1
    with pytest.raises(HitBuildError, match="words"):
        load_attention_items(
            session,
            study,
            [{"words": "too short", "answer": "x", "distractors": ["a", "b", "c", "d"]}],
        )
    report = build_hits(session, study)
    l10 = next(r for r in report.lengths if r.length == 10)
    assert l10.attention_placed == 1 and l10.attention_missing == 0
