"""Looking more than once (app/results/stats/sequential.py): the asymptotic confidence
sequence against its formula and, by simulation, against its promise (a true ratio missed
at any of 20 looks in at most 5% of studies, where the fixed-n interval misses far more);
Holm against statsmodels; the stop rule; and how estimate_ebc carries them."""

import math

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from app.results.stats import estimate_ebc
from app.results.stats.sequential import (
    ANYTIME_LABEL,
    PLANNED_ANNOTATORS,
    anytime_interval,
    cs_multiplier,
    half_width,
    holm,
    stop_now,
)
from tests.results.stats.test_cluster import _skewed


def test_cs_multiplier_is_the_papers_boundary_in_standard_errors():
    alpha, t_star = 0.05, 100
    rho2 = (2 * math.log(1 / alpha) + math.log(1 + 2 * math.log(1 / alpha))) / t_star
    for t in (2, 10, 100, 1000, 10**6):
        # Waudby-Smith et al. (2021), Theorem 2.2, with s_t = SE_t sqrt(t).
        boundary = math.sqrt(
            2 * (t * rho2 + 1) / (t * t * rho2) * math.log(math.sqrt(t * rho2 + 1) / alpha)
        )
        assert cs_multiplier(t, 0.95, t_star) == pytest.approx(boundary * math.sqrt(t))
    # Tightest near the planned number, about 3 standard errors there; wider than 1.96
    # everywhere, and it grows (slowly) without bound.
    ts = np.arange(1, 5000)
    m = cs_multiplier(ts, 0.95, PLANNED_ANNOTATORS)
    assert 60 <= ts[np.argmin(m)] <= 160 and m.min() == pytest.approx(3.0, abs=0.1)
    assert np.all(m > 1.96) and cs_multiplier(10**9) > cs_multiplier(10**4)
    assert math.isnan(cs_multiplier(0.0))


def _ratio_paths(rng, studies, g, looks, truth):
    """Per study, annotators arriving one by one; each has n ~ 1 + Poisson(30) judgments
    per kind and its own log-odds (skill N(0, 0.7), annotator x kind N(0, 0.4)). The
    population ratio of the two pooled shares is `truth` up to Monte Carlo error of the
    shares (2e5 draws). Returns, per look, ln(ratio), its CR1 delta-method SE and t."""
    n = 1 + rng.poisson(30, size=(studies, g, 2))
    u = rng.normal(0, 0.7, (studies, g))
    v = rng.normal(0, 0.4, (studies, g))
    p_d = 1 / (1 + np.exp(-(0.9 + u)))
    big = rng.normal(0, 0.7, 200_000)
    base = np.mean(1 / (1 + np.exp(-(0.9 + big))))
    vv = rng.normal(0, 0.4, 200_000)
    lo, hi = -3.0, 3.0
    for _ in range(30):  # bisection: E[p_m] = truth * E[p_d]
        mid = (lo + hi) / 2
        if np.mean(1 / (1 + np.exp(-(0.9 + big + vv + mid)))) < truth * base:
            lo = mid
        else:
            hi = mid
    shift = (lo + hi) / 2
    p_m = 1 / (1 + np.exp(-(0.9 + u + v + shift)))
    s = rng.binomial(n, np.stack([p_d, p_m], axis=2))
    out = []
    for t in looks:
        sg, ng = s[:, :t], n[:, :t]
        tot_s, tot_n = sg.sum(axis=1), ng.sum(axis=1)
        p = tot_s / tot_n
        psi = (sg[:, :, 1] - p[:, None, 1] * ng[:, :, 1]) / tot_s[:, None, 1] - (
            sg[:, :, 0] - p[:, None, 0] * ng[:, :, 0]
        ) / tot_s[:, None, 0]
        se = np.sqrt(t / (t - 1) * np.sum(psi**2, axis=1))
        out.append((np.log(p[:, 1] / p[:, 0]), se, t))
    return out


