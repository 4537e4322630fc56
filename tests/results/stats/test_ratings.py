"""Statistics of ratings studies (app/results/stats/ratings*.py): pure, no database.

A hand-made study checks every point figure against arithmetic written out here; the
simulated raters of app/studytypes/ratings/raters.py (exact population truth) check the coverage
of the intervals; Krippendorff's published example and the ``krippendorff`` package check
the agreement figures.
"""

import math

import krippendorff
import numpy as np
import pytest

from app.results.stats.ratings import (
    ANNOTATOR_BOOTSTRAP,
    METHOD_LABELS,
    PAPER_AGREEMENT,
    TWOWAY,
    RatingColumns,
    mean_ratings,
    rater_quality,
    ratings_results,
)
from app.results.stats.ratings_agreement import krippendorff_alpha, rating_agreement
from app.results.stats.ratings_figures import paper_split
from app.results.stats.ratings_inference import estimands, jackknife_var
from app.simulate.design import Design
from app.studytypes.ratings.raters import RaterHeterogeneity, Raters, simulate_ratings

KINDS = ["data", "model", "attention"]
DATA, MODEL, ATT = 0, 1, 2
NAN = float("nan")

# The hand-made study: two lengths, one HIT each (2 data + 2 model pairs + 1 attention
# pair), rated by annotators 1-3 (l=10) and 2-4 (l=20). Rows: (annotator, pair, quality,
# consistency); annotator 3 has not given the consistency of pair 102 yet.
PAIRS = {  # pair -> (length, kind, hit)
    101: (10, DATA, 1),
    102: (10, DATA, 1),
    111: (10, MODEL, 1),
    112: (10, MODEL, 1),
    120: (10, ATT, 1),
    201: (20, DATA, 2),
    202: (20, DATA, 2),
    211: (20, MODEL, 2),
    212: (20, MODEL, 2),
    220: (20, ATT, 2),
}
RATINGS = [
    (1, 101, 4.0, 3.5), (2, 101, 3.5, 3.0), (3, 101, 4.5, 4.0),
    (1, 102, 3.0, 3.0), (2, 102, 3.0, 2.5), (3, 102, 4.0, NAN),
    (1, 111, 2.5, 2.0), (2, 111, 3.0, 3.0), (3, 111, 3.5, 3.0),
    (1, 112, 2.0, 2.5), (2, 112, 2.5, 2.0), (3, 112, 3.0, 2.5),
    (1, 120, 0.5, 0.0), (2, 120, 1.0, 0.5), (3, 120, 3.0, 2.0),
    (2, 201, 4.0, 4.0), (3, 201, 4.0, 3.5), (4, 201, 5.0, 4.5),
    (2, 202, 3.5, 3.0), (3, 202, 3.0, 3.0), (4, 202, 4.5, 4.0),
    (2, 211, 3.0, 2.5), (3, 211, 2.0, 2.0), (4, 211, 3.5, 3.0),
    (2, 212, 2.5, 2.0), (3, 212, 2.5, 1.5), (4, 212, 4.0, 3.5),
    (2, 220, 0.0, 0.0), (3, 220, 0.5, 0.5), (4, 220, 1.0, 1.0),
]  # fmt: skip


def _columns(rows=RATINGS, pairs=PAIRS, too_fast=()) -> RatingColumns:
    ann, pair, q, c = (np.array(x) for x in zip(*rows, strict=True))
    length, kind, hit = (np.array([pairs[p][i] for p in pair]) for i in range(3))
    return RatingColumns(
        kinds=list(KINDS),
        annotator=ann,
        hit=hit,
        item=pair,
        length=length,
        kind=kind,
        quality=q.astype(float),
        consistency=c.astype(float),
        attention=kind == ATT,
        too_fast=np.isin(np.arange(len(rows)), too_fast),
    )


def _one(rows, **key):
    found = [r for r in rows if all(getattr(r, k) == v for k, v in key.items())]
    assert len(found) == 1, key
    return found[0]


