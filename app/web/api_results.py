"""REST API for studies and their results (included in ``app.web.api.router``, /api/v1).

Every route needs a bearer token. Handlers parse, call a service, return. Downloads of
judgments and items stream from a session of their own (the request's session is
committed and closed before the body is sent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.db import SessionDep
from app.models import Study
from app.results import exports, service
from app.results.plot import results_plot
from app.results.schemas import (
    ManifestOut,
    PlanOut,
    ResultQuery,
    ResultsOut,
    StudyDetailOut,
    StudySummaryOut,
)
from app.studies.service import get_study, list_studies
from app.web.security import api_user


class ErrorOut(BaseModel):
    detail: str
    status: int


class LatexQuery(ResultQuery):
    paper: bool = False  # ± as the paper-comparable std over 5 parts instead of the SE


router = APIRouter(
    tags=["studies"],
    dependencies=[Depends(api_user)],
    responses={401: {"model": ErrorOut, "description": "missing, invalid or revoked token"}},
)
_404 = {404: {"model": ErrorOut, "description": "no such study"}}


def valid_study(slug: str, session: SessionDep) -> Study:
    study = get_study(session, slug)
    if study is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no study {slug!r}")
    return study


StudyDep = Annotated[Study, Depends(valid_study)]
ResultQueryDep = Annotated[ResultQuery, Query()]


def _file(content_type: str, what: str) -> dict:
    return {
        200: {"content": {content_type: {"schema": {"type": "string"}}}, "description": what},
        **_404,
    }


def _streamed(
    request: Request, study: Study, chunks: Callable[[Session, Study], Iterator[str]]
) -> Iterator[str]:
    make_session = request.app.state.sessionmaker
    study_id = study.id

    def body() -> Iterator[str]:
        with make_session() as session:
            own = session.get(Study, study_id)
            yield from chunks(session, own)

    return body()


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"'}


@router.get("/studies", response_model=list[StudySummaryOut], summary="All studies")
def studies(session: SessionDep) -> list[StudySummaryOut]:
    return service.study_summaries(list_studies(session))


@router.get(
    "/studies/{slug}",
    response_model=StudyDetailOut,
    responses=_404,
    summary="A study: configuration, status, counts",
)
def study(study: StudyDep, session: SessionDep) -> StudyDetailOut:
    return service.study_detail(session, study)


@router.get(
    "/studies/{slug}/results",
    response_model=ResultsOut,
    responses=_404,
    summary="CGD, EB-C with error bars, tests, agreement, quality, sanity, plan",
)
def results(study: StudyDep, session: SessionDep, query: ResultQueryDep) -> ResultsOut:
    return service.study_results(session, study, query)


@router.get(
    "/studies/{slug}/results.csv",
    response_class=PlainTextResponse,
    responses=_file("text/csv", "one row per figure, both exclusion settings"),
    summary="Results as CSV",
)
def results_csv(study: StudyDep, session: SessionDep, query: ResultQueryDep) -> Response:
    body = exports.results_csv(service.study_results(session, study, query))
    return Response(body, media_type="text/csv", headers=_attachment(f"{study.slug}-results.csv"))


@router.get(
    "/studies/{slug}/results.tex",
    response_class=PlainTextResponse,
    responses=_file("application/x-tex", "a booktabs table shaped like the paper's Table 4"),
    summary="Results as a LaTeX table",
)
def results_tex(
    study: StudyDep, session: SessionDep, query: Annotated[LatexQuery, Query()]
) -> Response:
    opts = ResultQuery.model_validate(query.model_dump(exclude={"paper"}))
    res = service.study_results(session, study, opts)
    body = exports.results_latex(res, service.task_label(study), paper=query.paper)
    return Response(
        body, media_type="application/x-tex", headers=_attachment(f"{study.slug}-results.tex")
    )


@router.get(
    "/studies/{slug}/plot.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"image/svg+xml": {}, "image/png": {}},
            "description": "CGD(data), CGD(model) and EB-C against prefix length",
        },
        **_404,
    },
    summary="Results plot (SVG or PNG)",
)
def plot(
    study: StudyDep, session: SessionDep, fmt: Literal["svg", "png"], query: ResultQueryDep
) -> Response:
    image = results_plot(service.study_results(session, study, query), fmt)
    media = "image/svg+xml" if fmt == "svg" else "image/png"
    return Response(image, media_type=media)


@router.get(
    "/studies/{slug}/judgments.{fmt}",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-ndjson": {}},
            "description": "every judgment with its context (streamed)",
        },
        **_404,
    },
    summary="Judgments as CSV or JSON lines (streamed)",
)
def judgments(request: Request, study: StudyDep, fmt: Literal["csv", "jsonl"]) -> Response:
    chunks = exports.judgments_csv if fmt == "csv" else exports.judgments_jsonl
    media = "text/csv" if fmt == "csv" else "application/x-ndjson"
    return StreamingResponse(
        _streamed(request, study, chunks),
        media_type=media,
        headers=_attachment(f"{study.slug}-judgments.{fmt}"),
    )


@router.get(
    "/studies/{slug}/items.{fmt}",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-ndjson": {}},
            "description": "every item with its choices and HIT placement (streamed)",
        },
        **_404,
    },
    summary="Items as CSV or JSON lines (streamed)",
)
def items(request: Request, study: StudyDep, fmt: Literal["csv", "jsonl"]) -> Response:
    chunks = exports.items_csv if fmt == "csv" else exports.items_jsonl
    media = "text/csv" if fmt == "csv" else "application/x-ndjson"
    return StreamingResponse(
        _streamed(request, study, chunks),
        media_type=media,
        headers=_attachment(f"{study.slug}-items.{fmt}"),
    )


@router.get(
    "/studies/{slug}/manifest.json",
    response_model=ManifestOut,
    responses=_404,
    summary="Provenance manifest",
)
def manifest(study: StudyDep, session: SessionDep) -> ManifestOut:
    return service.manifest(session, study)


@router.get(
    "/studies/{slug}/plan",
    response_model=PlanOut,
    responses=_404,
    summary="Power and budget planner (design effect measured on the study's data)",
)
def plan(
    study: StudyDep,
    session: SessionDep,
    target_ebc: Annotated[float | None, Query(gt=1.0, le=3.0)] = 1.02,
    halfwidth: Annotated[float | None, Query(gt=0, le=1)] = None,
    power: Annotated[float, Query(gt=0.05, lt=1)] = 0.8,
    alpha: Annotated[float, Query(gt=0, lt=0.5)] = 0.05,
    seed: Annotated[int, Query(ge=0)] = 0,
) -> PlanOut:
    return service.study_plan(
        session,
        study,
        target_ebc=target_ebc,
        halfwidth=halfwidth,
        power=power,
        alpha=alpha,
        seed=seed,
    )
