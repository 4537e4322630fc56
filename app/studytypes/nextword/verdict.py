"""The sentence that ends "simulate before you pay" (issue 32): is this design enough, and
if not, what would be.

*Enough* means, for the main variant (with the study's exclusions): at every length the
default interval covers the truth in at least ``level - max(0.02, 2 MC SE)`` of the
simulated studies; when the rejection rate is the power (the truth is the target), the
pooled test reaches the planner's power (``PlanTarget.power``, 0.8) less 2 MC SE; and the
studies have on average at least ``FEW_ANNOTATORS`` (30) effective annotators, below which
the results page calls every interval unreliable.

*What would be enough* comes from the planner (:func:`~.planning.plan_for_study`) with the
design effect this simulation measured: ``deff = n Var(ln EB-C_hat) / V`` (the spread of
the simulated estimates on the log scale, ``sd / truth``, against
:func:`~app.results.stats.power.log_variance` at ``n`` judgments per cell), so the plan's
judgments per cell are those that give the target's power. The design grows by the factor
``max(planned / now, 30 / effective now)`` (the simulated crowd brings annotators in
proportion to the work); its cost is each channel's fee rule on the grown design.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from app.results.stats import FEW_ANNOTATORS, PlanError, PlanTarget
from app.results.stats.power import log_variance
from app.simulate.design import VARIANTS
from app.simulate.preview import ChannelCost, DesignSize, usd
from app.studytypes.nextword.planning import plan_for_study
from app.studytypes.nextword.simulation import SimulationSummary

MAIN = VARIANTS[0]


def grown(size: DesignSize, factor: float) -> DesignSize:
    """`size` with every group's HITs (and so assignments and judgments) times `factor`."""
    groups = tuple((r, math.ceil(n * factor)) for r, n in size.groups)
    hits = sum(n for _, n in groups)
    assignments = sum(r * n for r, n in groups)
    per_assignment = size.judgments / size.assignments if size.assignments else 0
    return DesignSize(
        groups=groups,
        hits=hits,
        assignments=assignments,
        judgments=round(assignments * per_assignment),
        judgments_per_cell={k: math.ceil(v * factor) for k, v in size.judgments_per_cell.items()},
    )


def measured_design_effect(summary: SimulationSummary, n_now: int, cgd_data: float) -> float:
    """The design effect the simulation saw (module docstring), mean over the lengths of
    the main variant; NaN without a spread."""
    out = []
    for s in summary.rows:
        if s.variant != MAIN or not (s.truth > 0 and math.isfinite(s.sd_estimate)):
            continue
        try:
            v = log_variance(cgd_data, s.truth)
        except PlanError:
            continue
        out.append(n_now * (s.sd_estimate / s.truth) ** 2 / v)
    return float(np.mean(out)) if out else math.nan


class Verdict(NamedTuple):
    """Whether the design is enough, and the sentence that says so."""

    enough: bool
    text: str


def verdict(
    study: Any,
    summary: SimulationSummary,
    size: DesignSize,
    *,
    target_ebc: float,
    cgd_data: float,
    rejection: str,
    price: Any = None,
) -> Verdict:
    """The verdict (module docstring); `price(size)` prices a grown design on each
    channel (None: no prices)."""
    rows = [s for s in summary.rows if s.variant == MAIN]
    level = summary.level
    covered = [s for s in rows if s.coverage >= level - max(0.02, 2 * s.coverage_mc)]
    power_goal = PlanTarget().power
    pooled = summary.pooled_reject.get(MAIN, math.nan)
    r = max(summary.replications, 1)
    pooled_mc = math.sqrt(pooled * (1 - pooled) / r) if math.isfinite(pooled) else 0.0
    powered = rejection != "power" or pooled >= power_goal - 2 * pooled_mc
    g = summary.mean_effective
    crowded = g >= FEW_ANNOTATORS
    worst = min((s.coverage for s in rows), default=math.nan)
    facts = [
        f"the {level:.0%} intervals cover the truth in {worst:.0%} of the simulated studies "
        f"at worst ({level:.0%} asked)"
    ]
    if rejection == "power":
        facts.append(
            f"the pooled test detects EB-C {target_ebc:g} with power {pooled:.2f} "
            f"({power_goal:g} asked)"
        )
    facts.append(f"with {g:.1f} effective annotators on average ({FEW_ANNOTATORS} wanted)")
    if len(covered) == len(rows) and powered and crowded:
        return Verdict(True, "Enough: " + ", ".join(facts) + ".")
    cells = [n for k, n in size.judgments_per_cell.items() if k in ("data", "model")]
    n_now = min(cells) if cells else 0
    deff = measured_design_effect(summary, n_now, cgd_data) if n_now else math.nan
    factor = FEW_ANNOTATORS / g if g > 0 else math.nan
    planned = ""
    try:
        plan = plan_for_study(
            study,
            PlanTarget(target_ebc=target_ebc),
            cgd_data=cgd_data,
            design_effect=deff if math.isfinite(deff) and deff > 0 else None,
        )
        if n_now:
            factor = max(factor if math.isfinite(factor) else 0.0, plan.judgments_per_cell / n_now)
        planned = (
            f" (the planner, with the design effect {plan.design_effect:.2f} this simulation "
            f"measured: {plan.judgments_per_cell:,} judgments per cell for power "
            f"{power_goal:g} at EB-C {target_ebc:g})"
        )
    except PlanError as exc:
        planned = f" (the planner cannot size it: {exc.reason})"
    if not math.isfinite(factor) or factor <= 1:
        factor = max(factor, 1.0) if math.isfinite(factor) else 1.0
        enough = "more replications to tell (the shortfall is within the simulation's noise)"
        return Verdict(False, f"Too small: {', '.join(facts)}; {enough}{planned}.")
    bigger = grown(size, factor)
    items = math.ceil(int(study.items_per_cell) * factor)
    scale = (
        f"{100 * (factor - 1):.0f}% more than this design"
        if factor < 2
        else f"{factor:.1f} times this design"
    )
    enough = (
        f"enough would be about {scale}: items_per_cell = {items:,} "
        f"({bigger.hits:,} HITs, {bigger.assignments:,} assignments, about "
        f"{summary.mean_annotators * factor:,.0f} annotators)"
    )
    costs: list[ChannelCost] = price(bigger) if price is not None else []
    priced = [f"{usd(c.estimate.total_cents)} on {c.provider}" for c in costs if c.estimate]
    if priced:
        enough += ", costing " + ", ".join(priced)
    return Verdict(False, f"Too small: {', '.join(facts)}; {enough}{planned}.")


__all__ = ["Verdict", "grown", "measured_design_effect", "verdict"]
