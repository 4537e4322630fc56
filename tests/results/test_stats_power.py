"""Power and budget planner (app/results/stats/power.py) against DESIGN.md's numbers."""

import math

import numpy as np
import pytest

from app.results.stats import (
    design_effect,
    estimate_ebc,
    judgments_for_halfwidth,
    judgments_per_cell,
    plan_study,
    power_at,
    smallest_detectable_ebc,
)


def test_design_md_numbers():
    assert judgments_per_cell(1.02, 0.73) == pytest.approx(14_300, rel=0.01)
    assert power_at(3000, 1.02, 0.73) == pytest.approx(0.25, abs=0.01)
    assert smallest_detectable_ebc(3000, 0.73) == pytest.approx(1.045, abs=0.003)
    assert power_at(judgments_per_cell(1.02, 0.73), 1.02, 0.73) == pytest.approx(0.8, abs=1e-3)
    assert power_at(3000, smallest_detectable_ebc(3000, 0.73), 0.73) == pytest.approx(0.8)


def test_design_effect_scales_sample_size_and_halfwidth():
    assert judgments_per_cell(1.02, 0.73, design_effect=2.5) == pytest.approx(
        2.5 * judgments_per_cell(1.02, 0.73)
    )
    n = judgments_for_halfwidth(0.02, 1.0, 0.73)
    # SE(R) at that n gives the half-width back
    se = math.sqrt(2 * (1 - 0.73) / 0.73 / n)
    assert 1.959964 * se == pytest.approx(0.02)


def test_plan_counts_hits_annotators_and_cost():
    p = plan_study(
        target_ebc=1.02,
        cgd_data=0.73,
        design_effect=1.5,
        lengths=(10, 20, 30),
        replicas=1,
        max_hits_per_annotator=200,
        reward_per_assignment=0.5,
        platform_fee=0.2,
    )
    n = math.ceil(1.5 * judgments_per_cell(1.02, 0.73))
    assert p.judgments_per_cell == n
    assert p.hits_per_length == math.ceil(n / 5) and p.hits == 3 * p.hits_per_length
    assert p.annotators_needed == math.ceil(p.assignments / 200)
    assert p.cost == pytest.approx(p.assignments * 0.5 * 1.2, abs=0.01)
    capped = plan_study(target_ebc=1.02, max_cell_share=0.05)
    assert capped.annotators_needed >= 20


def test_design_effect_from_results_is_variance_ratio():
    rng = np.random.default_rng(0)
    n_a = 60
    ann = np.repeat(np.arange(n_a), 40)
    kind = np.tile([0, 1], ann.size // 2)
    v = rng.normal(0, 1.0, n_a)[ann] * kind
    d = (rng.random(ann.size) < 1 / (1 + np.exp(-(0.8 + v)))).astype(float)
    r = estimate_ebc(d, np.full(ann.size, 10), kind, ann, ann, np.arange(ann.size), b=2000, seed=0)
    q = r.ebc(10)
    assert design_effect(r) == pytest.approx((q.se / q.iid_se) ** 2)
    assert design_effect(r) > 1.5  # strong annotator x kind effect: clustering matters
