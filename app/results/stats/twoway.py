"""Crossed designs: which design a study has, and two-way (annotator x item) inference.

When items carry the judgments of several annotators (``hits.replicas > 1``, or a large
overlap subset), the judgments of one item share its difficulty: annotator clusters are
no longer independent, and a test that clusters by annotator alone rejects a true
EB-C = 1 in 7-15% of studies (item logit SD 1-1.5; ``benchmarks/stats_calibration.py``).
The design then decides: the headline interval and test are two-way.

**The rule** (:func:`detect_design`): a study is *crossed* when at least
:data:`CROSSED_SHARE` (25%) of its judgments (after exclusions) are on items that two or
more distinct annotators judged; otherwise *nested*. ``replicas >= 2`` gives ~100%; the
default overlap subset (5% of HITs judged 3 times) gives ~14% and stays nested, where the
item component adds next to nothing to the annotator clustering.

**The two-way variance** of each quantity ``q = sum_k c_qk ln P_k`` (a log-linear form in
pooled shares ``P_k = (g_k . S) / (g_k . N)`` over groups ``g_k`` of cells; a CGD, a
ratio, the trend, the EB-C pooled over lengths) is the Cameron-Gelbach-Miller (2011)
``V = V_annotator + V_item - V_annotator x item`` with

- ``V_annotator``: the leave-one-annotator-out jackknife (CV3, :func:`jackknife_t`), which
  holds up with few busy annotators;
- ``V_item`` and ``V_annotator x item``: the cluster-robust (CR1) sums of squared
  influence ``G/(G-1) sum_u psi_u^2`` by item and by (annotator, item) pair. Items and
  pairs lie in one cell each, so these are sums over cells of
  ``c^2 (sum y^2 - 2 P sum y w + P^2 sum w^2)`` (no unit x cell matrix);

and when ``V <= 0``, ``max(V_annotator, V_item)``. The reference distribution is Student's
t with ``min(G_eff annotators, G_eff items) - 1`` degrees of freedom (effective numbers of
:func:`effective_clusters`, at least 1); the interval is ``q +- t SE`` (exp for a ratio)
and the test of ``ln ratio = 0`` (or slope = 0) is the same t, so the interval excludes 1
exactly when ``p <= 1 - level``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

from .cluster import effective_clusters, jackknife_t

CROSSED_SHARE = 0.25
"""Share of judgments on items judged by two or more annotators from which a design is
crossed (:func:`detect_design`)."""

TWOWAY_TEST_NULL = "population EB-C = 1, annotators and items as the sampled units"
TWOWAY_TEST_METHOD = (
    "two-way (annotator x item) t test: Cameron-Gelbach-Miller variance, annotator part by "
    "leave-one-annotator-out jackknife, t with min(G_eff annotators, G_eff items) - 1 "
    "degrees of freedom"
)


@dataclass(frozen=True)
class Crossing:
    """Which design the judgments have, and why (:func:`detect_design`).

    ``shared_share``: share of the judgments on items that two or more distinct
    annotators judged; ``judgments_per_item``: the mean number of judgments on those
    items (NaN when there are none); ``reason``: the rule and the figures in a sentence.
    """

    design: Literal["nested", "crossed"]
    shared_share: float
    judgments_per_item: float
    reason: str


def detect_design(
    item: np.ndarray, annotator: np.ndarray, *, threshold: float = CROSSED_SHARE
) -> Crossing:
    """Nested or crossed, from the judgments' item and annotator codes (0..n-1 each).

    Crossed when ``shared_share >= threshold``. An item is shared when one of its
    judgments has another annotator than the one written last for it (a scatter, a
    gather and a compare over the judgments: no sort)."""
    item = np.asarray(item)
    n = item.size
    if n == 0:
        return Crossing("nested", 0.0, float("nan"), "nested: no judgments")
    k = np.bincount(item)
    shared = np.zeros(k.size, dtype=bool)
    if k.max() >= 2:  # only the rows of items judged more than once are looked at
        multi = k[item] >= 2
        it, an = item[multi], np.asarray(annotator)[multi]
        some = np.empty(k.size, dtype=an.dtype)
        some[it] = an
        shared[it[an != some[it]]] = True
    share = float(k[shared].sum() / n)
    mean_k = float(k[shared].mean()) if shared.any() else float("nan")
    crossed = share >= threshold
    where = f"{share:.0%} of the judgments are on items that several annotators judged" + (
        f" ({mean_k:.1f} judgments an item there)" if np.isfinite(mean_k) else ""
    )
    if crossed:
        reason = (
            f"crossed: {where}, at least {threshold:.0%}; items are shared between "
            "annotators, so the headline interval and test are two-way (annotator x item)"
        )
    else:
        reason = (
            f"nested: {where}, below {threshold:.0%}; annotators are the sampled unit of "
            "the headline interval and test"
        )
    return Crossing("crossed" if crossed else "nested", share, mean_k, reason)


@dataclass(frozen=True)
class LogForms:
    """Quantities ``q = sum_k coef[q, k] ln P_k`` with ``P_k = (groups[k] . S) /
    (groups[k] . N)`` over the cells' sums ``S`` and counts ``N``. ``groups`` is
    ``K x J`` (0/1), ``coef`` ``Q x K``."""

    groups: np.ndarray
    coef: np.ndarray

    def log_values(self, s: np.ndarray, n: np.ndarray) -> np.ndarray:
        """``(..., Q)`` from sums and counts ``(..., J)``; ``0 * ln 0`` taken as 0."""
        with np.errstate(invalid="ignore", divide="ignore"):
            lp = np.log((s @ self.groups.T) / (n @ self.groups.T))
            return np.sum(np.where(self.coef != 0, self.coef * lp[..., None, :], 0.0), axis=-1)

    def cells(self) -> np.ndarray:
        """``Q x J``: which cells enter each quantity."""
        return ((np.abs(self.coef) @ self.groups) > 0).astype(float)

    def linear(self, tot_s: np.ndarray, tot_n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per quantity and cell, the influence coefficient and centre: a unit with sums
        ``y`` and counts ``w`` in cell j has influence ``c_qj (y - m_qj w)`` on ``q``, with
        ``c_qj = sum_k coef_qk g_kj / S_k`` and ``m_qj`` the ``P_k`` of the group of cell
        j that enters ``q`` (one group per cell and quantity)."""
        gs, gn = self.groups @ tot_s, self.groups @ tot_n
        with np.errstate(invalid="ignore", divide="ignore"):
            c = (self.coef / gs) @ self.groups
            used = (self.coef != 0).astype(float)
            m = (used * (gs / gn)) @ self.groups / np.maximum(used @ self.groups, 1.0)
        return c, m


