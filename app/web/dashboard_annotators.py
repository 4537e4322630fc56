"""Dashboard: a study's annotators: invite links, quality figures, blocks and caps."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.annotation.admin import (
    block,
    get_annotator,
    invite,
    invite_link,
    links_csv,
    local_annotators,
    set_cap,
    unblock,
)
from app.annotation.service import AnnotationError, annotator_cap
from app.audit.service import record
from app.db import SessionDep
from app.models import Annotator, Study
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.studies.queries import annotator_rows
from app.studies.service import StudyError, set_study_cap
from app.web.pages import LOGIN, StudyDep, flash, redirect, render, study_url
from app.web.security import CsrfDep, UserDep

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)

# The quality figures need no error bars: the fewest resamples the results accept.
QUALITY_QUERY = ResultQuery(b=100)


def _annotator(session, study: Study, annotator_id: int) -> Annotator:
    found = get_annotator(session, study, annotator_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "There is no such annotator.")
    return found


def _back(study: Study) -> RedirectResponse:
    return redirect(study_url(study, "/annotators"))


@router.get("/{slug}/annotators", response_class=HTMLResponse)
def annotators(request: Request, session: SessionDep, study: StudyDep) -> HTMLResponse:
    settings = request.app.state.settings
    rows = annotator_rows(session, study)
    quality = {q.annotator_id: q for q in study_results(session, study, QUALITY_QUERY).quality}
    return render(
        request,
        "annotators.html",
        {
            "study": study,
            "rows": rows,
            "quality": quality,
            "links": {
                r.annotator.id: invite_link(settings.base_url, settings.secret_key, r.annotator)
                for r in rows
            },
            "caps": {r.annotator.id: annotator_cap(r.annotator, study) for r in rows},
        },
    )


@router.post("/{slug}/annotators/invite", dependencies=[CsrfDep])
def invite_annotators(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: StudyDep,
    count: Annotated[int, Form(ge=1, le=1000)] = 1,
    label: Annotated[str, Form(max_length=200)] = "",
    as_csv: Annotated[bool, Form()] = False,
) -> Response:
    try:
        made = invite(session, study, count, label)
    except AnnotationError as exc:
        flash(request, exc.message, "error")
        return _back(study)
    record(session, "annotators_invited", user=user, study=study, count=len(made))
    if as_csv:
        settings = request.app.state.settings
        return Response(
            links_csv(settings.base_url, settings.secret_key, made),
            media_type="text/csv",
            headers={
                "Content-Disposition": f'attachment; filename="{study.slug}-invites.csv"',
                "Cache-Control": "no-store",
            },
        )
    flash(request, f"{len(made)} invite link{'s' if len(made) != 1 else ''} created (below).")
    return _back(study)


@router.get("/{slug}/annotators/links.csv")
def all_links(request: Request, session: SessionDep, user: UserDep, study: StudyDep) -> Response:
    settings = request.app.state.settings
    record(session, "export", user=user, study=study, what="invite links")
    return Response(
        links_csv(settings.base_url, settings.secret_key, local_annotators(session, study)),
        media_type="text/csv",
        headers={
            "Content-Disposition": f'attachment; filename="{study.slug}-invites.csv"',
            "Cache-Control": "no-store",
        },
    )


@router.post("/{slug}/annotators/{annotator_id}/block", dependencies=[CsrfDep])
def block_annotator(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: StudyDep,
    annotator_id: int,
    reason: Annotated[str, Form(max_length=2000)] = "",
    exclude_past: Annotated[bool, Form()] = False,
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    block(session, a, reason=reason, exclude_past=exclude_past)
    record(
        session,
        "annotator_blocked",
        user=user,
        study=study,
        annotator=a.label or a.id,
        exclude_past=exclude_past,
        reason=reason.strip()[:200],
    )
    past = " and their past judgments are excluded" if exclude_past else ""
    flash(request, f"{a.label or a.id} is blocked{past}.")
    return _back(study)


@router.post("/{slug}/annotators/{annotator_id}/unblock", dependencies=[CsrfDep])
def unblock_annotator(
    request: Request, session: SessionDep, user: UserDep, study: StudyDep, annotator_id: int
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    unblock(session, a)
    record(session, "annotator_unblocked", user=user, study=study, annotator=a.label or a.id)
    flash(request, f"{a.label or a.id} may work again; their judgments count.")
    return _back(study)


@router.post("/{slug}/annotators/{annotator_id}/cap", dependencies=[CsrfDep])
def annotator_cap_form(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: StudyDep,
    annotator_id: int,
    cap: Annotated[str, Form()] = "",
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    cap = cap.strip()
    if cap and not cap.isdigit():
        flash(request, "The cap is a whole number of HITs (empty: the study's cap).", "error")
        return _back(study)
    set_cap(session, a, int(cap) if cap else None)
    record(
        session,
        "annotator_cap_changed",
        user=user,
        study=study,
        annotator=a.label or a.id,
        cap=a.hit_cap,
    )
    flash(request, f"{a.label or a.id}: at most {annotator_cap(a, study)} HITs.")
    return _back(study)


@router.post("/{slug}/cap", dependencies=[CsrfDep])
def study_cap(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: StudyDep,
    cap: Annotated[int, Form()] = 0,
) -> RedirectResponse:
    try:
        set_study_cap(session, study, cap)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return _back(study)
    record(session, "study_cap_changed", user=user, study=study, cap=cap)
    flash(request, f"Every annotator without a cap of their own: at most {cap} HITs.")
    return _back(study)
