"""The sentence that ends "simulate before you pay" (issue 32): too small or enough, and
what would be enough (the planner with the design effect the simulation measured, each
channel's price of the grown design)."""

from __future__ import annotations

import math
import re

import pytest

from app.results.stats import FEW_ANNOTATORS, PlanTarget
from app.results.stats.power import log_variance
from app.simulate.costs import channel_costs
from app.studytypes.nextword.planning import plan_for_study
from app.studytypes.nextword.preview import PreviewOptions, preview_text, simulate_before_paying
from app.studytypes.nextword.simulation import LengthSummary, SimulationSummary
from app.studytypes.nextword.verdict import grown, measured_design_effect
from tests.simulate.test_preview import _study

QUICK = {"replications": 10, "b": 199}


def _summary(rows, **fields) -> SimulationSummary:
    base = dict(
        crowd="sampler", true_ebc={10: 1.02}, cgd_data={10: 0.73}, replications=100,
        alpha=0.05, level=0.95, rows=rows, pooled_reject={"with exclusions": 0.9},
        mean_judgments=1000.0, mean_annotators=50.0, mean_effective=40.0, mean_excluded=0.0,
        seconds_per_replication=0.1,
    )  # fmt: skip
    return SimulationSummary(**(base | fields))


def _row(sd: float, truth: float = 1.02, variant: str = "with exclusions") -> LengthSummary:
    return LengthSummary(variant, 10, truth, truth, sd, sd, 0.95, 0.02, 0.9, 0.03, 100)


def test_the_design_effect_is_the_simulated_spread_over_the_iid_one():
    n, cgd = 400, 0.73
    iid_sd = math.sqrt(log_variance(cgd, 1.02) / n) * 1.02  # sd of EB-C_hat, iid
    summary = _summary([_row(iid_sd * math.sqrt(2.0)), _row(99.0, variant="without exclusions")])
    assert measured_design_effect(summary, n, cgd) == pytest.approx(2.0)
    assert math.isnan(measured_design_effect(_summary([]), n, cgd))


def test_a_grown_design_scales_every_group():
    from app.simulate.preview import DesignSize

    size = DesignSize(((1, 100), (3, 10)), 110, 130, 1430, {"data": 325, "model": 325})
    big = grown(size, 2.5)
    assert big.groups == ((1, 250), (3, 25)) and big.hits == 275 and big.assignments == 325
    assert big.judgments == 325 * 11 and big.judgments_per_cell == {"data": 813, "model": 813}


def test_a_small_design_is_too_small_and_says_what_would_be_enough(session, settings):
    study = _study(session, reward_cents=37)
    p = simulate_before_paying(study, settings, PreviewOptions(**QUICK), price=channel_costs)
    s = p.summary
    assert p.verdict.startswith("Too small: ") and not p.enough
    worst = min(r.coverage for r in s.rows if r.variant == "with exclusions")
    assert f"cover the truth in {worst:.0%} of the simulated studies at worst" in p.verdict
    pooled = s.pooled_reject["with exclusions"]
    assert f"detects EB-C 1.02 with power {pooled:.2f} (0.8 asked)" in p.verdict
    assert f"with {s.mean_effective:.1f} effective annotators on average (30 wanted)" in p.verdict
    # What would be enough: the planner with the measured design effect, recomputed here.
    n_now = min(p.size.judgments_per_cell.values())
    deff = measured_design_effect(s, n_now, 0.73)
    plan = plan_for_study(study, PlanTarget(target_ebc=1.02), cgd_data=0.73, design_effect=deff)
    assert f"{plan.judgments_per_cell:,} judgments per cell for power 0.8" in p.verdict
    factor = max(FEW_ANNOTATORS / s.mean_effective, plan.judgments_per_cell / n_now)
    assert factor > 2 and f"about {factor:.1f} times this design" in p.verdict
    assert f"items_per_cell = {math.ceil(600 * factor):,}" in p.verdict
    # Its price on each channel is that channel's fee rule on the grown design.
    big = grown(p.size, factor)
    for c in channel_costs(study, settings, big):
        total = f"${c.estimate.total_cents / 100:,.2f} on {c.provider}"
        assert total in p.verdict
    # The CLI's table says it too.
    assert p.verdict in preview_text(p)


def test_a_large_effect_on_a_large_crowd_is_enough(session, settings):
    """EB-C 1.3 (CGD(data) 0.5) with a cap of 5 HITs: many annotators, a strong effect."""
    study = _study(session, reward_cents=37, per_annotator_cap=5)
    options = PreviewOptions(**QUICK, target_ebc=1.3, cgd_data=0.5)
    p = simulate_before_paying(study, settings, options, price=channel_costs)
    assert p.summary.mean_effective >= FEW_ANNOTATORS
    assert p.verdict.startswith("Enough: ") and p.enough, p.verdict
    assert re.search(r"detects EB-C 1.3 with power (0\.9\d|1\.00)", p.verdict)
