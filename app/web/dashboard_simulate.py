"""Dashboard: "simulate before you pay" for a study (app.simulate.preview).

A GET form: the simulation changes nothing, so anyone who may view the study may run it,
and its answer can be bookmarked or shared. The handler is a plain `def`, so FastAPI runs
it in its thread pool and the event loop keeps serving; its work is bounded by the page's
limits (R <= 50, R x judgments <= 1.5 million, B = 2,000: a few seconds on two cores),
which spares a job queue; `ebc simulate` has no limit.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.simulate.preview import (
    PAGE_LIMITS,
    PreviewError,
    form_values,
    options_from_form,
    simulate_before_paying,
)
from app.web.pages import LOGIN, StudyDep, render

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)


@router.get("/{slug}/simulate", response_class=HTMLResponse)
def simulate(request: Request, study: StudyDep) -> HTMLResponse:
    given = dict(request.query_params)
    context = {"study": study, "sim_values": form_values(given), "sim_limits": PAGE_LIMITS}
    try:
        options = options_from_form(given, PAGE_LIMITS)
        sim = simulate_before_paying(study, request.app.state.settings, options, limits=PAGE_LIMITS)
    except PreviewError as exc:
        return render(
            request,
            "simulate.html",
            {**context, "sim": None, "sim_errors": exc.errors},
            status_code=400,
        )
    return render(request, "simulate.html", {**context, "sim": sim, "sim_errors": {}})
