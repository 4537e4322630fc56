"""Dashboard: a study's results page (table, plot, agreement, sanity, planner) and the
downloads. The figures come from app.results.service; exports are audited."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response
from pydantic import Field
from sqlalchemy.orm import Session

from app.audit.service import record
from app.models import Study
from app.results import exports
from app.results.catalog import manifest, task_label
from app.results.planning import study_plan
from app.results.plot import results_plot
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.results.stats import PlanTarget
from app.web.deps import SessionDep
from app.web.downloads import export_response
from app.web.pages import LOGIN, StudyDep, render
from app.web.security import UserDep

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)


class PageQuery(ResultQuery):
    """The results' options plus the planner's and the LaTeX table's (one query string)."""

    target_ebc: float | None = Field(PlanTarget.target_ebc, gt=1.0, le=3.0)
    halfwidth: float | None = Field(PlanTarget.halfwidth, gt=0, le=1)
    power: float = Field(PlanTarget.power, gt=0.05, lt=1)
    paper: bool = False

    def results_query(self) -> ResultQuery:
        return ResultQuery.model_validate(self.model_dump(include=set(ResultQuery.model_fields)))

    def target(self) -> PlanTarget:
        """The planner's target: a half-width, when one is given, replaces the EB-C."""
        if self.halfwidth is not None:
            return PlanTarget(target_ebc=None, halfwidth=self.halfwidth, power=self.power)
        return PlanTarget(target_ebc=self.target_ebc, power=self.power)


PageQueryDep = Annotated[PageQuery, Query()]
# The SVG is ours (numbers drawn by matplotlib); it styles itself inline.
SVG_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}
DOWNLOADS = {
    "results.csv": "text/csv",
    "results.tex": "application/x-tex",
    "plot.svg": "image/svg+xml",
    "plot.png": "image/png",
    "manifest.json": "application/json",
    "judgments.csv": "text/csv",
    "judgments.jsonl": "application/x-ndjson",
    "items.csv": "text/csv",
    "items.jsonl": "application/x-ndjson",
}
STREAMED: dict[str, Callable[[Session, Study], Iterator[str]]] = {
    "judgments.csv": exports.judgments_csv,
    "judgments.jsonl": exports.judgments_jsonl,
    "items.csv": exports.items_csv,
    "items.jsonl": exports.items_jsonl,
}


@router.get("/{slug}/results", response_class=HTMLResponse)
def results_page(
    request: Request,
    session: SessionDep,
    study: StudyDep,
    options: PageQueryDep,
) -> HTMLResponse:
    query = options.results_query()
    res = study_results(session, study, query)
    plan = res.plan  # the default target's
    if options.target() != PlanTarget():
        plan = study_plan(session, study, options.target(), seed=query.seed)
    plot = None
    if res.results is not None:
        plot = base64.b64encode(results_plot(res, "svg")).decode()
    return render(
        request,
        "results.html",
        {
            "study": study,
            "res": res,
            "plan": plan,
            "plot": plot,
            "query": query,
            "query_string": str(request.url.query),
            "planner": options,
            "downloads": list(DOWNLOADS),
        },
    )


@router.get("/{slug}/results/{name}")
def download(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: StudyDep,
    name: str,
    options: PageQueryDep,
) -> Response:
    query = options.results_query()
    if name not in DOWNLOADS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "There is no such download.")
    record(session, "export", user=user, study=study, what=name, options=query.model_dump())
    media = DOWNLOADS[name]
    filename = f"{study.slug}-{name}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    if name in STREAMED:
        return export_response(request, study, STREAMED[name], media_type=media, filename=filename)
    if name == "manifest.json":
        body = manifest(session, study).model_dump_json(indent=2)
        return Response(body, media_type=media, headers=headers)
    res = study_results(session, study, query)
    if name.startswith("plot."):
        fmt: Literal["svg", "png"] = "svg" if name.endswith("svg") else "png"
        return Response(results_plot(res, fmt), media_type=media, headers=headers | SVG_HEADERS)
    if name == "results.tex":
        body = exports.results_latex(res, task_label(study), paper=options.paper)
    else:
        body = exports.results_csv(res)
    return Response(body, media_type=media, headers=headers)
