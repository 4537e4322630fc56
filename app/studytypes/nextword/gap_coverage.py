"""Does a simulated crowd recover a synthetic pair's EB-C_gap within its interval (issue 34)?

The known truth: a study with a ``[reference]`` model (P_D) whose data prefixes are sampled
from P_D (``data_prefixes = "reference"``, the papers' synthetic setting), so every cell's
items are draws from the two models alone. The worker's word-level d_GD of each item
(``items.reference["word_gd"]``, ``queries.load_references``) is what an **oracle**
annotator of that P_D answers (:class:`~.judges.ModelJudge`: P_D's top word when shown,
else "none"), item by item; over HTTP ``tests/studytypes/nextword/test_gap_recovery.py``
checks it judgment by judgment.

A :class:`Pool` is a large precompute of such a pair: each cell's items, the population a
study draws from. Its exact EB-C_gap (App. A eq. 9 with d_GD) is
``mean d(kind, l) / mean d(data, l + g)`` over the pool (:meth:`Pool.truth`); EB-C alike.
One replication (:func:`simulate_pool_judgments`) lays the study's HITs out and lets a
crowd with heavy-tailed activity take them under the cap exactly as
:mod:`.simulation` does (:mod:`app.simulate.design`), gives each of the study's items a
pool item of its cell drawn with replacement (so the pool is the population, and the truth
exact for it), and answers it as the oracle does; :func:`replication` runs the results'
estimator on it (:func:`app.results.stats.estimate_ebc` with the defaults and the study's
gap kinds) and :func:`coverage` counts the studies whose interval covers the truth.

Seeded and deterministic: replication ``r`` of seed ``s`` draws from
``numpy.random.default_rng([s, r])`` and resamples with seed ``s + r``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from app.results.stats import DATA_KIND, estimate_ebc
from app.simulate.crowd import Heterogeneity
from app.simulate.design import Design, Slots, assign_slots, hit_layout
from app.studytypes.nextword.queries import Judgments, References
from app.studytypes.nextword.synthetic import gap_codes

WORD_GD = 3  # the column of References.values an oracle annotator answers


@dataclass(frozen=True)
class Pool:
    """A synthetic pair's items by cell: ``d[(length, kind code)]`` is each item's d under
    the oracle (the word-level d_GD), the population a simulated study draws from."""

    kinds: list[str]
    d: dict[tuple[int, int], np.ndarray]

    @classmethod
    def of(cls, refs: References) -> Pool:
        """The computed items of a study's references (:func:`.queries.load_references`)."""
        value = refs.values[:, WORD_GD]
        ok = np.isfinite(value)
        cells = sorted(
            {(int(ln), int(k)) for ln, k in zip(refs.length[ok], refs.kind[ok], strict=True)}
        )
        d = {
            (ln, k): value[ok & (refs.length == ln) & (refs.kind == k)].astype(float)
            for ln, k in cells
            if k >= 0
        }
        return cls(kinds=list(refs.kinds), d=d)

    def cgd(self, length: int, code: int) -> float:
        got = self.d.get((length, code))
        return float(got.mean()) if got is not None and got.size else math.nan

    def truth(self) -> dict[tuple[str, int, int], float]:
        """The pool's exact ratios: ``("ebc", l, model)`` and ``("ebc_gap", l, kind)``
        (over data at ``l + g``) wherever both cells exist."""
        out: dict[tuple[str, int, int], float] = {}
        lengths = sorted({ln for ln, _ in self.d})
        for ln in lengths:
            data = self.cgd(ln, DATA_KIND)
            if (ln, 1) in self.d and (ln, DATA_KIND) in self.d:
                out[("ebc", ln, 1)] = self.cgd(ln, 1) / data
            for code, g in gap_codes(self.kinds).items():
                if (ln, code) in self.d and (ln + g, DATA_KIND) in self.d:
                    out[("ebc_gap", ln, code)] = self.cgd(ln, code) / self.cgd(ln + g, DATA_KIND)
        return out


