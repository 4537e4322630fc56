"""Small-cluster inference (app/results/stats/cluster.py): the wild cluster bootstrap test
of EB-C = 1 against a direct loop over the draws, its inversion into the interval, the
jackknife t interval and the effective number of annotators."""

import numpy as np
import pytest
from scipy import stats

from app.results.stats import estimate_ebc
from app.results.stats.cluster import (
    effective_clusters,
    jackknife_t,
    rademacher_blocks,
    wild_ratio,
)

DATA, MODEL = 0, 1


def _skewed(seed, g=25):
    """Judgments of one length: heavy-tailed activity, annotator x kind effects."""
    rng = np.random.default_rng(seed)
    n = np.ceil(rng.pareto(1.2, g) * 6 + 3).astype(int)
    u, v = rng.normal(0.8, 0.7, g), rng.normal(0.1, 0.5, g)
    rows = []
    for a in range(g):
        for k in (DATA, MODEL):
            p = 1 / (1 + np.exp(-(u[a] + k * v[a])))
            rows.append((np.full(n[a], a), np.full(n[a], k), (rng.random(n[a]) < p) * 1.0))
    ann, kind, d = (np.concatenate(c) for c in zip(*rows, strict=True))
    return d, ann, kind


def _totals(d, ann, kind):
    g = ann.max() + 1
    s = np.stack([np.bincount(ann, weights=d * (kind == k), minlength=g) for k in (0, 1)], 1)
    n = np.stack([np.bincount(ann, weights=1.0 * (kind == k), minlength=g) for k in (0, 1)], 1)
    return s, n


def _loop_p_value(d, ann, kind, r, eps):
    """The restricted wild cluster bootstrap-t, one draw at a time, on the judgments."""
    g = ann.max() + 1
    m = kind == MODEL

    def t_stat(y):
        pm, pd = y[m].mean(), y[~m].mean()
        res = y - np.where(m, pm, pd)
        score = np.bincount(ann, weights=np.where(m, res / m.sum(), -r * res / (~m).sum()))
        return (pm - r * pd) / np.sqrt(g / (g - 1) * np.sum(score**2))

    alpha = (r * d[m].sum() + d[~m].sum()) / (r * r * m.sum() + (~m).sum())
    fit = np.where(m, r * alpha, alpha)
    t = t_stat(d)
    t_star = np.array([t_stat(fit + e[ann] * (d - fit)) for e in eps])
    return (1 + np.sum(np.abs(t_star) >= abs(t) * (1 - 1e-10))) / (len(eps) + 1), t


@pytest.mark.parametrize("null", [1.0, 0.93, 1.2])
def test_wild_test_equals_a_loop_over_the_draws(null):
    d, ann, kind = _skewed(4)
    s, n = _totals(d, ann, kind)
    b, seed = 400, 9
    out = wild_ratio(s, n, np.array([[0, 1]]), np.array([[1, 0]]), b=b, seed=seed, null=null)
    # The same draws: 11 moment columns for one ratio.
    rng = np.random.default_rng(seed)
    eps = np.vstack([e for _, e in rademacher_blocks(s.shape[0], b, 11, rng)])
    p, t = _loop_p_value(d, ann, kind, null, eps)
    assert out.statistic[0] == pytest.approx(t, rel=1e-9)
    assert out.p_value[0] == pytest.approx(p, abs=1e-12)
    assert out.estimate[0] == pytest.approx(d[kind == 1].mean() / d[kind == 0].mean())
    assert out.n_clusters[0] == 25


def test_interval_is_the_inverted_test():
    for seed in range(6):
        d, ann, kind = _skewed(seed)
        s, n = _totals(d, ann, kind)
        num, den = np.array([[0, 1]]), np.array([[1, 0]])
        w = wild_ratio(s, n, num, den, b=999, seed=seed, level=0.95)
        lo, hi = w.low[0], w.high[0]
        assert lo < w.estimate[0] < hi
        # 1 outside the interval exactly when the test rejects at 5%.
        assert (w.p_value[0] <= 0.05) == (not lo <= 1.0 <= hi)
        # At the ends the p-value crosses 0.05 (same draws for every null).
        for end, step in ((lo, -1), (hi, 1)):
            inside = wild_ratio(s, n, num, den, b=999, seed=seed, null=end * (1 - step * 1e-6))
            outside = wild_ratio(s, n, num, den, b=999, seed=seed, null=end * (1 + step * 1e-6))
            assert inside.p_value[0] > 0.05 >= outside.p_value[0]


def test_estimate_ebc_reports_the_wild_interval_and_test():
    d, ann, kind = _skewed(2)
    n = d.size
    r = estimate_ebc(d, np.full(n, 10), kind, ann, ann, np.arange(n), b=999, seed=5)
    q, (test,) = r.ebc(10), r.tests
    assert q.method == "wild" and r.ci == "wild" and "wild" in r.interval
    s, cnt = _totals(d, ann, kind)
    w = wild_ratio(s, cnt, np.array([[0, 1]]), np.array([[1, 0]]), b=999, seed=5)
    assert (q.low, q.high, q.p_value) == (w.low[0], w.high[0], w.p_value[0])
    assert (test.low, test.high, test.p_value, test.length) == (q.low, q.high, q.p_value, 10)
    assert "population EB-C = 1" in test.null and "annotator" in test.method
    # CGD cells: jackknife t intervals; the old percentile stays available.
    assert {c.method for c in r.cgd} == {"jackknife-t"}
    pct = estimate_ebc(
        d, np.full(n, 10), kind, ann, ann, np.arange(n), b=999, seed=5, ci="percentile"
    )
    assert pct.ebc(10).method == "percentile" and pct.ebc(10).p_value == q.p_value


