"""Known answers for the EB-C estimators and their error bars (app/results/stats/ebc.py)."""

import math

import numpy as np
import pytest
from scipy import stats

from app.results.stats import (
    PAPER_LABEL,
    TEST_METHOD,
    ebc_ratio,
    estimate_ebc,
    paper_comparable,
    plurality_by_item,
    resample_sums,
)
from tests.results.stats_reference import cell_means, d_from_choice, d_gd, toy_ebc

DATA, MODEL, SHUFFLED = 0, 1, 2


def _study(rows):
    """rows: (annotator, hit, item, length, kind, choice[, attention])."""
    a = np.array([tuple(r) + (False,) * (7 - len(r)) for r in rows], dtype=np.int64)
    cols = [a[:, i] for i in range(6)]
    att = a[:, 6].astype(bool)
    annotator, hit, item, length, kind, choice = cols
    return {
        "d": d_from_choice(choice),
        "length": length,
        "kind": kind,
        "annotator": annotator,
        "hit": hit,
        "item": item,
        "choice": choice,
        "attention": att,
    }


# One length, two annotators, one attention item (item 9: answered "top-1", excluded).
# data choices: 1, 3, 0(none), 2  -> d = 0, 1, 1, 1       -> CGD(data)  = 3/4
# model choices: 1, 1, 4, 0, 1    -> d = 0, 0, 1, 1, 0    -> CGD(model) = 2/5
HAND = _study(
    [
        (7, 0, 0, 10, DATA, 1),
        (7, 0, 1, 10, DATA, 3),
        (7, 0, 2, 10, MODEL, 1),
        (7, 0, 3, 10, MODEL, 1),
        (7, 0, 9, 10, DATA, 1, True),
        (8, 1, 4, 10, DATA, 0),
        (8, 1, 5, 10, DATA, 2),
        (8, 1, 6, 10, MODEL, 4),
        (8, 1, 7, 10, MODEL, 0),
        (8, 1, 8, 10, MODEL, 1),
    ]
)


def test_d_is_zero_only_for_top1_and_none_counts_as_one():
    assert d_from_choice(np.array([1, 2, 5, 0, 6])).tolist() == [0, 1, 1, 1, 1]


def test_single_estimator_by_hand_excludes_attention_items():
    r = estimate_ebc(**HAND, b=200, seed=1)
    assert r.cell(10, DATA).estimate == pytest.approx(3 / 4)
    assert r.cell(10, MODEL).estimate == pytest.approx(2 / 5)
    assert r.ebc(10).estimate == pytest.approx((2 / 5) / (3 / 4))
    assert r.n_judgments == 9
    assert r.ebc(10).n_judgments == 9 and r.ebc(10).n_annotators == 2
    # With the attention item counted, CGD(data) would be 3/5: it must not be.
    with_att = estimate_ebc(**{**HAND, "attention": None}, b=200, seed=1)
    assert with_att.cell(10, DATA).estimate == pytest.approx(3 / 5)


def test_keep_mask_applies_exclusions():
    keep = HAND["annotator"] != 8  # e.g. annotator 8 blocked
    r = estimate_ebc(**HAND, keep=keep, b=200, seed=1)
    assert r.cell(10, DATA).estimate == pytest.approx(1 / 2)
    assert r.cell(10, MODEL).estimate == pytest.approx(0.0)
    assert r.n_annotators == 1


def test_few_annotators_are_flagged_with_every_interval():
    r = estimate_ebc(**HAND, b=200, seed=1)
    assert r.few_annotators and any("annotators" in w for w in r.warnings)
    assert all(q.few_annotators and q.n_annotators <= 2 for q in r.cgd + r.ratios)


def test_plurality_tie_rule_by_hand():
    item = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 6])
    choice = np.array([1, 1, 2, 1, 2, 3, 2, 2, 1, 0, 0, 1, 1, 0, 1, 4])
    ids, d, m = plurality_by_item(item, choice)
    assert ids.tolist() == [0, 1, 2, 3, 4, 5, 6]
    # unique top-1 plurality; 3-way tie; top-1 not modal; none modal; 2-way tie with
    # none; single judgments
    assert d == pytest.approx([0, 2 / 3, 1, 1, 1 / 2, 0, 1])
    assert m.tolist() == [3, 3, 3, 3, 2, 1, 1]


