"""Dashboard: a study's results page, its type's (a next-word study's table, plot, agreement,
sanity, diagnostics, planner; a ratings study's Table 3, agreement, quality control, EB-M:
``StudyTypePlugin.results_page``) and the downloads (audited: app.results.downloads)."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from app.results import downloads, forced
from app.results.schemas import ResultQuery
from app.results.stats import PlanTarget
from app.simulate.costs import plan_costs
from app.studies.service import Access
from app.studytypes.registry import study_type_of
from app.web.deps import SessionDep
from app.web.downloads import export_response
from app.web.pages import LOGIN, StudyDep, render
from app.web.security import UserDep, access_of

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)


class PageQuery(ResultQuery):
    """The results' options plus the planner's and the LaTeX table's (one query string)."""

    target_ebc: float | None = Field(PlanTarget.target_ebc, gt=1.0, le=3.0)
    halfwidth: float | None = Field(PlanTarget.halfwidth, gt=0, le=1)
    power: float = Field(PlanTarget.power, gt=0.05, lt=1)
    paper: bool = False

    def results_query(self) -> ResultQuery:
        """The results' options, only those given set (a ratings study refuses the
        next-word ones when given: a 400)."""
        fields = set(ResultQuery.model_fields)
        return ResultQuery.model_validate(self.model_dump(include=fields, exclude_unset=True))

    def target(self) -> PlanTarget:
        """The planner's target: a half-width, when one is given, replaces the EB-C."""
        if self.halfwidth is not None:
            return PlanTarget(target_ebc=None, halfwidth=self.halfwidth, power=self.power)
        return PlanTarget(target_ebc=self.target_ebc, power=self.power)


PageQueryDep = Annotated[PageQuery, Query()]
# The SVG is ours (numbers drawn by matplotlib); it styles itself inline.
SVG_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"}


@router.get("/{slug}/results", response_class=HTMLResponse)
def results_page(
    request: Request,
    session: SessionDep,
    study: StudyDep,
    options: PageQueryDep,
) -> HTMLResponse:
    costs = functools.partial(plan_costs, study, request.app.state.settings)
    template, context = study_type_of(study).dashboard.results_page(
        session, study, options, costs=costs
    )
    return render(request, template, {**context, "query_string": str(request.url.query)})


@router.get("/{slug}/samples", response_class=HTMLResponse)
def samples_page(request: Request, session: SessionDep, study: StudyDep) -> HTMLResponse:
    """The forced-prefix samples as the papers print them (issue 34)."""
    return samples_response(request, session, study)


def samples_response(
    request: Request, session, study, error: str | None = None, status_code: int = 200
) -> HTMLResponse:
    """The samples page (with ``error``: the rating form's refusal)."""
    context = {
        "study": study,
        "out": forced.forced_samples(session, study),
        "can_manage": access_of(request) >= Access.manage,
        "error": error,
    }
    return render(request, "forced_samples.html", context, status_code=status_code)


@router.get("/{slug}/results/{name}")
def download(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: StudyDep,
    name: str,
    options: PageQueryDep,
) -> Response:
    try:
        d = downloads.download(
            session, study, name, options.results_query(), by=user, paper=options.paper
        )
    except downloads.NoSuchDownload as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.message) from None
    if d.chunks is not None:
        return export_response(
            request, study, d.chunks, media_type=d.media_type, filename=d.filename
        )
    headers = {"Content-Disposition": f'attachment; filename="{d.filename}"'}
    if d.media_type == "image/svg+xml":
        headers |= SVG_HEADERS
    return Response(d.body, media_type=d.media_type, headers=headers)
