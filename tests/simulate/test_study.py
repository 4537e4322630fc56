"""Whole simulated studies through the results functions: bias, exclusions, coverage."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from app.models import Study
from app.results.schemas import ResultQuery
from app.results.service import compute_results
from app.results.stats import PlanTarget
from app.simulate.crowd import Crowd, Heterogeneity, StandIn, expected_with_random_clicks
from app.simulate.study import Design, estimate, simulate_judgments, simulate_study

pytestmark = pytest.mark.sqlite  # pure: one run is enough

WITH, WITHOUT = "with exclusions", "without exclusions"


def small(**fields) -> Design:
    base = {"items_per_cell": 400, "cap": 20, "overlap_share": 0.05}
    return Design.simple(lengths=(10, 20), **(base | fields))


def test_pd_equal_pm_is_centred_on_one():
    out = simulate_study(small(), Crowd.parse("sampler"), true_ebc=1.0, replications=60, b=199)
    for ln in (10, 20):
        row = out.row(WITH, ln)
        assert row.truth == pytest.approx(1.0)
        assert abs(row.mean_estimate - 1.0) < 3 * row.sd_estimate / math.sqrt(60)
        assert 0.3 < row.mean_se / row.sd_estimate < 3.0


def test_random_clickers_pull_ebc_towards_one():
    """With a share s of uniform clicks a cell's expected d is (1 - s) CGD + s 5/6, so the
    EB-C the crowd delivers is the ratio of those, not the truth."""
    share, truth, p_d = 0.4, 1.25, 0.6
    crowd = Crowd.parse(f"sampler,noisy:{share}")
    out = simulate_study(small(), crowd, true_ebc=truth, cgd_data=p_d, replications=60, b=199)
    expected = expected_with_random_clicks(p_d * truth, share) / expected_with_random_clicks(
        p_d, share
    )
    assert expected < truth - 0.1
    for ln in (10, 20):
        row = out.row(WITHOUT, ln)
        tol = 4 * row.sd_estimate / math.sqrt(60) + 0.005  # + the ratio estimator's bias
        assert row.mean_estimate == pytest.approx(expected, abs=tol)
        assert row.coverage < 0.5  # the interval is about the wrong number


def test_too_fast_clicks_are_excluded_and_the_truth_recovered():
    truth, p_d = 1.25, 0.6
    out = simulate_study(
        small(),
        Crowd.parse("sampler,fast:0.4"),
        true_ebc=truth,
        cgd_data=p_d,
        replications=40,
        b=199,
    )
    for ln in (10, 20):
        kept, raw = out.row(WITH, ln), out.row(WITHOUT, ln)
        assert abs(kept.mean_estimate - truth) < 4 * kept.sd_estimate / math.sqrt(40) + 0.01
        assert raw.mean_estimate < truth - 0.08
    assert out.mean_excluded > 0.35 * out.mean_judgments


def test_layout_cap_overlap_and_determinism():
    design = small(cap=7, overlap_share=0.1, overlap_replicas=3, replicas=1)
    stand_in = StandIn.calibrated([10, 20], 3, ebc=1.05)
    crowd = Crowd.parse("sampler")
    j = simulate_judgments(design, crowd, stand_in, np.random.default_rng(9))
    again = simulate_judgments(design, crowd, stand_in, np.random.default_rng(9))
    assert np.array_equal(j.choice, again.choice) and np.array_equal(j.annotator, again.annotator)
    pairs = np.unique(np.stack([j.annotator, j.hit]), axis=1)
    # Every judgment of an (annotator, HIT) pair is one assignment of 11 positions.
    assert pairs.shape[1] * 11 == len(j)
    per_annotator = np.bincount(pairs[0])
    assert per_annotator.max() <= 7
    per_hit = np.bincount(pairs[1])[1:]
    assert sorted(set(per_hit.tolist())) == [1, 3]
    assert np.sum(per_hit == 3) == 2 * round(0.1 * 80)
    assert np.sum(j.attention) == pairs.shape[1]  # one attention item per HIT
    a = simulate_study(design, crowd, true_ebc=1.05, replications=3, seed=4, b=199)
    b = simulate_study(design, crowd, true_ebc=1.05, replications=3, seed=4, b=199)
    c = simulate_study(design, crowd, true_ebc=1.05, replications=3, seed=5, b=199)
    assert a.rows == b.rows and a.rows != c.rows


def test_the_results_service_reads_the_simulated_columns():
    """compute_results takes a simulated study as it takes a real one, and its main EB-C is
    the simulator's."""
    design = small()
    study = Study(
        slug="sim",
        prefix_lengths=list(design.lengths),
        kinds=["data", "model"],
        items_per_cell=design.items_per_cell,
        top_k=5,
        hit_layout={"mix": {"data": 5, "model": 5}, "attention": 1},
        replicas=1,
        overlap_share=design.overlap_share,
        overlap_replicas=3,
        per_annotator_cap=design.cap,
        max_cell_share=None,
        min_ms_per_item=1000,
        exclusions={},
        reward_cents=0,
        platform_fee=0.0,
    )
    assert Design.from_study(study) == design
    j = simulate_judgments(
        design,
        Crowd.parse("sampler,fast:0.1"),
        StandIn.calibrated([10, 20], 3, ebc=1.1),
        np.random.default_rng(0),
    )
    res = compute_results(study, j, ResultQuery(b=200, seed=3))
    from app.results.exclusions import exclusion_mask

    keep, _ = exclusion_mask(j, study.exclusions)
    mine = estimate(j, keep, b=200, seed=3, level=0.95)
    for row in res.results.table:
        assert row.ebc.estimate == pytest.approx(mine.ebc(row.length).estimate, rel=1e-12)
        assert row.ebc.low == pytest.approx(mine.ebc(row.length).low, rel=1e-12)
    assert res.exclusions.excluded_by_rule["too_fast"] > 0