def test_hand_example_means_gaps_ratios_and_trends():
    res = ratings_results(_columns(), b=200, seed=3)
    approx = pytest.approx
    # Quality, l=10: data (4 + 3.5 + 4.5 + 3 + 3 + 4)/6 = 22/6; model (2.5 + 3 + 3.5 + 2
    # + 2.5 + 3)/6 = 16.5/6. The attention pair (0.5, 1, 3) enters nothing.
    q10 = _one(res.contrasts, length=10, step="quality")
    assert (q10.data_mean, q10.model_mean) == (approx(22 / 6), approx(16.5 / 6))
    assert q10.gap == approx(22 / 6 - 16.5 / 6)
    assert q10.ratio == approx(22 / 16.5)  # ratio of pooled means
    # l=20: data (4 + 4 + 5 + 3.5 + 3 + 4.5)/6 = 24/6; model (3 + 2 + 3.5 + 2.5 + 2.5 + 4)/6.
    q20 = _one(res.contrasts, length=20, step="quality")
    assert q20.gap == approx(24 / 6 - 17.5 / 6)
    assert q20.ratio == approx(24 / 17.5)
    # Consistency, l=10: annotator 3's missing rating of pair 102 leaves 5 data ratings,
    # (3.5 + 3 + 4 + 3 + 2.5)/5 = 3.2; model (2 + 3 + 3 + 2.5 + 2 + 2.5)/6 = 2.5.
    c10 = _one(res.contrasts, length=10, step="consistency")
    assert (c10.data_mean, c10.model_mean) == (approx(3.2), approx(2.5))
    assert (c10.gap, c10.ratio) == (approx(0.7), approx(3.2 / 2.5))
    cell = _one(res.cells, length=10, kind="data", step="consistency")
    assert (cell.mean, cell.n_ratings, cell.n_pairs, cell.n_annotators) == (approx(3.2), 5, 2, 3)
    cell = _one(res.cells, length=20, kind="model", step="quality")
    assert (cell.mean, cell.n_ratings, cell.n_pairs, cell.n_annotators) == (
        approx(17.5 / 6),
        6,
        2,
        3,
    )
    assert {(c.length, c.kind) for c in res.cells} == {
        (ln, k) for ln in (10, 20) for k in ("data", "model")
    }
    # Trends: two lengths, so the OLS slope is the difference over 10 words.
    gap = _one(res.trends, step="quality", measure="gap")
    assert gap.slope == approx(((24 - 17.5) / 6 - (22 - 16.5) / 6) / 10)
    log_ratio = _one(res.trends, step="quality", measure="log ratio")
    assert log_ratio.slope == approx((math.log(24 / 17.5) - math.log(22 / 16.5)) / 10)
    assert (res.n_ratings, res.n_annotators) == (24, 4)
    # Intervals around the estimates, named; the secondary figures carry the other name.
    for c in res.contrasts:
        assert c.gap_low <= c.gap <= c.gap_high and c.ratio_low <= c.ratio <= c.ratio_high
        assert c.method == METHOD_LABELS[TWOWAY]
    assert {c.method for c in res.secondary} == {METHOD_LABELS[ANNOTATOR_BOOTSTRAP]}
    assert [c.gap for c in res.secondary] == [c.gap for c in res.contrasts]
    assert any("only 4 annotators" in w for w in res.warnings)


def test_hand_example_agreement():
    res = ratings_results(_columns(), b=200, seed=3)
    quality = _one(res.agreement, step="quality")
    # Quality ratings of the 8 non-attention pairs, 3 each, so 3 pairs of ratings each;
    # (exact, within 0.5, within 1) agreeing pairs of ratings:
    # 101 (4, 3.5, 4.5): |d| 0.5, 0.5, 1 -> 0, 2, 3    102 (3, 3, 4): 0, 1, 1 -> 1, 1, 3
    # 111 (2.5, 3, 3.5): 0.5, 1, 0.5 -> 0, 2, 3         112 (2, 2.5, 3): -> 0, 2, 3
    # 201 (4, 4, 5): 0, 1, 1 -> 1, 1, 3                 202 (3.5, 3, 4.5): 0.5, 1, 1.5 -> 0, 1, 2
    # 211 (3, 2, 3.5): 1, 0.5, 1.5 -> 0, 1, 2           212 (2.5, 2.5, 4): 0, 1.5, 1.5 -> 1, 1, 1
    assert quality.exact == pytest.approx(3 / 24)
    assert quality.within_step == pytest.approx(11 / 24)
    assert quality.within_point == pytest.approx(20 / 24)
    assert (quality.n_pairs, quality.n_ratings) == (8, 24)
    assert quality.paper == PAPER_AGREEMENT and "within one point" in quality.paper
    # Consistency: pair 102 keeps 2 ratings (3, 2.5): one pair of ratings, within a step.
    consistency = _one(res.agreement, step="consistency")
    assert (consistency.n_pairs, consistency.n_ratings) == (8, 23)


