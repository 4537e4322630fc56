"""Annotator pages: invite links, panel links and the MTurk ExternalQuestion page.

Who is asking travels in the URL or the form (a signed token, or the
platform's ids), never in a cookie: the pages work inside iframes where
third-party cookies are blocked, and a form cannot be forged across sites
without the token it carries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import parse_qsl, quote

from anyio import to_thread
from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.annotation.schemas import AnnotatorRef, HitPage, StudyRef, Work, WorkStatus
from app.annotation.service import (
    MTURK_FRAME_ANCESTORS,
    PREVIEW_ASSIGNMENT,
    AnnotationError,
    InvalidAnswers,
    annotator_for_invite,
    answers_from_form,
    check_submit_to,
    crowd_annotator,
    hit_page,
    invite_token,
    next_assignment,
    read_invite_token,
    return_assignment,
    study_by_slug,
    submit,
)
from app.models import Channel, Study
from app.web.templating import templates

router = APIRouter(include_in_schema=False)

T = TypeVar("T")


async def _transaction(request: Request, work: Callable[..., T], *args) -> T:
    """Run `work(session, *args)` in one transaction on a worker thread (see _in_transaction).

    The database is used off the event loop: on the loop, a wait for a pooled connection
    (or a row lock) would stall every request of this process, and the connection it waits
    for is returned only by a request whose commit the stalled loop has yet to schedule: the
    process hangs (benchmarks/annotate_load.py, capacity scenario). At most `db_pool_size`
    run at once per process (`app.state.db_limiter`): the others wait on the loop, where
    waiting is cheap, instead of in threads that would contend for the GIL and open and
    close overflow connections past the pool (a new PostgreSQL backend each time).
    """
    limiter = getattr(request.app.state, "db_limiter", None)
    return await to_thread.run_sync(_in_transaction, request, work, *args, limiter=limiter)


def _in_transaction(request: Request, work: Callable[..., T], *args) -> T:
    """Run `work(session, *args)` in one transaction, committed before the response is sent.

    The annotator routes manage their session here instead of through `SessionDep`: a sync
    dependency with a teardown costs two more threadpool hops per request (set-up and
    teardown run in their own hops), so a route does its whole request, database and
    template, in one thread hop. Same rules as `app.db.get_session`: commit on success,
    roll back on any exception, always close.
    """
    session: Session = request.app.state.sessionmaker()
    try:
        result = work(session, *args)
        session.commit()
        return result
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "form-action 'self'{form}; frame-ancestors {frames}; base-uri 'none'; object-src 'none'"
)
# Invite and panel pages may be embedded anywhere (a lab's survey tool, a
# panel's frame): the token in the URL, not the framing site, grants access.
LINK_HEADERS = {
    "Content-Security-Policy": _CSP.format(form="", frames="*"),
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def mturk_headers(submit_origin: str | None = None) -> dict[str, str]:
    form = f" {submit_origin}" if submit_origin else ""
    return {
        "Content-Security-Policy": _CSP.format(form=form, frames=" ".join(MTURK_FRAME_ANCESTORS)),
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


@dataclass
class Channelled:
    """Where the page's forms go and what they carry, per channel."""

    submit_url: str
    return_url: str | None
    headers: dict[str, str]
    hidden: dict[str, str] = field(default_factory=dict)
    finish: dict[str, str | None] | None = None  # panel completion code / redirect


def _panel_finish(study: StudyRef, annotator: AnnotatorRef) -> dict[str, str | None] | None:
    if annotator.channel is not Channel.panel:
        return None
    panel = study.channels.get("panel") or {}
    return {"code": panel.get("completion_code"), "redirect": panel.get("redirect_url")}


