"""CGD and EB-C from human next-word judgments: estimators and error bars (DESIGN.md §1).

Every function here is pure: numpy arrays in, numbers out, randomness only through an
explicit ``seed``. One row of the inputs is one **judgment** (one annotator's choice
for one item). The columns are

- ``d``: 0.0 when the annotator chose the model's top-1 word, 1.0 otherwise ("none"
  included), i.e. a one-judgment sample of ``d_GD(P_M, P_D)``;
- ``length`` and ``kind``: the **cell** (prefix length in words, prefix-kind code; the
  caller maps kind names to integer codes, ``data_kind`` and ``model_kind`` say which
  codes are ``data`` and ``model``);
- ``annotator``, ``hit``, ``item``: integer (or any sortable) identifiers;
- ``choice`` (plurality estimator only): the model rank of the chosen word, 1 for the
  top-1 word, 2..k for the others, and any other code (0 or k+1) for "none".

Attention items never enter CGD; pass them as ``attention`` (or drop them before).
Exclusions (blocked annotators, failed attention checks, too-fast answers) are a
``keep`` mask so the caller can compute with and without them side by side.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
from scipy import special

from .bootstrap import bca_interval, percentile_interval, resample_cluster_totals
from .cluster import WildRatio, effective_clusters, jackknife_t, wild_ratio
from .columns import DATA_KIND, MODEL_KIND, Kind, cells, codes, unique_inverse
from .figure import Figure
from .sequential import anytime_interval, half_width, holm, stop_now
from .twoway import (
    TWOWAY_TEST_METHOD,
    TWOWAY_TEST_NULL,
    LogForms,
    detect_design,
    onecell_sums,
    twoway,
)

FEW_ANNOTATORS = 30
"""Below this *effective* number of annotators (:func:`effective_clusters`) a figure's
interval and test are flagged as unreliable."""

Estimator = Literal["single", "plurality"]
Unit = Literal["auto", "annotator", "twoway", "hit", "item"]
CiMethod = Literal["wild", "percentile", "bca"]

TEST_NULL = "population EB-C = 1, annotators as the sampled unit"
TEST_METHOD = "wild cluster bootstrap-t (restricted, Rademacher weights), clustered by annotator"
INTERVAL_LABELS = {
    "wild": "ratios: inverted wild cluster bootstrap-t test; CGD and trend: jackknife "
    "(leave one cluster out) t interval with G_eff - 1 degrees of freedom",
    "percentile": "percentile cluster bootstrap",
    "bca": "BCa cluster bootstrap",
    "cgm": "two-way (annotator x item): Cameron-Gelbach-Miller variance with the annotator "
    "part by leave-one-annotator-out jackknife, t interval with min(G_eff annotators, "
    "G_eff items) - 1 degrees of freedom (on the log scale for ratios)",
}
"""What each interval method is, in words (``EBCResults.interval``)."""

# --------------------------------------------------------------------------- plurality


def plurality_by_item(
    item: np.ndarray, choice: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Plurality estimator of ``d_GD`` per item, with DESIGN.md's tie rule.

    For item i with judgments choosing ranks ``c_1..c_m``, let ``M_i`` be the set of
    modal (most frequent) choices and ``k = |M_i|``. Then::

        d_i = 0          if M_i == {top-1}           (top-1 is the unique plurality)
        d_i = 1 - 1/k    if top-1 in M_i and k > 1    (ties with k-1 others)
        d_i = 1          if top-1 not in M_i         ("none" is a choice like any word)

    This is ``P[top-1 != a uniformly drawn member of M_i]``: the person's argmax is
    estimated by the plurality, ties broken at random. An item judged once gives
    ``d_i = 1[c_1 != 1]``, the single-judgment value.

    Returns ``(item_ids, d_item, n_judgments)`` with ``item_ids`` sorted.
    """
    item = np.asarray(item)
    choice = np.asarray(choice)
    item_ids, ii = unique_inverse(item)
    choices, cc = unique_inverse(choice)
    n_i, n_c = item_ids.size, choices.size
    counts = np.bincount(ii * n_c + cc, minlength=n_i * n_c).reshape(n_i, n_c)
    modal = counts == counts.max(axis=1, keepdims=True)
    k = modal.sum(axis=1)
    top = np.flatnonzero(choices == 1)
    top1_modal = modal[:, top[0]] if top.size else np.zeros(n_i, dtype=bool)
    d_item = np.where(top1_modal, 1.0 - 1.0 / k, 1.0)
    return item_ids, d_item, counts.sum(axis=1)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Quantity:
    """One reported number with its uncertainty.

    ``name`` is ``"cgd"`` (one cell), ``"ebc"`` (model over data at one length),
    ``"ratio"`` (a diagnostic kind over data at one length), ``"ebc_gap"`` (a gap kind at
    length l over data at ``reference_length`` = l + g: EB-C_gap) or ``"trend"`` (slope of
    ``ln EB-C`` per word of prefix length, OLS over the lengths).

    ``estimate, se, low, high`` come from the chosen method (``method``): ``"wild"``
    for a ratio under the default (the inverted wild cluster bootstrap-t test, see
    :func:`wild_ratio`; ``se`` is the jackknife one), ``"jackknife-t"`` for a CGD or the
    trend under the default (:func:`jackknife_t` with ``G_eff - 1`` degrees of
    freedom), the bootstrap ``"percentile"`` or ``"bca"``, or ``"cgm"`` for the two-way
    variance. ``delta_*`` is the cluster-robust delta-method cross-check on the log
    scale (one-way by the resampling unit; by annotator when the unit is ``twoway``).
    ``iid_se`` is the binomial-style standard error that ignores clustering, and
    ``design_effect = (se / iid_se)**2``. Counts are of the judgments, items,
    annotators and clusters that enter the number. ``n_effective`` is the effective
    number of annotators, ``(sum_g n_g)^2 / sum_g n_g^2`` over the judgments ``n_g``
    each annotator contributes (:func:`effective_clusters`); ``few_annotators`` warns
    when it is below 30. ``p_value``: for a ratio, the test of ratio = 1 by the interval's
    own unit (the wild cluster bootstrap by annotator, HIT or item; the two-way t test
    when the unit is ``twoway``); for the trend under the default or two-way, the t test
    of slope = 0; NaN otherwise. ``p_holm``: ``p_value`` Holm-adjusted over the lengths
    (the family: one kind's ratios over data at every length; NaN for a CGD and the
    trend). ``av_low``, ``av_high``: for a ratio, the anytime-valid interval (asymptotic
    confidence sequence over annotators, :mod:`.sequential`), "valid however often you
    look"; ``av_half_width`` its ``(high - low) / 2`` for the stop rule
    (:func:`~.sequential.stop_now`). ``low``/``high`` are valid at the planned n (one
    look).
    """

    name: Literal["cgd", "ebc", "ratio", "ebc_gap", "trend"]
    length: int | None
    kind: Kind | None
    reference_kind: Kind | None
    estimate: Figure
    se: Figure
    low: Figure
    high: Figure
    method: str
    level: float
    delta_se: Figure
    delta_low: Figure
    delta_high: Figure
    iid_se: Figure
    design_effect: Figure
    n_judgments: int
    n_items: int
    n_annotators: int
    n_clusters: int
    few_annotators: bool
    n_effective: Figure = float("nan")
    p_value: Figure = float("nan")
    reference_length: int | None = None  # a ratio's denominator cell's length
    p_holm: Figure = float("nan")
    av_low: Figure = float("nan")
    av_high: Figure = float("nan")
    av_half_width: Figure = float("nan")


