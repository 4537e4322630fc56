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
proportion to the work); its cost is each channel's fee rule on the grown design. The
sentence itself is every type's (:mod:`app.simulate.verdict`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.results.stats import PlanError, PlanTarget
from app.results.stats.power import log_variance
from app.simulate.design import VARIANTS
from app.simulate.preview import DesignSize
from app.simulate.verdict import (
    Verdict,
    covers,
    crowd_fact,
    crowd_factor,
    design_verdict,
    grown,
    reaches,
)
from app.studytypes.nextword.planning import plan_for_study
from app.studytypes.nextword.simulation import SimulationSummary

MAIN = VARIANTS[0]


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
    power_goal = PlanTarget().power
    pooled = summary.pooled_reject.get(MAIN, math.nan)
    worst = min((s.coverage for s in rows), default=math.nan)
    facts = [
        (
            all(covers(s.coverage, s.coverage_mc, level) for s in rows),
            f"the {level:.0%} intervals cover the truth in {worst:.0%} of the simulated "
            f"studies at worst ({level:.0%} asked)",
        )
    ]
    if rejection == "power":
        facts.append(
            (
                reaches(pooled, summary.replications, power_goal),
                f"the pooled test detects EB-C {target_ebc:g} with power {pooled:.2f} "
                f"({power_goal:g} asked)",
            )
        )
    g = summary.mean_effective
    facts.append(crowd_fact(g))
    if all(ok for ok, _ in facts):
        return design_verdict(study, size, facts, 1.0, annotators=summary.mean_annotators)
    cells = [n for k, n in size.judgments_per_cell.items() if k in ("data", "model")]
    n_now = min(cells) if cells else 0
    deff = measured_design_effect(summary, n_now, cgd_data) if n_now else math.nan
    factor = crowd_factor(g)
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
    return design_verdict(
        study,
        size,
        facts,
        factor,
        annotators=summary.mean_annotators,
        planned=planned,
        price=price,
    )


__all__ = ["Verdict", "grown", "measured_design_effect", "verdict"]
