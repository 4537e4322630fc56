"""Intervals for the mean ratings of a ratings study, their gaps, ratios and trends
(DESIGN.md "Second protocol" and "Estimators and error bars").

The ratings design is **crossed**: each pair is rated by several annotators (5 by
default) and each annotator rates many pairs. A rating ``y`` of pair ``i`` by annotator
``a`` shares the annotator's leniency and rater x kind effect with the annotator's other
ratings, and the pair's quality with the pair's other ratings. Resampling annotators
alone treats the pairs as fixed: it leaves out the pair component of the variance and
under-covers.

The headline method is therefore two-way: the Cameron-Gelbach-Miller variance
(Cameron, Gelbach & Miller 2011, "Robust inference with multiway clustering", *J.
Business & Economic Statistics* 29(2)) ``V = V_annotator + V_pair - V_annotator∩pair``,
each term a leave-one-cluster-out jackknife variance (CV3 of MacKinnon, Nielsen & Webb
2023, "Cluster-robust inference: a guide to empirical practice", *J. Econometrics*
232(2)), which unlike the sandwich is not pulled down by the busiest annotators fitting
themselves; the interval is ``theta -+ t_(G_eff - 1) se`` with ``G_eff`` the effective
number of annotators (:func:`~app.results.stats.cluster.effective_clusters`), the
small-cluster correction DESIGN.md asks for. An annotator rates a pair at most once, so
the intersection clusters are single ratings.

Measured coverage of the true gap / ratio at a nominal 95% (:mod:`app.studytypes.ratings.raters`,
1,000 studies each of 3 lengths x 250 pairs per kind, 5 raters per pair, both steps;
Monte Carlo SE ~0.007; ``tests/results/stats/test_ratings.py`` checks the first line):

=====================================================  ===========  ===================
raters                                                 two-way      annotator bootstrap
=====================================================  ===========  ===================
default heterogeneity (G_eff ~21 of ~77 per length)    0.950/0.954  0.860/0.861
a few busy raters (G_eff ~9 of ~24), rater x kind 0.4  0.949/0.953  0.884/0.886
pairs differ more (sd_pair 1.0)                        0.956/0.957  0.736/0.744
=====================================================  ===========  ===================

The two-way cell means cover 0.948-0.954 and the trends 0.955-0.968 in the same runs.
(Without the jackknife, the CR1 sandwich with a normal quantile covered the gap ~0.87
with a few busy raters; a two-way variance by annotator x HIT instead of x pair gave
the same figures as x pair.)

Everything is a function of the per-cell sums ``S_j`` and counts ``N_j`` of the ratings
(a cell is one prefix length x kind at one step), so every jackknife and bootstrap value
is the statistic recomputed from totals, never linearised.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import special

from .bootstrap import percentile_interval, resample_cluster_totals
from .cluster import effective_clusters
from .columns import codes

TWOWAY = "twoway"
ANNOTATOR_BOOTSTRAP = "annotator-bootstrap"
METHOD_LABELS = {
    TWOWAY: "two-way (annotator x pair) cluster jackknife variance "
    "(Cameron-Gelbach-Miller), t interval with G_eff - 1 degrees of freedom",
    ANNOTATOR_BOOTSTRAP: "one-way annotator-cluster bootstrap, percentile "
    "(ignores that pairs are rated by several annotators: under-covers; secondary figure)",
}
"""The interval methods of a ratings study, in words (``Contrast.method``)."""


@dataclass(frozen=True)
class Estimands:
    """Every reported quantity of one step as a function of the cell means ``m_j``.

    ``labels[k]`` is ``(name, length, kind)`` with name ``"mean"`` (a cell), ``"gap"``
    (``m_data - m_model`` at a length), ``"log ratio"`` (``ln m_data - ln m_model``),
    ``"trend gap"`` and ``"trend log ratio"`` (the OLS slope over the lengths,
    ``sum_l c_l x_l`` with ``c_l = (l - mean l) / sum (l - mean l)^2``). The first
    ``a_lin.shape[0]`` quantities are ``a_lin @ m``, the others ``a_log @ ln m``.
    """

    cells: np.ndarray  # J x 2: (length, kind code)
    labels: list[tuple]
    a_lin: np.ndarray
    a_log: np.ndarray

    @property
    def involved(self) -> np.ndarray:
        """``K x J``: which cells enter each quantity."""
        return np.vstack([self.a_lin, self.a_log]) != 0

    def index(self, name: str, length: int | None = None, kind: int | None = None) -> int:
        return self.labels.index((name, length, kind))


def estimands(cells: np.ndarray, data_kind: int, model_kind: int) -> Estimands:
    """The quantities of :class:`Estimands` for the cells present (``J x 2`` rows of
    ``(length, kind)``); a length without both a data and a model cell has no gap."""
    n_cells = cells.shape[0]
    index = {(int(a), int(b)): i for i, (a, b) in enumerate(cells)}
    contrasts: list[tuple[int, np.ndarray]] = []
    for length in np.unique(cells[:, 0]) if n_cells else []:
        d, m = index.get((int(length), data_kind)), index.get((int(length), model_kind))
        if d is not None and m is not None:
            row = np.zeros(n_cells)
            row[d], row[m] = 1.0, -1.0
            contrasts.append((int(length), row))
    lin = [np.eye(n_cells)[j] for j in range(n_cells)] + [r for _, r in contrasts]
    log = [r for _, r in contrasts]
    lin_labels = [("mean", int(a), int(b)) for a, b in cells]
    lin_labels += [("gap", length, None) for length, _ in contrasts]
    log_labels = [("log ratio", length, None) for length, _ in contrasts]
    if len(contrasts) >= 2:
        ls = np.array([length for length, _ in contrasts], dtype=float)
        c = (ls - ls.mean()) / np.sum((ls - ls.mean()) ** 2)
        slope = sum(ci * r for ci, (_, r) in zip(c, contrasts, strict=True))
        lin.append(slope)
        lin_labels.append(("trend gap", None, None))
        log.append(slope)
        log_labels.append(("trend log ratio", None, None))
    return Estimands(
        cells=cells,
        labels=lin_labels + log_labels,
        a_lin=np.array(lin, dtype=float).reshape(-1, n_cells),
        a_log=np.array(log, dtype=float).reshape(-1, n_cells),
    )


def point(est: Estimands, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The quantities from cell sums and counts (any leading axes: resamples, left-out
    clusters); NaN where a cell they need is empty or a mean is not positive."""
    with np.errstate(invalid="ignore", divide="ignore"):
        m = sums / counts
        logm = np.log(np.where(m > 0, m, np.nan))
        out = np.concatenate([_combine(m, est.a_lin), _combine(logm, est.a_log)], axis=-1)
    return out


