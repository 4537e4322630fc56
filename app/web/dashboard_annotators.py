"""Dashboard: a study's annotators: invite links (revoke, re-issue), quality figures,
blocks and caps. Viewers see the figures; links and every change need manage access."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.annotation.admin import (
    block,
    export_links,
    get_annotator,
    invite,
    invite_link,
    links_csv,
    reissue_invite,
    revoke_invite,
    set_cap,
    unblock,
)
from app.annotation.errors import AnnotationError
from app.annotation.leases import annotator_cap
from app.annotation.participants import participant_sides
from app.crowd.registry import entry_urls
from app.models import Annotator, Study
from app.studies.queries import annotator_rows
from app.studies.service import Access, StudyError, set_study_cap
from app.studytypes.registry import study_type_of
from app.validation import INT32_MAX, MAX_CAP, check_text, parse_int
from app.web.deps import SessionDep
from app.web.pages import LOGIN, StudyDep, flash, redirect, render, study_url
from app.web.security import CsrfDep, ManageStudyDep, UserDep, access_of

router = APIRouter(prefix="/dashboard/studies", include_in_schema=False, dependencies=LOGIN)


def _annotator(session, study: Study, annotator_id: int) -> Annotator:
    # An id past the column names nobody (and would overflow the driver).
    found = get_annotator(session, study, annotator_id) if 0 < annotator_id <= INT32_MAX else None
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "There is no such annotator.")
    return found


def _back(study: Study) -> RedirectResponse:
    return redirect(study_url(study, "/annotators"))


@router.get("/{slug}/annotators", response_class=HTMLResponse)
def annotators(request: Request, session: SessionDep, study: StudyDep) -> HTMLResponse:
    settings = request.app.state.settings
    rows = annotator_rows(session, study)
    can_manage = access_of(request) >= Access.manage
    plugin = study_type_of(study)
    return render(
        request,
        "annotators.html",
        {
            "study": study,
            "rows": rows,
            # Per judgment or per rater, as the type's partials show them.
            "quality": plugin.results.quality(session, study),
            **plugin.dashboard.annotators_context(study),
            "can_manage": can_manage,
            # Invite links are credentials: only those who may manage the study see them.
            "links": {
                r.annotator.id: invite_link(settings.base_url, settings.secret_key, r.annotator)
                for r in rows
                if can_manage
            },
            "caps": {r.annotator.id: annotator_cap(r.annotator, study) for r in rows},
            # Consent, comments and page signals (issue 33): flags to read, never rules.
            "sides": participant_sides(session, study.id),
            # A self-enrolment URL may carry the study's entry key: a credential too.
            "crowd": entry_urls(settings, study) if can_manage else None,
        },
    )


@router.post("/{slug}/annotators/invite", dependencies=[CsrfDep])
def invite_annotators(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    count: Annotated[int, Form(ge=1, le=1000)] = 1,
    label: Annotated[str, Form(max_length=200)] = "",
    as_csv: Annotated[bool, Form()] = False,
) -> Response:
    check_text(label, max_length=200, field="label")
    try:
        made = invite(session, study, count, label, by=user)
    except AnnotationError as exc:
        flash(request, exc.message, "error")
        return _back(study)
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
def all_links(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep
) -> Response:
    settings = request.app.state.settings
    return Response(
        export_links(session, study, settings.base_url, settings.secret_key, by=user),
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
    study: ManageStudyDep,
    annotator_id: int,
    reason: Annotated[str, Form(max_length=2000)] = "",
    exclude_past: Annotated[bool, Form()] = False,
) -> RedirectResponse:
    check_text(reason, max_length=2000, multiline=True, field="reason")
    a = _annotator(session, study, annotator_id)
    block(session, a, reason=reason, exclude_past=exclude_past, by=user)
    past = " and their past judgments are excluded" if exclude_past else ""
    flash(request, f"{a.label or a.id} is blocked{past}.")
    return _back(study)


@router.post("/{slug}/annotators/{annotator_id}/unblock", dependencies=[CsrfDep])
def unblock_annotator(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep, annotator_id: int
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    unblock(session, a, by=user)
    flash(request, f"{a.label or a.id} may work again; their judgments count.")
    return _back(study)


@router.post("/{slug}/annotators/{annotator_id}/cap", dependencies=[CsrfDep])
def annotator_cap_form(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    annotator_id: int,
    cap: Annotated[str, Form()] = "",
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    cap = cap.strip()  # empty: the study's cap
    set_cap(session, a, parse_int(cap, ge=0, le=MAX_CAP, field="cap") if cap else None, by=user)
    flash(request, f"{a.label or a.id}: at most {annotator_cap(a, study)} HITs.")
    return _back(study)


@router.post("/{slug}/cap", dependencies=[CsrfDep])
def study_cap(
    request: Request,
    session: SessionDep,
    user: UserDep,
    study: ManageStudyDep,
    cap: Annotated[int, Form(le=MAX_CAP)] = 0,
) -> RedirectResponse:
    try:
        set_study_cap(session, study, cap, by=user)
    except StudyError as exc:
        flash(request, str(exc), "error")
        return _back(study)
    flash(request, f"Every annotator without a cap of their own: at most {cap} HITs.")
    return _back(study)


@router.post("/{slug}/annotators/{annotator_id}/revoke", dependencies=[CsrfDep])
def revoke_link(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep, annotator_id: int
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    try:
        revoke_invite(session, a, by=user)
    except AnnotationError as exc:
        flash(request, exc.message, "error")
        return _back(study)
    flash(request, f"The invite link of {a.label or a.id} no longer works.")
    return _back(study)


@router.post("/{slug}/annotators/{annotator_id}/reissue", dependencies=[CsrfDep])
def reissue_link(
    request: Request, session: SessionDep, user: UserDep, study: ManageStudyDep, annotator_id: int
) -> RedirectResponse:
    a = _annotator(session, study, annotator_id)
    try:
        reissue_invite(session, a, by=user)
    except AnnotationError as exc:
        flash(request, exc.message, "error")
        return _back(study)
    # The link is not put in the notice (the session cookie is signed, not encrypted).
    flash(request, f"{a.label or a.id} has a new invite link (below); the old one no longer works.")
    return _back(study)
