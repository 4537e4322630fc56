"""Power and budget planner (app/results/stats/power.py) against DESIGN.md's numbers."""

import itertools
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
from app.results.stats.power import MAX_JUDGMENTS_PER_CELL, PlanError


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


def test_impossible_targets_raise_a_plan_error_that_says_why():
    with pytest.raises(PlanError, match=r"below 1\.111") as err:
        plan_study(target_ebc=1.5, cgd_data=0.9)  # CGD(model) would be 1.35
    assert err.value.param == "target_ebc"
    with pytest.raises(PlanError, match="infinitely many") as err:
        plan_study(target_ebc=1.02, alpha=1e-300)  # z(1 - alpha/2) is infinite
    assert err.value.param == "alpha"
    with pytest.raises(PlanError, match="wider half-width") as err:
        plan_study(halfwidth=1e-12)
    assert err.value.param == "halfwidth"
    with pytest.raises(PlanError, match="must exceed alpha") as err:
        plan_study(target_ebc=1.02, power=0.1, alpha=0.3)
    assert err.value.param == "power"
    with pytest.raises(PlanError):
        plan_study(target_ebc=None, halfwidth=None)
    # Just inside: a plan, with the judgments to match.
    near = plan_study(target_ebc=1.0 / 0.9 - 1e-3, cgd_data=0.9)
    assert 0 < near.judgments_per_cell <= MAX_JUDGMENTS_PER_CELL


def _log_uniform(rng, low, high):
    return float(np.exp(rng.uniform(np.log(low), np.log(high))))


def test_every_plan_inside_the_documented_bounds_is_a_plan_or_a_reason():
    """The API's bounds (target EB-C in (1, 3], half-width in (0, 1], power in (0.05, 1),
    alpha in (0, 0.5)) and any CGD(data) in (0, 1): a grid over the edges and seeded
    log-uniform draws. Each answer is a finite plan or a PlanError, never anything else."""
    tiny = 1e-12
    grid = itertools.product(
        [1 + tiny, 1.0001, 1.02, 1.5, 3.0],  # target EB-C
        [None, 1e-300, 1e-9, 1e-3, 0.5, 1.0],  # half-width
        [0.05 + tiny, 0.5, 0.8, 1 - tiny],  # power
        [1e-300, 1e-12, 0.05, 0.5 - tiny],  # alpha
        [1e-6, 0.5, 0.73, 0.99, 1 - 1e-9],  # CGD(data)
        [1.0, 40.0],  # design effect
    )
    rng = np.random.default_rng(20261125)
    draws = (
        (
            1 + _log_uniform(rng, tiny, 2.0),
            None if rng.random() < 0.5 else _log_uniform(rng, 1e-300, 1.0),
            rng.uniform(0.05 + tiny, 1 - tiny),
            _log_uniform(rng, 1e-300, 0.5 - tiny),
            rng.uniform(tiny, 1 - tiny),
            _log_uniform(rng, 1.0, 100.0),
        )
        for _ in range(3000)
    )
    plans = refused = 0
    for target, half, power, alpha, cgd, deff in itertools.chain(grid, draws):
        try:
            p = plan_study(
                target_ebc=target,
                halfwidth=half,
                power=power,
                alpha=alpha,
                cgd_data=cgd,
                design_effect=deff,
                max_cell_share=0.05,
            )
        except PlanError as exc:
            assert exc.reason and exc.param in {"target_ebc", "halfwidth", "alpha", "power"}
            refused += 1
            continue
        plans += 1
        assert 1 <= p.judgments_per_cell <= MAX_JUDGMENTS_PER_CELL
        assert p.hits >= p.hits_per_length >= 1 and p.annotators_needed >= 20
        assert math.isfinite(p.cost) and (math.isnan(p.power) or 0 <= p.power <= 1)
    assert plans > 500 and refused > 500  # both kinds of answer are exercised
