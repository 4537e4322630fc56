"""What each crowd channel charges for a design, by that channel's own fee rule
(``Platform.price`` of ``app.crowd.registry``: no fee for invite links), grouped by
replicas as ``app.crowd.postings.price_groups`` prices a study's HITs: the previews' costs
(``app.simulate.preview``) and the planner's (:func:`plan_costs`), asked of no platform.
Where a study's preview runs (:func:`preview`), its type's, with these costs.
"""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.crowd.base import PostingSpec, Qualifications
from app.crowd.common import study_qualifications
from app.crowd.postings import price_groups
from app.crowd.registry import PLATFORMS
from app.results.schemas import ChannelCostOut, PricedPlan
from app.simulate.preview import CHANNELS, NO_LIMITS, ChannelCost, DesignSize, Limits
from app.studytypes.registry import study_type_of


def channel_costs(
    study: Any, settings: Settings, size: DesignSize, providers: tuple[str, ...] = CHANNELS
) -> list[ChannelCost]:
    """Each channel's estimate for the design's HITs, by its platform's fee rule
    (`Platform.price`: no call to any platform). The study's reward (`payment.reward_cents`)
    per assignment; the environment and qualifications as the study file sets them
    (`Platform.study_environment`: MTurk's sandbox, `channels.mturk`); Prolific at
    `EBC_PROLIFIC_FEE_RATE`, one HIT per place; local: no fee."""
    out = []
    for name in providers:
        platform = PLATFORMS[name]
        spec = _spec(study, name)
        notes: list[str] = []
        environment = platform.study_environment(study)
        enabled = platform.enabled(study)
        price = platform.price(settings, spec)
        if environment == "sandbox":
            notes.append("sandbox: no money moves; production charges this for the same HITs")
        if spec.reward_cents < 1 and platform.caps.remote:
            out.append(
                ChannelCost(
                    name,
                    environment,
                    enabled,
                    size.assignments,
                    None,
                    problem="no reward set (payment.reward_cents): a platform needs one",
                )
            )
            continue
        estimate = price_groups(name, price, size.groups)
        out.append(
            ChannelCost(
                name,
                environment,
                enabled,
                size.assignments,
                estimate,
                notes=(*estimate.notes, *notes),
            )
        )
    return out


def _spec(study: Any, provider: str) -> PostingSpec:
    """What pricing reads of a posting: the reward and (MTurk) Masters; the rest is what
    publishing would fill in and does not change a price."""
    masters = bool(study_qualifications(study, provider).get("masters"))
    return PostingSpec(
        study_slug=study.slug,
        title=study.title,
        description="",
        reward_cents=int(study.reward_cents or 0),
        assignment_seconds=int(study.lease_seconds),
        lifetime_seconds=0,
        auto_approve_seconds=0,
        qualifications=Qualifications(masters=masters),
    )


def plan_costs(
    study: Any, settings: Settings, plan: Any, providers: tuple[str, ...] = CHANNELS
) -> list[ChannelCost]:
    """What each channel charges for a planner's plan (``app.results.stats.StudyPlan``:
    its HITs and assignments, all HITs with the same replicas), by each platform's own fee
    rule as :func:`channel_costs` prices a preview's design: the planner's cost with every
    channel's fees."""
    hits, assignments = int(plan.hits), int(plan.assignments)
    groups = ((assignments // hits, hits),) if hits else ()
    size = DesignSize(
        groups=groups,
        hits=hits,
        assignments=assignments,
        judgments=int(plan.judgments),
        judgments_per_cell={},
    )
    return channel_costs(study, settings, size, providers)


def priced_plan(
    study: Any, settings: Settings, plan: Any, providers: tuple[str, ...] = CHANNELS
) -> PricedPlan:
    """`plan` with :func:`plan_costs` beside it, each channel with its fee rule in words
    (``GET /studies/{slug}/plan``, ``ebc results plan``)."""
    out = []
    for c in plan_costs(study, settings, plan, providers):
        e = c.estimate
        out.append(
            ChannelCostOut(
                channel=c.provider,
                environment=c.environment,
                enabled=c.enabled,
                assignments=c.assignments,
                fee_rule=PLATFORMS[c.provider].caps.fee_rule,
                rewards_cents=e.rewards_cents if e else None,
                fees_cents=e.fees_cents if e else None,
                total_cents=e.total_cents if e else None,
                notes=list(c.notes),
                problem=c.problem,
            )
        )
    return PricedPlan.of(plan, out)


def preview(study: Any, settings: Settings, options: Any, *, limits: Limits = NO_LIMITS) -> Any:
    """ "Simulate before you pay" for `study`: its type's preview (``options``: its type's
    options model) within `limits`, with what each channel charges."""
    simulation = study_type_of(study).preview
    return simulation.run(study, settings, options, limits=limits, price=channel_costs)


__all__ = ["channel_costs", "plan_costs", "preview", "priced_plan"]