def test_hand_example_paper_runs_follow_the_documented_split():
    cols = _columns()
    seed = 5
    res = ratings_results(cols, b=50, seed=seed, paper_runs=2, paper_pairs=1)
    # Two runs of one pair per kind. Pair means of quality at l=10: data 101 (4 + 3.5 +
    # 4.5)/3 = 4, 102 (3 + 3 + 4)/3 = 10/3; model 111 (2.5 + 3 + 3.5)/3 = 3, 112 7.5/3.
    data = _one(res.paper, length=10, step="quality", what="data")
    assert (data.mean, data.std, data.runs, data.pairs) == (
        pytest.approx((4 + 10 / 3) / 2),
        pytest.approx((4 - 10 / 3) / 2),  # ddof 0: half the spread of two values
        2,
        1,
    )
    # Which data pair meets which model pair: the split of ratings_figures.paper_split,
    # a permutation of the sorted pair ids from default_rng([seed, length, kind]).
    d_perm = np.random.default_rng([seed, 10, DATA]).permutation(2)
    m_perm = np.random.default_rng([seed, 10, MODEL]).permutation(2)
    d_means, m_means = np.array([4, 10 / 3])[d_perm], np.array([3.0, 2.5])[m_perm]
    gaps, ratios = d_means - m_means, d_means / m_means
    gap = _one(res.paper, length=10, step="quality", what="gap")
    assert (gap.mean, gap.std) == (pytest.approx(gaps.mean()), pytest.approx(gaps.std()))
    ratio = _one(res.paper, length=10, step="quality", what="ratio")
    assert (ratio.mean, ratio.std) == (pytest.approx(ratios.mean()), pytest.approx(ratios.std()))
    runs = paper_split(np.array([102, 101]), 2, 1, seed, 10, DATA)
    assert [int(r[0]) for r in runs] == [[101, 102][i] for i in d_perm]
    # The paper's 5 runs of 50 pairs do not fit 2 pairs: no figure, and a warning; with
    # 2 runs of 50 asked, 2 runs of 1 pair and a warning.
    default = ratings_results(cols, b=50)
    assert default.paper == []
    assert any("cannot make 5 runs" in w for w in default.warnings)
    fewer = ratings_results(cols, b=50, paper_runs=2, paper_pairs=50)
    assert {r.pairs for r in fewer.paper} == {1}
    assert any("2 runs of 1 pair each" in w for w in fewer.warnings)


def test_rater_quality_by_hand():
    rows = {r.annotator: r for r in rater_quality(_columns(too_fast=(0, 12)))}
    assert sorted(rows) == [1, 2, 3, 4]
    one, three = rows[1], rows[3]
    assert (one.n_ratings, one.n_attention, three.n_ratings, rows[2].n_ratings) == (5, 1, 10, 10)
    # Attention pairs rated at most 1 for quality: annotator 3 gave 3.0 (l=10) and 0.5.
    assert (one.attention_pass, three.attention_pass) == (1.0, 0.5)
    assert one.too_fast_share == pytest.approx(2 / 5)
    # Annotator 1's 8 ratings (quality and consistency of 4 pairs): values 4, 3.5, 3, 3,
    # 2.5, 2, 2, 2.5 -> 3.0, 2.5 and 2.0 twice each: 2/8.
    assert one.top_value_share == pytest.approx(2 / 8)
    # Leniency of annotator 1: own rating minus the mean of the others' on the same pair.
    # quality: 4 - 4, 3 - 3.5, 2.5 - 3.25, 2 - 2.75; consistency: 3.5 - 3.5, 3 - 2.5
    # (annotator 3 has none of 102), 2 - 3, 2.5 - 2.25.
    devs = [0, -0.5, -0.75, -0.75, 0, 0.5, -1, 0.25]
    assert one.leniency == pytest.approx(sum(devs) / 8)
    assert rater_quality(_columns().subset(np.zeros(30, bool))) == []
    # An annotator alone on a pair, no attention pair, one value: leniency and the
    # attention figure undefined, straight-lining 1.
    alone = _columns([*RATINGS, (5, 113, 3.0, 3.0)], {**PAIRS, 113: (10, MODEL, 3)})
    five = rater_quality(alone)[-1]
    assert (five.annotator, five.n_ratings, five.n_attention, five.top_value_share) == (
        5,
        1,
        0,
        1.0,
    )
    assert math.isnan(five.leniency) and math.isnan(five.attention_pass)


