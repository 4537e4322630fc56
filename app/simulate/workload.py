"""How much work one simulated study is, before it is run: what the page's limits count.

A replication (:func:`app.studytypes.nextword.simulation.run_replication`) simulates every judgment,
then runs the results' main estimate twice (with and without the study's exclusions).
The estimate's cost is its wild cluster bootstrap (:func:`app.results.stats.wild_ratio`):
the moments ``eps @ cols``, B draws x G annotators x 11 Q columns (Q ratios: per length
each kind of the mix but data over data, and the pooled EB-C when there are several
lengths), then the inversion of each ratio's test (a dozen or so evaluations of B draws
each). So, in nanoseconds of this service's two-core machine,

    work = JUDGMENT_NS x judgments + 2 B (c 11 Q G + INVERT_NS Q),

with G the expected number of annotators (:func:`expected_annotators`) and ``c`` the
cost of one multiply-add of the moments: ``FAST_NS`` while the ``G x 11 Q`` columns fit
a core's 2 MiB cache, else ``SLOW_NS`` (past ~2^17 entries ``wild_ratio`` takes one draw
at a time, and each draw then streams the columns from memory). Judgments alone miss the
many-cells case: 100 lengths x 8 kinds with a cap of 1 is 1,800 judgments but ~14 s a
replication.
The constants were measured over 45 designs (1-100 lengths, 2-8 kinds, caps 1-200,
B = 2,000) on that machine under load: the time taken was at most 1.35 times the
estimate, and well under it for most designs (it ignores that annotators alike, as
with a cap of 1, are multiplied once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from app.simulate.crowd import Heterogeneity
from app.simulate.design import Design

JUDGMENT_NS = 1_500  # simulating a judgment: its assignment, answer and timing
FAST_NS = 0.5  # a multiply-add of the bootstrap moments, their columns in cache
SLOW_NS = 5.0  # the same, the columns streamed from memory for every draw
INVERT_NS = 850  # inverting one ratio's test, per bootstrap draw
_IN_CACHE = 1 << 18  # float64 entries in 2 MiB, the L2 cache of a core of that machine
# Past this many HITs the activity sum is cut (a smaller mean take: more annotators).
_MOST_TERMS = 100_000


def ratios(design: Design) -> int:
    """Q: per length, each kind of the mix over data, and the pooled EB-C."""
    n_len = len(design.lengths)
    return n_len * (len(design.mix) - 1) + (1 if n_len >= 2 else 0)


def expected_annotators(design: Design, assignments: int, hetero: Heterogeneity) -> float:
    """G: the assignments over the mean number an annotator takes. Each wants ``W =
    ceil(a (1 + X))`` HITs, X Lomax with tail ``t`` (``P(X > x) = (1 + x)^-t``), and takes
    at most ``M`` (the cap; with a cell share, at most the share's HITs per length), so
    ``E[min(W, M)] = sum_{k=0}^{M-1} P(W > k) = 1 + sum_{k=1}^{M-1} min(1, (a/k)^t)``.
    The queue's end, where the last annotators find less than they want, is ignored."""
    most = design.cap
    if design.max_cell_share:
        share_cap = max(1, math.floor(design.max_cell_share * design.hits_per_length))
        most = min(most, share_cap * len(design.lengths))
    k = np.arange(1, max(1, min(most, assignments, _MOST_TERMS)), dtype=float)
    wants_more = np.minimum(1.0, (hetero.activity_min / k) ** hetero.activity_tail)
    mean_take = 1.0 + float(wants_more.sum())
    return max(1.0, assignments / mean_take)


@dataclass(frozen=True)
class Workload:
    """One replication of a design, as the limits see it: its judgments, its cells
    (length x kind of the mix), the expected annotators G, the ratios Q, and the
    estimated work ``ns`` (module docstring)."""

    judgments: int
    cells: int
    annotators: float
    ratios: int
    ns: float

    @classmethod
    def of(
        cls, design: Design, judgments: int, assignments: int, hetero: Heterogeneity, b: int
    ) -> Workload:
        g = expected_annotators(design, assignments, hetero)
        q = ratios(design)
        per = FAST_NS if g * 11 * q <= _IN_CACHE else SLOW_NS
        ns = JUDGMENT_NS * judgments + 2.0 * b * (per * 11 * q * g + INVERT_NS * q)
        return cls(judgments, len(design.lengths) * len(design.mix), g, q, ns)

    def describe(self) -> str:
        return (
            f"{self.judgments:,} judgments in {self.cells:,} cells by about "
            f"{self.annotators:,.0f} annotators, an estimated {self.ns / 1e9:.2g} s of work"
        )


__all__ = ["Workload", "expected_annotators", "ratios"]
