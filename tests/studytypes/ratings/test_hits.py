"""HIT building for ratings studies: the mix of pairs, the worker's attention pairs, no
screen orders, replicas and overlap as for next-word studies, nothing promoted."""

from collections import Counter

import pytest
from sqlalchemy import func, select

from app.hits.service import HitBuildError, build_hits, load_attention_items
from app.models import Hit, HitPosition, Item
from tests.hits.ratings_factory import make_ratings_study


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


def test_a_ratings_hit_holds_the_mix_of_pairs_and_an_attention_pair(session):
    study = make_ratings_study(
        session, lengths=(10, 20), per_cell=20, replicas=5, overlap_share=0.25
    )
    hits = _hits(session, study)
    assert len(hits) == 8  # 20 // 5 per length, two lengths
    placed, orders = [], set()
    for rows in hits.values():
        hit = rows[0][0]
        assert {item.length for _, _, item in rows} == {hit.length}
        kinds = Counter("attention" if item.is_attention else item.kind for _, _, item in rows)
        assert kinds == {"data": 5, "model": 5, "attention": 1}
        assert [pos.position for _, pos, _ in rows] == list(range(11))
        assert all(pos.choice_order == [] for _, pos, _ in rows)  # nothing to order
        assert all(item.continuation and item.choices == [] for _, _, item in rows)
        orders.add(tuple(item.is_attention or item.kind == "data" for _, _, item in rows))
        placed += [item.id for _, _, item in rows]
    assert len(placed) == len(set(placed))
    assert len(orders) > 1  # pairs are shuffled within HITs, not one fixed layout
    total = session.scalar(select(func.count()).select_from(Item).where(Item.study_id == study.id))
    assert len(placed) == total
    # 5 ratings per pair (the paper), the overlap subset by max(overlap_replicas, replicas)
    assert {h.replicas for h in session.scalars(select(Hit))} == {5}
    assert sum(h.is_overlap for h in session.scalars(select(Hit))) == 2


def test_pairs_without_a_continuation_are_not_placed(session):
    study = make_ratings_study(session, per_cell=10, build=False)
    missing = session.scalars(
        select(Item).where(Item.kind == "model", Item.is_attention.is_(False)).limit(3)
    ).all()
    for item in missing:
        item.continuation = None  # not made (yet): nothing to rate
    session.flush()
    report = build_hits(session, study)
    assert report.hits == 1 and report.lengths[0].leftovers == {"data": 5, "model": 2}
    placed = set(session.scalars(select(HitPosition.item_id)))
    assert not placed & {i.id for i in missing}


def test_data_pairs_are_never_promoted_to_attention_pairs(session):
    study = make_ratings_study(session, per_cell=12, attention_items=1, build=False)
    report = build_hits(session, study)
    length = report.lengths[0]
    assert (length.hits, length.attention_placed, length.attention_missing) == (2, 1, 1)
    assert length.attention_promoted == 0 and length.leftovers == {"data": 2, "model": 2}
    attention = session.scalars(select(Item).where(Item.is_attention.is_(True))).all()
    assert len(attention) == 1 and "attention" in attention[0].provenance


def test_an_attention_file_is_refused_for_a_ratings_study(session):
    study = make_ratings_study(session, per_cell=5)
    before = session.scalar(select(func.count()).select_from(Item))
    row = {"words": " ".join(["w"] * 10), "answer": "a", "distractors": ["b", "c", "d", "e"]}
    with pytest.raises(HitBuildError, match="next-word studies"):
        load_attention_items(session, study, [row])
    assert session.scalar(select(func.count()).select_from(Item)) == before


def test_the_same_seed_and_pairs_give_the_same_hits(session):
    a = make_ratings_study(session, slug="a", per_cell=10)
    b = make_ratings_study(session, slug="b", per_cell=10)

    def shape(study):
        return [
            [(i.length, i.kind, i.index, i.is_attention) for _, _, i in rows]
            for rows in _hits(session, study).values()
        ]

    assert shape(a) == shape(b)
