"""Crossed designs (app/results/stats/twoway.py): the rule that detects them, the one-cell
variance sums against a loop, and by simulation (the generator of
benchmarks/stats_calibration.py) that the two-way default holds its level and covers
where the annotator-only test, kept as a secondary figure, does not."""

import numpy as np
import pytest

from app.results.stats import TEST_METHOD, estimate_ebc
from app.results.stats.twoway import (
    CROSSED_SHARE,
    TWOWAY_TEST_METHOD,
    LogForms,
    detect_design,
    onecell_sums,
    onecell_var,
)
from benchmarks.stats_calibration import Crossed, crossed_study, parameters


def test_the_rule_nested_overlap_and_replicas():
    # Nested: every item judged once.
    nested = detect_design(np.arange(100), np.arange(100) % 7)
    assert nested.design == "nested" and nested.shared_share == 0.0
    # Replicas 3: every item by 3 annotators.
    item = np.repeat(np.arange(50), 3)
    ann = (np.arange(150) * 7) % 11
    crossed = detect_design(item, ann)
    assert crossed.design == "crossed" and crossed.shared_share == 1.0
    assert crossed.judgments_per_item == pytest.approx(3.0)
    assert "crossed" in crossed.reason and "two-way" in crossed.reason
    # An overlap subset: m of 100 items judged by 3 annotators, the rest once; share
    # 3m / (100 - m + 3m). The default 5% gives 13.6%: nested; 15% gives 34.6%: crossed.
    for m, design in ((5, "nested"), (15, "crossed")):
        item = np.concatenate([np.arange(100), np.repeat(np.arange(m), 2)])
        ann = np.concatenate([np.zeros(100, int), np.tile([1, 2], m)])
        got = detect_design(item, ann)
        assert got.shared_share == pytest.approx(3 * m / (100 + 2 * m))
        assert got.design == design
    # The same annotator twice on one item is not sharing.
    same = detect_design(np.array([0, 0, 1, 1]), np.array([4, 4, 5, 5]))
    assert same.design == "nested" and same.shared_share == 0.0
    assert CROSSED_SHARE == 0.25


def test_onecell_variance_is_the_cr1_sum_over_items():
    rng = np.random.default_rng(1)
    n_items = 60
    item = np.repeat(np.arange(n_items), 3)
    cell = (np.arange(n_items) % 2)[item]  # even items data, odd items model
    y = (rng.random(item.size) < 0.6).astype(float)
    w = np.ones(item.size)
    tot_s = np.bincount(cell, weights=y)
    tot_n = np.bincount(cell, weights=w)
    forms = LogForms(np.eye(2), np.array([[-1.0, 1.0]]))  # ln EB-C
    c, m = forms.linear(tot_s, tot_n)
    v = onecell_var(onecell_sums(item, cell, y, w, 2), c, m)
    psi = {}
    p = tot_s / tot_n
    for i, j, yy in zip(item, cell, y, strict=True):
        sign = 1 if j == 1 else -1
        psi[i] = psi.get(i, 0.0) + sign * (yy - p[j]) / tot_s[j]
    g = len(psi)
    assert v[0] == pytest.approx(g / (g - 1) * sum(x * x for x in psi.values()))
    assert forms.log_values(tot_s, tot_n)[0] == pytest.approx(np.log(p[1] / p[0]))


SCENARIO = Crossed(g=100, hits=60, replicas=5, sd_item=1.5)
REPS = 200


def _tolerance(p: float) -> float:
    return 3 * np.sqrt(p * (1 - p) / REPS)


def test_two_way_default_holds_its_level_where_the_annotator_test_does_not():
    beta, mu = parameters(1.0, SCENARIO.sd_kind, SCENARIO.sd_item)
    rng = np.random.default_rng(21)
    new, old = [], []
    for r in range(REPS):
        res = estimate_ebc(**crossed_study(rng, SCENARIO, beta, mu), b=99, seed=r)
        assert res.design == "crossed" and res.unit == "twoway"
        t, sec = res.tests[0], res.secondary_tests[0]
        assert t.method == TWOWAY_TEST_METHOD and sec.method == TEST_METHOD
        # The p-value follows the interval: it excludes 1 exactly when p <= 0.05.
        assert (t.p_value <= 0.05) == (not t.low <= 1.0 <= t.high)
        new.append(t.p_value <= 0.05)
        old.append(sec.p_value <= 0.05)
    fpr_new, fpr_old = np.mean(new), np.mean(old)
    print(f"false-positive rate: two-way {fpr_new:.3f}, annotator-only {fpr_old:.3f}")
    assert abs(fpr_new - 0.05) <= _tolerance(0.05)
    assert fpr_old > 0.05 + _tolerance(0.05)


def test_two_way_default_covers_the_true_ebc():
    truth = 1.05
    beta, mu = parameters(truth, SCENARIO.sd_kind, SCENARIO.sd_item)
    rng = np.random.default_rng(22)
    cover = []
    for r in range(REPS):
        q = estimate_ebc(**crossed_study(rng, SCENARIO, beta, mu), b=99, seed=r).ebc(10)
        cover.append(q.low <= truth <= q.high)
    print(f"coverage of EB-C = {truth}: two-way {np.mean(cover):.3f}")
    assert abs(np.mean(cover) - 0.95) <= _tolerance(0.95)