def test_tiny_alphas_by_hand_and_against_the_package():
    # Units (1, 2), (2, 3), (1, 3), (3, 3): coincidences o_12 = o_21 = o_23 = o_32 = o_13 =
    # o_31 = 1, o_33 = 2; n_1 = 2, n_2 = 2, n_3 = 4, n = 8.
    unit = np.repeat(np.arange(4), 2)
    value = np.array([1, 2, 2, 3, 1, 3, 3, 3], float)
    # interval: sum o d^2 = 2*1 + 2*1 + 2*4 = 12; sum n_c n_k d^2 = 2 (2*2*1 + 2*4*1 + 2*4*4)
    # = 88; alpha = 1 - 7 * 12 / 88.
    assert krippendorff_alpha(unit, value, "interval") == pytest.approx(1 - 7 * 12 / 88)
    # ordinal: d_12 = (2 + 2 - 2)^2 = 4, d_23 = (2 + 4 - 3)^2 = 9, d_13 = (8 - 3)^2 = 25;
    # sum o d = 2 (4 + 9 + 25) = 76; sum n n d = 2 (4*4 + 8*9 + 8*25) = 576.
    assert krippendorff_alpha(unit, value, "ordinal") == pytest.approx(1 - 7 * 76 / 576)
    # nominal: sum o d = 6; sum n n d = 2 (4 + 8 + 8) = 40.
    assert krippendorff_alpha(unit, value, "nominal") == pytest.approx(1 - 7 * 6 / 40)
    data = value.reshape(4, 2).T
    for metric in ("interval", "ordinal", "nominal"):
        ref = krippendorff.alpha(reliability_data=data, level_of_measurement=metric)
        assert krippendorff_alpha(unit, value, metric) == pytest.approx(ref)


