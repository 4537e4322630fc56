"""REST API for studies and their results (included in ``app.web.api.router``, /api/v1).

Every route needs a bearer token. Handlers parse, call a service, return. Downloads of
judgments and items stream from a session of their own (the request's session is
committed and closed before the body is sent).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from app.models import Study, User
from app.results import catalog, downloads, forced, service
from app.results.schemas import (
    DiagnosticsOut,
    ForcedSamplesOut,
    ManifestOut,
    PricedPlan,
    RecoveryOut,
    ResultQuery,
    ResultsOut,
    StudyDetailOut,
    StudySummaryOut,
)
from app.results.stats import PlanTarget
from app.simulate.costs import priced_plan
from app.studies.service import Access, visible_studies
from app.studytypes.base import OptionNotForThisType
from app.studytypes.registry import STUDY_TYPES, study_type_of
from app.web.deps import SessionDep
from app.web.downloads import export_response
from app.web.security import ApiStudyDep, ApiUserDep, access_of, api_user


class ErrorOut(BaseModel):
    """Every error of /api/v1 (app.main's handlers)."""

    detail: str
    status: int


class ErrorItem(BaseModel):
    loc: list[str | int] = Field(description="where: query, path or body, then the name")
    msg: str
    type: str


class ValidationErrorOut(ErrorOut):
    """422: parameters that do not validate, or a plan no study can reach."""

    errors: list[ErrorItem]


# The answers every authenticated route may give besides its own (app.main's handlers).
ERRORS: dict[int | str, dict] = {
    401: {"model": ErrorOut, "description": "missing, invalid or revoked token"},
    403: {"model": ErrorOut, "description": "an annotator's invite token (not for the API)"},
    422: {"model": ValidationErrorOut, "description": "invalid parameters"},
    503: {"model": ErrorOut, "description": "the database is unavailable or too slow"},
}


class LatexQuery(ResultQuery):
    paper: bool = False  # ± as the paper-comparable std over 5 parts instead of the SE

    def results_query(self) -> ResultQuery:
        """The results' options, only those given set (a ratings study refuses the
        next-word ones when given)."""
        return ResultQuery.model_validate(self.model_dump(exclude={"paper"}, exclude_unset=True))


router = APIRouter(
    tags=["studies"],
    dependencies=[Depends(api_user)],
    responses=ERRORS,
)
_404 = {404: {"model": ErrorOut, "description": "no such study"}}
_404_RATINGS = {
    404: {"model": ErrorOut, "description": "no such study, or a next-word study (no ratings)"}
}
_404_NEXTWORD = {
    404: {"model": ErrorOut, "description": "no such study, or a ratings study (no judgments)"}
}


# The study, if the token's user may see it: 404 otherwise, as for a study that does not
# exist (app.web.security.api_study). Every route here only reads.
StudyDep = ApiStudyDep


def _study_with(capability: str) -> Any:
    """The study, if its type has `capability` (``diagnostics``, ``planner``): else a 404
    with its type's message, as a download a study's type does not have."""

    def dependency(study: StudyDep) -> Study:
        plugin = study_type_of(study)
        if getattr(plugin, capability) is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, plugin.refusal(study, capability))
        return study

    return Annotated[Study, Depends(dependency)]


def _refuse_options(study: Study, query: ResultQuery) -> None:
    """Options the study's type does not take (a ratings study: estimator, unit, ci) are a
    422 that names them, not silently ignored."""
    try:
        study_type_of(study).results.check_options(query)
    except OptionNotForThisType as exc:
        errors = [
            {"loc": ("query", name), "msg": exc.message, "type": "value_error"}
            for name in exc.fields
        ]
        raise RequestValidationError(errors) from None


REFUSED_BY = "x-refused-by-study-types"
"""The OpenAPI extension on a results option: the study types that refuse it (422)."""


def refused_options() -> dict[str, list[str]]:
    """Per results option, the study types (their names) that refuse it when given: each
    type's own `check_options`, asked with the option alone set to its default."""
    refused: dict[str, list[str]] = {}
    for option, spec in ResultQuery.model_fields.items():
        given = ResultQuery.model_validate({option: spec.default})
        for plugin in STUDY_TYPES.values():
            try:
                plugin.results.check_options(given)
            except OptionNotForThisType:
                refused.setdefault(option, []).append(plugin.name.value)
    return refused