def test_jackknife_t_matches_a_leave_one_out_loop():
    d, ann, kind = _skewed(3)
    n = d.size
    r = estimate_ebc(d, np.full(n, 10), kind, ann, ann, np.arange(n), b=199, seed=0)
    g = ann.max() + 1
    logs, sizes = [], np.bincount(ann)
    for a in range(g):
        keep = ann != a
        dd, kk = d[keep], kind[keep]
        logs.append(np.log(dd[kk == 1].mean() / dd[kk == 0].mean()))
    logs = np.array(logs)
    se = np.sqrt((g - 1) / g * np.sum((logs - logs.mean()) ** 2))
    g_eff = sizes.sum() ** 2 / np.sum(sizes**2)
    assert r.ebc(10).n_effective == pytest.approx(g_eff)
    assert r.ebc(10).se == pytest.approx(r.ebc(10).estimate * se, rel=1e-9)
    # CGD(data): its SE is the same on the linear scale; its interval (issue 32) the
    # jackknife t interval on the logit scale, t quantiles with G_eff - 1 df.
    cgd = []
    for a in range(g):
        keep = (ann != a) & (kind == 0)
        cgd.append(d[keep].mean())
    cgd = np.array(cgd)
    se_c = np.sqrt((g - 1) / g * np.sum((cgd - cgd.mean()) ** 2))
    c = r.cell(10, 0)
    assert c.se == pytest.approx(se_c, rel=1e-9)
    lg = np.log(cgd / (1 - cgd))
    se_lg = np.sqrt((g - 1) / g * np.sum((lg - lg.mean()) ** 2))
    half = stats.t.ppf(0.975, g_eff - 1) * se_lg
    centre = np.log(c.estimate / (1 - c.estimate))
    ends = 1 / (1 + np.exp(-np.array([centre - half, centre + half])))
    assert (c.low, c.high) == pytest.approx(tuple(ends), rel=1e-9)
    assert c.low < c.estimate < c.high


def test_jackknife_t_ignores_clusters_outside_a_quantity():
    theta = np.array([0.5])
    jack = np.array([[0.4], [0.6], [0.5], [123.0]])
    involved = np.array([[True], [True], [True], [False]])
    se, tq, _ = jackknife_t(theta, jack, involved, np.array([2.0]))
    assert se[0] == pytest.approx(np.sqrt(2 / 3 * 0.02))
    assert tq == pytest.approx(stats.t.ppf(0.975, 2))


def test_effective_number_of_annotators():
    assert effective_clusters(np.full(40, 7)) == pytest.approx(40)
    assert effective_clusters(np.array([100, 1, 1, 1])) == pytest.approx(103**2 / 10_003)
    assert effective_clusters(np.array([5, 0, 5])) == pytest.approx(2)  # idle ones drop out


def test_few_effective_annotators_are_flagged_even_when_there_are_many():
    # 100 annotators, but three of them do nearly everything.
    rng = np.random.default_rng(0)
    sizes = np.r_[[600, 500, 400], np.full(97, 2)]
    ann = np.repeat(np.arange(100), sizes)
    kind = rng.integers(0, 2, ann.size)
    d = (rng.random(ann.size) < 0.7).astype(float)
    n = d.size
    r = estimate_ebc(d, np.full(n, 10), kind, ann, ann, np.arange(n), b=199)
    q = r.ebc(10)
    assert q.n_annotators == 100 and q.n_effective < 5 and q.few_annotators
    assert r.few_annotators and any("effective annotators" in w for w in r.warnings)


def test_wild_test_of_an_empty_denominator_is_undefined():
    s = np.array([[0.0, 3.0], [0.0, 2.0], [0.0, 1.0]])
    n = np.array([[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]])
    w = wild_ratio(s, n, np.array([[0, 1]]), np.array([[1, 0]]), b=199)
    assert np.isnan(w.p_value[0]) and np.isnan(w.low[0])


def test_wild_figures_are_seeded_and_reproducible():
    d, ann, kind = _skewed(6)
    n = d.size
    args = (d, np.full(n, 10), kind, ann, ann, np.arange(n))
    a = estimate_ebc(*args, b=499, seed=3).ebc(10)
    b = estimate_ebc(*args, b=499, seed=3).ebc(10)
    c = estimate_ebc(*args, b=499, seed=4).ebc(10)
    assert (a.low, a.high, a.p_value) == (b.low, b.high, b.p_value)
    assert (a.low, a.high) != (c.low, c.high)


def test_identical_clusters_are_drawn_as_binomial_sums():
    # Items as clusters: each holds one judgment, so only 4 distinct rows exist and the
    # weights enter as 2 Binomial(c, 1/2) - c per row; the same test as per-cluster
    # Rademacher weights (checked against the loop, within Monte Carlo error).
    rng = np.random.default_rng(8)
    kind = np.repeat([DATA, MODEL], 400)
    d = (rng.random(800) < np.where(kind == MODEL, 0.76, 0.72)).astype(float)
    item = np.arange(800)
    s, n = _totals(d, item, kind)
    w = wild_ratio(s, n, np.array([[0, 1]]), np.array([[1, 0]]), b=4000, seed=1)
    eps = rng.choice([-1.0, 1.0], size=(4000, 800))
    p, t = _loop_p_value(d, item, kind, 1.0, eps)
    assert w.statistic[0] == pytest.approx(t, rel=1e-9)
    assert 0.1 < p < 0.9 and abs(w.p_value[0] - p) < 4 * np.sqrt(p * (1 - p) / 4000)
    assert w.n_clusters[0] == 800 and w.n_effective[0] == pytest.approx(800)