def test_krippendorff_published_example():
    # "Computing Krippendorff's Alpha-Reliability" (2011), 4 observers x 12 units, missing
    # values: nominal 0.743, ordinal 0.815, interval 0.849.
    n = NAN
    data = np.array(
        [
            [1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n],
            [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
            [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n],
            [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n],
        ]
    )
    unit = np.tile(np.arange(12), 4)
    got = {m: krippendorff_alpha(unit, data.ravel(), m) for m in ("nominal", "ordinal", "interval")}
    assert got == {
        "nominal": pytest.approx(0.743, abs=5e-4),
        "ordinal": pytest.approx(0.815, abs=5e-4),
        "interval": pytest.approx(0.849, abs=5e-4),
    }


def test_alpha_is_one_for_perfect_agreement_and_undefined_without_variation():
    unit = np.repeat(np.arange(6), 3)
    value = np.repeat([0.5, 1.0, 2.5, 3.0, 4.5, 5.0], 3)
    res = rating_agreement(unit, value, step=0.5, b=100, seed=0)
    assert (res.alpha_interval, res.alpha_ordinal) == (1.0, 1.0)
    assert (res.alpha_interval_low, res.alpha_interval_high) == (1.0, 1.0)
    assert (res.exact, res.within_step, res.within_point) == (1.0, 1.0, 1.0)
    assert math.isnan(krippendorff_alpha(unit, np.full(18, 3.0), "interval"))
    assert (
        rating_agreement(np.array([1, 1, 2]), np.array([1.0, 2.0, 3.0]), step=0.5, b=10, seed=0)
        is None
    )


def test_alphas_match_the_package_on_simulated_ratings_and_their_interval_covers():
    design = Design.simple(lengths=(10,), items_per_cell=100, replicas=5, overlap_share=0)
    cols = simulate_ratings(design, Raters.paper_like((10,)), np.random.default_rng(4))
    cols.consistency[::7] = NAN  # missing consistency ratings
    res = ratings_results(cols, b=400, seed=1)
    rated = ~cols.attention
    ann = np.unique(cols.annotator[rated], return_inverse=True)[1]
    pair = np.unique(cols.item[rated], return_inverse=True)[1]
    for row in res.agreement:
        data = np.full((ann.max() + 1, pair.max() + 1), NAN)
        data[ann, pair] = cols.values(row.step)[rated]
        for metric in ("interval", "ordinal"):
            ref = krippendorff.alpha(reliability_data=data, level_of_measurement=metric)
            assert getattr(row, f"alpha_{metric}") == pytest.approx(ref, rel=1e-9)
            low, high = getattr(row, f"alpha_{metric}_low"), getattr(row, f"alpha_{metric}_high")
            assert low < ref < high and high - low < 0.2
        assert row.exact < row.within_step < row.within_point < 1


def test_jackknife_variances_against_leaving_each_annotator_and_pair_out():
    cols = _columns().subset(~_columns().attention)
    cells = np.array([[10, DATA], [10, MODEL], [20, DATA], [20, MODEL]])
    cell = 2 * (cols.length == 20) + cols.kind  # the row of `cells`
    est = estimands(cells, DATA, MODEL)
    var = jackknife_var(est, cols.quality, cell, cols.annotator)
    k = est.index("gap", 10)
    at10 = cols.length == 10
    gaps = []
    for a in (1, 2, 3):  # the annotators of l=10
        keep = at10 & (cols.annotator != a)
        d, m = (cols.quality[keep & (cols.kind == kd)].mean() for kd in (DATA, MODEL))
        gaps.append(d - m)
    assert var[k] == pytest.approx(2 / 3 * np.sum((np.array(gaps) - np.mean(gaps)) ** 2))
    # By pair (each pair lies in one cell): the 4 pairs of l=10 enter its log ratio.
    var = jackknife_var(est, cols.quality, cell, cols.item)
    k = est.index("log ratio", 10)
    logs = []
    for p in (101, 102, 111, 112):
        keep = at10 & (cols.item != p)
        d, m = (cols.quality[keep & (cols.kind == kd)].mean() for kd in (DATA, MODEL))
        logs.append(math.log(d / m))
    assert var[k] == pytest.approx(3 / 4 * np.sum((np.array(logs) - np.mean(logs)) ** 2))


# --------------------------------------------------------------------------- coverage

REPS = 250
COVER_B = 300


def _tolerance(p: float, reps: int) -> float:
    """3 Monte Carlo standard errors of a share p over `reps` replications."""
    return 3 * math.sqrt(p * (1 - p) / reps)


def test_twoway_intervals_cover_the_truth_where_the_annotator_bootstrap_does_not():
    """250 studies of 250 pairs per (length, kind) at 3 lengths, 5 raters per pair, with
    rater leniency, rater x kind effects, pair effects and heavy-tailed activity (a few
    raters do much of the work: ~15-25 effective annotators of ~90). The headline gap and
    ratio intervals cover the exact population truth within 3 Monte Carlo SEs of 95%
    (0.909-0.991), at each length and step; so do the trends (truth 0: the same means at
    every length). The one-way annotator bootstrap treats the pairs as fixed and
    under-covers (measured ~0.86 on the gap, pooled over lengths and steps)."""
    lengths = (10, 20, 30)
    design = Design.simple(lengths=lengths, items_per_cell=250, replicas=5, overlap_share=0)
    raters = Raters.paper_like(lengths, hetero=RaterHeterogeneity())
    hits: dict[tuple, list[bool]] = {}
    for r in range(REPS):
        cols = simulate_ratings(design, raters, np.random.default_rng([15, r]))
        res = mean_ratings(cols, b=COVER_B, seed=r)
        for which, contrasts in (("twoway", res.contrasts), ("boot", res.secondary)):
            for c in contrasts:
                gap, ratio = raters.true_gap(c.length, c.step), raters.true_ratio(c.length, c.step)
                hits.setdefault((which, "gap", c.step, c.length), []).append(
                    c.gap_low <= gap <= c.gap_high
                )
                hits.setdefault((which, "ratio", c.step, c.length), []).append(
                    c.ratio_low <= ratio <= c.ratio_high
                )
        for t in res.trends:
            hits.setdefault(("twoway", "trend", t.step, t.measure), []).append(t.low <= 0 <= t.high)
    cover = {k: float(np.mean(v)) for k, v in hits.items()}
    print({k: round(v, 3) for k, v in sorted(cover.items())})
    tol = _tolerance(0.95, REPS)
    headline = {k: v for k, v in cover.items() if k[0] == "twoway"}
    assert len(headline) == 2 * 3 * 2 + 2 * 2
    assert all(abs(v - 0.95) <= tol for v in headline.values()), headline
    boot_gap = np.mean([v for k, v in cover.items() if k[:2] == ("boot", "gap")])
    assert boot_gap < 0.95 - _tolerance(0.95, REPS * 6)


# --------------------------------------------------------------------------- inputs


def test_empty_or_attention_only_columns_are_a_clear_error():
    cols = _columns()
    with pytest.raises(ValueError, match="no ratings"):
        ratings_results(cols.subset(np.zeros(cols.n, bool)))
    with pytest.raises(ValueError, match="attention pairs only"):
        ratings_results(cols.subset(cols.attention))
    with pytest.raises(ValueError, match="unknown interval method"):
        ratings_results(cols, method="items")
    with pytest.raises(ValueError, match="level"):
        ratings_results(cols, level=95)


def test_one_kind_missing_gives_means_without_contrasts_and_a_warning():
    cols = _columns()
    res = ratings_results(cols.subset(cols.kind != MODEL), b=50)
    assert res.contrasts == [] and res.trends == [] and res.paper == []
    assert {(c.length, c.kind) for c in res.cells} == {(10, "data"), (20, "data")}
    assert _one(res.cells, length=10, kind="data", step="quality").mean == pytest.approx(22 / 6)
    assert any("no model pairs" in w for w in res.warnings)
    assert any("no trend" in w for w in res.warnings)


def test_a_length_without_consistency_has_nan_figures_and_a_warning():
    cols = _columns()
    cols.consistency[cols.length == 20] = NAN
    res = ratings_results(cols, b=50)
    c20 = _one(res.contrasts, length=20, step="consistency")
    assert math.isnan(c20.gap) and math.isnan(c20.ratio) and math.isnan(c20.gap_low)
    assert _one(res.contrasts, length=20, step="quality").gap == pytest.approx(6.5 / 6)
    cell = _one(res.cells, length=20, kind="data", step="consistency")
    assert math.isnan(cell.mean) and cell.n_ratings == 0
    assert [t.step for t in res.trends] == ["quality", "quality"]
    assert any("l=20: no consistency ratings yet" in w for w in res.warnings)
    cols.consistency[:] = NAN
    res = ratings_results(cols, b=50)
    assert [a.step for a in res.agreement] == ["quality"]
    assert any("no consistency ratings yet" in w for w in res.warnings)


def test_the_few_annotators_warning_names_the_worst_contrast_that_has_ratings():
    # No consistency at l=20 yet: its gap has no effective annotators (nan) and must not
    # hide the real warning. Of the others, the l=10 consistency gap has the fewest:
    # annotators 1, 2, 3 give 4, 4 and 3 ratings (pair 102 lacks annotator 3's), so
    # G_eff = 11^2 / (16 + 16 + 9) = 121/41 = 2.95 (the quality gaps: 3 x 4 ratings, 3.0).
    cols = _columns()
    cols.consistency[cols.length == 20] = NAN
    res = mean_ratings(cols, b=50)
    assert math.isnan(_one(res.contrasts, length=20, step="consistency").effective_annotators)
    c10 = _one(res.contrasts, length=10, step="consistency")
    assert c10.effective_annotators == pytest.approx(121 / 41)
    few = [w for w in res.warnings if "effective annotators" in w]
    assert len(few) == 1 and "nan" not in few[0], few
    assert few[0].startswith("only 3.0 effective annotators") and "3 in all" in few[0]
    assert "enter the consistency gap at l=10" in few[0]


def test_one_length_has_no_trend_and_the_same_seed_gives_the_same_figures():
    cols = _columns()
    one = cols.subset(cols.length == 10)
    res = ratings_results(one, b=50)
    assert res.trends == [] and any("no trend" in w for w in res.warnings)
    assert ratings_results(cols, b=100, seed=7) == ratings_results(cols, b=100, seed=7)
    # The headline interval does not resample: b changes only the bootstrap figures.
    a, b = ratings_results(cols, b=100), ratings_results(cols, b=300)
    assert a.contrasts == b.contrasts and a.secondary != b.secondary