def document_refusals(schema: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document per study type: every results option that a type refuses says
    so, in words and as `REFUSED_BY` (a client, or schemathesis, reads which values a study
    of each type takes). Changes `schema` in place and returns it."""
    refused = refused_options()
    nouns = {plugin.name.value: plugin.noun for plugin in STUDY_TYPES.values()}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                types = refused.get(parameter["name"]) if parameter["in"] == "query" else None
                if not types:
                    continue
                parameter[REFUSED_BY] = types
                who = " or ".join(f"{nouns[t]} study" for t in types)
                note = f"Refused by {who} (422 naming it): not an option of its figures."
                described = parameter.get("description") or parameter["schema"].get("description")
                parameter["description"] = f"{described} {note}" if described else note
    return schema


def result_options(study: StudyDep, query: Annotated[ResultQuery, Query()]) -> ResultQuery:
    _refuse_options(study, query)
    return query


def latex_options(study: StudyDep, query: Annotated[LatexQuery, Query()]) -> LatexQuery:
    _refuse_options(study, query.results_query())
    return query


ResultQueryDep = Annotated[ResultQuery, Depends(result_options)]
LatexQueryDep = Annotated[LatexQuery, Depends(latex_options)]
DiagnosticsStudyDep = _study_with("diagnostics")
PlanStudyDep = _study_with("planner")


def _file(content_type: str, what: str, missing: dict = _404) -> dict:
    return {
        200: {"content": {content_type: {"schema": {"type": "string"}}}, "description": what},
        **missing,
    }


def _file_response(d: downloads.Download) -> Response:
    disposition = {"Content-Disposition": f'attachment; filename="{d.filename}"'}
    return Response(d.body, media_type=d.media_type, headers=disposition)


def _download(
    session: Session, study: Study, name: str, query: ResultQuery, user: User, paper: bool = False
) -> downloads.Download:
    """`name` of `study`; a 404 when the study has no such download (a ratings study's on a
    next-word study, or the reverse)."""
    try:
        return downloads.download(session, study, name, query, by=user, paper=paper)
    except downloads.NoSuchDownload as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, exc.message) from None


def _streamed(request: Request, study: Study, session: Session, user: User, name: str) -> Response:
    d = _download(session, study, name, ResultQuery(), user)
    assert d.chunks is not None
    return export_response(request, study, d.chunks, media_type=d.media_type, filename=d.filename)


@router.get(
    "/studies",
    response_model=list[StudySummaryOut],
    summary="The studies the token's user may see (administrators: all)",
)
def studies(session: SessionDep, user: ApiUserDep) -> list[StudySummaryOut]:
    return catalog.study_summaries(visible_studies(session, user))


@router.get(
    "/studies/{slug}",
    response_model=StudyDetailOut,
    responses=_404,
    summary="A study: configuration, status, counts",
)
def study(study: StudyDep, session: SessionDep) -> StudyDetailOut:
    return catalog.study_detail(session, study)


@router.get(
    "/studies/{slug}/results",
    response_model=ResultsOut,
    responses=_404,
    summary="CGD, EB-C with error bars, tests, agreement, quality, sanity, plan; a ratings "
    "study: its ratings figures (ratings) and EB-M (ebm)",
)
def results(study: StudyDep, session: SessionDep, query: ResultQueryDep) -> ResultsOut:
    return service.study_results(session, study, query)


@router.get(
    "/studies/{slug}/results/diagnostics",
    response_model=DiagnosticsOut,
    responses=_404_NEXTWORD,
    summary="Diagnostic curves: CGD per prefix kind and length from people and from the "
    "reference model, with the corruption ratios and EB-C_gap (next-word studies)",
)
def results_diagnostics(
    study: DiagnosticsStudyDep, session: SessionDep, query: ResultQueryDep
) -> DiagnosticsOut:
    return study_type_of(study).diagnostics.compute(session, study, query)


@router.get(
    "/studies/{slug}/results/diagnostics.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"text/csv": {}, "image/svg+xml": {}, "image/png": {}},
            "description": "the diagnostics table as CSV (one line per row), or its plot: "
            "CGD against prefix length per kind, one panel per source",
        },
        **_404_NEXTWORD,
    },
    summary="Diagnostics as CSV, or their plot (SVG or PNG)",
)
def results_diagnostics_file(
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "svg", "png"],
    query: ResultQueryDep,
) -> Response:
    return _file_response(_download(session, study, f"diagnostics.{fmt}", query, user))


@router.get(
    "/studies/{slug}/results/recovery",
    response_model=RecoveryOut,
    responses=_404_NEXTWORD,
    summary="Self-recovery figures as data: EB-C_gap against l_gap (lines per l) and CGD "
    "against the corruption rate beside CGD(M|D) and CGD(M|M) (next-word studies)",
)
def results_recovery(
    study: DiagnosticsStudyDep, session: SessionDep, query: ResultQueryDep
) -> RecoveryOut:
    return study_type_of(study).diagnostics.recovery(session, study, query)


@router.get(
    "/studies/{slug}/results/recovery.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {
                "text/csv": {},
                "application/x-tex": {},
                "image/svg+xml": {},
                "image/png": {},
            },
            "description": "the self-recovery figures' points as CSV or LaTeX tables, or their "
            "plot (EB-C_gap against l_gap; CGD against the corruption rate)",
        },
        **_404_NEXTWORD,
    },
    summary="Self-recovery figures as CSV, LaTeX, SVG or PNG",
)
def results_recovery_file(
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "tex", "svg", "png"],
    query: ResultQueryDep,
) -> Response:
    return _file_response(_download(session, study, f"recovery.{fmt}", query, user))


@router.get(
    "/studies/{slug}/forced_samples",
    response_model=ForcedSamplesOut,
    responses=_404,
    summary="Forced-prefix samples: what the model wrote after data, model, random, shuffled "
    "(language models) or DATA, NORMAL, UNREL, RAND (translation) prefixes, with BLEU for "
    "DATA and NORMAL",
)
def forced_samples(request: Request, study: StudyDep, session: SessionDep) -> ForcedSamplesOut:
    out = forced.forced_samples(session, study)
    return out if access_of(request) >= Access.manage else forced.error_hidden(out)


@router.get(
    "/studies/{slug}/forced_samples.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-tex": {}},
            "description": "the samples as CSV (one line per sample) or the paper's LaTeX "
            "table (the forced prefix underlined)",
        },
        **_404,
    },
    summary="Forced-prefix samples as CSV or LaTeX",
)
def forced_samples_file(
    study: StudyDep, session: SessionDep, user: ApiUserDep, fmt: Literal["csv", "tex"]
) -> Response:
    return _file_response(_download(session, study, f"forced_samples.{fmt}", ResultQuery(), user))


@router.get(
    "/studies/{slug}/results.csv",
    response_class=Response,
    responses=_file("text/csv", "one row per figure, both exclusion settings", _404_NEXTWORD),
    summary="Results as CSV",
)
def results_csv(
    study: StudyDep, session: SessionDep, user: ApiUserDep, query: ResultQueryDep
) -> Response:
    return _file_response(_download(session, study, "results.csv", query, user))


@router.get(
    "/studies/{slug}/results.tex",
    response_class=Response,
    responses=_file(
        "application/x-tex", "a booktabs table shaped like the paper's Table 4", _404_NEXTWORD
    ),
    summary="Results as a LaTeX table",
)
def results_tex(
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    query: Annotated[LatexQuery, Query()],
) -> Response:
    opts = query.results_query()
    return _file_response(_download(session, study, "results.tex", opts, user, query.paper))


@router.get(
    "/studies/{slug}/plot.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"image/svg+xml": {}, "image/png": {}},
            "description": "CGD(data), CGD(model) and EB-C against prefix length",
        },
        **_404_NEXTWORD,
    },
    summary="Results plot (SVG or PNG)",
)
def plot(
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["svg", "png"],
    query: ResultQueryDep,
) -> Response:
    d = _download(session, study, f"plot.{fmt}", query, user)
    return Response(d.body, media_type=d.media_type)


@router.get(
    "/studies/{slug}/judgments.{fmt}",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-ndjson": {}},
            "description": "every judgment with its context (streamed)",
        },
        **_404_NEXTWORD,
    },
    summary="Judgments as CSV or JSON lines (streamed)",
)
def judgments(
    request: Request,
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "jsonl"],
) -> Response:
    return _streamed(request, study, session, user, f"judgments.{fmt}")


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
def items(
    request: Request,
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "jsonl"],
) -> Response:
    return _streamed(request, study, session, user, f"items.{fmt}")


@router.get(
    "/studies/{slug}/annotators.csv",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}},
            "description": "every annotator with their consent, comments and page signals",
        },
        **_404,
    },
    summary="Annotators as CSV: consent, comments, page signals",
)
def annotators(
    request: Request, study: StudyDep, session: SessionDep, user: ApiUserDep
) -> Response:
    return _streamed(request, study, session, user, "annotators.csv")


@router.get(
    "/studies/{slug}/results/ebm.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-tex": {}},
            "description": "a ratings study's stored EB-M scores: CSV (one row per figure) or "
            "a booktabs table (one row per prefix length, EB-M per score, EB-bleu); none "
            "stored yet: the header or an empty table",
        },
        **_404_RATINGS,
    },
    summary="EB-M scores as CSV or a LaTeX table (ratings studies)",
)
def results_ebm_file(
    study: StudyDep, session: SessionDep, user: ApiUserDep, fmt: Literal["csv", "tex"]
) -> Response:
    return _file_response(_download(session, study, f"ebm.{fmt}", ResultQuery(), user))


@router.get(
    "/studies/{slug}/results/ebm_gap.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"image/svg+xml": {}, "image/png": {}},
            "description": "a ratings study's EB-M_gap against l_gap (the later paper's Fig. "
            "3 for continuations): one line per distorted kind and prefix length, one panel "
            "per score, from the stored EB-M scores (the figures are in ebm.csv)",
        },
        **_404_RATINGS,
    },
    summary="EB-M_gap figure as SVG or PNG (ratings studies)",
)
def results_ebm_gap_file(
    study: StudyDep, session: SessionDep, user: ApiUserDep, fmt: Literal["svg", "png"]
) -> Response:
    return _file_response(_download(session, study, f"ebm_gap.{fmt}", ResultQuery(), user))


@router.get(
    "/studies/{slug}/samples.{fmt}",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-ndjson": {}},
            "description": "every continuation with its kind, prompt and prefix (streamed)",
        },
        **_404_RATINGS,
    },
    summary="Prefix-switching samples as CSV or JSON lines (ratings studies; streamed)",
)
def samples(
    request: Request,
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "jsonl"],
) -> Response:
    return _streamed(request, study, session, user, f"samples.{fmt}")


@router.get(
    "/studies/{slug}/results/ratings_table.{fmt}",
    response_class=Response,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-tex": {}},
            "description": "a ratings study's figures as the later paper's Table 3: CSV (one "
            "row per figure, both exclusion settings) or a booktabs table (per prefix length, "
            "quality and consistency after data and model prefixes, gap and ratio, with "
            "intervals; paper=true: the paper-comparable mean +- std)",
        },
        **_404_RATINGS,
    },
    summary="Ratings results (Table 3) as CSV or a LaTeX table (ratings studies)",
)
def results_ratings_table(
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "tex"],
    query: LatexQueryDep,
) -> Response:
    opts = query.results_query()
    d = _download(session, study, f"ratings_table.{fmt}", opts, user, query.paper)
    return _file_response(d)


@router.get(
    "/studies/{slug}/ratings.{fmt}",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/csv": {}, "application/x-ndjson": {}},
            "description": "every rating (one annotator's quality and consistency of one "
            "pair) with its pair, opaque ids and flags (streamed)",
        },
        **_404_RATINGS,
    },
    summary="Ratings as CSV or JSON lines (ratings studies; streamed)",
)
def ratings(
    request: Request,
    study: StudyDep,
    session: SessionDep,
    user: ApiUserDep,
    fmt: Literal["csv", "jsonl"],
) -> Response:
    return _streamed(request, study, session, user, f"ratings.{fmt}")


@router.get(
    "/studies/{slug}/manifest.json",
    response_model=ManifestOut,
    responses=_404,
    summary="Provenance manifest",
)
def manifest(study: StudyDep, session: SessionDep) -> ManifestOut:
    return catalog.manifest(session, study)


_INFEASIBLE = (
    "Values inside the range that ask for a plan no study can reach (with this study's "
    "CGD(data) and design effect) are refused: 422, type plan_infeasible."
)


@router.get(
    "/studies/{slug}/plan",
    response_model=PricedPlan,
    responses={
        **_404_NEXTWORD,
        422: {
            "model": ValidationErrorOut,
            "description": "invalid parameters, or a target no study can reach: an error "
            "of type plan_infeasible whose detail says why (EB-C x CGD(data) >= 1, or more "
            "judgments than any study collects); which values those are depends on the "
            "study's measured CGD(data) and design effect",
        },
    },
    summary="Power and budget planner, priced on each crowd channel (design effect "
    "measured on the study's data; "
    "next-word studies)",
)
def plan(
    request: Request,
    study: PlanStudyDep,
    session: SessionDep,
    target_ebc: Annotated[
        float | None, Query(gt=1.0, le=3.0, description=f"the EB-C to detect. {_INFEASIBLE}")
    ] = PlanTarget.target_ebc,
    halfwidth: Annotated[
        float | None,
        Query(
            gt=0,
            le=1,
            description="plan an interval of this half-width instead of a test. A half-"
            "width below about 1e-4 (at the defaults; more with a larger design effect) "
            f"needs over 10^9 judgments per cell. {_INFEASIBLE}",
        ),
    ] = PlanTarget.halfwidth,
    power: Annotated[
        float, Query(gt=0.05, lt=1, description=f"power of the test. {_INFEASIBLE}")
    ] = PlanTarget.power,
    alpha: Annotated[
        float, Query(gt=0, lt=0.5, description=f"two-sided level. {_INFEASIBLE}")
    ] = PlanTarget.alpha,
    seed: Annotated[int, Query(ge=0, lt=2**63)] = 0,
) -> PricedPlan:
    target = PlanTarget(target_ebc=target_ebc, halfwidth=halfwidth, power=power, alpha=alpha)
    plan = study_type_of(study).planner.plan(session, study, target, seed=seed)
    return priced_plan(study, request.app.state.settings, plan)
