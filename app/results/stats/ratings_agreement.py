"""Inter-annotator agreement on ratings (docs/design.md "Second protocol": Krippendorff's alpha
for interval/ordinal data, and the later paper's "agreement").

Only pairs (units) rated by two or more annotators enter. Every figure is a function of
each pair's value counts ``n_uc`` (how many of its ``m_u`` ratings took value c), so one
pair bootstrap (pairs resampled with replacement, the ratings of a pair together) gives
the alphas' intervals from resampled sums of per-pair coincidence matrices.

The reference implementation is the ``krippendorff`` package (a dev dependency the tests
compare with); it has no bootstrap, and computing it per resample costs a thousand times
more than one matrix product, hence the few lines here.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from .agreement import AGREEMENT_B
from .bootstrap import percentile_interval
from .columns import codes, unique_inverse

METRICS = ("nominal", "ordinal", "interval")


def value_counts(pair: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, values)``: the pair x value count matrix ``n_uc`` over the pairs with
    at least two (non-NaN) ratings, and the values (sorted) its columns stand for."""
    pair, value = np.asarray(pair), np.asarray(value, dtype=float)
    ok = np.isfinite(value)
    pair, value = pair[ok], value[ok]
    if value.size == 0:
        return np.zeros((0, 0)), np.zeros(0)
    values, vi = unique_inverse(value)
    pi, n_pairs = codes(pair)
    counts = np.bincount(pi * values.size + vi, minlength=n_pairs * values.size).reshape(
        n_pairs, values.size
    )
    return counts[counts.sum(axis=1) >= 2].astype(float), values


def coincidences(counts: np.ndarray) -> np.ndarray:
    """Per pair, the coincidence matrix ``o_uck = (n_uc n_uk - 1[c=k] n_uc) / (m_u - 1)``
    (``P x V x V``): each ordered pair of two different ratings of the unit, weighted
    ``1/(m_u - 1)`` so that a unit contributes ``m_u`` in all (Krippendorff 2011)."""
    m = counts.sum(axis=1)
    o = counts[:, :, None] * counts[:, None, :]
    idx = np.arange(counts.shape[1])
    o[:, idx, idx] -= counts
    return o / (m - 1.0)[:, None, None]