def test_plurality_estimator_in_estimate_ebc():
    # Items 0-2 data, 3-5 model, three judgments each by annotators 1..3.
    choices = {0: [1, 1, 2], 1: [1, 2, 3], 2: [2, 2, 1], 3: [1, 1, 1], 4: [0, 0, 1], 5: [1, 4, 4]}
    rows = [
        (a, 0, i, 20, DATA if i < 3 else MODEL, c)
        for i, cs in choices.items()
        for a, c in zip((1, 2, 3), cs, strict=True)
    ]
    s = _study(rows)
    r = estimate_ebc(**s, estimator="plurality", unit="item", b=300, seed=0)
    assert r.cell(20, DATA).estimate == pytest.approx((0 + 2 / 3 + 1) / 3)
    assert r.cell(20, MODEL).estimate == pytest.approx((0 + 1 + 1) / 3)
    single = estimate_ebc(**s, estimator="single", unit="item", b=300, seed=0)
    assert single.cell(20, DATA).estimate == pytest.approx(5 / 9)
    # Annotator attribution gives each judgment 1/3 of its item: same point estimate.
    ra = estimate_ebc(**s, estimator="plurality", unit="annotator", b=300, seed=0)
    assert ra.ebc(20).estimate == pytest.approx(r.ebc(20).estimate)
    with pytest.raises(ValueError, match="choice"):
        estimate_ebc(**{**s, "choice": None}, estimator="plurality")


