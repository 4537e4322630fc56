"""A study's design as a simulation needs it (:class:`Design`, read from a study by
:meth:`Design.from_study`), its HITs laid out as ``app.hits.service.build_hits`` does
(:func:`hit_layout`), and a simulated crowd with heavy-tailed activity taking their
replica slots under the per-annotator cap and the cell share (:class:`Slots`,
:func:`assign_slots`): what every study type's simulation shares
(``app.studytypes.<type>.simulation``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from app.results.queries import ATTENTION_KIND, kind_codes
from app.results.stats import DATA_KIND, MODEL_KIND
from app.simulate.crowd import Heterogeneity

# The two variants of every simulated result: the study's exclusions applied, or not.
VARIANTS = ("with exclusions", "without exclusions")

T = TypeVar("T")


def by_variant(
    keep: np.ndarray, attention: np.ndarray, figures: Callable[[np.ndarray], T], empty: T
) -> dict[str, T]:
    """A replication's figures for each variant (:data:`VARIANTS`: the answers `keep`
    selects, then all of them): ``figures(mask)``; the first variant's again when the
    exclusions left everything, and `empty` where only attention items are left."""
    out: dict[str, T] = {}
    for variant, mask in zip(VARIANTS, (keep, np.ones(keep.size, bool)), strict=True):
        if variant == VARIANTS[1] and keep.all():
            out[variant] = out[VARIANTS[0]]
        elif not (mask & ~attention).any():
            out[variant] = empty
        else:
            out[variant] = figures(mask)
    return out


DEFAULT_MIX = {"data": 5, "model": 5}


@dataclass(frozen=True)
class Design:
    """What a simulation needs of a study's design (:meth:`from_study` reads a Study)."""

    lengths: tuple[int, ...]
    kinds: list[str]  # by code, as app.results.queries.kind_codes names them
    mix: dict[int, int]  # kind code -> items of that kind per HIT
    attention: int = 1  # attention items per HIT
    items_per_cell: int = 3000
    replicas: int = 1
    overlap_share: float = 0.05
    overlap_replicas: int = 3
    cap: int = 200
    max_cell_share: float | None = None
    min_ms_per_item: int = 1000
    top_k: int = 5
    exclusions: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_study(cls, study: Any) -> Design:
        kinds = kind_codes(study)
        layout = study.hit_layout or {}
        mix_names = {k: int(n) for k, n in (layout.get("mix") or DEFAULT_MIX).items() if int(n)}
        unknown = [k for k in mix_names if k not in kinds]
        if unknown:
            raise ValueError(f"the HIT mix names kinds the study does not list: {unknown}")
        return cls(
            lengths=tuple(int(x) for x in study.prefix_lengths),
            kinds=kinds,
            mix={kinds.index(k): n for k, n in mix_names.items()},
            attention=int(layout.get("attention", 0)),
            items_per_cell=int(study.items_per_cell),
            replicas=int(study.replicas),
            overlap_share=float(study.overlap_share),
            overlap_replicas=int(study.overlap_replicas),
            cap=int(study.per_annotator_cap),
            max_cell_share=study.max_cell_share,
            min_ms_per_item=int(study.min_ms_per_item),
            top_k=int(study.top_k),
            exclusions=dict(study.exclusions or {}),
        )

    @classmethod
    def simple(cls, lengths=(10, 20, 30), **fields: Any) -> Design:
        """A data/model study with docs/design.md's defaults (for tests and the benchmark)."""
        return cls(
            lengths=tuple(lengths),
            kinds=["data", "model", ATTENTION_KIND],
            mix={DATA_KIND: 5, MODEL_KIND: 5},
            **fields,
        )

    @property
    def attention_code(self) -> int:
        return self.kinds.index(ATTENTION_KIND)

    @property
    def per_hit(self) -> int:
        return sum(self.mix.values()) + self.attention

    @property
    def hits_per_length(self) -> int:
        return min(self.items_per_cell // n for n in self.mix.values())

    def check(self) -> None:
        if not self.mix or self.hits_per_length < 1:
            raise ValueError(
                f"{self.items_per_cell} items per cell do not fill one HIT of the mix "
                f"{self.mix}: nothing to simulate"
            )
        if DATA_KIND not in self.mix or MODEL_KIND not in self.mix:
            raise ValueError("the HIT mix needs data and model items to estimate EB-C")


def hit_layout(design: Design) -> tuple[np.ndarray, np.ndarray]:
    """The design's HITs: each position's kind code (the mix in code order, then the
    attention items) and each HIT's length (``hits_per_length`` HITs per length)."""
    pos_kind = np.array(
        [code for code, n in sorted(design.mix.items()) for _ in range(n)]
        + [design.attention_code] * design.attention,
        np.int64,
    )
    hit_length = np.repeat(np.array(design.lengths, np.int64), design.hits_per_length)
    return pos_kind, hit_length


@dataclass(frozen=True)
class Slots:
    """Every (assignment, position) of a simulated study, one entry per answer: who, which
    HIT and position, the item (``hit * per_hit + position``), its kind, length and
    whether it is an attention item."""

    annotator: np.ndarray
    hit: np.ndarray
    pos: np.ndarray
    item: np.ndarray
    kind: np.ndarray
    length: np.ndarray
    attention: np.ndarray

    @classmethod
    def of(
        cls,
        design: Design,
        a_annot: np.ndarray,
        a_hit: np.ndarray,
        pos_kind: np.ndarray,
        hit_length: np.ndarray,
    ) -> Slots:
        """The answers of the assignments ``(a_annot, a_hit)`` (from :func:`assign_slots`)
        to HITs laid out as :func:`hit_layout` says."""
        per_hit = pos_kind.size
        hit = np.repeat(a_hit, per_hit)
        pos = np.tile(np.arange(per_hit), a_hit.size)
        kind = pos_kind[pos]
        return cls(
            annotator=np.repeat(a_annot, per_hit),
            hit=hit,
            pos=pos,
            item=hit * per_hit + pos,
            kind=kind,
            length=hit_length[hit],
            attention=kind == design.attention_code,
        )


def assign_slots(
    rng: np.random.Generator,
    design: Design,
    hetero: Heterogeneity,
    hit_length: np.ndarray,
    replicas: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Annotators take the assignments (HIT replica slots): each wants a heavy-tailed
    number of HITs, at most the cap (and, with a cell share, at most that share of a
    length's HITs: each HIT holds the same number of a cell's items), never one HIT twice.
    Returns ``(annotator, hit)`` per assignment and the number of slots looked at.

    The slots wait in one queue, replica round after round, each round shuffled; an
    annotator takes, in queue order, each slot it may (its length under the annotator's
    share, a HIT it has not done) until it has what it wants. So that this stays linear
    when the share is small (a scan of the whole queue per annotator is quadratic), each
    length keeps its own queue, a linked list of queue positions, and a heap merges their
    heads: a length at the annotator's share leaves the heap until the next annotator,
    and only a slot of a HIT the annotator has done (at most ``replicas - 1`` per HIT it
    took) is passed over. The order taken is the single queue's."""
    rounds = [rng.permutation(np.flatnonzero(replicas > r)) for r in range(int(replicas.max()))]
    queue = np.concatenate(rounds)  # queue position -> HIT
    per_length_cap = design.cap
    if design.max_cell_share:
        per_length_cap = max(1, math.floor(design.max_cell_share * design.hits_per_length))
    # Per length, a linked list of its queue positions (-1: none).
    lengths = hit_length[queue]
    by_length = np.argsort(lengths, kind="stable")
    same = lengths[by_length[1:]] == lengths[by_length[:-1]]
    nxt_a, prv_a = np.full(queue.size, -1), np.full(queue.size, -1)
    nxt_a[by_length[:-1][same]] = by_length[1:][same]
    prv_a[by_length[1:][same]] = by_length[:-1][same]
    starts = by_length[np.flatnonzero(np.r_[True, ~same])]
    first = dict(zip(lengths[starts].tolist(), starts.tolist(), strict=True))
    order, nxt, prv = queue.tolist(), nxt_a.tolist(), prv_a.tolist()
    # (head position, length, version): an entry counts only at its length's version.
    version = dict.fromkeys(first, 0)
    heap = [(pos, ln, 0) for ln, pos in first.items()]
    heapq.heapify(heap)
    annot: list[int] = []
    hits: list[int] = []
    looked, left, g = 0, len(order), 0
    while left:  # (stale entries may outlast the slots)
        want = min(
            design.cap, math.ceil(hetero.activity_min * (1.0 + rng.pareto(hetero.activity_tail)))
        )
        seen: set[int] = set()
        per_length: dict[int, int] = {}
        while heap and len(seen) < want:
            pos, ln, ver = heapq.heappop(heap)
            if ver != version[ln]:
                continue
            looked += 1
            left -= 1
            x = order[pos]
            seen.add(x)
            per_length[ln] = per_length.get(ln, 0) + 1
            annot.append(g)
            hits.append(x)
            after = nxt[pos]
            # Unlink the slot taken.
            if prv[pos] >= 0:
                nxt[prv[pos]] = after
            else:
                first[ln] = after
            if after >= 0:
                prv[after] = prv[pos]
            version[ln] += 1
            if per_length[ln] >= per_length_cap:
                continue
            while after >= 0 and order[after] in seen:
                looked += 1
                after = nxt[after]
            if after >= 0:
                heapq.heappush(heap, (after, ln, version[ln]))
        # The lengths this annotator touched wait again at their first slot.
        for ln in per_length:
            version[ln] += 1
            if first[ln] >= 0:
                heapq.heappush(heap, (first[ln], ln, version[ln]))
        g += 1
    return np.array(annot, np.int64), np.array(hits, np.int64), looked