def _combine(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``x @ a.T`` where a NaN cell spoils only the rows that use it."""
    nan = np.isnan(x)
    out = np.where(nan, 0.0, x) @ a.T
    return np.where(nan.astype(float) @ (a != 0).T.astype(float) > 0, np.nan, out)


def _totals(g: np.ndarray, cell: np.ndarray, v: np.ndarray, n_cells: int) -> np.ndarray:
    """``G x J`` totals of ``v`` by cluster code ``g`` (0..G-1) and cell."""
    n_g = int(g.max()) + 1 if g.size else 0
    return np.bincount(g * n_cells + cell, weights=v, minlength=n_g * n_cells).reshape(n_g, n_cells)


def jackknife_var(
    est: Estimands, y: np.ndarray, cell: np.ndarray, cluster: np.ndarray
) -> np.ndarray:
    """Leave-one-cluster-out variance of every quantity::

        V_k = (G_k - 1)/G_k * sum_(g in k) (theta_(g),k - mean_g theta_(g),k)^2

    over the ``G_k`` clusters with ratings in the quantity's cells (the others leave it
    unchanged); ``theta_(g)`` is recomputed from the totals without cluster g. NaN where
    fewer than 2 clusters enter or a left-out cluster empties a cell. ``cluster`` holds
    non-negative integer ids (dense codes ``0..G-1`` cost least). Clusters inside one
    cell each (pairs, single ratings) change one cell mean only, so their ``theta_(g) -
    theta`` is that change times the cell's column of the quantities (no ``G x J``
    table)."""
    n_cells = est.cells.shape[0]
    n_clusters = int(cluster.max()) + 1
    cell_of = np.zeros(n_clusters, dtype=np.int64)
    cell_of[cluster] = cell
    if np.array_equal(cell_of[cluster], cell):
        tot_s = np.bincount(cell, weights=y, minlength=n_cells)
        tot_n = np.bincount(cell, minlength=n_cells).astype(float)
        s_g = np.bincount(cluster, weights=y, minlength=n_clusters)
        n_g = np.bincount(cluster, minlength=n_clusters)
        with np.errstate(invalid="ignore", divide="ignore"):
            m, m_out = tot_s / tot_n, (tot_s[cell_of] - s_g) / (tot_n[cell_of] - n_g)
            log_m = np.log(np.where(m > 0, m, np.nan))
            log_out = np.log(np.where(m_out > 0, m_out, np.nan))
        d_lin, d_log = m_out - m[cell_of], log_out - log_m[cell_of]
        a_lin, a_log = est.a_lin[:, cell_of].T, est.a_log[:, cell_of].T  # G x K each
        inv = (np.hstack([a_lin, a_log]) != 0) & (n_g > 0)[:, None]  # (ids unused: none)
        # theta_(g) - theta (the variance is the same); a quantity without the cell is
        # unchanged, also where the cell's change is NaN.
        with np.errstate(invalid="ignore"):
            lin = np.where(a_lin != 0, a_lin * d_lin[:, None], 0.0)
            log = np.where(a_log != 0, a_log * d_log[:, None], 0.0)
        theta_g = np.hstack([lin, log])
    else:
        s_g = _totals(cluster, cell, y, n_cells)
        n_g = _totals(cluster, cell, np.ones_like(y), n_cells)
        theta_g = point(est, s_g.sum(axis=0) - s_g, n_g.sum(axis=0) - n_g)
        inv = (n_g @ est.involved.T.astype(float)) > 0
    g_k = inv.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(inv, theta_g, 0.0).sum(axis=0) / g_k
        dev = np.where(inv, theta_g - mean, 0.0)
        var = (g_k - 1) / g_k * np.sum(dev * dev, axis=0)
    return np.where(g_k >= 2, var, np.nan)


@dataclass(frozen=True)
class Intervals:
    """Estimates and intervals of every quantity of :class:`Estimands` (same order).

    Log ratios and their trend are on the log scale here. ``se`` is on the same scale
    (the jackknife one, or the sd of the bootstrap resamples); ``n_annotators`` and
    ``n_effective`` count the annotators with ratings in the quantity's cells."""

    estimate: np.ndarray
    se: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_annotators: np.ndarray
    n_effective: np.ndarray
    method: str
    notes: list[str]