def simulate_pool_judgments(
    design: Design, pool: Pool, hetero: Heterogeneity, rng: np.random.Generator
) -> Judgments:
    """One simulated study of the pool (module docstring) as the columns the results
    functions read. ``design.kinds`` must name the pool's kinds in the same codes, plus
    the attention kind (answered right: attention items are left out of the estimates).
    Every HIT takes ``design.replicas`` annotators: no overlap subset (``overlap_share`` is
    not read), as in the HTTP test's study, so with one replica the design is nested."""
    design.check()
    for code, kind in enumerate(pool.kinds):
        if design.kinds[code] != kind:
            raise ValueError(f"the design's kind {code} is {design.kinds[code]!r}, not {kind!r}")
    pos_kind, hit_length = hit_layout(design)
    per_hit = pos_kind.size
    replicas = np.full(hit_length.size, design.replicas, np.int64)
    a_annot, a_hit, _ = assign_slots(rng, design, hetero, hit_length, replicas)
    s = Slots.of(design, a_annot, a_hit, pos_kind, hit_length)
    # Each of the study's items is one pool item of its cell, drawn with replacement.
    n_items = hit_length.size * per_hit
    item_kind = np.tile(pos_kind, hit_length.size)
    item_length = np.repeat(hit_length, per_hit)
    item_d = np.zeros(n_items)
    for (ln, code), values in pool.d.items():
        at = np.flatnonzero((item_length == ln) & (item_kind == code))
        if at.size:
            item_d[at] = values[rng.integers(0, values.size, at.size)]
    judged = np.unique(np.stack([s.length, s.kind])[:, ~s.attention], axis=1).T
    missing = sorted({(int(ln), int(k)) for ln, k in judged} - set(pool.d))
    if missing:
        raise ValueError(f"the pool has no items of the design's cells {missing}")
    d = np.where(s.attention, 0.0, item_d[s.item])
    n = d.size
    n_annot = int(s.annotator.max()) + 1
    ids = np.arange(1, n_annot + 1, dtype=np.int64)
    choice = np.where(d == 0, 1, 0).astype(np.int64)  # the oracle: top-1, or "none"
    return Judgments(
        kinds=list(design.kinds),
        d=d,
        length=s.length,
        kind=s.kind,
        annotator=s.annotator + 1,
        hit=s.hit + 1,
        item=s.item + 1,
        option=np.where(choice == 1, 0, design.top_k).astype(np.int64),
        choice=choice,
        client_ms=np.full(n, 4000.0),
        too_fast=np.zeros(n, bool),
        attention=s.attention,
        true_rank=np.zeros(n, np.int64),
        **Judgments.simulated_annotators(ids),
    )


def estimate(j: Judgments, *, b: int, seed: int, level: float = 0.95):
    """The results' default estimate with the study's gap kinds (EB-C_gap included)."""
    return estimate_ebc(
        j.d,
        j.length,
        j.kind,
        j.annotator,
        j.hit,
        j.item,
        choice=j.choice,
        b=b,
        seed=seed,
        level=level,
        attention=j.attention,
        gaps=gap_codes(j.kinds),
    )


@dataclass(frozen=True)
class Replication:
    """One simulated study's ratios: ``(name, length, kind code) -> (estimate, low, high,
    p_value)``, and its effective number of annotators."""

    ratios: dict[tuple[str, int, int], tuple[float, float, float, float]]
    n_effective: float
    n_judgments: int


def replication(
    design: Design,
    pool: Pool,
    hetero: Heterogeneity,
    *,
    seed: int,
    r: int,
    b: int = 999,
    level: float = 0.95,
) -> Replication:
    j = simulate_pool_judgments(design, pool, hetero, np.random.default_rng([seed, r]))
    res = estimate(j, b=b, seed=seed + r, level=level)
    ratios = {
        (q.name, int(q.length), int(q.kind)): (q.estimate, q.low, q.high, q.p_value)
        for q in res.ratios
        if q.name in ("ebc", "ebc_gap")
    }
    return Replication(ratios, float(res.n_effective), len(j))


@dataclass(frozen=True)
class CoverageRow:
    """Over the replications, one ratio: its truth, the mean estimate, the share of
    intervals that cover the truth (``coverage_mc``: its Monte Carlo SE), the median
    interval's width relative to the truth, the median effective annotators."""

    name: str
    length: int
    kind: str
    truth: float
    mean_estimate: float
    coverage: float
    coverage_mc: float
    median_rel_width: float
    median_effective: float
    replications: int


def coverage(
    design: Design,
    pool: Pool,
    hetero: Heterogeneity,
    *,
    replications: int,
    seed: int = 0,
    b: int = 999,
    level: float = 0.95,
    truth: dict[tuple[str, int, int], float] | None = None,
) -> tuple[list[CoverageRow], float]:
    """:func:`replication` ``replications`` times; a row per ratio the pool has a truth
    for (:meth:`Pool.truth`, or ``truth``: another one, to check that the count can
    fail), and the CPU seconds per replication."""
    started = time.process_time()
    reps = [
        replication(design, pool, hetero, seed=seed, r=r, b=b, level=level)
        for r in range(replications)
    ]
    per = (time.process_time() - started) / max(replications, 1)
    rows = []
    for key, want in sorted((pool.truth() if truth is None else truth).items()):
        got = np.array([x.ratios[key] for x in reps if key in x.ratios])
        if got.size == 0:
            continue
        est, low, high, _p = got.T
        covered = float(np.mean((low <= want) & (want <= high)))
        n = got.shape[0]
        rows.append(
            CoverageRow(
                name=key[0],
                length=key[1],
                kind=pool.kinds[key[2]],
                truth=want,
                mean_estimate=float(est.mean()),
                coverage=covered,
                coverage_mc=math.sqrt(covered * (1 - covered) / n),
                median_rel_width=float(np.median((high - low) / want)),
                median_effective=float(np.median([x.n_effective for x in reps])),
                replications=n,
            )
        )
    return rows, per


__all__ = [
    "CoverageRow",
    "Pool",
    "Replication",
    "coverage",
    "estimate",
    "replication",
    "simulate_pool_judgments",
]