def onecell_sums(
    unit: np.ndarray, cell: np.ndarray, y: np.ndarray, w: np.ndarray, n_cells: int
) -> np.ndarray:
    """Per cell, over the units (items, or annotator x item pairs: each in one cell):
    ``sum y_u^2, sum y_u w_u, sum w_u^2, units, sum n_u, sum n_u^2`` with ``y_u, w_u`` a
    unit's totals and ``n_u`` its judgments (``6 x J``)."""
    n_u = int(unit.max()) + 1
    y_u = np.bincount(unit, weights=y, minlength=n_u)
    w_u = np.bincount(unit, weights=w, minlength=n_u)
    k_u = np.bincount(unit, minlength=n_u).astype(float)
    cell_u = np.zeros(n_u, dtype=np.int64)
    cell_u[unit] = cell
    present = k_u > 0
    return np.stack(
        [
            np.bincount(cell_u, weights=v, minlength=n_cells)
            for v in (y_u * y_u, y_u * w_u, w_u * w_u, present * 1.0, k_u, k_u * k_u)
        ]
    )


def onecell_var(sums: np.ndarray, c: np.ndarray, m: np.ndarray) -> np.ndarray:
    """CR1 variance ``G_q/(G_q - 1) sum_u psi_uq^2`` of each quantity from
    :func:`onecell_sums` and :meth:`LogForms.linear`; ``G_q`` the units entering it."""
    sy2, syw, sw2, g_cell = sums[0], sums[1], sums[2], sums[3]
    with np.errstate(invalid="ignore"):
        ss = np.where(c != 0, c * c * (sy2 - 2.0 * m * syw + m * m * sw2), 0.0)
    g_q = (c != 0) @ g_cell
    with np.errstate(invalid="ignore", divide="ignore"):
        return g_q / np.maximum(g_q - 1.0, 1.0) * ss.sum(axis=1)


