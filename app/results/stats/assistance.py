"""LLM-assistance signal: annotators who agree with a reference model's argmax far beyond
the crowd (issue 14; docs/design.md §1, "Quality and sanity").

Crowd workers may answer with a language model's help; such an annotator's choices agree
with a model's top-1 word much more often than people's do. The reference is given per
judgment as a boolean ("this judgment chose the reference's argmax"); today the only
model stored per item is the studied one, so the service passes ``choice == 1`` (its
top-1 word), and another reference (a P_D model) can be plugged in the same way.

It is a quality figure, never an exclusion: the flag says "look at this annotator".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from .columns import unique_inverse

ASSIST_FDR = 0.05
"""Benjamini-Hochberg false discovery rate of the flag."""

MIN_ANNOTATORS = 5
"""Fewer annotators than this: no crowd to compare with, no p-values (NaN)."""

_CHI2_1_MEDIAN = float(stats.chi2.ppf(0.5, 1))

ASSIST_METHOD = (
    "one-sided test per annotator of agreement with the reference argmax against the "
    "crowd (leave-one-annotator-out rate per cell, between-annotator spread on the logit "
    "scale estimated robustly; the null's binomial-normal tail computed, not simulated); "
    "Benjamini-Hochberg at FDR {fdr:g}"
)


@dataclass(frozen=True)
class Assistance:
    """Per annotator (arrays aligned with ``annotator``): ``n`` judgments tested,
    ``rate`` their share agreeing with the reference, ``expected`` the crowd's rate on
    the same cells, ``p_value`` and its Benjamini-Hochberg adjustment ``q_value``,
    ``flagged`` where ``q_value <= fdr``. ``tau``: the crowd's between-annotator
    standard deviation of the logit agreement rate (NaN without a crowd)."""

    annotator: np.ndarray
    n: np.ndarray
    rate: np.ndarray
    expected: np.ndarray
    p_value: np.ndarray
    q_value: np.ndarray
    flagged: np.ndarray
    tau: float
    fdr: float
    method: str


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """BH-adjusted p-values ``q_(i) = min_{j >= i} m p_(j) / j`` (NaN entries stay NaN
    and do not count in m). Rejecting ``q <= alpha`` controls the false discovery rate
    at ``alpha`` for independent (or positively dependent) p-values."""
    p = np.asarray(p, dtype=float)
    q = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return q
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return q


_TAU_GRID = np.linspace(0.0, 3.0, 61)
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(32)
_LOG_WEIGHTS = np.log(_WEIGHTS / np.sqrt(2 * np.pi))
_LL_FLOOR = 4.0
_PROFILE_DROP = float(stats.chi2.ppf(0.9, 1)) / 2
_TAU_BLOCK = 2_000_000  # terms (tau x pair x node) evaluated at once in _tau_upper


def _tau_upper(
    starts: np.ndarray, k_pair: np.ndarray, n_pair: np.ndarray, logit_pair: np.ndarray
) -> tuple[float, float]:
    """``(tau_hat, tau_upper)``: the maximum-likelihood between-annotator standard
    deviation of the logit offset (marginal likelihood over ``u ~ N(0, tau^2)`` by
    32-node Gauss-Hermite quadrature, on a grid of step 0.05 up to 3) and the upper end
    of its one-sided 90% profile-likelihood interval. Each annotator's log-likelihood
    enters relative to its own maximum, floored at -4 (a trimmed likelihood: an
    annotator far outside the crowd weighs like one at about p = 0.005). A crowd of a
    few dozen annotators pins ``tau`` down poorly, and too small a ``tau`` flags honest
    annotators who did much work; the test therefore uses the upper bound."""
    # log P(k | u) up to a constant: k log p + (n - k) log(1 - p) = k eta - n softplus(eta)
    # (log p = eta - softplus(eta), log(1 - p) = -softplus(eta)), every tau of the grid at
    # once: one softplus per term instead of two, and no per-tau call overhead.
    ll = np.empty((starts.size, _TAU_GRID.size))
    step = max(1, _TAU_BLOCK // max(logit_pair.size * _NODES.size, 1))  # bounded memory
    for t0 in range(0, _TAU_GRID.size, step):
        taus = _TAU_GRID[t0 : t0 + step]
        eta = logit_pair[None, :, None] + taus[:, None, None] * _NODES[None, None, :]
        lp = k_pair[None, :, None] * eta - n_pair[None, :, None] * np.logaddexp(0.0, eta)
        per_annotator = np.add.reduceat(lp, starts, axis=1) + _LOG_WEIGHTS[None, None, :]
        # logsumexp over the nodes (scipy's adds milliseconds of overhead per call).
        top = per_annotator.max(axis=2, keepdims=True)
        ll[:, t0 : t0 + step] = (top[..., 0] + np.log(np.exp(per_annotator - top).sum(2))).T
    # Bounded influence: no annotator costs a value of tau more than _LL_FLOOR against
    # their own best, so a few assisted annotators cannot stretch the honest spread.
    ll = np.maximum(ll - ll.max(axis=1, keepdims=True), -_LL_FLOOR).sum(axis=0)
    best = int(np.argmax(ll))
    above = np.flatnonzero(ll >= ll[best] - _PROFILE_DROP)
    return float(_TAU_GRID[best]), float(_TAU_GRID[above.max()])


_Z_EDGE = 8.0
_Z_GLOBAL = np.linspace(-_Z_EDGE, _Z_EDGE, 65)  # step 0.25 in z = u / tau
_Z_LOCAL = np.linspace(-8.0, 8.0, 81)  # step 0.2 standard deviations of the mass
_GOLDEN = (math.sqrt(5) - 1) / 2
_GOLDEN_STEPS = 28  # the mode to 16 x 0.618^28 = 2e-5 in z
_SQRT_HALF_PI = math.sqrt(math.pi / 2)


class _Null:
    """The null of one crowd's annotators: ``f(z) = P[Binomial(n, pbar(tau z)) >= o]``
    per owner (annotator), ``pbar(u)`` the mean of ``expit(logit p_c + u)`` over the
    owner's judgments (see :func:`null_tail_probabilities`)."""

    def __init__(self, owner, n_pair, logit_pair, n_owner, observed, tau):
        self.owner, self.n_pair, self.logit, self.tau = owner, n_pair, logit_pair, tau
        self.starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        self.rows = owner[self.starts]
        self.n = np.rint(np.bincount(owner, weights=n_pair, minlength=n_owner)).astype(np.int64)
        self.o = observed.astype(np.int64)

    def _q(self, z: np.ndarray) -> np.ndarray:
        """``expit(logit p_c + tau z)`` per pair and node; `z` is (owners, nodes)."""
        return special.expit(self.logit[:, None] + self.tau * z[self.owner])

    def _per_owner(self, per_pair: np.ndarray, fill: float) -> np.ndarray:
        out = np.full((self.n.size, per_pair.shape[1]), fill)
        out[self.rows] = np.add.reduceat(per_pair, self.starts, axis=0)
        return out

    def tail(self, z: np.ndarray) -> np.ndarray:
        mean = self._per_owner(self.n_pair[:, None] * self._q(z), 0.0)
        pbar = np.clip(mean / np.maximum(self.n, 1)[:, None], 0.0, 1.0)
        f = special.bdtrc(np.maximum(self.o - 1, 0)[:, None], self.n[:, None], pbar)
        return np.where(self.o[:, None] <= 0, 1.0, f)

    def sd(self, z: np.ndarray) -> np.ndarray:
        """Standard deviation of the count given ``u = tau z`` (one z per owner)."""
        q = self._q(z[:, None])
        return np.sqrt(self._per_owner(self.n_pair[:, None] * q * (1 - q), 0.0)[:, 0])

    def mode(self) -> np.ndarray:
        """Per owner, the z maximising ``log phi(z) + log f(z)`` on [-8, 8] (golden-section
        search; ``f`` is log-concave in z): where the tail's mass is."""

        def g(z: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore"):
                return np.log(self.tail(z[:, None])[:, 0]) - z * z / 2

        lo, hi = np.full(self.n.size, -_Z_EDGE), np.full(self.n.size, _Z_EDGE)
        x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
        g1, g2 = g(x1), g(x2)
        for _ in range(_GOLDEN_STEPS):
            right = g2 >= g1  # the maximum lies in [x1, hi]
            lo, hi = np.where(right, x1, lo), np.where(right, hi, x2)
            x1, x2 = (
                np.where(right, x2, hi - _GOLDEN * (hi - lo)),
                np.where(right, lo + _GOLDEN * (hi - lo), x1),
            )
            new = g(np.where(right, x2, x1))
            g1, g2 = np.where(right, g2, new), np.where(right, new, g1)
        return 0.5 * (lo + hi)


def _integrate(z: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``int f(z) phi(z) dz`` over each row's nodes `z` (sorted), f interpolated
    log-linearly between nodes and the product with ``phi`` integrated exactly:
    on ``[a, a + h]`` with ``f = f_a exp(beta (z - a))`` and ``c = beta - a``,
    ``sqrt(pi/2) (f_b phi(b) erfcx((c - h)/sqrt 2) - f_a phi(a) erfcx(c/sqrt 2))``, or
    its mirror image from b when f phi decreases (both forms free of overflow and
    cancellation where they are used). Where f is 0 at a node, f is linear there."""
    a, b = z[:, :-1], z[:, 1:]
    fa, fb = f[:, :-1], f[:, 1:]
    h = b - a
    pa, pb = stats.norm.pdf(a), stats.norm.pdf(b)
    pos = (fa > 0) & (fb > 0) & (h > 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(pos, (np.log(fb) - np.log(fa)) / h, 0.0)
        c = beta - a
        rising = c >= h / 2
        r2 = math.sqrt(2.0)
        up = fb * pb * special.erfcx((c - h) / r2) - fa * pa * special.erfcx(c / r2)
        down = fa * pa * special.erfcx(-c / r2) - fb * pb * special.erfcx((h - c) / r2)
        loglin = _SQRT_HALF_PI * np.where(rising, up, down)
        # f linear: f_a (Phi(b) - Phi(a)) + slope int_a^b (z - a) phi(z) dz.
        upper = special.ndtr(-a) - special.ndtr(-b)  # no cancellation in the upper tail
        mass = np.where(a > 0, upper, special.ndtr(b) - special.ndtr(a))
        slope = np.where(h > 1e-12, (fb - fa) / h, 0.0)
        linear = fa * mass + slope * (pa - pb - a * mass)
    edge = special.ndtr(-_Z_EDGE)
    inside = np.where(pos, loglin, np.where(h > 1e-12, linear, 0.0)).sum(1)
    return inside + (f[:, 0] + f[:, -1]) * edge


def null_tail_probabilities(
    owner: np.ndarray,
    n_pair: np.ndarray,
    logit_pair: np.ndarray,
    n_owner: int,
    observed: np.ndarray,
    tau: float,
) -> np.ndarray:
    """Per owner (annotator), ``P[O >= observed]`` under the null: ``u ~ N(0, tau^2)``,
    then ``O = sum_c Binomial(n_c, expit(logit p_c + u))`` over the annotator's cells
    (`owner` sorted).

    Given u, O is a Poisson-binomial count; its upper tail is bounded by that of the
    binomial ``Binomial(n, pbar(u))`` with the same mean (Hoeffding 1956, Theorem 4: for
    ``o >= n pbar + 1`` the binomial's tail is the larger), computed exactly
    (``scipy.special.bdtrc``, the regularised incomplete beta function). The binomial
    is O itself when the annotator worked in one cell, and slightly conservative
    otherwise (its variance is larger by ``sum_c n_c (p_c - pbar)^2``).

    The mixture over u: ``int f(z) phi(z) dz`` with ``z = u / tau`` and f that binomial
    tail, by product integration (:func:`_integrate`: ``log f`` linear between nodes,
    ``phi`` integrated exactly, so the normal's far tail costs no accuracy) on a grid of
    step 0.25 over [-8, 8] joined with one of step 0.2 standard deviations of the
    integrand's mass around its mode (for a busy annotator f climbs from 0 to 1 much
    faster than the coarse grid's step). Outside [-8, 8] f is held at its edge value.
    Within 1% of ``scipy.integrate.quad`` from p = 1 down to 1e-12, and of a simulation
    of the null (tests/results/stats/test_assistance.py)."""
    null = _Null(owner, n_pair, logit_pair, n_owner, observed, tau)
    if tau <= 0:
        return np.clip(null.tail(np.zeros((n_owner, 1)))[:, 0], 0.0, 1.0)
    mode = null.mode()
    with np.errstate(divide="ignore"):
        spread = 1.0 / np.sqrt(1.0 + (tau * null.sd(mode)) ** 2)  # SD of the mass in z
    local = np.clip(mode[:, None] + spread[:, None] * _Z_LOCAL[None, :], -_Z_EDGE, _Z_EDGE)
    z = np.sort(np.concatenate([np.broadcast_to(_Z_GLOBAL, (n_owner, _Z_GLOBAL.size)), local], 1))
    return np.clip(_integrate(z, null.tail(z)), 0.0, 1.0)


def assistance_signal(
    annotator: np.ndarray,
    cell: np.ndarray,
    agrees: np.ndarray,
    *,
    fdr: float = ASSIST_FDR,
    min_annotators: int = MIN_ANNOTATORS,
) -> Assistance:
    """Flag annotators whose choices agree with the reference argmax far beyond the crowd.

    Inputs, one entry per judgment (attention items left out by the caller): the
    annotator, the ``cell`` (a code of prefix length x kind: the crowd's rate differs
    by cell), and ``agrees`` (the choice is the reference's argmax).

    Per annotator a with ``O_a`` agreeing judgments out of ``n_ac`` in cell c, the
    crowd's rate ``p_c`` is the share of the other annotators (leave-one-annotator-out),
    clipped to ``[0.5/N_c, 1 - 0.5/N_c]``, leaving out as well the annotators flagged so
    far: a heavy user would raise everyone's baseline. The first pass leaves out those a
    sharp-null screen finds (``z > 3`` against the pooled cell rate); the passes repeat
    until the flags settle (at most 5).

    **Null hypothesis** ("an honest annotator drawn from this crowd"): given a personal
    offset ``u_a ~ N(0, tau^2)``, the annotator's judgments are independent, agreeing
    with probability ``expit(logit p_c + u_a)`` in cell c. This admits what honest
    annotators do: agree more or less than the crowd (skill, taste), more visibly the
    more they work. ``tau`` is the upper end of a one-sided 90% profile-likelihood
    interval from a trimmed marginal likelihood over the whole crowd (:func:`_tau_upper`),
    which the flagged minority barely moves.

    **p-value**: the null's upper tail ``P[O*_a >= O_a]``, computed, not simulated
    (:func:`null_tail_probabilities`: the binomial tail given u, exact or a Hoeffding upper
    bound, integrated over u to within 1%). It is valid (``P[p <= alpha] <= alpha``)
    under the null with ``p_c`` and ``tau`` taken as known; with them estimated it is
    approximate, and conservative by the choice of the upper ``tau``
    (benchmarks/stats_calibration.py ``--suite assistance``: honest heterogeneous crowds,
    the per-annotator rate of p <= 0.05 and the share of crowds with any flag).
    It is *not* the sharp-null binomial test against the pooled rate (exact
    when every honest annotator agrees at the crowd's rate), which flags skilled honest
    annotators who did much work.

    **Multiplicity**: Benjamini-Hochberg over the annotators tested, ``flagged`` where
    ``q <= fdr`` (false discovery rate ``fdr``; with no assisted annotator at all, also
    the chance of any flag). Deterministic; fewer than ``min_annotators`` annotators:
    NaN p-values, nobody flagged.
    """
    annotator = np.asarray(annotator)
    agrees = np.asarray(agrees, dtype=bool)
    ids, a = unique_inverse(annotator)
    n_a = ids.size
    _, c = unique_inverse(np.asarray(cell))
    n_c = int(c.max()) + 1 if c.size else 0
    n = np.bincount(a, minlength=n_a)
    obs = np.bincount(a, weights=agrees, minlength=n_a).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = obs / n
    nan = np.full(n_a, np.nan)
    method = ASSIST_METHOD.format(fdr=fdr)
    if n_a < min_annotators:
        none = np.zeros(n_a, bool)
        return Assistance(ids, n, rate, nan, nan, nan, none, math.nan, fdr, method)

    # Per (annotator, cell) pair (sorted by annotator): judgments and agreements.
    pair_ids, pair = unique_inverse(a.astype(np.int64) * n_c + c)
    owner, pc = pair_ids // n_c, pair_ids % n_c
    n_pair = np.bincount(pair, minlength=pair_ids.size).astype(np.int64)
    k_pair = np.bincount(pair, weights=agrees, minlength=pair_ids.size).astype(np.int64)
    # The crowd's baseline rates leave out the annotators flagged so far (heavy users
    # would raise everyone's expected rate), until the flags settle. The first baseline
    # leaves out whoever a sharp-null screen (z > 3 against the pooled cell rate) finds.
    n_cell = np.bincount(pc, weights=n_pair, minlength=n_c)
    p_cell = np.bincount(pc, weights=k_pair, minlength=n_c) / np.maximum(n_cell, 1)
    e = np.bincount(owner, weights=n_pair * p_cell[pc], minlength=n_a)
    v = np.bincount(owner, weights=n_pair * p_cell[pc] * (1 - p_cell[pc]), minlength=n_a)
    with np.errstate(invalid="ignore", divide="ignore"):
        left_out = (obs - e) / np.sqrt(v) > 3
    flagged = np.zeros(n_a, bool)
    for _ in range(5):
        fit = _fit(owner, pc, n_pair, k_pair, n_a, n_c, left_out, fdr, min_annotators)
        if fit is None:
            none = np.zeros(n_a, bool)
            return Assistance(ids, n, rate, nan, nan, nan, none, math.nan, fdr, method)
        expected, p, tau = fit
        q = benjamini_hochberg(p)
        flagged = np.isfinite(q) & (q <= fdr)
        if np.array_equal(flagged, left_out):
            break
        left_out = flagged
    return Assistance(ids, n, rate, expected, p, q, flagged, tau, fdr, method)


def _fit(
    owner: np.ndarray,
    pc: np.ndarray,
    n_pair: np.ndarray,
    k_pair: np.ndarray,
    n_a: int,
    n_c: int,
    left_out: np.ndarray,
    fdr: float,
    min_annotators: int,
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(expected rate, p-value, tau)`` per annotator against the crowd without the
    annotators `left_out` (None: too few annotators left to be a crowd)."""
    base = ~left_out[owner]
    n_cell = np.bincount(pc[base], weights=n_pair[base], minlength=n_c)
    k_cell = np.bincount(pc[base], weights=k_pair[base], minlength=n_c)
    own_n, own_k = np.where(base, n_pair, 0), np.where(base, k_pair, 0)
    others = n_cell[pc] - own_n
    with np.errstate(invalid="ignore", divide="ignore"):
        p_loo = (k_cell[pc] - own_k) / others
    # A cell nobody else worked in says nothing about this annotator: its pairs drop out.
    ok = others > 0
    lo = 0.5 / np.maximum(others, 1)
    p_loo = np.clip(np.where(ok, p_loo, 0.5), lo, 1 - lo)
    n_ok = np.where(ok, n_pair, 0)
    k_ok = np.where(ok, k_pair, 0)
    tested = np.bincount(owner, weights=n_ok, minlength=n_a)
    obs = np.bincount(owner, weights=k_ok, minlength=n_a).astype(np.int64)
    has = tested > 0
    if np.sum(has) < min_annotators or not base.any():
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.bincount(owner, weights=n_ok * p_loo, minlength=n_a) / tested
    logit = special.logit(p_loo)
    # The spread is fitted on every annotator (bounded influence, see _tau_upper).
    fit_pairs = ok
    fit_owner = owner[fit_pairs]
    starts = np.flatnonzero(np.r_[True, fit_owner[1:] != fit_owner[:-1]])
    _, tau = _tau_upper(starts, k_pair[fit_pairs], n_pair[fit_pairs], logit[fit_pairs])

    p = null_tail_probabilities(owner, n_ok, logit, n_a, obs, tau)
    return np.where(has, expected, np.nan), np.where(has, p, np.nan), tau
