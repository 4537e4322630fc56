"""Small-cluster inference for ratios of pooled means: the headline test of EB-C = 1 and
the intervals that hold their level when a few annotators do most of the work.

The estimand (docs/design.md §1). Annotators are a sample from a population of people,
prefixes a sample of texts. For a cell j (prefix length x kind) the **population CGD**
is the judgment-weighted expectation ``p_j = E[S_gj] / E[N_gj]`` over annotators g (and,
inside ``E``, over the texts they judge), where ``S_gj`` sums d and ``N_gj`` counts the
judgments of annotator g in cell j: the limit of the pooled mean ``sum_g S_gj /
sum_g N_gj`` when annotators are drawn independently. The **population EB-C** at length
l is ``p_(l,model) / p_(l,data)`` -- the pooled-ratio estimand. When activity is
independent of how an annotator judges, ``p_j`` is the plain mean over the population of
each annotator's expected d; otherwise busy annotators weigh more, as in the estimate.

"EB-C = 1" is therefore a statement about that population, not about the annotators at
hand. A test that shuffles data/model labels within HITs is exact only for the sharp
null "no annotator treats data and model prefixes differently"; when annotators differ
in how much harder they find model prefixes (an annotator x kind effect) while the
population EB-C is 1, it rejects far too often. Here the annotator is the unit.

Everything is computed from per-cluster totals (``G x J`` matrices of sums and counts,
one row per annotator), vectorised over the bootstrap draws; no loop runs over draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

# Bound on (draws x clusters x columns) per matrix product (see ebc._SMALL_PRODUCT: small
# products stay on the calling thread).
_SMALL_PRODUCT = 1 << 18
# How far from the estimate (in ln ratio) an interval's end is looked for.
_MAX_LOG_SPAN = 30.0


def effective_clusters(n: np.ndarray, axis: int = 0) -> np.ndarray:
    """Effective number of clusters ``G_eff = (sum_g n_g)^2 / sum_g n_g^2``.

    ``n_g`` is the number of judgments cluster g contributes (clusters with none drop
    out). This is Kish's effective sample size (L. Kish, *Survey Sampling*, Wiley 1965,
    §11.7) with the clusters' sizes as weights: ``G`` when every annotator does the same
    amount, near the number of busy annotators when a few do most of the work (e.g. 200
    annotators of which 10 do 90% of the HITs: G_eff ~ 12). It is the simpler stand-in
    for the effective number of clusters ``G*`` of Carter, Schnepel & Steigerwald
    (2017, "Asymptotic behavior of a t-test robust to cluster heterogeneity", *Review of
    Economics and Statistics* 99(4), 698-709), which also needs a within-cluster
    correlation and the regressors; used here for the "few annotators" warning and as
    the degrees of freedom ``G_eff - 1`` of the jackknife t interval (the Satterthwaite
    degrees of freedom of a cluster-robust variance of a pooled mean when judgments are
    independent given the annotator, cf. Bell & McCaffrey 2002).
    """
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(n, axis=axis) ** 2 / np.sum(n * n, axis=axis)


def rademacher_blocks(g: int, b: int, width: int, rng: np.random.Generator):
    """Yield ``(start, eps)`` blocks of Rademacher weights (+-1 with probability 1/2 each),
    ``eps`` of shape ``m x g``, ``b`` rows in all. Random bytes unpacked to bits: a
    draw costs one bit. The block size depends only on ``g`` and ``width`` (the columns
    they multiply), so a seed gives the same draws on every machine."""
    block = max(1, _SMALL_PRODUCT // max(g * max(width, 1), 1))
    nbytes = -(-g // 8)
    for start in range(0, b, block):
        m = min(block, b - start)
        bits = np.unpackbits(
            rng.integers(0, 256, size=(m, nbytes), dtype=np.uint8), axis=1, count=g
        )
        yield start, 1.0 - 2.0 * bits


@dataclass(frozen=True)
class WildRatio:
    """Wild cluster bootstrap inference for ratios ``R_q = p_(num q) / p_(den q)``.

    Arrays have one entry per ratio q. ``statistic`` is the cluster-robust t of
    ``p_num - null * p_den`` (CR1); ``p_value`` two-sided, ``p_greater`` for the
    alternative ``R > null``; ``low``/``high`` the inverted test (NaN when not asked
    for; ``high`` is ``inf`` when no finite bound exists). ``n_clusters`` counts the
    clusters with judgments in the ratio's cells, ``n_effective`` their
    :func:`effective_clusters`.
    """

    estimate: np.ndarray
    statistic: np.ndarray
    p_value: np.ndarray
    p_greater: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_clusters: np.ndarray
    n_effective: np.ndarray
    b: int
    null: float


class _RatioDraws:
    """One ratio's totals, the Gram matrix ``M = sum_g x_g x_g'`` of its per-cluster
    columns ``x_g = (s_gm, n_gm, s_gd, n_gd)`` and the bootstrap moments its t* needs at
    any R: ``mom`` (``B x 11``) is ``eps @ [s_m, n_m, s_d, n_d, s_m n_m, n_m^2, s_d n_m,
    n_d n_m, s_m n_d, s_d n_d, n_d^2]`` (products per cluster). Every per-cluster sum of
    squares below is a quadratic form in ``M``, so nothing is O(G) once this is built."""

    def __init__(self, totals, gram, g, mom):
        self.Sm, self.Nm, self.Sd, self.Nd = (float(x) for x in totals)
        self.gram = gram
        self.g = g
        self.c = g / (g - 1) if g > 1 else np.nan
        self.mom = mom
        self.b = mom.shape[0]
        self.uu = gram[1, 1] / self.Nm**2
        self.dd = gram[3, 3] / self.Nd**2
        self.ud = gram[1, 3] / (self.Nm * self.Nd)
        self.pm, self.pd = self.Sm / self.Nm, self.Sd / self.Nd

    def _sum_sq(self, w: np.ndarray) -> float:
        """``sum_g (w . x_g)^2``."""
        return max(float(w @ self.gram @ w), 0.0)

    def log_se(self) -> float:
        """Delta-method SE of ``ln R`` (CR1), a scale for the interval search."""
        w = np.array([1 / self.Sm, -self.pm / self.Sm, -1 / self.Sd, self.pd / self.Sd])
        return float(np.sqrt(self.c * self._sum_sq(w)))

    def t_obs(self, r: float) -> float:
        w = np.array([1 / self.Nm, -self.pm / self.Nm, -r / self.Nd, r * self.pd / self.Nd])
        with np.errstate(invalid="ignore", divide="ignore"):
            t = float((self.pm - r * self.pd) / np.sqrt(self.c * self._sum_sq(w)))
        # 0/0: annotators all alike and R at the estimate; no evidence either way.
        return 0.0 if np.isnan(t) else t

    def t_star(self, r: float) -> np.ndarray:
        """Bootstrap t of ``p_m - r p_d`` from the restricted wild bootstrap under
        ``H0: p_m = r p_d``, for every draw at once (see :func:`wild_ratio`)."""
        Nm, Nd = self.Nm, self.Nd
        alpha = (r * self.Sm + self.Sd) / (r * r * Nm + Nd)  # restricted OLS fit
        qm, qd = r * alpha, alpha
        # A = sum eps e_gm / N_m, D = sum eps e_gd / N_d, and sum_g eps_g z_g u_g,
        # sum_g eps_g z_g v_g (z, u, v as in wild_ratio): linear in the moments.
        coef = np.zeros((11, 4))
        coef[0:2, 0] = 1 / Nm, -qm / Nm
        coef[2:4, 1] = 1 / Nd, -qd / Nd
        mn = Nm * Nd
        coef[4:8, 2] = 1 / Nm**2, -qm / Nm**2, -r / mn, r * qd / mn
        coef[7:11, 3] = -qm * r / mn, r / mn, -r * r / Nd**2, r * r * qd / Nd**2
        a_, d_, zu, zv = (self.mom @ coef).T
        delta = a_ - r * d_
        zz = self._sum_sq(np.array([1 / Nm, -qm / Nm, -r / Nd, r * qd / Nd]))  # eps^2 = 1
        v = zz - 2 * a_ * zu + 2 * d_ * zv + a_ * a_ * self.uu
        v += d_ * d_ * (r * r * self.dd) - 2 * a_ * d_ * (r * self.ud)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = delta / np.sqrt(self.c * np.maximum(v, 0.0))
        return np.where(np.isnan(t), 0.0, t)  # 0/0: a draw with nothing to compare


def wild_ratio(
    sums: np.ndarray,
    counts: np.ndarray,
    num: np.ndarray,
    den: np.ndarray,
    *,
    b: int = 10_000,
    seed: int | np.random.Generator | None = 0,
    level: float | None = 0.95,
    null: float = 1.0,
) -> WildRatio:
    """Wild cluster restricted (WCR) bootstrap-t tests of ``R_q = null`` for ratios of
    pooled means, and intervals by inverting them.

    Inputs: per-cluster totals ``sums``, ``counts`` (``G x J``: cluster x cell) and, per
    ratio q, 0/1 rows ``num[q]``, ``den[q]`` (``Q x J``) selecting the cells pooled into
    the numerator and denominator (e.g. one length's model and data cell, or every
    length's for a pooled EB-C).

    Model. With ``s_g, n_g`` the cluster's numerator sum and count (``m``) and
    denominator ones (``d``), the pooled ratio is ``(S_m/N_m) / (S_d/N_d)``: the OLS
    fit of the judgments on two cell indicators, clustered by annotator. ``H0: p_m =
    R p_d`` is a linear restriction. The test (Cameron, Gelbach & Miller 2008; MacKinnon
    & Webb 2017; Roodman, MacKinnon, Nielsen & Webb 2019, "Fast and wild", *Stata
    Journal* 19(1)):

    1. observed ``t = (p_m - R p_d) / se``, ``se^2 = G/(G-1) sum_g a_g^2`` with
       ``a_g = (s_gm - p_m n_gm)/N_m - R (s_gd - p_d n_gd)/N_d`` (CR1);
    2. the restricted fit ``alpha = (R S_m + S_d) / (R^2 N_m + N_d)`` (``q_m = R alpha``,
       ``q_d = alpha``) and its per-cluster residual sums ``e_gm = s_gm - q_m n_gm``,
       ``e_gd = s_gd - q_d n_gd``;
    3. B draws of Rademacher weights ``eps_g`` (one per cluster: an annotator's whole
       work flips together), data ``s*_g = q n_g + eps_g e_g``, and the same t from each
       draw. In closed form, with ``A = sum eps_g e_gm / N_m``, ``D = sum eps_g e_gd /
       N_d``, ``z_g = e_gm/N_m - R e_gd/N_d``, ``u_g = n_gm/N_m``, ``v_g = R n_gd/N_d``:
       ``t* = (A - R D) / sqrt(G/(G-1) sum_g (eps_g z_g - u_g A + v_g D)^2)``; the sum
       expands into ``eps @ [s, n, s n, n n]`` products of the per-cluster columns,
       formed once for all R;
    4. ``p = (1 + #{|t*| >= |t|}) / (B + 1)`` (``p_greater``: ``t* >= t``).

    Rademacher weights make ``t*`` symmetric, so the symmetric and equal-tailed tests
    coincide. With G clusters there are only ``2^G`` distinct draws: with fewer than
    about 12 annotators the p-value cannot be small (warned by the caller).

    Interval (``level``): ``{R : p(R) > 1 - level}``, i.e. ``|t(R)| <= q*(R)`` with
    ``q*`` the ``(k+1)``-th largest ``|t*(R)|``, ``k = floor((1-level)(B+1)) - 1``; the
    same draws serve every R, so the ends are found by Brent's method on ``ln R``.
    Therefore the interval excludes ``null`` exactly when ``p <= 1 - level`` (up to the
    root finder's tolerance, 1e-9 on ``ln R``).
    Assumes clusters independent; no assumption that annotators agree.
    """
    rng = np.random.default_rng(seed)
    s = np.asarray(sums, dtype=float)
    n = np.asarray(counts, dtype=float)
    num = np.asarray(num, dtype=float)
    den = np.asarray(den, dtype=float)
    g, q_count = s.shape[0], num.shape[0]

    # Column sums, not products with the 0/1 rows: with items as clusters G is large
    # and a BLAS product of that size starts a thread pool (see ebc._SMALL_PRODUCT).
    def pick(x, rows):
        return np.stack([sum(x[:, j] for j in np.flatnonzero(r)) for r in rows], axis=1)

    base = np.hstack([pick(s, num), pick(n, num), pick(s, den), pick(n, den)])  # G x 4Q
    rows, group_size = _distinct_rows(base)
    if rows is None:
        rows, group_size = base, np.ones(g)
    n_same = group_size.astype(np.int64)
    sm, nm, sd, nd = np.split(rows, 4, axis=1)
    prods = [sm * nm, nm * nm, sd * nm, nd * nm, sm * nd, sd * nd, nd * nd]
    cols = np.hstack([sm, nm, sd, nd, *prods])  # (G or distinct rows) x 11Q
    moments = np.zeros((b, cols.shape[1]))
    if rows is not base:
        # Items or HITs as clusters: many identical rows. Their weights enter only
        # through their sum, 2 Binomial(c, 1/2) - c for c identical clusters.
        block = max(1, _SMALL_PRODUCT // (rows.shape[0] * cols.shape[1]))
        for start in range(0, b, block):
            m = min(block, b - start)
            eps = 2.0 * rng.binomial(n_same, 0.5, size=(m, n_same.size)) - group_size
            moments[start : start + m] = eps @ cols
    else:
        for start, eps in rademacher_blocks(g, b, cols.shape[1], rng):
            moments[start : start + eps.shape[0]] = eps @ cols
    mom = moments.reshape(b, 11, q_count)

    out = {k: np.full(q_count, np.nan) for k in ("est", "t", "p", "pg", "lo", "hi")}
    n_clusters = np.zeros(q_count, dtype=np.int64)
    size = nm + nd
    with np.errstate(invalid="ignore", divide="ignore"):
        n_eff = (group_size @ size) ** 2 / (group_size @ (size * size))
    k_rank = int(np.floor((1.0 - level) * (b + 1))) - 1 if level is not None else -1
    for q in range(q_count):
        x = np.stack([sm[:, q], nm[:, q], sd[:, q], nd[:, q]], axis=1)
        r = _RatioDraws(
            group_size @ x,
            x.T @ (group_size[:, None] * x),
            int(group_size @ (size[:, q] > 0)),
            np.ascontiguousarray(mom[:, :, q]),
        )
        n_clusters[q] = r.g
        if r.g < 2 or not (r.Sd > 0 and r.Nm > 0 and r.Nd > 0):
            continue
        out["est"][q] = r.pm / r.pd
        t = r.t_obs(null)
        out["t"][q] = t
        if not np.isnan(t):  # (inf: annotators all alike, and a difference)
            ts = r.t_star(null)
            # Draws equal to the observed value count as extreme.
            tol = 1e-10 * abs(t) if np.isfinite(t) else 0.0
            out["p"][q] = (1 + np.sum(np.abs(ts) >= abs(t) - tol)) / (b + 1)
            out["pg"][q] = (1 + np.sum(ts >= t - tol)) / (b + 1)
        if level is not None and k_rank >= 0 and r.Sm > 0:
            out["lo"][q], out["hi"][q] = _invert(r, k_rank)
        elif level is not None:
            out["lo"][q], out["hi"][q] = 0.0, np.inf
    return WildRatio(
        estimate=out["est"],
        statistic=out["t"],
        p_value=out["p"],
        p_greater=out["pg"],
        low=out["lo"],
        high=out["hi"],
        n_clusters=n_clusters,
        n_effective=n_eff,
        b=b,
        null=null,
    )


def _distinct_rows(x: np.ndarray):
    """``(distinct rows of x, how many clusters have each)`` when clusters share few
    distinct rows (at most a sixth as many as clusters: items, HITs), else
    ``(None, None)``. Rows are matched by a random projection, then checked exactly."""
    g = x.shape[0]
    if g < 12:
        return None, None
    key = x @ np.random.default_rng(0).random(x.shape[1])
    _, first, inverse, counts = np.unique(
        key, return_index=True, return_inverse=True, return_counts=True
    )
    if counts.size * 6 > g or not np.array_equal(x[first][inverse.reshape(-1)], x):
        return None, None  # (a projection collision: too rare to optimise for)
    return x[first], counts.astype(float)


def _invert(r: _RatioDraws, k: int) -> tuple[float, float]:
    """Ends of ``{R : |t(R)| <= q*(R)}`` around the estimate, on the ``ln R`` scale."""
    b = r.b

    def gap(u: float) -> float:
        rr = float(np.exp(u))
        ts = np.abs(r.t_star(rr))
        q_star = np.partition(ts, b - 1 - k)[b - 1 - k]
        return min(abs(r.t_obs(rr)), 1e12) - q_star  # finite, for Brent's method

    u0 = float(np.log(r.pm / r.pd))
    step = max(r.log_se(), 1e-4)  # a scale for the search, nothing more
    ends = []
    for side in (-1.0, 1.0):
        inner, end = u0, np.nan
        width = step
        while width <= _MAX_LOG_SPAN:
            outer = u0 + side * width
            if gap(outer) > 0:
                lo, hi = sorted((inner, outer))
                end = optimize.brentq(gap, lo, hi, xtol=1e-9)
                break
            inner, width = outer, width * 2
        if np.isnan(end):  # no finite bound within e^30 of the estimate
            end = -np.inf if side < 0 else np.inf
        ends.append(float(np.exp(end)))
    return ends[0], ends[1]


def jackknife_t(
    theta: np.ndarray,
    theta_jack: np.ndarray,
    involved: np.ndarray,
    df: np.ndarray,
    level: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leave-one-cluster-out (jackknife, "CV3") standard error and t interval.

    ``theta`` (Q) are the estimates on the scale where the interval is symmetric (ln of
    a ratio, a CGD, a slope), ``theta_jack`` (``G x Q``) the same with cluster g left
    out, ``involved`` (``G x Q``) which clusters have judgments in each quantity (the
    others leave it unchanged and are not counted). With ``G_q`` involved clusters::

        se^2 = (G_q - 1)/G_q * sum_g (theta_(g) - mean theta_(.))^2
        interval = theta -+ t_{df, (1+level)/2} * se,  p = 2 P(T_df > |theta / se|)

    The jackknife variance is the cluster-robust variance with each cluster's
    influence measured with that cluster left out (MacKinnon, Nielsen & Webb 2023,
    "Cluster-robust inference: a guide to empirical practice", *J. Econometrics* 232(2),
    their CV3): unlike ``G/(G-1) sum psi_g^2`` it is not pulled down by the busiest
    clusters fitting themselves. ``df`` is ``G_eff - 1`` (:func:`effective_clusters`),
    at least 1. NaN where a left-out cluster empties a cell.
    """
    inv = np.asarray(involved, dtype=bool)
    g_q = inv.sum(axis=0)
    tj = np.where(inv, theta_jack, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = tj.sum(axis=0) / g_q
        dev = np.where(inv, theta_jack - mean, 0.0)
        var = (g_q - 1) / g_q * np.sum(dev * dev, axis=0)
        se = np.sqrt(var)
        se = np.where(g_q >= 2, se, np.nan)
        tq = special.stdtrit(np.maximum(df, 1.0), 0.5 + level / 2.0)
        p = 2.0 * special.stdtr(np.maximum(df, 1.0), -np.abs(theta / se))
    return se, tq, p
