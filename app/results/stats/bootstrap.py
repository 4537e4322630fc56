"""Cluster bootstrap machinery: resampled per-cluster totals and bootstrap intervals.

Pure and seeded; ``ebc.py`` and ``agreement.py`` resample their cluster totals here.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from .columns import unique_rows

# Bound on the (resamples x clusters) weight matrix built at once: ~2 MB blocks stay in
# cache and reuse memory (fresh 30 MB arrays cost more in page faults than in arithmetic).
# Draws are consumed in order, so the block size does not change the resamples.
_MAX_WEIGHT_ELEMENTS = 1 << 18
# ... and on (resamples x clusters x features) per matrix product: OpenBLAS runs a
# product this small on the calling thread. Larger ones start its thread pool, which on
# a busy machine costs far more than the product (measured: 10,000 resamples of 300
# annotators x 18 totals, 118 ms in blocks of 873 resamples, 3-5 ms in blocks of 48).
_SMALL_PRODUCT = 1 << 18


def resample_sums(x: np.ndarray, b: int, seed: int | np.random.Generator | None) -> np.ndarray:
    """Cluster bootstrap of per-cluster totals, vectorised: ``B x F`` resampled sums.

    ``x`` is ``G x F`` (one row of totals per cluster). Resample ``r`` draws ``G``
    clusters with replacement; its multiplicities ``W_r`` (multinomial(G, 1/G)) give
    ``x*_r = W_r @ x``.

    - Clusters with identical rows are interchangeable, so only how many draws fall on
      each distinct row matters: with ``U`` distinct rows, ``c_u`` clusters each, that
      is multinomial(G, c_u / G) over the ``U`` rows, the same distribution of ``x*``.
      Drawn that way when ``U <= G / 6`` (items or HITs with a few possible totals,
      agreement count patterns), where ``B x U`` binomials cost less than ``B x G``
      uniform draws.
    - Otherwise (annotators: every row differs) ``W_r`` comes from one ``integers``
      draw and ``bincount``, in blocks of resamples to bound memory; the block size
      depends only on ``G``, so a seed gives the same resamples on every machine.
    """
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=float)
    g = x.shape[0]
    out = np.empty((b, x.shape[1]))
    if g >= 12:
        rows, _, counts = unique_rows(x)
        if rows.shape[0] * 6 <= g:
            block = max(1, _SMALL_PRODUCT // (rows.shape[0] * max(x.shape[1], 1)))
            for start in range(0, b, block):
                m = min(block, b - start)
                w = rng.multinomial(g, counts / g, size=m).astype(float)
                out[start : start + m] = w @ rows
            return out
    block = max(1, min(_MAX_WEIGHT_ELEMENTS // max(g, 1), _SMALL_PRODUCT // max(g * x.shape[1], 1)))
    for start in range(0, b, block):  # blocks of resamples, not one resample at a time
        m = min(block, b - start)
        idx = rng.integers(0, g, size=(m, g)) + (np.arange(m) * g)[:, None]
        w = np.bincount(idx.ravel(), minlength=m * g).reshape(m, g).astype(float)
        out[start : start + m] = w @ x
    return out


def resample_cluster_totals(
    sums: np.ndarray, counts: np.ndarray, b: int, seed: int | np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`resample_sums` of per-cluster ``sums`` and ``counts`` (each ``G x J``,
    cluster x cell) with the same resamples: returns ``(S*, N*)``, each ``B x J``."""
    both = resample_sums(np.hstack([sums, counts]), b, seed)
    return both[:, : sums.shape[1]], both[:, sums.shape[1] :]


def percentile_interval(theta_b: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, ...]:
    """Percentile interval: the ``(1-level)/2`` and ``(1+level)/2`` quantiles of the
    bootstrap distribution (column-wise; linear interpolation as ``scipy.stats``)."""
    alpha = (1.0 - level) / 2.0
    lo, hi = np.nanquantile(theta_b, [alpha, 1.0 - alpha], axis=0)
    return lo, hi


def bca_interval(
    theta_b: np.ndarray, theta_hat: np.ndarray, theta_jack: np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, ...]:
    """Bias-corrected and accelerated interval (Efron & Tibshirani 1993, §14.3).

    ``z0 = Phi^-1(#{theta*_b < theta} + #{theta*_b <= theta}) / 2B)`` (bias);
    ``a = sum (tbar - theta_(g))^3 / (6 [sum (tbar - theta_(g))^2]^(3/2))`` from the
    leave-one-cluster-out jackknife ``theta_(g)`` (acceleration);
    the interval is the bootstrap quantiles at
    ``Phi(z0 + (z0 + z_a) / (1 - a (z0 + z_a)))`` for ``z_a = Phi^-1(alpha/2)`` and
    ``Phi^-1(1 - alpha/2)``. Same definitions as ``scipy.stats.bootstrap(method="BCa")``.
    Assumes a monotone normalising transform exists; NaN when the jackknife is degenerate.
    """
    alpha = (1.0 - level) / 2.0
    nb = np.sum(np.isfinite(theta_b), axis=0)
    below = np.sum(theta_b < theta_hat, axis=0) + np.sum(theta_b <= theta_hat, axis=0)
    z0 = special.ndtri(below / (2.0 * nb))
    dev = np.nanmean(theta_jack, axis=0) - theta_jack
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = np.sum(dev**3, axis=0) / (6.0 * np.sum(dev**2, axis=0) ** 1.5)
    out = []
    for z_a in (special.ndtri(alpha), special.ndtri(1.0 - alpha)):
        with np.errstate(invalid="ignore", divide="ignore"):
            p = special.ndtr(z0 + (z0 + z_a) / (1.0 - acc * (z0 + z_a)))
        col = np.full(theta_b.shape[1], np.nan)
        ok = np.isfinite(p)
        for k in np.flatnonzero(ok):  # one quantile per reported quantity, not per resample
            col[k] = np.nanquantile(theta_b[:, k], p[k])
        out.append(col)
    return out[0], out[1]
