"""Synthetic CGD and EB-C (app.results.stats.synthetic): hand-computed values, the
undefined ratio, seeds, and the item bootstrap's coverage against a known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.results.stats import DATA_KIND, MODEL_KIND, jsonable, synthetic_table

NAN = math.nan
CORRUPT = 2  # a third kind code (data_corrupted@c in a study)


def _hand_set():
    """l = 5: data items (tv, js, gd, word_gd); model items; one data item without token
    values (its word_gd still counts); l = 10: data only."""
    rows = [
        (5, DATA_KIND, 0.2, 0.1, 0, 0),
        (5, DATA_KIND, 0.4, 0.3, 1, 0),
        (5, DATA_KIND, NAN, NAN, NAN, 1),
        (5, MODEL_KIND, 0.6, 0.5, 1, 1),
        (5, MODEL_KIND, 0.3, 0.2, 1, 0),
        (5, MODEL_KIND, 0.0, 0.0, 0, 0),
        (5, MODEL_KIND, 0.5, 0.4, 1, 1),
        (10, DATA_KIND, 0.1, 0.05, 0, 1),
    ]
    a = np.array(rows, dtype=float)
    return a[:, 0].astype(int), a[:, 1].astype(int), a[:, 2:]


def test_means_and_ratio_of_means_by_hand():
    length, kind, values = _hand_set()
    t = synthetic_table(length, kind, values, b=300, seed=1)
    cell = {(c.length, c.kind): c for c in t.cells}
    d5, m5 = cell[(5, DATA_KIND)], cell[(5, MODEL_KIND)]
    # Token metrics over the two data items that have them; word_gd over all three.
    assert d5.cgd["tv"].estimate == pytest.approx(0.3) and d5.cgd["tv"].n_items == 2
    assert d5.cgd["js"].estimate == pytest.approx(0.2)
    assert d5.cgd["gd"].estimate == pytest.approx(0.5)
    assert d5.cgd["word_gd"].estimate == pytest.approx(1 / 3) and d5.cgd["word_gd"].n_items == 3
    assert d5.n_items == 3 and m5.n_items == 4
    assert m5.cgd["tv"].estimate == pytest.approx(1.4 / 4)
    assert m5.cgd["gd"].estimate == pytest.approx(0.75)
    # Token and word d_GD agree on 1 of the 2 data items with both, 3 of the 4 model ones.
    assert d5.gd_agreement == pytest.approx(0.5) and m5.gd_agreement == pytest.approx(0.75)
    ebc = {(f.length, f.metric): f for f in t.ratios if f.name == "ebc"}
    assert set(ebc) == {(5, m) for m in ("tv", "js", "gd", "word_gd")}  # l = 10: no model
    assert ebc[(5, "tv")].estimate == pytest.approx((1.4 / 4) / 0.3)  # ratio of means
    assert ebc[(5, "gd")].estimate == pytest.approx(0.75 / 0.5)
    assert ebc[(5, "word_gd")].estimate == pytest.approx(0.5 / (1 / 3))
    assert ebc[(5, "word_gd")].n_items == 7
    for f in [*t.ratios, *(f for c in t.cells for f in c.cgd.values())]:
        if f.n_items > 1 and f.se > 0:
            assert f.low <= f.estimate <= f.high, f


def test_zero_over_zero_is_one_and_a_positive_over_zero_is_undefined():
    """P_D = P_M: every divergence 0, so EB-C = 0/0 = 1 (issue 14), in every resample; a
    positive CGD over a CGD of 0 is undefined: NaN, null in JSON, and warned."""
    length = np.array([5, 5, 5, 5])
    kind = np.array([DATA_KIND, DATA_KIND, MODEL_KIND, MODEL_KIND])
    t = synthetic_table(length, kind, np.zeros((4, 4)), b=200, seed=0, kind_names=["data", "model"])
    assert all(
        f.estimate == 0 and f.low == 0 and f.high == 0 for c in t.cells for f in c.cgd.values()
    )
    ebc = [f for f in t.ratios if f.name == "ebc"]
    assert len(ebc) == 4 and all((f.estimate, f.low, f.high) == (1, 1, 1) for f in ebc)
    assert all(f.n_resamples == 200 for f in ebc) and not t.warnings

    values = np.zeros((4, 4))
    values[2:, :] = 0.5  # model prefixes deviate, data prefixes never do
    t = synthetic_table(length, kind, values, b=200, seed=0, kind_names=["data", "model"])
    ebc = [f for f in t.ratios if f.name == "ebc"]
    assert all(math.isnan(f.estimate) and math.isnan(f.low) for f in ebc)
    assert all(f.n_resamples == 0 for f in ebc)
    assert any("CGD(data) is 0" in w for w in t.warnings)
    out = jsonable(t)
    assert out["ratios"][0]["estimate"] is None and out["ratios"][0]["high"] is None
    assert out["cells"][0]["cgd"]["gd"]["estimate"] == 0.0


def test_pairs_the_gap_ratios_and_seeds():
    rng = np.random.default_rng(5)
    length = np.repeat([5, 10], 90)
    kind = np.tile(np.repeat([DATA_KIND, MODEL_KIND, CORRUPT], 30), 2)
    values = np.column_stack(
        [rng.beta(2, 3, 180), rng.beta(2, 5, 180), rng.random(180) < 0.5, rng.random(180) < 0.6]
    ).astype(float)
    pairs = [(MODEL_KIND, DATA_KIND), (CORRUPT, DATA_KIND)]
    t = synthetic_table(length, kind, values, pairs=pairs, b=400, seed=9)
    gap = {(f.length, f.metric): f for f in t.ratios if f.name == "ratio"}
    assert set(gap) == {(ln, m) for ln in (5, 10) for m in ("tv", "js", "gd", "word_gd")}
    for ln in (5, 10):
        sel = length == ln
        want = (
            values[sel & (kind == CORRUPT), 0].mean() / values[sel & (kind == DATA_KIND), 0].mean()
        )
        assert gap[(ln, "tv")].estimate == pytest.approx(want)
        assert gap[(ln, "tv")].reference_kind == DATA_KIND and gap[(ln, "tv")].kind == CORRUPT
    # The same seed gives the same numbers, whatever ratios are asked; another seed differs.
    alone = synthetic_table(length, kind, values, b=400, seed=9)
    assert alone.cells == t.cells
    assert [f for f in t.ratios if f.name == "ebc"] == alone.ratios
    other = synthetic_table(length, kind, values, b=400, seed=10)
    assert other.cells[0].cgd["tv"].low != t.cells[0].cgd["tv"].low


def test_no_items_gives_an_empty_table():
    t = synthetic_table(np.zeros(0, int), np.zeros(0, int), np.zeros((0, 4)), b=100)
    assert t.cells == [] and t.ratios == []


def test_item_bootstrap_covers_a_known_truth():
    """Items drawn from a known truth: token d_GD ~ Bernoulli(p), d_TV ~ Beta(a, b), per
    kind; 95% percentile intervals of CGD and EB-C cover the truth about 95% of the time
    (R = 400 studies of 150 items per cell: Monte Carlo sd of a coverage ~0.011)."""
    p = {DATA_KIND: 0.55, MODEL_KIND: 0.66}
    beta = {DATA_KIND: (2.0, 3.0), MODEL_KIND: (2.5, 3.0)}
    true_ebc_gd = p[MODEL_KIND] / p[DATA_KIND]
    mean_tv = {k: a / (a + b) for k, (a, b) in beta.items()}
    true_ebc_tv = mean_tv[MODEL_KIND] / mean_tv[DATA_KIND]
    n, reps = 150, 400
    rng = np.random.default_rng(2024)
    kind = np.repeat([DATA_KIND, MODEL_KIND], n)
    length = np.full(2 * n, 10)
    hits = {"cgd_gd": 0, "cgd_tv": 0, "ebc_gd": 0, "ebc_tv": 0}
    for r in range(reps):
        gd = np.concatenate([rng.random(n) < p[k] for k in (DATA_KIND, MODEL_KIND)])
        tv = np.concatenate([rng.beta(*beta[k], n) for k in (DATA_KIND, MODEL_KIND)])
        values = np.column_stack([tv, gd]).astype(float)
        t = synthetic_table(length, kind, values, metrics=("tv", "gd"), b=500, seed=r)
        data = next(c for c in t.cells if c.kind == DATA_KIND)
        ebc = {f.metric: f for f in t.ratios}
        hits["cgd_gd"] += data.cgd["gd"].low <= p[DATA_KIND] <= data.cgd["gd"].high
        hits["cgd_tv"] += data.cgd["tv"].low <= mean_tv[DATA_KIND] <= data.cgd["tv"].high
        hits["ebc_gd"] += ebc["gd"].low <= true_ebc_gd <= ebc["gd"].high
        hits["ebc_tv"] += ebc["tv"].low <= true_ebc_tv <= ebc["tv"].high
    coverage = {k: v / reps for k, v in hits.items()}
    assert all(0.91 <= c <= 0.98 for c in coverage.values()), coverage