def test_coverage_of_the_default_interval_with_annotator_effects():
    """Over 600 small studies whose annotators differ in skill and in how they treat data
    and model prefixes, with heavy-tailed activity, the default 95% interval covers the
    population EB-C within Monte Carlo tolerance (DESIGN.md: ~93-95% for annotator
    resampling)."""
    hetero = Heterogeneity(sd_annotator=0.6, sd_annotator_kind=0.5, sd_item=0.8, activity_tail=1.1)
    design = small(items_per_cell=1000, cap=25)
    crowd = Crowd.parse("sampler", hetero=hetero)
    r = 600
    started = time.perf_counter()
    out = simulate_study(
        design,
        crowd,
        true_ebc=1.05,
        replications=r,
        b=499,
        seed=11,
        target=PlanTarget(target_ebc=1.05),
    )
    assert time.perf_counter() - started < 60
    tol = 3 * math.sqrt(0.95 * 0.05 / r)
    for ln in (10, 20):
        row = out.row(WITH, ln)
        assert abs(row.coverage - 0.95) <= tol, (ln, row)
    assert out.mean_effective >= 30  # the design keeps enough clusters for the claim


def test_the_coverage_check_can_fail_item_resampling_under_covers():
    """The same studies with item-level resampling (ignoring the annotator x kind effect)
    fall well short of 95% (DESIGN.md: ~75-80%), so the coverage check above has teeth."""
    from app.results.stats import estimate_ebc

    hetero = Heterogeneity(sd_annotator=0.6, sd_annotator_kind=0.5, sd_item=0.8)
    design = small(items_per_cell=1000, cap=25)
    crowd = Crowd.parse("sampler", hetero=hetero)
    s = StandIn.calibrated([10, 20], 3, ebc=1.05, hetero=hetero)
    covered = []
    for r in range(150):
        j = simulate_judgments(design, crowd, s, np.random.default_rng([11, r]))
        res = estimate_ebc(
            j.d, j.length, j.kind, j.annotator, j.hit, j.item,
            unit="item", ci="percentile", b=299, seed=r, attention=j.attention,
        )  # fmt: skip
        q = res.ebc(10)
        covered.append(q.low <= 1.05 <= q.high)
    assert np.mean(covered) < 0.95 - 3 * math.sqrt(0.95 * 0.05 / 150)
