"""A next-word study's parts of the researcher's pages: its results page (Table 4, the plot,
the diagnostics, the planner) and what its Annotators page reads."""

from __future__ import annotations

import base64
from typing import Any

from sqlalchemy.orm import Session

from app.models import Study
from app.results.schemas import DiagnosticsOut, ResultsOut
from app.results.stats import PlanTarget, StudyPlan
from app.studytypes.nextword import diagnostics, planning
from app.studytypes.nextword.downloads import CATALOGUE
from app.studytypes.nextword.plot import diagnostics_plot, results_plot
from app.studytypes.nextword.readable import interval_sentence
from app.studytypes.nextword.recovery import recovery_from, recovery_plot

ANSWERS_LABEL, ITEMS_LABEL = "Judgments", "Items"  # as the study page names them


def results_page(
    session: Session, study: Study, options: Any, *, costs: Any = None
) -> tuple[str, dict]:
    """The results page's template and context (`options`: the page's query; `costs`: the
    plan's price on each channel, ``app.simulate.costs.plan_costs`` bound)."""
    query = options.results_query()
    # One load of the judgments for the figures and the diagnostics (None: no section, and
    # no diagnostics downloads).
    res, diag = diagnostics.results_with_diagnostics(session, study, query)
    plan = res.plan  # the default target's
    if options.target() != PlanTarget():
        plan = planning.study_plan(session, study, options.target(), seed=query.seed)
    context = results_context(study, res, diag, plan, options)
    context["plan_costs"] = costs(plan) if costs is not None and plan is not None else []
    return "nextword/results.html", context


def results_context(
    study: Study,
    res: ResultsOut,
    diag: DiagnosticsOut | None,
    plan: StudyPlan | None,
    options: Any,
) -> dict[str, Any]:
    """What the results page shows of computed results: the plots drawn, uninformative
    intervals said in words (no database)."""
    plot = None
    if res.results is not None:
        plot = base64.b64encode(results_plot(res, "svg")).decode()
    diag_plot = recovery_svg = None
    if diag is not None:
        diag_plot = base64.b64encode(diagnostics_plot(diag, "svg")).decode()
        rec = recovery_from(diag)
        if rec.gap_curve or rec.corruption_curve:
            recovery_svg = base64.b64encode(recovery_plot(rec, "svg")).decode()
    return {
        "study": study,
        "res": res,
        "plan": plan,
        "plot": plot,
        # Uninformative EB-C intervals said in words, with the planner's answer.
        "uninformative": interval_sentence(study, res),
        "query": options.results_query(),
        "planner": options,
        "diagnostics": diag,
        "diagnostics_plot": diag_plot,
        "recovery_plot": recovery_svg,
        "downloads": [
            n for n in CATALOGUE if diag or not n.startswith(("diagnostics.", "recovery."))
        ],
    }


def annotators_context(study: Study) -> dict[str, Any]:
    """Its partials read the quality figures alone."""
    return {}