def _delta(metric: str, values: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """Squared distances ``delta^2_ck`` (``... x V x V``), Krippendorff's metrics:
    nominal ``1[c != k]``; interval ``(c - k)^2``; ordinal
    ``(sum_(g between c and k) n_g - (n_c + n_k)/2)^2``, which depends on the value
    totals ``n_c`` (so on the resample)."""
    v = values.size
    if metric == "nominal":
        return np.broadcast_to(1.0 - np.eye(v), (*n_c.shape[:-1], v, v))
    if metric == "interval":
        d = values[:, None] - values[None, :]
        return np.broadcast_to(d * d, (*n_c.shape[:-1], v, v))
    if metric == "ordinal":
        cum = np.cumsum(n_c, axis=-1)
        before = cum - n_c  # sum of n_g for g < c
        upper = cum[..., None, :] - before[..., :, None]  # c <= k: sum_(g=c..k) n_g
        lower = np.swapaxes(upper, -1, -2)
        i = np.arange(v)
        between = np.where(i[:, None] <= i[None, :], upper, lower)
        d = between - (n_c[..., :, None] + n_c[..., None, :]) / 2.0
        return d * d
    raise ValueError(f"unknown metric {metric!r}; one of {METRICS}")


def alpha_from_coincidences(o: np.ndarray, values: np.ndarray, metric: str) -> np.ndarray:
    """Krippendorff's alpha from summed coincidences ``o`` (``... x V x V``)::

        n_c = sum_k o_ck,  n = sum_c n_c,
        alpha = 1 - (n - 1) sum_ck o_ck delta^2_ck / sum_ck n_c n_k delta^2_ck

    NaN when every value is the same (no expected disagreement)."""
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    delta = _delta(metric, values, n_c)
    observed = np.sum(o * delta, axis=(-1, -2))
    expected = np.sum(n_c[..., :, None] * n_c[..., None, :] * delta, axis=(-1, -2))
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = 1.0 - (n - 1.0) * observed / expected
    return np.where(expected > 0, alpha, np.nan)


def krippendorff_alpha(pair: np.ndarray, value: np.ndarray, metric: str = "interval") -> float:
    """Krippendorff's alpha of ratings (one entry per rating: the unit ``pair`` and the
    ``value``; NaN values are missing) with the ``nominal``, ``ordinal`` or ``interval``
    metric, over the units with two or more ratings (Krippendorff 2011, "Computing
    Krippendorff's alpha-reliability"). Assumes ratings within a unit exchangeable."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {METRICS}")
    counts, values = value_counts(pair, value)
    if counts.shape[0] == 0:
        return float("nan")
    return float(alpha_from_coincidences(coincidences(counts).sum(axis=0), values, metric))


def pairwise_agreement(counts: np.ndarray, values: np.ndarray, tolerance: float) -> float:
    """Mean over units of the share of their pairs of ratings within ``tolerance`` of each
    other: ``P_u = (sum_ck n_uc n_uk 1[|v_c - v_k| <= tol] - m_u) / (m_u (m_u - 1))``
    (``tolerance`` 0: exact agreement). A tolerance of one scale step or one point is
    matched with a margin of 1e-9, the values being stored floats."""
    if counts.shape[0] == 0:
        return float("nan")
    close = (np.abs(values[:, None] - values[None, :]) <= tolerance + 1e-9).astype(float)
    m = counts.sum(axis=1)
    agree = np.einsum("uc,ck,uk->u", counts, close, counts) - m
    return float(np.mean(agree / (m * (m - 1.0))))


# Bound on the (resamples x pairs) weight block drawn at once (32 MB of float64).
_MAX_WEIGHTS = 1 << 22


def resample_pairs(x: np.ndarray, b: int, seed: int | np.random.Generator | None) -> np.ndarray:
    """``B x F`` sums of the rows of ``x`` (``P x F``, one row per pair) over ``b``
    resamples of the pairs with replacement: resample r's multiplicities ``W_r``
    (multinomial(P, 1/P), from one ``integers`` draw) give ``W_r @ x``.

    As :func:`.bootstrap.resample_sums`, but ``x`` here is a coincidence matrix per pair:
    ``V (V + 1) / 2`` columns (66 on a half-point 0-5 scale) of which a pair fills at
    most ``m_u (m_u + 1) / 2``, so the product is taken sparse, in blocks of resamples
    bounded by memory; a dense product with that many columns runs in blocks of one
    resample there, to stay off the BLAS thread pool (20 s for 6,000 pairs and 2,000
    resamples, against 1.5 s)."""
    rng = np.random.default_rng(seed)
    p = x.shape[0]
    xt = sparse.csr_array(x).T.tocsr()  # F x P
    out = np.empty((b, x.shape[1]))
    block = max(1, _MAX_WEIGHTS // max(p, 1))
    for start in range(0, b, block):
        m = min(block, b - start)
        idx = rng.integers(0, p, size=(m, p)) + (np.arange(m) * p)[:, None]
        w = np.bincount(idx.ravel(), minlength=m * p).reshape(m, p).astype(float)
        out[start : start + m] = (xt @ w.T).T
    return out


@dataclass(frozen=True)
class RatingAgreement:
    """Agreement figures of one step (see :func:`rating_agreement`)."""

    n_pairs: int
    n_ratings: int
    alpha_interval: float
    alpha_interval_low: float
    alpha_interval_high: float
    alpha_ordinal: float
    alpha_ordinal_low: float
    alpha_ordinal_high: float
    exact: float
    within_step: float
    within_point: float


def rating_agreement(
    pair: np.ndarray,
    value: np.ndarray,
    *,
    step: float,
    b: int,
    seed: int | np.random.Generator | None,
    level: float = 0.95,
) -> RatingAgreement | None:
    """Krippendorff's alpha (interval and ordinal metric) with pair-bootstrap percentile
    intervals (``min(b, AGREEMENT_B)`` resamples of the units with replacement, as the
    next-word agreement: :data:`.agreement.AGREEMENT_B`; alpha recomputed from the
    resampled coincidence sums, the ordinal distances from the resample's value totals),
    and pairwise percent agreement: exact, within one scale ``step``, within one point.
    Only units with two or more ratings enter; ``None`` when fewer than two do.
    Assumes units independent; annotator effects are not resampled."""
    counts, values = value_counts(pair, value)
    if counts.shape[0] < 2:
        return None
    b = min(b, AGREEMENT_B)  # the resamples are held as b x V x V coincidence sums
    o = coincidences(counts)
    total = o.sum(axis=0)
    upper = np.triu_indices(values.size)  # o is symmetric: resample c <= k only
    drawn = resample_pairs(o[:, upper[0], upper[1]], b, seed)
    boot = np.empty((b, values.size, values.size))
    boot[:, upper[0], upper[1]] = drawn
    boot[:, upper[1], upper[0]] = drawn
    out = {}
    for metric in ("interval", "ordinal"):
        est = float(alpha_from_coincidences(total, values, metric))
        draws = alpha_from_coincidences(boot, values, metric)
        with warnings.catch_warnings():  # no finite resample: NaN ends
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = percentile_interval(np.where(np.isfinite(draws), draws, np.nan), level)
        out[metric] = (est, float(lo), float(hi))
    return RatingAgreement(
        n_pairs=int(counts.shape[0]),
        n_ratings=int(counts.sum()),
        alpha_interval=out["interval"][0],
        alpha_interval_low=out["interval"][1],
        alpha_interval_high=out["interval"][2],
        alpha_ordinal=out["ordinal"][0],
        alpha_ordinal_low=out["ordinal"][1],
        alpha_ordinal_high=out["ordinal"][2],
        exact=pairwise_agreement(counts, values, 0.0),
        within_step=pairwise_agreement(counts, values, step),
        within_point=pairwise_agreement(counts, values, 1.0),
    )