def intervals(
    est: Estimands,
    y: np.ndarray,
    cell: np.ndarray,
    annotator: np.ndarray,
    pair: np.ndarray,
    *,
    method: str = TWOWAY,
    b: int = 2000,
    seed: int | np.random.Generator | None = 0,
    level: float = 0.95,
) -> Intervals:
    """Intervals at ``level`` for the quantities of ``est`` from one step's ratings
    (``y``; ``cell`` indexes ``est.cells``; ``annotator``, ``pair`` any integer ids).

    ``method="twoway"`` (the headline): ``V = V_annotator + V_pair - V_rating`` with each
    term :func:`jackknife_var` (by annotator, by pair, by single rating: the
    intersection of the two, as an annotator rates a pair once), interval ``theta -+
    t_(df) sqrt(V)``, ``df = max(G_eff - 1, 1)``. Where ``V`` is not positive (the
    subtraction can make it so) ``max(V_annotator, V_pair)`` is used, and a note says
    so. Assumes annotators independent of each other, pairs independent of each other,
    and the two kinds of effect additive (the model of :mod:`app.studytypes.ratings.raters`).
    Pairs that share a prompt (item i of each kind at a length) are correlated across
    kinds; treating them as independent makes the gap's interval conservative.

    ``method="annotator-bootstrap"``: ``b`` resamples of annotators with replacement (all
    of an annotator's ratings together), every quantity recomputed from the resampled
    totals, percentile interval; resamples that empty a cell are dropped (noted).
    Treats the pairs as fixed, so it under-covers on this crossed design.
    """
    if method not in METHOD_LABELS:
        raise ValueError(f"unknown interval method {method!r}; one of {sorted(METHOD_LABELS)}")
    n_cells = est.cells.shape[0]
    a = codes(annotator)[0]
    p = codes(pair)[0]
    s_a = _totals(a, cell, y, n_cells)
    n_a = _totals(a, cell, np.ones_like(y), n_cells)
    theta = point(est, s_a.sum(axis=0), n_a.sum(axis=0))
    per_quantity = n_a @ est.involved.T.astype(float)
    n_annot = (per_quantity > 0).sum(axis=0)
    n_eff = effective_clusters(per_quantity)
    notes: list[str] = []
    if method == TWOWAY:
        v_a = jackknife_var(est, y, cell, a)
        v_p = jackknife_var(est, y, cell, p)
        v_r = jackknife_var(est, y, cell, codes(a * (int(p.max()) + 1) + p)[0])
        var = v_a + v_p - v_r
        bad = ~(var > 0) & np.isfinite(v_a) & np.isfinite(v_p)
        if bad.any():
            notes.append(
                "the two-way variance was not positive for "
                f"{int(bad.sum())} figure(s); max(V_annotator, V_pair) used there"
            )
            var = np.where(bad, np.maximum(v_a, v_p), var)
        se = np.sqrt(var)
        with np.errstate(invalid="ignore"):
            tq = special.stdtrit(np.maximum(n_eff - 1.0, 1.0), 0.5 + level / 2.0)
        low, high = theta - tq * se, theta + tq * se
    else:
        sb, nb = resample_cluster_totals(s_a, n_a, b, seed)
        theta_b = point(est, sb, nb)
        bad_draws = int(np.sum(~np.isfinite(theta_b).all(axis=1)))
        if bad_draws:
            notes.append(
                f"{bad_draws} of {b} annotator resamples left a cell empty; "
                "dropped from the intervals"
            )
        with warnings.catch_warnings():  # a quantity with no finite resample: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            low, high = percentile_interval(theta_b, level)
            se = np.nanstd(theta_b, axis=0, ddof=1)
    return Intervals(
        estimate=theta,
        se=se,
        low=low,
        high=high,
        n_annotators=n_annot,
        n_effective=n_eff,
        method=METHOD_LABELS[method],
        notes=notes,
    )