RATIO_NAMES = ("ebc", "ratio", "ebc_gap")
"""The quantities that are ratios of two cells' CGDs (their intervals and tests are a ratio's)."""


@dataclass(frozen=True)
class ClusterTest:
    """The headline test of EB-C = 1 at one length (``length=None``: pooled over the
    lengths, ``sum of model sums / model counts`` over ``sum of data ...``).

    By the unit of the intervals (``method``, ``null`` say it in words): with annotators
    (or HITs, items) as the unit, ``statistic`` is the cluster-robust t of ``CGD(model) -
    CGD(data)``; ``p_value`` two-sided, ``p_greater`` for EB-C > 1, from ``b`` wild
    cluster bootstrap draws (:func:`wild_ratio`); ``low``/``high`` its inversion at
    ``level``. Two-way (crossed designs): the t test of ``ln EB-C = 0`` with the two-way
    SE (:mod:`.twoway`), ``low``/``high`` the matching t interval. Either way the interval
    excludes 1 exactly when ``p_value <= 1 - level``. ``p_holm``: Holm-adjusted over the
    lengths (NaN for the pooled test, a headline and not a member of the family);
    ``av_low``/``av_high``: the anytime-valid interval (:mod:`.sequential`).
    """

    length: int | None
    estimate: Figure
    statistic: Figure
    p_value: Figure
    p_greater: Figure
    low: Figure
    high: Figure
    level: float
    b: int
    n_annotators: int
    n_effective: Figure
    few_annotators: bool
    null: str = TEST_NULL
    method: str = TEST_METHOD
    p_holm: Figure = float("nan")
    av_low: Figure = float("nan")
    av_high: Figure = float("nan")


@dataclass(frozen=True)
class EBCResults:
    """CGD per cell, EB-C and diagnostic ratios per length, and the trend.

    ``unit`` is what was resampled (``annotator``, ``hit``, ``item``) or ``twoway``
    (annotator x item, :mod:`.twoway`), after ``auto`` was resolved by the design;
    ``interval`` says the method in words. ``design`` (``nested`` or ``crossed``),
    ``design_reason`` (a sentence) and ``shared_share`` (share of judgments on items
    several annotators judged) are :func:`~.twoway.detect_design`'s. ``tests`` are the
    headline tests of EB-C = 1 (per length, and pooled when there are several) by the
    intervals' unit; ``secondary_tests`` the wild annotator-only tests with their
    intervals when the unit is not the annotator (labelled secondary); ``multiplicity``
    says, with several lengths, which figures are the headline and how the per-length
    p-values are adjusted. ``n_effective`` is
    the effective number of annotators over all judgments; ``few_annotators`` is set
    when any figure's effective number is below 30. ``bootstrap_ebc`` keeps the
    resampled EB-C values of a pairs bootstrap (``B x n_lengths``; ``None`` for
    ``wild`` and ``twoway``) so a caller can derive further figures from them.
    """

    estimator: str
    unit: str
    ci: str
    level: float
    b: int
    seed: int | None
    n_judgments: int
    n_items: int
    n_annotators: int
    n_clusters: int
    few_annotators: bool
    cgd: list[Quantity]
    ratios: list[Quantity]
    trend: Quantity | None
    warnings: list[str] = field(default_factory=list)
    n_effective: float = float("nan")
    interval: str = ""
    tests: list[ClusterTest] = field(default_factory=list)
    bootstrap_ebc: np.ndarray | None = field(default=None, repr=False, compare=False)
    design: str = "nested"
    design_reason: str = ""
    shared_share: float = 0.0
    secondary_tests: list[ClusterTest] = field(default_factory=list)
    multiplicity: str = ""

    def ebc(self, length: int) -> Quantity:
        """The EB-C quantity at ``length`` (KeyError when the length has no EB-C)."""
        for q in self.ratios:
            if q.name == "ebc" and q.length == length:
                return q
        raise KeyError(length)

    def stop(self, h: float) -> bool:
        """The stop rule (:func:`~.sequential.stop_now`): every EB-C's anytime-valid
        interval has a half-width of at most ``h``."""
        ebc = [q for q in self.ratios if q.name == "ebc"]
        return stop_now([q.av_low for q in ebc], [q.av_high for q in ebc], h)

    def cell(self, length: int, kind: int) -> Quantity:
        for q in self.cgd:
            if q.length == length and q.kind == kind:
                return q
        raise KeyError((length, kind))


# --------------------------------------------------------------------------- core


@dataclass(frozen=True)
class _Design:
    """Rows (judgments) reduced to what every estimator needs.

    ``y`` and ``w`` are each row's contribution to a cell's numerator and denominator
    (``CGD_j = sum y / sum w``).
    """

    y: np.ndarray
    w: np.ndarray
    cell: np.ndarray
    cells: np.ndarray
    annotator: np.ndarray
    hit: np.ndarray
    item: np.ndarray
    iid_unit: np.ndarray  # the unit treated as independent for iid_se


def _design(
    d: np.ndarray,
    length: np.ndarray,
    kind: np.ndarray,
    annotator: np.ndarray,
    hit: np.ndarray,
    item: np.ndarray,
    choice: np.ndarray | None,
    estimator: str,
    attention: np.ndarray | None,
    keep: np.ndarray | None,
) -> _Design:
    d = np.asarray(d, dtype=float)
    n = d.size
    cols = [np.asarray(x) for x in (length, kind, annotator, hit, item)]
    if any(c.shape != (n,) for c in cols):
        raise ValueError("d, length, kind, annotator, hit and item must be 1-d of one length")
    mask = np.ones(n, dtype=bool)
    if attention is not None:
        mask &= ~np.asarray(attention, dtype=bool)
    if keep is not None:
        mask &= np.asarray(keep, dtype=bool)
    if not mask.all():  # (copies of a million entries are not free)
        cols, d = [c[mask] for c in cols], d[mask]
    length, kind = cols[0], cols[1]
    # Identifiers become codes 0..G-1 once, so every clustering below is a bincount.
    annotator, hit, item = (codes(c)[0] for c in cols[2:])
    if d.size == 0:
        raise ValueError("no judgments left after attention items and exclusions")
    present, cell = cells(length, kind)
    if estimator == "single":
        y, w = d, np.ones_like(d)
        iid_unit = np.arange(d.size)
    elif estimator == "plurality":
        if choice is None:
            raise ValueError("the plurality estimator needs `choice` (model rank chosen)")
        choice = np.asarray(choice)[mask]
        item_ids, d_item, m_item = plurality_by_item(item, choice)
        pos = np.searchsorted(item_ids, item)
        # Each of an item's m judgments carries 1/m of the item: clustering by item or
        # HIT then sees exactly the item values; by annotator, a linearised share.
        y, w = d_item[pos] / m_item[pos], 1.0 / m_item[pos]
        iid_unit = pos
    else:
        raise ValueError(f"unknown estimator {estimator!r}")
    return _Design(y, w, cell, present, annotator, hit, item, iid_unit)