def test_anytime_interval_keeps_its_level_over_20_looks_where_the_fixed_one_does_not():
    rng = np.random.default_rng(3)
    studies, truth = 2000, 1.0
    looks = np.linspace(10, 200, 20).astype(int)
    paths = _ratio_paths(rng, studies, 200, looks, truth)
    miss_av = np.zeros(studies, bool)
    miss_fixed = np.zeros(studies, bool)
    for est, se, t in paths:
        lo, hi = anytime_interval(est, se, np.full(studies, t), exp=False)
        miss_av |= (lo > 0) | (hi < 0)
        miss_fixed |= np.abs(est) > 1.959964 * se
    tol = 3 * math.sqrt(0.05 * 0.95 / studies)
    print(f"missed at some look: anytime-valid {miss_av.mean():.3f}, fixed {miss_fixed.mean():.3f}")
    assert miss_av.mean() <= 0.05 + tol
    assert miss_fixed.mean() > 0.10  # every look is another test


def test_small_sample_factor_and_too_few_clusters():
    est, se = np.array([0.0, 0.0, 0.0]), np.array([0.1, 0.1, 0.1])
    t = np.array([1.0, 10.0, 10.0])
    lo, hi = anytime_interval(est, se, t, df=np.array([5.0, 5.0, 1e6]), exp=False)
    assert math.isnan(lo[0]) and math.isnan(hi[0])  # one annotator: no interval
    plain = cs_multiplier(10.0) * 0.1
    assert hi[2] == pytest.approx(plain, rel=1e-4)  # df -> infinity: no correction
    assert hi[1] == pytest.approx(plain * 2.570582 / 1.959964, rel=1e-5)  # t_5 / z


def test_holm_matches_statsmodels_and_ignores_nan():
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 7):
        p = rng.uniform(0, 0.2, m)
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1])
    p = np.array([0.01, np.nan, 0.04, 0.03])
    adj = holm(p)
    assert math.isnan(adj[1])
    assert adj[[0, 2, 3]] == pytest.approx(multipletests(p[[0, 2, 3]], method="holm")[1])
    assert np.all(np.isnan(holm(np.array([np.nan]))))


def test_stop_rule():
    assert stop_now([0.98, 1.01], [1.02, 1.05], h=0.025)
    assert not stop_now([0.98, 1.01], [1.02, 1.07], h=0.025)  # one is still wide
    assert not stop_now([0.9], [np.inf], h=10.0)  # an unbounded interval never stops
    assert not stop_now([], [], h=1.0)
    assert half_width(1.0, 1.5) == pytest.approx(0.25)


def _three_lengths(seed):
    d, ann, kind = _skewed(seed, g=40)
    rng = np.random.default_rng(seed)
    length = rng.choice([10, 20, 30], d.size)
    n = d.size
    return d, length, kind, ann, np.arange(n) // 10, np.arange(n)


def test_estimate_ebc_carries_holm_and_the_anytime_interval():
    cols = _three_lengths(2)
    res = estimate_ebc(*cols, b=199, seed=1)
    assert res.design == "nested" and res.unit == "annotator"
    per = [t for t in res.tests if t.length is not None]
    pooled = next(t for t in res.tests if t.length is None)
    assert [t.p_holm for t in per] == pytest.approx(holm(np.array([t.p_value for t in per])))
    assert math.isnan(pooled.p_holm)  # the headline, not a member of the family
    assert "Holm" in res.multiplicity and "pooled" in res.multiplicity
    for t in per:
        q = res.ebc(t.length)
        assert q.p_holm == t.p_holm and (q.av_low, q.av_high) == (t.av_low, t.av_high)
        # The anytime-valid interval: the jackknife SE of ln EB-C times the sequence's
        # factor at G annotators, with the t correction at G_eff - 1.
        se_log = q.se / q.estimate
        lo, hi = anytime_interval(
            np.log(q.estimate), se_log, q.n_annotators, df=q.n_effective - 1.0
        )
        assert (q.av_low, q.av_high) == pytest.approx((float(lo), float(hi)), rel=1e-9)
        assert q.av_low < q.low and q.av_high > q.high  # wider than the fixed-n one
        assert q.av_half_width == pytest.approx((q.av_high - q.av_low) / 2)
    assert pooled.av_low < pooled.estimate < pooled.av_high
    for q in res.cgd:
        assert math.isnan(q.av_low) and math.isnan(q.p_holm)
    widest = max(q.av_half_width for q in res.ratios if q.name == "ebc")
    assert res.stop(widest) and not res.stop(widest * 0.99)
    assert ANYTIME_LABEL == "valid however often you look"