def _render(
    request: Request,
    session,
    study: StudyRef,
    work: Work,
    ch: Channelled,
    *,
    notice: str | None = None,
    error: str | None = None,
    answers: dict[int, int] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    if work.status is not WorkStatus.assigned or work.assignment is None:
        return templates.TemplateResponse(
            request,
            "annotate/message.html",
            {"kind": work.status.value, "work": work, "ch": ch, "notice": notice},
            status_code=status_code,
            headers=ch.headers,
        )
    page = hit_page(session, work.assignment, study=study)
    page.answers = answers or {}
    return templates.TemplateResponse(
        request,
        "annotate/hit.html",
        {
            "page": page,
            "items": _items_html(page),
            "work": work,
            "ch": ch,
            "notice": notice,
            "error": error,
        },
        status_code=status_code,
        headers=ch.headers,
    )


def _items_html(page: HitPage) -> Markup:
    """The HIT's texts and options: rendered once per HIT and process, unless refilled.

    They depend on the HIT alone (its positions are immutable), and were most of the
    page's rendering time. Templates edited in development are picked up (no reuse then).
    """
    html = None if page.answers else page.fragments.get("items")
    if html is None:
        html = templates.get_template("annotate/_items.html").render(
            positions=page.positions, answers=page.answers
        )
        if not page.answers and not templates.env.auto_reload:
            page.fragments["items"] = html
    return Markup(html)


_NOTICES = {
    "ok": "Thank you: your answers were saved.",
    "late": "Your time for that HIT had run out, but your answers were saved.",
    "returned": "The HIT was returned.",
}


def _invite(request: Request, session, token: str):
    ref = read_invite_token(request.app.state.settings.secret_key, token)
    annotator = annotator_for_invite(session, ref)
    ch = Channelled(
        submit_url=f"/a/{token}/submit",
        return_url=f"/a/{token}/return",
        headers=LINK_HEADERS,
        finish=_panel_finish(annotator.study, annotator),
    )
    return ref, annotator, ch


@router.get("/a/{token}", response_class=HTMLResponse)
async def invite_page(request: Request):
    # Parameters read from the request directly: FastAPI's validation of declared
    # parameters was a tenth of this page's CPU, for two plain strings.
    token, n = request.path_params["token"], request.query_params.get("n")
    return await _transaction(request, _invite_page, request, token, n)


def _invite_page(session: Session, request: Request, token: str, n: str | None) -> Response:
    ref, annotator, ch = _invite(request, session, token)
    work = next_assignment(session, annotator, external_session_id=ref.session_id, serve=True)
    notice = _NOTICES.get(n or "")
    if work.expired_previous:
        notice = "Your time for the previous HIT ran out; here is another one."
    return _render(request, session, annotator.study, work, ch, notice=notice)


MAX_FORM_FIELDS = 1000  # as Starlette's form parser: a page posts about 25


async def _read_form(request: Request) -> dict[str, str]:
    """The posted fields (the last value of a repeated name), files ignored.

    A plain urlencoded form, what the page posts, is decoded with `parse_qsl`: several
    times cheaper than the streaming multipart parser behind `request.form()`.
    """
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        body = (await request.body()).decode("utf-8", "replace")
        try:
            return dict(parse_qsl(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS))
        except ValueError:
            raise AnnotationError("The form has too many fields.", 400) from None
    return {k: v for k, v in (await request.form()).items() if isinstance(v, str)}


@router.post("/a/{token}/submit", response_class=HTMLResponse)
async def invite_submit(request: Request):
    token = request.path_params["token"]  # see invite_page
    form = await _read_form(request)  # on the loop; then one hop: session, submit, commit
    return await _transaction(request, _invite_submit, request, token, form)


def _invite_submit(session: Session, request: Request, token: str, form: dict[str, str]):
    ref, annotator, ch = _invite(request, session, token)
    answers, times = answers_from_form(form)
    try:
        result = submit(session, annotator, form.get("assignment", ""), answers, times)
    except InvalidAnswers as exc:
        work = next_assignment(session, annotator, external_session_id=ref.session_id, serve=True)
        return _render(
            request,
            session,
            annotator.study,
            work,
            ch,
            error=exc.message,
            answers=exc.answers,
            status_code=400,
        )
    flag = "late" if result.late else "ok"
    return RedirectResponse(f"/a/{token}?n={flag}", status.HTTP_303_SEE_OTHER, LINK_HEADERS)


@router.post("/a/{token}/return")
async def invite_return(request: Request, token: str) -> RedirectResponse:
    assignment = (await _read_form(request)).get("assignment", "")
    return await _transaction(request, _invite_return, request, token, assignment)


def _invite_return(session: Session, request: Request, token: str, assignment: str):
    _, annotator, _ = _invite(request, session, token)
    return_assignment(session, annotator, assignment)
    return RedirectResponse(f"/a/{token}?n=returned", status.HTTP_303_SEE_OTHER, LINK_HEADERS)


@router.get("/p/{slug}")
async def panel_entry(request: Request, slug: str) -> RedirectResponse:
    """A panel participant arrives with their ids; from here on they use a signed link."""
    return await _transaction(request, _panel_entry, request, slug)


def _panel_entry(session: Session, request: Request, slug: str) -> RedirectResponse:
    study = study_by_slug(session, slug)
    names = study.channels.get("panel") or {}
    params = request.query_params
    participant = params.get(names.get("participant_param", "PROLIFIC_PID"), "")
    session_id = params.get(names.get("session_param", "SESSION_ID")) or None
    annotator = crowd_annotator(session, study, Channel.panel, participant)
    token = invite_token(request.app.state.settings.secret_key, annotator, session_id)
    return RedirectResponse(f"/a/{token}", status.HTTP_303_SEE_OTHER, LINK_HEADERS)


@router.get("/mturk/{slug}", response_class=HTMLResponse)
async def mturk_page(
    request: Request,
    slug: str,
    assignmentId: str = "",
    hitId: str = "",
    workerId: str = "",
    turkSubmitTo: str = "",
):
    return await _transaction(
        request, _mturk_page, request, slug, assignmentId, hitId, workerId, turkSubmitTo
    )


def _mturk_page(
    session: Session,
    request: Request,
    slug: str,
    assignmentId: str,
    hitId: str,
    workerId: str,
    turkSubmitTo: str,
) -> Response:
    study = study_by_slug(session, slug)
    if not assignmentId or assignmentId == PREVIEW_ASSIGNMENT:
        return templates.TemplateResponse(
            request, "annotate/mturk_preview.html", {"study": study}, headers=mturk_headers()
        )
    origin = check_submit_to(study, turkSubmitTo)
    annotator = crowd_annotator(session, study, Channel.mturk, workerId)
    work = next_assignment(
        session,
        annotator,
        external_assignment_id=assignmentId,
        external_hit_id=hitId,
        submit_to=turkSubmitTo,
        serve=True,
    )
    if work.assignment is not None and work.assignment.submitted_at is not None:
        return _mturk_done(request, work.assignment, study)
    ch = _mturk_channel(slug, origin, assignmentId, workerId)
    return _render(request, session, annotator.study, work, ch)


def _mturk_channel(slug: str, origin: str, assignment_id: str, worker_id: str) -> Channelled:
    return Channelled(
        submit_url=f"/mturk/{quote(slug)}/submit",
        return_url=None,  # on MTurk, returning is done on MTurk's own page
        headers=mturk_headers(origin),
        hidden={"assignmentId": assignment_id, "workerId": worker_id},
    )


@router.post("/mturk/{slug}/submit", response_class=HTMLResponse)
async def mturk_submit(request: Request, slug: str):
    form = await _read_form(request)
    return await _transaction(request, _mturk_submit, request, slug, form)


def _mturk_submit(session: Session, request: Request, slug: str, form: dict[str, str]) -> Response:
    study = study_by_slug(session, slug)
    annotator = crowd_annotator(session, study, Channel.mturk, form.get("workerId", ""))
    answers, times = answers_from_form(form)
    external = form.get("assignmentId", "")
    try:
        result = submit(session, annotator, form.get("assignment", ""), answers, times)
    except InvalidAnswers as exc:
        work = next_assignment(session, annotator, external_assignment_id=external, serve=True)
        origin = check_submit_to(study, work.assignment.submit_to or "")
        ch = _mturk_channel(slug, origin, external, annotator.external_id or "")
        return _render(
            request,
            session,
            annotator.study,
            work,
            ch,
            error=exc.message,
            answers=exc.answers,
            status_code=400,
        )
    if result.assignment.external_assignment_id != external:
        raise AnnotationError("The MTurk assignment does not match this HIT.", 400)
    return _mturk_done(request, result.assignment, study)


def _mturk_done(request: Request, assignment, study: Study) -> HTMLResponse:
    """Stored; now the browser posts to MTurk (automatically with JS, a button without)."""
    origin = check_submit_to(study, assignment.submit_to or "")
    return templates.TemplateResponse(
        request,
        "annotate/mturk_done.html",
        {
            "action": f"{assignment.submit_to.rstrip('/')}/mturk/externalSubmit",
            "assignment_id": assignment.external_assignment_id,
            "late": assignment.late,
        },
        headers=mturk_headers(origin),
    )


def annotation_error(request: Request, exc: AnnotationError) -> HTMLResponse:
    """A refused annotator request: a clear message, framed like the page it came from."""
    headers = mturk_headers() if request.url.path.startswith("/mturk") else LINK_HEADERS
    return templates.TemplateResponse(
        request,
        "annotate/message.html",
        {"kind": "error", "message": exc.message, "work": None, "ch": None},
        status_code=exc.status_code,
        headers=headers,
    )