def _totals(g: np.ndarray, cell: np.ndarray, v: np.ndarray, n_cells: int) -> np.ndarray:
    """``G x J`` totals of ``v`` by cluster code ``g`` (0..G-1) and cell."""
    n_g = int(g.max()) + 1
    return np.bincount(g * n_cells + cell, weights=v, minlength=n_g * n_cells).reshape(n_g, n_cells)


def _quantity_matrix(
    cells: np.ndarray, data_kind: int, model_kind: int, gaps: Mapping[int, int] | None = None
) -> tuple[np.ndarray, list[tuple], np.ndarray]:
    """Every reported quantity as a linear map of ``ln CGD`` per cell.

    Rows: ``ln CGD_j`` for each cell; ``ln CGD_(l,k) - ln CGD_(l,data)`` for each length and
    non-data kind, but a gap kind (``gaps``: its code -> g), whose row is ``ln CGD_(l,k) - ln
    CGD_(l+g,data)`` (EB-C_gap, where that data cell exists); the OLS slope ``sum_l c_l ln
    EB-C_l`` with ``c_l = (l - mean l) / sum (l - mean l)^2`` when two or more lengths have
    EB-C.
    Returns ``(A, labels, exp_scale)``; ``exp_scale`` marks rows reported as ``exp``; a
    label is (name, length, kind, reference kind, reference length).
    """
    gaps = gaps or {}
    n_cells = cells.shape[0]
    rows: list[np.ndarray] = []
    labels: list[tuple] = []
    for j, (length, kind) in enumerate(cells):
        r = np.zeros(n_cells)
        r[j] = 1.0
        rows.append(r)
        labels.append(("cgd", int(length), int(kind), None, None))
    index = {(int(a), int(b)): j for j, (a, b) in enumerate(cells)}
    ebc_rows: list[tuple[int, np.ndarray]] = []
    for length in np.unique(cells[:, 0]):
        ref = index.get((int(length), data_kind))
        if ref is None:
            continue
        for kind in np.unique(cells[cells[:, 0] == length, 1]):
            if kind == data_kind or int(kind) in gaps:
                continue
            r = np.zeros(n_cells)
            r[index[(int(length), int(kind))]] += 1.0
            r[ref] -= 1.0
            rows.append(r)
            name = "ebc" if kind == model_kind else "ratio"
            labels.append((name, int(length), int(kind), data_kind, int(length)))
            if kind == model_kind:
                ebc_rows.append((int(length), r))
    for (length, kind), j in index.items():  # EB-C_gap: over data at l + g
        ref = index.get((length + gaps.get(kind, 0), data_kind))
        if kind in gaps and ref is not None:
            r = np.zeros(n_cells)
            r[j], r[ref] = 1.0, -1.0
            rows.append(r)
            labels.append(("ebc_gap", length, kind, data_kind, length + gaps[kind]))
    if len(ebc_rows) >= 2:
        ls = np.array([length for length, _ in ebc_rows], dtype=float)
        c = (ls - ls.mean()) / np.sum((ls - ls.mean()) ** 2)
        rows.append(sum(ci * r for ci, (_, r) in zip(c, ebc_rows, strict=True)))
        labels.append(("trend", None, model_kind, data_kind, None))
    a = np.array(rows)
    exp_scale = np.array([lab[0] != "trend" for lab in labels])
    return a, labels, exp_scale


