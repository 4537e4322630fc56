"""The power and budget planner of a study (docs/design.md §1, "Power"), one path for every
caller: the results' default plan, ``GET /plan`` and the dashboard's planner.

:func:`plan_from_judgments` measures the planner's inputs on the study's judgments
(CGD(data), the design effect by annotator bootstrap, the judgments per cell so far) and
:func:`plan_for_study` plans with the study's layout, cap and payment. The targets'
defaults are :class:`PlanTarget`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from app.models import Study
from app.results.exclusions import exclusion_mask
from app.results.stats import (
    DATA_KIND,
    MODEL_KIND,
    EBCResults,
    PlanError,
    PlanTarget,
    StudyPlan,
    design_effect,
    estimate_ebc,
    plan_study,
)
from app.studytypes.nextword import queries
from app.studytypes.nextword.queries import Judgments

PLAN_B = 2000  # resamples for the design effect when no annotator estimate is at hand


def plan_for_study(
    study: Study,
    target: PlanTarget | None = None,
    *,
    cgd_data: float | None = None,
    design_effect: float | None = None,
    judgments_now: int = 0,
) -> StudyPlan:
    """:func:`~app.results.stats.plan_study` for ``target`` (the defaults when None) with
    the study's lengths, HIT mix, replicas, per-annotator cap, cell share and payment.
    ``cgd_data`` None: the paper's; ``design_effect`` None or NaN: 1.

    Raises PlanError (answered 422 with its reason) when no finite study reaches the target.
    """
    target = target or PlanTarget()
    mix = dict(study.hit_layout.get("mix", {"data": 5, "model": 5}))
    per_kind = int(mix.get("data", 5)) or 5
    per_hit = sum(int(v) for v in mix.values()) + int(study.hit_layout.get("attention", 0))
    return plan_study(
        target_ebc=target.target_ebc,
        halfwidth=target.halfwidth,
        cgd_data=cgd_data,
        alpha=target.alpha,
        power=target.power,
        design_effect=design_effect,
        judgments_now=judgments_now,
        lengths=study.prefix_lengths,
        items_per_kind_per_hit=per_kind,
        items_per_hit=per_hit,
        replicas=int(study.replicas),
        max_hits_per_annotator=int(study.per_annotator_cap),
        max_cell_share=study.max_cell_share,
        reward_per_assignment=study.reward_cents / 100.0,
        platform_fee=float(study.platform_fee),
    )


def plan_from_judgments(
    study: Study,
    j: Judgments,
    keep: np.ndarray | None,
    target: PlanTarget | None = None,
    *,
    estimator: str = "single",
    seed: int = 0,
    measured: EBCResults | None = None,
) -> StudyPlan:
    """The plan for ``target`` with its inputs measured on the judgments in ``keep``
    (None: all), attention items aside: CGD(data) is the mean over lengths of the data
    cells' estimates inside (0, 1) (the paper's 0.73 without one), the design effect
    :func:`~app.results.stats.design_effect` of an annotator-clustered estimate (1 when
    it is undefined), the judgments so far the smallest data or model cell.

    ``measured``: an estimate with ``unit="annotator"`` on those judgments that the caller
    already has (the results' main figures), used instead of making another; otherwise
    one is made with ``estimator``, ``PLAN_B`` resamples and ``seed``.
    """
    if measured is None:
        mask = ~j.attention if keep is None else keep & ~j.attention
        if not mask.any():
            return plan_for_study(study, target)
        measured = estimate_ebc(
            j.d,
            j.length,
            j.kind,
            j.annotator,
            j.hit,
            j.item,
            choice=j.choice,
            estimator=estimator,
            unit="annotator",
            b=PLAN_B,
            seed=seed,
            keep=mask,
        )
    cgd = [q.estimate for q in measured.cgd if q.kind == DATA_KIND and 0 < q.estimate < 1]
    n_now = [q.n_judgments for q in measured.cgd if q.kind in (DATA_KIND, MODEL_KIND)]
    return plan_for_study(
        study,
        target,
        cgd_data=float(np.mean(cgd)) if cgd else None,
        design_effect=design_effect(measured),
        judgments_now=min(n_now) if n_now else 0,
    )


def study_plan(
    session: Session, study: Study, target: PlanTarget | None = None, *, seed: int = 0
) -> StudyPlan:
    """The plan for ``target`` measured on the study's judgments so far, exclusions
    applied, single estimator (``GET /plan``, the dashboard's planner)."""
    j = queries.load_judgments(session, study)
    keep, _ = exclusion_mask(j, study.exclusions)
    return plan_from_judgments(study, j, keep, target, seed=seed)


# The half-width (EB-C scale, around 1) the results page plans for when an interval says
# nothing: EB-C 1 +- 0.1 tells "no exposure bias" from a 10% one.
INFORMATIVE_HALFWIDTH = 0.1


@dataclass(frozen=True)
class MoreAnnotators:
    """What the planner says a study needs for an EB-C interval of half-width
    ``halfwidth``: ``total`` annotators (``more`` than the ``now`` counted), at today's
    judgments per cell per annotator; the plan behind it (None: no finite plan, ``reason``)."""

    halfwidth: float
    now: int
    total: int | None
    more: int | None
    per_annotator: float
    plan: StudyPlan | None
    reason: str = ""


def annotators_for_halfwidth(
    study: Study,
    measured: StudyPlan | None,
    n_annotators: int,
    halfwidth: float = INFORMATIVE_HALFWIDTH,
) -> MoreAnnotators:
    """How many annotators a half-width of ``halfwidth`` takes: the planner's judgments per
    cell (:func:`plan_for_study`, with the CGD(data) and design effect that ``measured``
    measured, else its defaults), divided by the judgments per cell each of the
    ``n_annotators`` gave so far (``measured.judgments_per_cell_now / n_annotators``), and
    never fewer than the plan's own minimum (its cap and cell share)."""
    now = max(int(n_annotators), 0)
    cells_now = measured.judgments_per_cell_now if measured else 0
    per = cells_now / now if now and cells_now else float("nan")
    try:
        plan = plan_for_study(
            study,
            PlanTarget(target_ebc=None, halfwidth=halfwidth),
            cgd_data=measured.cgd_data if measured and measured.cgd_data_measured else None,
            design_effect=(
                measured.design_effect if measured and measured.design_effect_measured else None
            ),
            judgments_now=cells_now,
        )
    except PlanError as exc:
        return MoreAnnotators(halfwidth, now, None, None, per, None, exc.reason)
    total = plan.annotators_needed
    if per > 0:
        total = max(total, math.ceil(plan.judgments_per_cell / per))
    return MoreAnnotators(halfwidth, now, total, max(total - now, 0), per, plan)