@dataclass(frozen=True)
class TwoWay:
    """Two-way inference for each quantity of a :class:`LogForms` (module docstring):
    ``est`` and ``se`` on the log-linear scale, ``t`` quantile and ``df``, the t statistic
    of ``q = 0`` with its two-sided and upper p-values, the variance components, the
    effective numbers, and where the fallback ``max(V_annotator, V_item)`` was used."""

    est: np.ndarray
    se: np.ndarray
    tq: np.ndarray
    df: np.ndarray
    statistic: np.ndarray
    p_value: np.ndarray
    p_greater: np.ndarray
    v_annotator: np.ndarray
    v_item: np.ndarray
    v_pair: np.ndarray
    n_eff_annotators: np.ndarray
    n_eff_items: np.ndarray
    fallback: np.ndarray


def twoway(
    forms: LogForms,
    tot_s: np.ndarray,
    tot_n: np.ndarray,
    s_a: np.ndarray,
    n_a: np.ndarray,
    item_sums: np.ndarray,
    pair_sums: np.ndarray,
    level: float = 0.95,
) -> TwoWay:
    """Two-way (annotator x item) SEs, t intervals' quantiles and tests (module docstring).

    ``tot_s, tot_n``: the cells' totals; ``s_a, n_a``: per annotator (``G x J``);
    ``item_sums``, ``pair_sums``: :func:`onecell_sums` by item and by annotator x item."""
    est = forms.log_values(tot_s, tot_n)
    inv_cells = forms.cells()
    involved = (n_a @ inv_cells.T) > 0
    jack = forms.log_values(tot_s - s_a, tot_n - n_a)
    with np.errstate(invalid="ignore"):
        se_a, _, _ = jackknife_t(est, jack, involved, np.ones(est.size), level)
    c, m = forms.linear(tot_s, tot_n)
    v_a = se_a**2
    v_i = onecell_var(item_sums, c, m)
    v_ai = onecell_var(pair_sums, c, m)
    v = v_a + v_i - v_ai
    bad = ~(v > 0)
    fallback = bad & np.isfinite(v_a) & np.isfinite(v_i)
    v = np.where(bad, np.maximum(v_a, v_i), v)
    g_a = effective_clusters(n_a @ inv_cells.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        g_i = (inv_cells @ item_sums[4]) ** 2 / (inv_cells @ item_sums[5])
        df = np.maximum(np.fmin(g_a, g_i) - 1.0, 1.0)
        se = np.sqrt(v)
        tq = special.stdtrit(df, 0.5 + level / 2.0)
        stat = est / se
        p = 2.0 * special.stdtr(df, -np.abs(stat))
        pg = special.stdtr(df, -stat)
    return TwoWay(est, se, tq, df, stat, p, pg, v_a, v_i, v_ai, g_a, g_i, fallback)


__all__ = [
    "CROSSED_SHARE",
    "TWOWAY_TEST_METHOD",
    "TWOWAY_TEST_NULL",
    "Crossing",
    "LogForms",
    "TwoWay",
    "detect_design",
    "onecell_sums",
    "onecell_var",
    "twoway",
]