def _log_quantities(sums: np.ndarray, counts: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``A @ ln(S/N)`` over the last axis, with ``0 * ln 0`` taken as 0 (a cell at CGD 0
    must not turn unrelated quantities into NaN)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        logp = np.log(sums / counts)[..., None, :]
        return np.sum(np.where(a != 0, a * logp, 0.0), axis=-1)


def _theta(sums: np.ndarray, counts: np.ndarray, a: np.ndarray, exp_scale: np.ndarray):
    """Reported quantities. CGDs and ratios are formed as ``prod p^A+ / prod p^A-`` (not
    ``exp(A ln p)``) so a resampled ratio equal to the estimate compares equal to it:
    BCa's bias correction counts such ties. Rows of ``A`` with entries in {-1, 0, 1}
    (every CGD and ratio) take the products from a gather of ``p`` (``p^1 = p``, so the
    same values), the others the general power."""
    with np.errstate(invalid="ignore", divide="ignore"):
        p = sums / counts
        out = np.empty((*p.shape[:-1], a.shape[0]))
        unit = exp_scale & np.all(np.isin(a, (-1.0, 0.0, 1.0)), axis=1)
        if unit.any():
            ones = np.concatenate([p, np.ones((*p.shape[:-1], 1))], axis=-1)
            for sign in (1.0, -1.0):  # numerator, then denominator
                hit = (a[unit] == sign).astype(np.int64)
                width = int(hit.sum(axis=1).max()) if hit.size else 0
                # Column index of each factor, padded with the column of ones.
                idx = np.full((int(unit.sum()), max(width, 1)), p.shape[-1])
                rows, cols = np.nonzero(hit)
                rank = np.arange(rows.size) - np.searchsorted(rows, rows)
                idx[rows, rank] = cols
                part = np.prod(ones[..., idx], axis=-1)
                out[..., unit] = part if sign > 0 else out[..., unit] / part
        other = ~unit
        if other.any():
            pp = p[..., None, :]
            ao = a[other]
            num = np.prod(pp ** np.where(ao > 0, ao, 0.0), axis=-1)
            den = np.prod(pp ** np.where(ao < 0, -ao, 0.0), axis=-1)
            out[..., other] = np.where(
                exp_scale[other], num / den, _log_quantities(sums, counts, ao)
            )
        return out


@contextmanager
def _quiet_nan() -> Iterator[None]:
    """Quantities with no valid resample (an empty or all-zero cell) are NaN by design."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _influence(
    sums: np.ndarray,
    counts: np.ndarray,
    total_s: np.ndarray,
    total_n: np.ndarray,
    a: np.ndarray,
) -> np.ndarray:
    """Per-cluster influence on each quantity ``A ln CGD``: ``psi_g = A psi_g.`` with
    ``psi_gj = (S_gj - p_j N_gj) / S_j``. Quantities that involve a cell with
    ``S_j = 0`` (log undefined) get NaN; the others are unaffected."""
    with np.errstate(invalid="ignore", divide="ignore"):
        psi = (sums - (total_s / total_n) * counts) / total_s
    bad_cell = ~np.isfinite(psi).all(axis=0)
    out = np.where(np.isfinite(psi), psi, 0.0) @ a.T
    out[:, ((a != 0) & bad_cell).any(axis=1)] = np.nan
    return out


def cluster_robust_var(psi: np.ndarray) -> np.ndarray:
    """``V = G/(G-1) * sum_g psi_g^2`` column-wise: the one-way cluster-robust (sandwich)
    variance of a linearised statistic from its per-cluster influence sums ``psi``."""
    g = psi.shape[0]
    return g / max(g - 1, 1) * np.sum(psi**2, axis=0)


def _report_delta(est, q_hat, var_log, exp_scale, labels, level):
    """Delta-method SE and interval on the reported scale.

    Ratios: ``exp(ln R +- z se)``; CGD: ``p +- z p se`` (linear, ``se`` of ``ln p``);
    trend (already a log-scale slope): ``b +- z se``.
    """
    z = special.ndtri(0.5 + level / 2.0)
    se_log = np.sqrt(var_log)
    is_cgd = np.array([lab[0] == "cgd" for lab in labels])
    se = np.where(exp_scale, est * se_log, se_log)
    low = np.where(
        is_cgd, est - z * se, np.where(exp_scale, np.exp(q_hat - z * se_log), q_hat - z * se_log)
    )
    high = np.where(
        is_cgd, est + z * se, np.where(exp_scale, np.exp(q_hat + z * se_log), q_hat + z * se_log)
    )
    return se, low, high


@dataclass
class _Fit:
    """The point estimates of every quantity, and what their error bars start from: the
    design's rows, the quantity matrix ``a`` (its rows' ``labels``, ``exp_scale``), the
    cells' totals and, per quantity, the cells that enter it (``involved``)."""

    des: _Design
    a: np.ndarray
    labels: list[tuple]
    exp_scale: np.ndarray
    tot_s: np.ndarray
    tot_n: np.ndarray
    est: np.ndarray
    q_hat: np.ndarray
    involved: np.ndarray
    counted: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, des: _Design, data_kind: int, model_kind: int, gaps=None) -> _Fit:
        n_cells = des.cells.shape[0]
        a, labels, exp_scale = _quantity_matrix(des.cells, data_kind, model_kind, gaps)
        tot_s = np.bincount(des.cell, weights=des.y, minlength=n_cells)
        tot_n = np.bincount(des.cell, weights=des.w, minlength=n_cells)
        est = _theta(tot_s, tot_n, a, exp_scale)
        q_hat = _log_quantities(tot_s, tot_n, a)
        # Counts of what enters each quantity (a quantity involves the cells with A != 0).
        involved = (a != 0).astype(float)
        return cls(des, a, labels, exp_scale, tot_s, tot_n, est, q_hat, involved)

    @property
    def n_cells(self) -> int:
        return self.des.cells.shape[0]

    def named(self, *names: str) -> np.ndarray:
        """Which quantities are named one of `names` ("cgd", "ebc", "ratio", "ebc_gap",
        "trend")."""
        return np.array([lab[0] in names for lab in self.labels])

    def rows(self, *names: str) -> list[int]:
        return [k for k, lab in enumerate(self.labels) if lab[0] in names]

    def totals(self, cluster: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``G x J`` totals ``S_gj``, ``N_gj`` by `cluster`."""
        des = self.des
        return _totals(cluster, des.cell, des.y, self.n_cells), _totals(
            cluster, des.cell, des.w, self.n_cells
        )

    def var_log(self, s_g: np.ndarray, n_g: np.ndarray) -> np.ndarray:
        """The one-way cluster-robust variance of each ``ln`` quantity from the totals."""
        return cluster_robust_var(_influence(s_g, n_g, self.tot_s, self.tot_n, self.a))

    def var_by(self, cluster: np.ndarray) -> np.ndarray:
        return self.var_log(*self.totals(cluster))

    def delta(self, var_log: np.ndarray, level: float):
        """SE, low and high of each quantity by the delta method from `var_log`."""
        return _report_delta(self.est, self.q_hat, var_log, self.exp_scale, self.labels, level)

    def n_present(self, cluster: np.ndarray) -> np.ndarray:
        """Clusters with a judgment in any cell of each quantity. Each cluster's cells
        as a bit mask; clusters share few distinct masks, counted once each."""
        if id(cluster) in self.counted:
            return self.counted[id(cluster)]
        n_cells, cell, involved = self.n_cells, self.des.cell, self.involved
        if n_cells > 52:  # bit masks as exact floats: fall back to a cluster x cell table
            present = np.zeros((int(cluster.max()) + 1, n_cells), dtype=np.float32)
            present[cluster, cell] = 1.0
            out = ((present @ involved.T.astype(np.float32)) > 0).sum(axis=0)
        else:
            pairs, _ = unique_inverse(cluster.astype(np.int64) * n_cells + cell)
            bits = np.bincount(pairs // n_cells, weights=np.exp2(pairs % n_cells))
            masks, which = unique_inverse(bits.astype(np.int64))
            per_mask = np.bincount(which, minlength=masks.size)
            q_bits = (involved > 0).astype(np.int64) @ (np.int64(1) << np.arange(n_cells))
            out = per_mask @ ((masks[:, None] & q_bits[None, :]) != 0)
        self.counted[id(cluster)] = out
        return out

    def unit(self, unit: str) -> np.ndarray:
        """The codes of the clusters of `unit` (``twoway``: the annotators)."""
        des = self.des
        return {"annotator": des.annotator, "hit": des.hit, "item": des.item}.get(
            unit, des.annotator
        )

    def iid_se(self) -> np.ndarray:
        """The SE of each quantity were the iid units independent: iid units lie in one
        cell each, so the variance is a sum over cells (no G x J matrix); no G/(G-1)
        factor, so it equals the binomial formula for single judgments."""
        des, n_cells, a = self.des, self.n_cells, self.a
        n_iid = int(des.iid_unit.max()) + 1
        y_u = np.bincount(des.iid_unit, weights=des.y, minlength=n_iid)
        w_u = np.bincount(des.iid_unit, weights=des.w, minlength=n_iid)
        cell_u = np.zeros(n_iid, dtype=np.int64)
        cell_u[des.iid_unit] = des.cell
        with np.errstate(invalid="ignore", divide="ignore"):
            psi_u = (y_u - (self.tot_s / self.tot_n)[cell_u] * w_u) / self.tot_s[cell_u]
            var_cell = np.bincount(cell_u, weights=psi_u**2, minlength=n_cells)
        var_iid = (a**2) @ np.where(np.isfinite(var_cell), var_cell, 0.0)
        var_iid[((a != 0) & ~np.isfinite(var_cell)).any(axis=1)] = np.nan
        return np.where(self.exp_scale, self.est * np.sqrt(var_iid), np.sqrt(var_iid))


@dataclass(frozen=True)
class _Headline:
    """The headline tests of EB-C = 1 (and of each ratio): the wild cluster bootstrap by
    annotator, whatever the unit; its annotator totals, the ratios' numerators and
    denominators (a row per ratio, and the pooled EB-C last when ``pooled``)."""

    s_a: np.ndarray
    n_a: np.ndarray
    n_eff: np.ndarray
    ratio_rows: list[int]
    ebc_rows: list[int]
    num: np.ndarray
    den: np.ndarray
    pooled: bool
    tests: WildRatio

    @classmethod
    def of(cls, fit: _Fit, *, b: int, seed: int | None, level: float | None) -> _Headline:
        # Annotator totals: the effective numbers of annotators and the headline tests use
        # them whatever the resampling unit.
        s_a, n_a = fit.totals(fit.des.annotator)
        n_eff = effective_clusters(n_a @ fit.involved.T)
        ratio_rows, ebc_rows = fit.rows(*RATIO_NAMES), fit.rows("ebc")
        num = np.where(fit.a[ratio_rows] > 0, 1.0, 0.0)
        den = np.where(fit.a[ratio_rows] < 0, 1.0, 0.0)
        pooled = len(ebc_rows) >= 2
        if pooled:  # every length with an EB-C, its model cells over its data cells
            pos = [ratio_rows.index(k) for k in ebc_rows]
            num = np.vstack([num, num[pos].sum(axis=0)])
            den = np.vstack([den, den[pos].sum(axis=0)])
        tests = wild_ratio(s_a, n_a, num, den, b=b, seed=seed, level=level)
        return cls(s_a, n_a, n_eff, ratio_rows, ebc_rows, num, den, pooled, tests)

    def p_values(self, n: int) -> np.ndarray:
        p_value = np.full(n, np.nan)
        p_value[self.ratio_rows] = self.tests.p_value[: len(self.ratio_rows)]
        return p_value

    def forms(self, fit: _Fit) -> LogForms:
        """Every quantity of `fit` (the rows of its ``a``), then the pooled EB-C when
        there is one, as log-linear forms (:class:`~.twoway.LogForms`)."""
        n_cells = fit.n_cells
        groups, coef = np.eye(n_cells), fit.a
        if self.pooled:
            groups = np.vstack([groups, self.num[-1], self.den[-1]])
            coef = np.hstack([coef, np.zeros((coef.shape[0], 2))])
            coef = np.vstack([coef, np.r_[np.zeros(n_cells), 1.0, -1.0]])
        return LogForms(groups, coef)

    def test_rows(self, fit: _Fit) -> list[int]:
        """The forms' rows of the ratios, then of the pooled EB-C: the order of the
        tests' arrays (:class:`WildRatio`)."""
        return self.ratio_rows + ([len(fit.labels)] if self.pooled else [])

    def cluster_tests(
        self, fit: _Fit, level: float, b: int, tests: WildRatio, extra: _Extra | None = None
    ) -> list[ClusterTest]:
        """One test per length with an EB-C, then the pooled one, from `tests` (arrays in
        :meth:`test_rows` order), with the Holm and anytime-valid figures of `extra`."""
        out = []
        ratio_rows = self.ratio_rows
        method, null = (extra.method, extra.null) if extra else (TEST_METHOD, TEST_NULL)
        for k in self.ebc_rows + ([None] if self.pooled else []):
            row = ratio_rows.index(k) if k is not None else len(ratio_rows)
            ge = float(tests.n_effective[row])
            more = {}
            if extra is not None:
                more = {
                    "p_holm": float(extra.p_holm[row]),
                    "av_low": float(extra.av_low[row]),
                    "av_high": float(extra.av_high[row]),
                }
            out.append(
                ClusterTest(
                    length=fit.labels[k][1] if k is not None else None,
                    estimate=float(tests.estimate[row]),
                    statistic=float(tests.statistic[row]),
                    p_value=float(tests.p_value[row]),
                    p_greater=float(tests.p_greater[row]),
                    low=float(tests.low[row]),
                    high=float(tests.high[row]),
                    level=level,
                    b=b,
                    n_annotators=int(tests.n_clusters[row]),
                    n_effective=ge,
                    few_annotators=not ge >= FEW_ANNOTATORS,
                    null=null,
                    method=method,
                    **more,
                )
            )
        return out


class _Bars(NamedTuple):
    """Each quantity's error bar by one method, its delta-method cross-check, its
    p-value, the clusters that enter it, and the bootstrap's EB-C draws (if any); the
    headline tests by the same unit (:meth:`_Headline.test_rows` order) with their labels,
    and (two-way) the SE of ``ln`` of each tested ratio."""

    se: np.ndarray
    low: np.ndarray
    high: np.ndarray
    d_se: np.ndarray
    d_low: np.ndarray
    d_high: np.ndarray
    method: str
    n_clust: np.ndarray
    p_value: np.ndarray
    boot_ebc: np.ndarray | None = None
    tests: WildRatio | None = None
    test_method: str = TEST_METHOD
    test_null: str = TEST_NULL
    se_log_tested: np.ndarray | None = None


def _wild_labels(unit: str) -> tuple[str, str]:
    """The method and null of the wild cluster bootstrap test by `unit`, in words."""
    plural = {"annotator": "annotators", "hit": "HITs", "item": "items"}[unit]
    return (
        TEST_METHOD.replace("clustered by annotator", f"clustered by {unit}"),
        TEST_NULL.replace("annotators as", f"{plural} as"),
    )


def _twoway_bars(
    fit: _Fit, head: _Headline, forms: LogForms, level: float, notes: list[str]
) -> _Bars:
    """Two-way (annotator x item) SEs, t intervals and tests (:func:`~.twoway.twoway`);
    its fallback warned in `notes`. A CGD's interval is linear (cut to [0, 1]), a
    ratio's is on the log scale, the trend's on its own (log-ratio per word) scale."""
    des, n_cells = fit.des, fit.n_cells
    item_sums = onecell_sums(des.item, des.cell, des.y, des.w, n_cells)
    pair = codes(des.annotator.astype(np.int64) * (int(des.item.max()) + 1) + des.item)[0]
    pair_sums = onecell_sums(pair, des.cell, des.y, des.w, n_cells)
    tw = twoway(forms, fit.tot_s, fit.tot_n, head.s_a, head.n_a, item_sums, pair_sums, level)
    if tw.fallback.any():
        notes.append(
            "two-way variance not positive for some quantities; used max(V_annotator, V_item) there"
        )
    nq = len(fit.labels)
    est, q_hat, exp_scale = fit.est, fit.q_hat, fit.exp_scale
    se_log, tq = tw.se[:nq], tw.tq[:nq]
    is_cgd = fit.named("cgd")
    with _quiet_nan():
        se = np.where(exp_scale, est * se_log, se_log)
        low_log, high_log = q_hat - tq * se_log, q_hat + tq * se_log
        low = np.where(
            is_cgd, np.maximum(est - tq * se, 0.0), np.where(exp_scale, np.exp(low_log), low_log)
        )
        high = np.where(
            is_cgd, np.minimum(est + tq * se, 1.0), np.where(exp_scale, np.exp(high_log), high_log)
        )
        pos = head.test_rows(fit)
        half = tw.tq[pos] * tw.se[pos]
        tests = WildRatio(
            estimate=np.exp(tw.est[pos]),
            statistic=tw.statistic[pos],
            p_value=tw.p_value[pos],
            p_greater=tw.p_greater[pos],
            low=np.exp(tw.est[pos] - half),
            high=np.exp(tw.est[pos] + half),
            n_clusters=head.tests.n_clusters,
            n_effective=head.tests.n_effective,
            b=head.tests.b,
            null=1.0,
        )
    p_value = np.where(is_cgd, np.nan, tw.p_value[:nq])
    d_se, d_low, d_high = fit.delta(fit.var_log(head.s_a, head.n_a), level)
    n_clust = fit.n_present(des.annotator)
    return _Bars(
        se, low, high, d_se, d_low, d_high, "cgm", n_clust, p_value, None,
        tests, TWOWAY_TEST_METHOD, TWOWAY_TEST_NULL, tw.se[pos],
    )  # fmt: skip


def _wild_bars(
    fit: _Fit, head: _Headline, p_value: np.ndarray, unit: str, b: int, seed, level: float
) -> _Bars:
    """A ratio's interval inverts the wild cluster bootstrap-t test by `unit` (whose
    p-values are the ratios'); a CGD's and the trend's is the jackknife t interval with
    ``G_eff - 1`` degrees of freedom."""
    cluster = fit.unit(unit)
    if unit == "annotator":
        s_g, n_g, wild = head.s_a, head.n_a, head.tests
    else:
        s_g, n_g = fit.totals(cluster)
        wild = wild_ratio(s_g, n_g, head.num, head.den, b=b, seed=seed, level=level)
        p_value = p_value.copy()
        p_value[head.ratio_rows] = wild.p_value[: len(head.ratio_rows)]
    est, ratio_rows = fit.est, head.ratio_rows
    counts_q = n_g @ fit.involved.T
    with _quiet_nan():
        jack = _theta(fit.tot_s - s_g, fit.tot_n - n_g, fit.a, fit.exp_scale)
        # Symmetric scale: ln of a ratio; a CGD and the (log-scale) slope as they are.
        is_ratio = fit.named(*RATIO_NAMES)
        sym = np.where(is_ratio, np.log(est), est)
        jack = np.where(is_ratio, np.log(jack), jack)
        se_sym, tq, p_jack = jackknife_t(
            sym, jack, counts_q > 0, effective_clusters(counts_q) - 1.0, level
        )
        se = np.where(is_ratio, est * se_sym, se_sym)
        low, high = sym - tq * se_sym, sym + tq * se_sym
        # A CGD is a share: its interval is cut to [0, 1] (coverage is unchanged) ...
        is_cgd = fit.named("cgd")
        low = np.where(is_cgd, np.maximum(low, 0.0), low)
        high = np.where(is_cgd, np.minimum(high, 1.0), high)
        # ... and, when its estimate is inside (0, 1), the jackknife t interval on the
        # logit scale: annotators' shares are skewed, and with 8 annotators the linear
        # interval covered 91-92% (issue 32), the logit one more (docs/statistics.md).
        lg, lg_jack = special.logit(est), special.logit(jack)
        se_lg, _, _ = jackknife_t(lg, lg_jack, counts_q > 0, np.ones(est.size), level)
        inside = is_cgd & np.isfinite(lg) & np.isfinite(se_lg)
        low = np.where(inside, special.expit(lg - tq * se_lg), low)
        high = np.where(inside, special.expit(lg + tq * se_lg), high)
    low[ratio_rows] = wild.low[: len(ratio_rows)]
    high[ratio_rows] = wild.high[: len(ratio_rows)]
    p_value = np.where(fit.named("trend"), p_jack, p_value)
    d_se, d_low, d_high = fit.delta(fit.var_log(s_g, n_g), level)
    method, null = _wild_labels(unit)
    return _Bars(
        se, low, high, d_se, d_low, d_high, "wild", fit.n_present(cluster), p_value, None,
        wild, method, null,
    )  # fmt: skip


def _bootstrap_bars(
    fit: _Fit,
    head: _Headline,
    p_value: np.ndarray,
    unit: str,
    ci: str,
    b: int,
    seed,
    level: float,
    notes: list[str],
) -> _Bars:
    """The pairs cluster bootstrap by `unit`: percentile or BCa intervals, the SE the
    resamples' sd (resamples that left a cell empty dropped, and said in `notes`); the
    ratios' p-values from the wild test by the same unit."""
    cluster = fit.unit(unit)
    if unit == "annotator":
        s_g, n_g, wild = head.s_a, head.n_a, head.tests
    else:
        s_g, n_g = fit.totals(cluster)
        wild = wild_ratio(s_g, n_g, head.num, head.den, b=b, seed=seed, level=None)
        p_value = p_value.copy()
        p_value[head.ratio_rows] = wild.p_value[: len(head.ratio_rows)]
    a, exp_scale = fit.a, fit.exp_scale
    s_b, n_b = resample_cluster_totals(s_g, n_g, b, seed)
    theta_b = _theta(s_b, n_b, a, exp_scale)
    theta_b = np.where(np.isfinite(theta_b), theta_b, np.nan)
    with _quiet_nan():
        se = np.nanstd(theta_b, axis=0, ddof=1)
        if ci == "percentile":
            low, high = percentile_interval(theta_b, level)
        else:
            theta_jack = _theta(fit.tot_s - s_g, fit.tot_n - n_g, a, exp_scale)
            low, high = bca_interval(theta_b, fit.est, theta_jack, level)
    d_se, d_low, d_high = fit.delta(fit.var_log(s_g, n_g), level)
    n_bad = int(np.sum(~np.isfinite(theta_b).all(axis=1)))
    if n_bad:
        notes.append(
            f"{n_bad} of {b} resamples left a cell empty or at zero; "
            "they were dropped from the intervals"
        )
    boot_ebc = theta_b[:, fit.rows("ebc")]
    n_clust = fit.n_present(cluster)
    method, null = _wild_labels(unit)
    return _Bars(
        se, low, high, d_se, d_low, d_high, ci, n_clust, p_value, boot_ebc, wild, method, null
    )


class _Extra(NamedTuple):
    """Per tested ratio (:meth:`_Headline.test_rows` order): Holm-adjusted p-values and
    the anytime-valid interval; the headline tests' labels."""

    p_holm: np.ndarray
    av_low: np.ndarray
    av_high: np.ndarray
    method: str
    null: str


def _extra(fit: _Fit, head: _Headline, forms: LogForms, bars: _Bars, level: float) -> _Extra:
    """Holm over the lengths (per kind) and the anytime-valid interval of every ratio and
    of the pooled EB-C (:mod:`.sequential`): the confidence sequence over annotators,
    from the headline's SE of ``ln`` ratio when it is two-way, else the
    leave-one-annotator-out jackknife's."""
    pos = head.test_rows(fit)
    with _quiet_nan():
        est_log = forms.log_values(fit.tot_s, fit.tot_n)[pos]
        se = bars.se_log_tested
        if se is None:
            jack = forms.log_values(fit.tot_s - head.s_a, fit.tot_n - head.n_a)[:, pos]
            involved = (head.n_a @ forms.cells()[pos].T) > 0
            se, _, _ = jackknife_t(est_log, jack, involved, np.ones(len(pos)), level)
        t = head.tests.n_clusters.astype(float)
        df = head.tests.n_effective - 1.0
        av_low, av_high = anytime_interval(est_log, se, t, df=df, level=level)
    p_holm = np.full(len(pos), np.nan)
    kinds = np.array([fit.labels[k][2] for k in head.ratio_rows])
    p_ratio = bars.p_value[head.ratio_rows]
    for kind in np.unique(kinds):
        which = np.flatnonzero(kinds == kind)
        p_holm[which] = holm(p_ratio[which])
    return _Extra(p_holm, av_low, av_high, bars.test_method, bars.test_null)


def _few_note(fit: _Fit, head: _Headline, n_annot: np.ndarray, few: np.ndarray) -> str:
    """What the results say when some figure has fewer than FEW_ANNOTATORS effective
    annotators: the worst EB-C (else the worst figure)."""
    n_eff, labels = head.n_eff, fit.labels
    shown = [k for k in head.ebc_rows if few[k]] or list(np.flatnonzero(few))
    worst = min(shown, key=lambda k: n_eff[k] if np.isfinite(n_eff[k]) else -1.0)
    # An empty figure has no effective count (0/0): it is named as such, not as "nan".
    count = (
        f"only {n_eff[worst]:.1f} effective annotators ({n_annot[worst]} in all; "
        "(sum n_g)^2 / sum n_g^2 over judgments per annotator) enter"
        if np.isfinite(n_eff[worst])
        else "no judgments enter"
    )
    return (
        f"{count} {_describe(labels[worst])}: intervals and tests are unreliable below "
        f"{FEW_ANNOTATORS} effective annotators"
    )


def _quantities(
    fit: _Fit,
    head: _Headline,
    bars: _Bars,
    iid_se: np.ndarray,
    deff: np.ndarray,
    counts: tuple[np.ndarray, np.ndarray, np.ndarray],
    few: np.ndarray,
    level: float,
    extra: _Extra,
) -> list[Quantity]:
    """Every quantity as reported: its estimate, error bar, cross-checks and counts
    (``counts``: judgments, items, annotators that enter it), and for a ratio its Holm
    p-value and anytime-valid interval (`extra`)."""
    n_judg, n_items, n_annot = counts
    nq = len(fit.labels)
    p_holm, av_low, av_high = (np.full(nq, np.nan) for _ in range(3))
    n_r = len(head.ratio_rows)
    p_holm[head.ratio_rows] = extra.p_holm[:n_r]
    av_low[head.ratio_rows] = extra.av_low[:n_r]
    av_high[head.ratio_rows] = extra.av_high[:n_r]
    av_half = half_width(av_low, av_high)
    method_of = {"cgd": "jackknife-t", "trend": "jackknife-t"} if bars.method == "wild" else {}
    return [
        Quantity(
            name=lab[0],
            length=lab[1],
            kind=lab[2],
            reference_kind=lab[3],
            estimate=float(fit.est[k]),
            se=float(bars.se[k]),
            low=float(bars.low[k]),
            high=float(bars.high[k]),
            method=method_of.get(lab[0], bars.method),
            level=level,
            delta_se=float(bars.d_se[k]),
            delta_low=float(bars.d_low[k]),
            delta_high=float(bars.d_high[k]),
            iid_se=float(iid_se[k]),
            design_effect=float(deff[k]),
            n_judgments=int(n_judg[k]),
            n_items=int(n_items[k]),
            n_annotators=int(n_annot[k]),
            n_clusters=int(bars.n_clust[k]),
            few_annotators=bool(few[k]),
            n_effective=float(head.n_eff[k]),
            p_value=float(bars.p_value[k]),
            reference_length=lab[4],
            p_holm=float(p_holm[k]),
            av_low=float(av_low[k]),
            av_high=float(av_high[k]),
            av_half_width=float(av_half[k]),
        )
        for k, lab in enumerate(fit.labels)
    ]


def estimate_ebc(
    d: np.ndarray,
    length: np.ndarray,
    kind: np.ndarray,
    annotator: np.ndarray,
    hit: np.ndarray,
    item: np.ndarray,
    *,
    choice: np.ndarray | None = None,
    estimator: Estimator = "single",
    unit: Unit = "auto",
    b: int = 10_000,
    ci: CiMethod = "wild",
    level: float = 0.95,
    seed: int | None = 0,
    data_kind: int = DATA_KIND,
    model_kind: int = MODEL_KIND,
    attention: np.ndarray | None = None,
    keep: np.ndarray | None = None,
    gaps: Mapping[int, int] | None = None,
) -> EBCResults:
    """CGD per cell, EB-C (and each diagnostic kind over ``data``) per length, and the
    trend of ``ln EB-C`` over length, each with an error bar.

    Point estimates
        single:    ``CGD_j = sum_{r in j} d_r / n_j`` over judgments (the paper's).
        plurality: ``CGD_j = sum_{i in j} d_i / n_items_j`` with ``d_i`` from
                   :func:`plurality_by_item`.
        ``EB-C_l = CGD_(l,model) / CGD_(l,data)``; diagnostic ratios likewise; a gap
        kind's (``gaps``: kind code -> g) ``EB-C_gap_l = CGD_(l,kind) / CGD_(l+g,data)``
        (the later paper's App. A eq. 9), with a ratio's intervals and test;
        trend = OLS slope of ``ln EB-C_l`` on ``l`` (per word).

    Estimand: the population CGD and EB-C of :mod:`app.results.stats.cluster` (the
    ratio of the expected CGDs over the population of annotators, weighted as the
    judgments are, and texts); annotators are the sampled unit.

    Error bars by ``unit``
        ``annotator`` (default; nested designs), ``hit``, ``item``: clustered by that
        unit. Per cluster g and cell j the totals ``S_gj = sum y``, ``N_gj = sum w`` are
        formed once, and everything below works on these ``G x J`` matrices.

        ``ci="wild"`` (default; small-cluster corrected): a ratio's interval inverts
        the wild cluster restricted bootstrap-t test (:func:`wild_ratio`, ``b`` draws
        of Rademacher weights); a CGD's and the trend's is the jackknife t interval
        (:func:`jackknife_t`) with ``G_eff - 1`` degrees of freedom, ``G_eff`` the
        effective number of clusters (:func:`effective_clusters`). SE = the jackknife
        one (on the ratio scale by the delta method). These hold their level with a
        few busy annotators, where the percentile bootstrap under-covers
        (``benchmarks/stats_calibration.py``).

        ``ci="percentile"`` or ``"bca"``: pairs cluster bootstrap; each of ``b``
        resamples draws G clusters with replacement and recomputes every quantity from
        ``W @ S`` and ``W @ N`` (the ratio is taken inside each resample). Percentile,
        or BCa with leave-one-cluster-out jackknife acceleration; SE = sd of the
        resamples. Assumes clusters are independent and exchangeable and many
        *effective* clusters.

        Every figure is flagged when fewer than 30 effective annotators enter it.
        Resampling items or HITs ignores annotator x kind effects and under-covers;
        those are secondary figures.
        ``twoway`` (crossed designs, items judged by several annotators): normal interval
        on the log scale with the Cameron-Gelbach-Miller variance
        ``V = V_annotator + V_item - V_annotator∩item`` from the per-cluster influence
        sums; when ``V <= 0`` it falls back to ``max(V_annotator, V_item)`` (warned).
        No resampling for the intervals, so ``ci`` is unused.

    Tests of EB-C = 1 (``tests``, and ``p_value`` of each ratio): the wild cluster
    bootstrap by annotator, whatever ``unit`` and ``ci`` are (``b`` draws, ``seed``).

    Cross-check (``delta_*``): one-way cluster-robust delta method on ``ln`` of the
    quantity, ``psi_gj = (S_gj - p_j N_gj)/S_j``, ``V = G/(G-1) sum_g psi_g^2``.

    With the plurality estimator each judgment carries ``1/m_i`` of its item, so the
    annotator bootstrap resamples annotators' shares of item values (a linearisation;
    prefer ``twoway`` or ``hit`` there).
    """
    if unit not in ("auto", "annotator", "hit", "item", "twoway"):
        raise ValueError(f"unknown unit {unit!r}")
    if ci not in ("wild", "percentile", "bca"):
        raise ValueError(f"unknown interval method {ci!r}")
    des = _design(d, length, kind, annotator, hit, item, choice, estimator, attention, keep)
    crossing = detect_design(des.item, des.annotator)
    notes: list[str] = []
    if unit == "auto":
        unit = "twoway" if crossing.design == "crossed" else "annotator"
    elif crossing.design == "crossed" and unit != "twoway":
        notes.append(
            f"the design is crossed ({crossing.shared_share:.0%} of the judgments on items "
            f"several annotators judged) but the unit is {unit}: these intervals and tests "
            "ignore that items are shared and reject a true EB-C = 1 too often; the "
            "default (unit auto) makes them two-way"
        )
    fit = _Fit.of(des, data_kind, model_kind, gaps)
    n_judg = fit.involved @ np.bincount(des.cell, minlength=fit.n_cells)
    n_items = fit.n_present(des.item)
    n_annot = fit.n_present(des.annotator)
    iid_se = fit.iid_se()
    # The annotator wild tests: the headline when the unit is the annotator, else the
    # secondary one-way figures (with their inverted intervals).
    own_wild = unit == "annotator" and ci == "wild"
    head_level = level if own_wild or unit != "annotator" else None
    head = _Headline.of(fit, b=b, seed=seed, level=head_level)
    forms = head.forms(fit)
    p_value = head.p_values(len(fit.labels))
    if unit == "twoway":
        bars = _twoway_bars(fit, head, forms, level, notes)
    elif ci == "wild":
        bars = _wild_bars(fit, head, p_value, unit, b, seed, level)
    else:
        bars = _bootstrap_bars(fit, head, p_value, unit, ci, b, seed, level, notes)
    extra = _extra(fit, head, forms, bars, level)
    few = ~(head.n_eff >= FEW_ANNOTATORS)
    if few.any():
        notes.append(_few_note(fit, head, n_annot, few))
    with np.errstate(invalid="ignore", divide="ignore"):
        deff = (bars.se / iid_se) ** 2
    counts = (n_judg, n_items, n_annot)
    quantities = _quantities(fit, head, bars, iid_se, deff, counts, few, level, extra)
    secondary = head.cluster_tests(fit, level, b, head.tests) if unit != "annotator" else []
    return EBCResults(
        estimator=estimator,
        unit=unit,
        ci=bars.method,
        level=level,
        b=b,
        seed=seed,
        n_judgments=int(des.y.size),
        n_items=int(des.item.max()) + 1,
        n_annotators=int(des.annotator.max()) + 1,
        n_clusters=int(fit.unit(unit).max()) + 1,
        few_annotators=bool(few.any()),
        cgd=[q for q in quantities if q.name == "cgd"],
        ratios=[q for q in quantities if q.name in RATIO_NAMES],
        trend=next((q for q in quantities if q.name == "trend"), None),
        warnings=notes,
        n_effective=float(effective_clusters(head.n_a.sum(axis=1))),
        interval=INTERVAL_LABELS["cgm" if unit == "twoway" else ci],
        tests=head.cluster_tests(fit, level, b, bars.tests, extra),
        bootstrap_ebc=bars.boot_ebc,
        design=crossing.design,
        design_reason=crossing.reason,
        shared_share=crossing.shared_share,
        secondary_tests=secondary,
        multiplicity=_multiplicity(len(head.ebc_rows)),
    )


def _multiplicity(n_lengths: int) -> str:
    if n_lengths < 2:
        return ""
    return (
        f"{n_lengths} lengths: the pooled test over lengths and the trend are the headline; "
        f"each length's test is one of {n_lengths}, so its p-value is also given "
        "Holm-adjusted (p_holm), which keeps the chance of any false rejection at the level"
    )


def _describe(label: tuple) -> str:
    name, length, kind = label[:3]
    if name == "trend":
        return "the trend"
    if name == "cgd":
        return f"CGD at l={length} (kind {kind})"
    return f"{ {'ebc': 'EB-C', 'ebc_gap': 'EB-C_gap'}.get(name, 'a ratio') } at l={length}"
