"""Build HITs from a study's items (docs/design.md §2). Services flush; the caller commits.

A HIT holds the study's mix of kinds (default 5 `data` + 5 `model`) of one
prefix length plus its attention items, in random order; each position stores
its own random screen order of the choices, with "none" last. Every item goes
into at most one HIT; what does not fill a whole HIT is reported, not dropped.
Everything is drawn from generators seeded by the study's seed, so the same
items give the same HITs.

What depends on the study's type comes from its plug-in (``app.studytypes``): which items
may go into a HIT (a ratings study's: those with a continuation), which may be attention
items (a next-word study's: an unambiguous next word, or a researcher's attention file; a
ratings study's: the worker's attention pairs, none promoted from the data), a position's
screen order (a ratings pair has no choices: ``[]``), and the researcher's attention files.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from app.hits.schemas import BuildReport, HitBuildError, LengthReport
from app.models import Hit, HitPosition, Item, Study
from app.studytypes.registry import study_type_of

# An attention item must have an unambiguous next word: the true next word is
# the model's top-1 with at least this probability.
ATTENTION_MIN_PROB = 0.9


@dataclass(frozen=True)
class _Row:
    id: int
    length: int
    kind: str
    index: int
    is_attention: bool
    k: int
    clear: bool  # qualifies as an attention item


def build_hits(
    session: Session, study: Study, *, attention_min_prob: float = ATTENTION_MIN_PROB
) -> BuildReport:
    """Place every unplaced item of `study` into new HITs and report the rest.

    Per prefix length: as many HITs as the scarcest kind of the mix allows;
    each gets `hit_layout["attention"]` attention items (the study's
    `is_attention` items of that length that have a clear answer, topped up
    with clear items from the data items this build leaves over; a shortfall
    is reported). A share `overlap_share` of each length's HITs, drawn at
    random, is done by `overlap_replicas` annotators; the others by `replicas`.
    Re-running places only items that are not in a HIT yet.
    """
    mix: dict[str, int] = {k: int(n) for k, n in study.hit_layout["mix"].items() if int(n) > 0}
    n_attention = int(study.hit_layout.get("attention", 0))
    if not mix:
        raise HitBuildError("the HIT layout has no items")
    rows = _unplaced_items(session, study, attention_min_prob)
    taken_attention = {
        (length, kind, index)
        for length, kind, index in session.execute(
            select(Item.length, Item.kind, Item.index).where(
                Item.study_id == study.id, Item.is_attention.is_(True)
            )
        )
    }
    next_index = (
        session.scalar(select(func.max(Hit.index)).where(Hit.study_id == study.id)) or -1
    ) + 1
    report = BuildReport(study.slug)
    planned: list[tuple[int, bool, list[_Row]]] = []  # (length, overlap, positions)
    promoted: list[int] = []
    for length in sorted(study.prefix_lengths):
        rng = random.Random(f"{study.seed}:hits:{length}:{next_index}")
        by_kind: dict[str, list[_Row]] = defaultdict(list)
        attention: list[_Row] = []
        for row in rows.get(length, []):
            (attention if row.is_attention else by_kind[row.kind]).append(row)
        for pool in by_kind.values():
            rng.shuffle(pool)
        rng.shuffle(attention)
        n_hits = min(len(by_kind[kind]) // n for kind, n in mix.items())
        lr = LengthReport(length=length, hits=n_hits)
        chosen = {kind: by_kind[kind][: n_hits * n] for kind, n in mix.items()}
        leftover = {
            kind: pool[n_hits * mix.get(kind, 0) :] for kind, pool in sorted(by_kind.items())
        }
        attention = [r for r in attention if r.clear]
        wanted = n_hits * n_attention
        if len(attention) < wanted:
            # Data items this build leaves over are not in any cell's sample, so
            # using the clear ones as attention items biases nothing.
            spare = [
                r
                for r in leftover.get("data", [])
                if r.clear and (length, r.kind, r.index) not in taken_attention
            ]
            extra = spare[: wanted - len(attention)]
            promoted += [r.id for r in extra]
            lr.attention_promoted = len(extra)
            attention += extra
            leftover["data"] = [r for r in leftover.get("data", []) if r not in extra]
        lr.leftovers = {kind: len(pool) for kind, pool in leftover.items()}
        lr.attention_placed = min(len(attention), wanted)
        lr.attention_missing = wanted - lr.attention_placed
        overlap = set(rng.sample(range(n_hits), round(study.overlap_share * n_hits)))
        lr.overlap_hits = len(overlap)
        for h in range(n_hits):
            positions = [r for kind, n in mix.items() for r in chosen[kind][h * n : (h + 1) * n]]
            positions += attention[h * n_attention : (h + 1) * n_attention]
            planned.append((length, h in overlap, positions))
        report.lengths.append(lr)

    if promoted:
        session.execute(
            Item.__table__.update().where(Item.id.in_(promoted)).values(is_attention=True)
        )
    _insert_hits(session, study, planned, next_index)
    return report


def _insert_hits(
    session: Session, study: Study, planned: list[tuple[int, bool, list[_Row]]], next_index: int
) -> None:
    # Number the HITs in a seeded random order so lengths are fielded evenly.
    rng = random.Random(f"{study.seed}:hits:order:{next_index}")
    order = list(range(len(planned)))
    rng.shuffle(order)
    hits = []
    for offset, p in enumerate(order):
        length, overlap, _ = planned[p]
        replicas = max(study.overlap_replicas, study.replicas) if overlap else study.replicas
        hits.append(
            Hit(
                study_id=study.id,
                index=next_index + offset,
                length=length,
                replicas=replicas,
                is_overlap=overlap,
            )
        )
    session.add_all(hits)
    session.flush()
    values = []
    plugin = study_type_of(study)
    for hit, p in zip(hits, order, strict=True):
        rng = random.Random(f"{study.seed}:positions:{hit.index}")
        positions = list(planned[p][2])
        rng.shuffle(positions)
        for pos, row in enumerate(positions):
            screen: list[int | str] = list(range(row.k))
            rng.shuffle(screen)
            values.append(
                {
                    "hit_id": hit.id,
                    "position": pos,
                    "item_id": row.id,
                    "choice_order": plugin.hits.screen_order(screen),
                }
            )
    for start in range(0, len(values), 5000):
        session.execute(insert(HitPosition), values[start : start + 5000])
    session.flush()


def _unplaced_items(session: Session, study: Study, min_prob: float) -> dict[int, list[_Row]]:
    plugin = study_type_of(study)
    placed = select(HitPosition.item_id)
    query = (
        select(
            Item.id,
            Item.length,
            Item.kind,
            Item.index,
            Item.is_attention,
            Item.choices,
            Item.true_next_word,
            Item.provenance,
        )
        .where(Item.study_id == study.id, Item.id.not_in(placed))
        .order_by(Item.length, Item.kind, Item.index, Item.id)
    )
    # Prefixes the worker marked as not to be shown (e.g. a special token was
    # the top-1 under the "skip" policy) never go into a HIT.
    query = plugin.hits.placeable(query.where(Item.skip_reason.is_(None)))
    out: dict[int, list[_Row]] = defaultdict(list)
    for r in session.execute(query):
        clear = plugin.hits.attention_ready(r, min_prob)
        out[r.length].append(
            _Row(r.id, r.length, r.kind, r.index, r.is_attention, len(r.choices), clear)
        )
    return out


def load_attention_items(
    session: Session, study: Study, rows: Iterable[Mapping[str, object]]
) -> int:
    """A researcher's attention file (JSON lines), as the study's type takes it (a
    next-word study: items with an unambiguous next word; a ratings study has none:
    `HitBuildError`); how many items were added."""
    return study_type_of(study).hits.load_attention_items(session, study, rows)
