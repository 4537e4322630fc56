"""Dashboard: a study's results page (table, plot, agreement, sanity, diagnostics,
planner; a ratings study's: its Table 3, agreement, quality control, EB-M) and the
downloads. The figures come from app.results.service (diagnostics: app.results.diagnostics;
ratings: app.results.ratings), the downloads (audited) from app.results.downloads."""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from app.models import StudyType
from app.results import downloads
from app.results.diagnostics import results_with_diagnostics
from app.results.ebm_exports import ebm_view
from app.results.planning import study_plan
from app.results.plot import diagnostics_plot, results_plot
from app.results.ratings import ratings_document
from app.results.schemas import ResultQuery
from app.results.stats import PlanTarget
from app.results.stats.ebm import SCORE_LABELS, SCORES
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
    query = options.results_query()
    if study.study_type is StudyType.ratings:
        # Ratings, not judgments: quality and consistency (app.results.ratings), and the EB-M
        # scores as a results job stored them (app.results.ebm).
        res = ratings_document(session, study, query)
        return render(
            request,
            "results_ratings.html",
            {
                "study": study,
                "res": res,
                "query": query,
                "query_string": str(request.url.query),
                "ebm": res.ebm,
                "ebm_rows": ebm_view(res.ebm) if res.ebm else [],
                "score_labels": [SCORE_LABELS[n] for n in SCORES],
                "downloads": downloads.catalogue(study),
            },
        )
    # One load of the judgments for the figures and the diagnostics (None: no section, and
    # no diagnostics downloads).
    res, diag = results_with_diagnostics(session, study, query)
    plan = res.plan  # the default target's
    if options.target() != PlanTarget():
        plan = study_plan(session, study, options.target(), seed=query.seed)
    plot = None
    if res.results is not None:
        plot = base64.b64encode(results_plot(res, "svg")).decode()
    diag_plot = None
    if diag is not None:
        diag_plot = base64.b64encode(diagnostics_plot(diag, "svg")).decode()
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
            "diagnostics": diag,
            "diagnostics_plot": diag_plot,
            "downloads": [
                n for n in downloads.catalogue(study) if diag or not n.startswith("diagnostics.")
            ],
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