def test_diagnostic_ratios_and_cell_means():
    rng = np.random.default_rng(0)
    n = 600
    kind = np.tile([DATA, MODEL, SHUFFLED], n // 3)
    d = (rng.random(n) < np.choose(kind, [0.5, 0.6, 0.9])).astype(float)
    length = np.repeat([5, 10], n // 2)
    ids = np.arange(n)
    cm = cell_means(d, length, kind)
    r = estimate_ebc(d, length, kind, ids % 40, ids // 10, ids, b=300, seed=0)
    for ln in (5, 10):
        sel = length == ln
        p = {k: d[sel & (kind == k)].mean() for k in (DATA, MODEL, SHUFFLED)}
        assert cm.get(ln, MODEL) == pytest.approx(p[MODEL])
        assert r.ebc(ln).estimate == pytest.approx(p[MODEL] / p[DATA])
        ratio = [q for q in r.ratios if q.name == "ratio" and q.length == ln]
        assert len(ratio) == 1 and ratio[0].kind == SHUFFLED
        assert ratio[0].estimate == pytest.approx(p[SHUFFLED] / p[DATA])


def test_trend_is_ols_slope_of_log_ebc_over_length():
    rng = np.random.default_rng(3)
    rows_d, rows_l, rows_k = [], [], []
    for ln, pm in ((10, 0.6), (20, 0.7), (30, 0.75)):
        for k, p in ((DATA, 0.55), (MODEL, pm)):
            x = (rng.random(500) < p).astype(float)
            rows_d.append(x)
            rows_l.append(np.full(500, ln))
            rows_k.append(np.full(500, k))
    d, length, kind = map(np.concatenate, (rows_d, rows_l, rows_k))
    ids = np.arange(d.size)
    r = estimate_ebc(d, length, kind, ids % 60, ids // 10, ids, b=2000, seed=2)
    logs = [math.log(r.ebc(ln).estimate) for ln in (10, 20, 30)]
    slope = np.polyfit([10, 20, 30], logs, 1)[0]
    assert r.trend.estimate == pytest.approx(slope)
    assert r.trend.low < r.trend.estimate < r.trend.high
    assert r.trend.low > 0  # a clear upward trend is detected


def test_delta_method_matches_an_explicit_loop():
    rng = np.random.default_rng(5)
    n = 400
    ann = rng.integers(0, 12, n)
    kind = rng.integers(0, 2, n)
    d = (rng.random(n) < 0.5 + 0.1 * kind + 0.02 * ann).astype(float)
    r = estimate_ebc(d, np.full(n, 10), kind, ann, np.arange(n) // 10, np.arange(n), b=500, seed=0)
    p = {k: d[kind == k].mean() for k in (0, 1)}
    s = {k: d[kind == k].sum() for k in (0, 1)}
    psi = []
    for a in range(12):
        terms = []
        for k in (0, 1):
            sel = (ann == a) & (kind == k)
            terms.append((d[sel].sum() - p[k] * sel.sum()) / s[k])
        psi.append(terms[1] - terms[0])
    v = 12 / 11 * sum(x * x for x in psi)
    q = r.ebc(10)
    assert q.delta_se == pytest.approx(q.estimate * math.sqrt(v))
    assert q.delta_low == pytest.approx(q.estimate * math.exp(-1.959963985 * math.sqrt(v)))


def _crossed(rng, n_items=120, n_annot=15, per_item=3):
    item = np.repeat(np.arange(n_items), per_item)
    ann = np.concatenate([rng.choice(n_annot, per_item, replace=False) for _ in range(n_items)])
    kind = (np.arange(n_items) % 2)[item]
    eff = rng.normal(0, 0.8, n_annot)[ann] + rng.normal(0, 0.8, n_items)[item]
    d = (rng.random(item.size) < 1 / (1 + np.exp(-(0.5 + 0.3 * kind + eff)))).astype(float)
    return d, np.full(item.size, 10), kind, ann, item // 10, item


def test_two_way_variance_is_cgm_formula():
    d, length, kind, ann, hit, item = _crossed(np.random.default_rng(11))
    r = estimate_ebc(d, length, kind, ann, hit, item, unit="twoway")
    p = {k: d[kind == k].mean() for k in (0, 1)}
    s = {k: d[kind == k].sum() for k in (0, 1)}

    def v(cluster):
        groups = {}
        for c, dk, kk in zip(cluster, d, kind, strict=True):
            sign = 1 if kk == 1 else -1
            groups[c] = groups.get(c, 0.0) + sign * (dk - p[kk]) / s[kk]
        g = len(groups)
        return g / (g - 1) * sum(x * x for x in groups.values())

    def v_jack(cluster):  # leave one annotator out, ln EB-C recomputed (CV3)
        cluster = np.asarray(cluster)
        ids = np.unique(cluster)
        th = []
        for c in ids:
            keep = cluster != c
            th.append(np.log(d[keep & (kind == 1)].mean() / d[keep & (kind == 0)].mean()))
        th = np.array(th)
        return (ids.size - 1) / ids.size * np.sum((th - th.mean()) ** 2)

    pairs = [(a, i) for a, i in zip(ann, item, strict=True)]
    v_cgm = v_jack(ann) + v(list(item)) - v(pairs)
    q = r.ebc(10)
    assert r.unit == "twoway" and r.design == "crossed"
    assert q.method == "cgm"
    assert q.se == pytest.approx(q.estimate * math.sqrt(v_cgm))
    assert q.delta_se == pytest.approx(q.estimate * math.sqrt(v(list(ann))))
    n_a = np.bincount(ann)
    g_eff = n_a.sum() ** 2 / np.sum(n_a**2)  # items: 3 judgments each, G_eff = items
    tq = stats.t.ppf(0.975, min(g_eff, 120) - 1)
    assert q.low == pytest.approx(q.estimate * math.exp(-tq * math.sqrt(v_cgm)))
    # The p-value is the same t: the interval excludes 1 exactly when p <= 0.05.
    t = math.log(q.estimate) / math.sqrt(v_cgm)
    assert q.p_value == pytest.approx(2 * stats.t.sf(abs(t), min(g_eff, 120) - 1))
    assert r.tests[0].p_value == pytest.approx(q.p_value)
    assert r.tests[0].low == pytest.approx(q.low)
    # The one-way annotator test stays, labelled secondary.
    assert r.secondary_tests[0].method == TEST_METHOD
    assert r.tests[0].method != TEST_METHOD


def test_two_way_reduces_to_annotator_clustering_when_items_are_judged_once():
    rng = np.random.default_rng(4)
    n = 500
    ann, kind = rng.integers(0, 40, n), np.tile([0, 1], n // 2)
    d = (rng.random(n) < 0.6 + 0.05 * kind).astype(float)
    args = (d, np.full(n, 10), kind, ann, np.arange(n) // 10, np.arange(n))
    tw = estimate_ebc(*args, unit="twoway").ebc(10)
    an = estimate_ebc(*args, unit="annotator", b=200)
    assert an.design == "nested" and an.unit == "annotator"
    # V_item = V_judgment: what is left is the annotator jackknife of the default.
    assert tw.se == pytest.approx(an.ebc(10).se)


def test_bootstrap_is_seeded_and_reproducible():
    # The pairs bootstrap (no longer the default; the wild one: test_cluster.py).
    a = estimate_ebc(**HAND, b=500, seed=3, ci="percentile").ebc(10)
    b = estimate_ebc(**HAND, b=500, seed=3, ci="percentile").ebc(10)
    c = estimate_ebc(**HAND, b=500, seed=4, ci="percentile").ebc(10)
    assert (a.low, a.high, a.se) == (b.low, b.high, b.se)
    assert (a.low, a.high, a.se) != (c.low, c.high, c.se)


def test_resample_weights_are_multinomial():
    x = np.eye(4)
    w = resample_sums(x, 20_000, seed=0)  # row r = multiplicities of the 4 clusters
    assert np.all(w.sum(axis=1) == 4)
    assert w.mean(axis=0) == pytest.approx(np.ones(4), abs=0.03)
    assert w.var(axis=0) == pytest.approx(np.full(4, 4 * 0.25 * 0.75), rel=0.05)


def _skewed_clusters(seed, g=20):
    """Judgments of a skewed, low-CGD study with few annotators (BCa != percentile)."""
    rng = np.random.default_rng(seed)
    n = np.ceil(rng.pareto(1.5, g) * 4 + 2).astype(int)
    p_a = rng.beta(1, 4, g)
    rows = []
    for a in range(g):
        for k, bump in ((DATA, 0.0), (MODEL, 0.1)):
            rows.append((a, k, (rng.random(n[a]) < min(p_a[a] + bump, 1)).astype(float)))
    d = np.concatenate([r[2] for r in rows])
    ann = np.concatenate([np.full(r[2].size, r[0]) for r in rows])
    kind = np.concatenate([np.full(r[2].size, r[1]) for r in rows])
    return d, ann, kind


def _per_annotator(d, ann, kind):
    return [
        np.bincount(ann, weights=w, minlength=ann.max() + 1)
        for w in (d * (kind == MODEL), kind == MODEL, d * (kind == DATA), kind == DATA)
    ]


def _ratio(sm, nm, sd, nd, axis=-1):
    return (sm.sum(axis) / nm.sum(axis)) / (sd.sum(axis) / nd.sum(axis))


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_intervals_equal_scipy_bootstrap_on_the_same_resamples(method):
    # Our resamples are scipy's paired-bootstrap index draws (integers(0, G, (B, G))
    # from the same generator), so with one seed both give the same interval; the data
    # are skewed and lumpy (20 annotators), where BCa moves well away from percentile.
    d, ann, kind = _skewed_clusters(1)
    n, b = d.size, 20_000
    ours = estimate_ebc(
        d, np.full(n, 10), kind, ann, ann, np.arange(n), b=b, seed=1, ci=method
    ).ebc(10)
    ref = stats.bootstrap(
        _per_annotator(d, ann, kind),
        _ratio,
        paired=True,
        vectorized=True,
        n_resamples=b,
        method="BCa" if method == "bca" else "percentile",
        rng=np.random.default_rng(1),
    )
    assert ours.se == pytest.approx(ref.standard_error, rel=1e-9)
    assert ours.low == pytest.approx(ref.confidence_interval.low, rel=1e-9)
    assert ours.high == pytest.approx(ref.confidence_interval.high, rel=1e-9)
    if method == "bca":
        pct = estimate_ebc(
            d, np.full(n, 10), kind, ann, ann, np.arange(n), b=b, seed=1, ci="percentile"
        ).ebc(10)
        assert max(abs(pct.low - ours.low), abs(pct.high - ours.high)) > 0.3 * ours.se


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_intervals_agree_with_scipy_bootstrap_within_monte_carlo_error(method):
    d, ann, kind = _skewed_clusters(8, g=30)
    n, b = d.size, 20_000
    ours = estimate_ebc(
        d, np.full(n, 10), kind, ann, ann, np.arange(n), b=b, seed=1, ci=method
    ).ebc(10)
    ref = stats.bootstrap(
        _per_annotator(d, ann, kind),
        _ratio,
        paired=True,
        vectorized=True,
        n_resamples=b,
        method="BCa" if method == "bca" else "percentile",
        rng=np.random.default_rng(2),
    )
    se = ref.standard_error
    # Monte Carlo sd of a 2.5% endpoint with B = 20,000 is ~0.02 SE per run.
    assert ours.se == pytest.approx(se, rel=0.03)
    assert abs(ours.low - ref.confidence_interval.low) < 0.1 * se
    assert abs(ours.high - ref.confidence_interval.high) < 0.1 * se


def test_paper_table_ebc_recomputed_from_its_means():
    table = [  # (CGD(M|D), CGD(M|M), EB-C as printed)
        (0.726, 0.738, 1.016),
        (0.735, 0.752, 1.022),
        (0.731, 0.752, 1.029),
        (0.485, 0.482, 0.993),
        (0.563, 0.562, 0.999),
        (0.530, 0.526, 0.992),
    ]
    for cgd_d, cgd_m, printed in table:
        # The printed ratios agree with the printed means to rounding (0.0005 on each
        # mean moves the ratio by up to ~0.0015).
        assert float(ebc_ratio(cgd_m, cgd_d)) == pytest.approx(printed, abs=0.0025)


def test_toy_check_total_variation():
    t = toy_ebc()
    assert (t.cgd_data, t.cgd_model, t.ebc) == pytest.approx((0.2, 0.36, 1.8))
    t2 = toy_ebc(p_model_first=(0.1, 0.9))
    assert (t2.cgd_data, t2.cgd_model, t2.ebc) == pytest.approx((0.2, 0.04, 0.2))


def test_toy_check_greedy_with_tie_rule():
    # P_D(.|w) is uniform: argmax ties between A and B, broken at random.
    assert d_gd([0.9, 0.1], [0.5, 0.5]) == pytest.approx(0.5)
    assert d_gd([0.9, 0.1], [0.2, 0.8]) == 1.0 and d_gd([0.9, 0.1], [0.6, 0.4]) == 0.0
    t = toy_ebc(divergence="gd")
    assert (t.cgd_data, t.cgd_model, t.ebc) == pytest.approx((0.5, 0.5, 1.0))


def test_paper_comparable_is_mean_and_std_of_five_disjoint_parts():
    rng = np.random.default_rng(0)
    n = 1000
    kind = np.tile([DATA, MODEL], n // 2)
    d = (rng.random(n) < 0.7 + 0.05 * kind).astype(float)
    out = paper_comparable(d, np.full(n, 10), kind, seed=9)
    ebc = next(f for f in out if f.name == "ebc")
    assert ebc.label == PAPER_LABEL and len(ebc.parts) == 5
    # Recompute the five parts with the same permutation.
    part = np.random.default_rng(9).permutation(n) % 5
    vals = [
        d[(part == k) & (kind == MODEL)].mean() / d[(part == k) & (kind == DATA)].mean()
        for k in range(5)
    ]
    assert ebc.mean == pytest.approx(np.mean(vals))
    assert ebc.std == pytest.approx(np.std(vals))
    assert ebc.mean != pytest.approx(d[kind == MODEL].mean() / d[kind == DATA].mean(), abs=1e-12)
