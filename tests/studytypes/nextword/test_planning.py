"""The planner of a study: its inputs measured on the study's judgments, one path."""

from __future__ import annotations

import math

import pytest

from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.results.stats import PlanError, PlanTarget, jsonable
from app.studytypes.nextword.planning import plan_for_study, study_plan

FAST = {"b": 200}


def test_empty_study_has_no_figures_but_a_plan(session):
    from tests.factories import StudyFactory

    f = StudyFactory(session, "nothing")
    res = study_results(session, f.study, ResultQuery(**FAST))
    assert res.results is None and res.other is None and res.messages
    plan = study_plan(session, f.study)
    assert not plan.design_effect_measured and plan.cgd_data == 0.73
    # docs/design.md: about 14,300 judgments per cell for 1.02 vs 1.00 at CGD 0.73.
    assert 14_000 < plan.judgments_per_cell_iid < 14_600


def test_plan_uses_the_study_layout_and_payment(session, handmade):
    study = handmade.study
    study.reward_cents, study.platform_fee, study.per_annotator_cap = 50, 0.2, 100
    plan = plan_for_study(study, design_effect=2.0)
    assert plan.judgments_per_cell == pytest.approx(2 * plan.judgments_per_cell_iid, abs=2)
    assert plan.hits_per_length == -(-plan.judgments_per_cell // 5)
    assert plan.cost == pytest.approx(plan.assignments * 0.5 * 1.2)
    assert plan.annotators_needed == -(-plan.assignments // 100)
    measured = study_plan(session, study)
    assert measured.cgd_data_measured and measured.judgments_per_cell_now == 5


def test_the_results_default_plan_is_the_planners(session, handmade):
    """One path: the plan beside the results (annotator unit, exclusions on) and the plan
    of GET /plan measure the same inputs and plan the same study."""
    res = study_results(session, handmade.study, ResultQuery(**FAST))
    assert res.plan is not None and res.plan.cgd_data_measured
    assert jsonable(res.plan) == jsonable(study_plan(session, handmade.study))
    # Another resampling unit measures the design effect by annotator all the same.
    hit = study_results(session, handmade.study, ResultQuery(unit="hit", **FAST))
    assert jsonable(hit.plan) == jsonable(res.plan)


def test_the_planner_refuses_what_no_study_reaches_and_plans_a_halfwidth(session, handmade):
    with pytest.raises(PlanError, match="CGD is a share below 1"):
        study_plan(session, handmade.study, PlanTarget(target_ebc=3.0))
    plan = study_plan(session, handmade.study, PlanTarget(target_ebc=None, halfwidth=0.1))
    assert plan.halfwidth == 0.1 and math.isnan(plan.power) and plan.judgments_per_cell_now == 5
