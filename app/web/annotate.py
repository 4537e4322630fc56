"""Annotator pages: invite links, Prolific links and the MTurk ExternalQuestion page.

Who is asking travels in the URL or the form (a signed token, or the
platform's ids), never in a cookie: the pages work inside iframes where
third-party cookies are blocked, and a form cannot be forged across sites
without the token it carries.

Each route parses its request, makes one call to app.annotation.pages in one
transaction, and renders what that call returned once it is committed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import parse_qsl, quote, urlencode

from anyio import to_thread
from fastapi import APIRouter, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.formparsers import MultiPartException, MultiPartParser

from app.annotation.content import HitCache
from app.annotation.errors import AnnotationError
from app.annotation.identities import (
    MTURK_FRAME_ANCESTORS,
    Enrolment,
    check_prolific_key,
    read_invite_token,
    safe_redirect,
)
from app.annotation.pages import (
    enter_prolific,
    open_invite,
    open_mturk,
    return_invite,
    send_invite,
    send_mturk,
)
from app.annotation.participants import ConsentNeeded, comments_on
from app.annotation.schemas import (
    AnnotatorRef,
    MturkDone,
    PageData,
    Sent,
    WorkStatus,
)
from app.crowd.registry import by_channel
from app.db import unit_of_work
from app.models import Study
from app.web.templating import templates

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)

T = TypeVar("T")


RETRY_AFTER = 5  # seconds, with a 503 while the database cannot be reached


class Unavailable(AnnotationError):
    """The database could not be reached: nothing of this request was stored (or, if the
    connection broke during the commit, it may have been, and a resend stores nothing twice).

    `resend` holds the posted form, so the page can offer to send the same answers again.
    """

    def __init__(self, message: str, resend: dict[str, str] | None = None) -> None:
        super().__init__(message, 503, retry_after=RETRY_AFTER)
        self.resend = resend


def _database_down(exc: BaseException) -> bool:
    """A connection that failed, broke or timed out (not a bad statement of ours)."""
    if isinstance(exc, OperationalError | InterfaceError | PoolTimeout):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


UNSAVED = (
    "Your answers were not saved \u2014 press Send again. (The service could not reach its "
    "database for a moment; sending again never stores anything twice.)"
)


async def _transaction(
    request: Request,
    action: Callable[..., T],
    args: tuple,
    render: Callable[[T], Response],
    *,
    resend: dict[str, str] | None = None,
    unsaved: str = UNSAVED,
) -> Response:
    """`render(action(session, *args))`, the action in one transaction, on a worker thread.

    When the database cannot be reached (down, cut, pool exhausted, timed out) the
    annotator gets a 503 page that says so, with the posted form (`resend`) ready to send
    again, instead of a bare 500 that leaves them guessing whether their answers were saved.

    The database is used off the event loop: on the loop, a wait for a pooled connection
    (or a row lock) would stall every request of this process, and the connection it waits
    for is returned only by a request whose commit the stalled loop has yet to schedule: the
    process hangs (benchmarks/annotate_load.py, capacity scenario). At most `db_pool_size`
    run at once per process (`app.state.db_limiter`): the others wait on the loop, where
    waiting is cheap, instead of in threads that would contend for the GIL and open and
    close overflow connections past the pool (a new PostgreSQL backend each time).
    """
    limiter = getattr(request.app.state, "db_limiter", None)
    try:
        return await to_thread.run_sync(
            _in_transaction, request, action, args, render, limiter=limiter
        )
    except (DBAPIError, PoolTimeout) as exc:
        if not _database_down(exc):
            raise
        log.warning("annotator request without a database: %s", type(exc).__name__)
        if resend is None:
            raise Unavailable(
                "The service cannot reach its database right now. Please reload this page "
                "in a few seconds."
            ) from None
        raise Unavailable(unsaved, resend) from None


def _in_transaction(
    request: Request, action: Callable[..., T], args: tuple, render: Callable[[T], Response]
) -> Response:
    """Run `action(session, *args)` in one transaction, committed before its result is
    rendered (rendering reads only that result) and before the response is sent.

    The annotator routes manage their session here instead of through `SessionDep`: a sync
    dependency with a teardown costs two more threadpool hops per request (set-up and
    teardown run in their own hops), so a route does its whole request, database and
    template, in one thread hop, in the same unit of work as every other commit.
    """
    with unit_of_work(request.app.state.sessionmaker) as session:
        data = action(session, *args)
    return render(data)


_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "form-action 'self'{form}; frame-ancestors {frames}; base-uri 'none'; object-src 'none'"
)
# Invite and Prolific pages may be embedded anywhere (a lab's survey tool, a
# platform's frame): the token in the URL, not the framing site, grants access.
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
    finish: dict[str, str | None] | None = None  # completion code / redirect
    # Where the end-of-study comment goes; None: the study offers no comment boxes.
    comment_url: str | None = None

    @property
    def comments(self) -> bool:
        return self.comment_url is not None


def _invite_channel(token: str, annotator: AnnotatorRef) -> Channelled:
    return Channelled(
        submit_url=f"/a/{token}/submit",
        return_url=f"/a/{token}/return",
        headers=LINK_HEADERS,
        finish=_finish(annotator),
        comment_url=f"/a/{token}/comment" if comments_on(annotator.study) else None,
    )


def _finish(annotator: AnnotatorRef) -> dict[str, str | None] | None:
    """How a participant of a platform with completion codes (Prolific) ends: the code and
    the study's redirect; None elsewhere."""
    platform = by_channel(annotator.channel)
    if platform is None or not platform.caps.completion_code:
        return None
    settings = platform.settings_of(annotator.study)
    # Checked again where it is emitted: only http(s) (a stored `javascript:` never runs).
    return {
        "code": settings.get("completion_code"),
        "redirect": safe_redirect(settings.get("redirect_url")),
    }


def _mturk_channel(
    slug: str, origin: str | None, assignment_id: str, worker_id: str, annotator: AnnotatorRef
) -> Channelled:
    return Channelled(
        submit_url=f"/mturk/{quote(slug)}/submit",
        return_url=None,  # on MTurk, returning is done on MTurk's own page
        headers=mturk_headers(origin),
        hidden={"assignmentId": assignment_id, "workerId": worker_id},
        comment_url=f"/mturk/{quote(slug)}/comment" if comments_on(annotator.study) else None,
    )


def _render(
    request: Request,
    data: PageData,
    ch: Channelled,
    *,
    notice: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    work = data.work
    page = data.page
    if page is None:
        # Not assigned, or assigned yet nothing to show (a refused rating of a HIT whose
        # pairs are all rated).
        kind = "error" if data.error and work.status is WorkStatus.assigned else work.status.value
        return templates.TemplateResponse(
            request,
            "annotate/message.html",
            {"kind": kind, "work": work, "ch": ch, "notice": notice, "message": data.error},
            status_code=status_code,
            headers=ch.headers,
        )
    context = {"page": page, "work": work, "ch": ch, "notice": notice, "error": data.error}
    if page.fragment is not None:
        context["fragment"] = _fragment_html(request, data)
    return templates.TemplateResponse(
        request, page.template, context, status_code=status_code, headers=ch.headers
    )


def _fragment_html(request: Request, data: PageData) -> Markup:
    """The part of a HIT's page that depends on the HIT alone (a next-word HIT's texts and
    options): rendered once per HIT and process, unless refilled.

    Its positions are immutable, and it was most of the page's rendering time, so it is
    kept by HIT id (`app.state.hit_html`, bounded like the domain's cache of HIT content).
    Templates edited in development are picked up (no reuse then).
    """
    page = data.page
    hit_id = data.work.assignment.hit_id
    cache: HitCache[Markup] = request.app.state.hit_html
    html = cache.get(hit_id) if page.cacheable else None
    if html is None:
        html = Markup(templates.get_template(page.fragment).render(**page.fragment_context()))
        if page.cacheable and not templates.env.auto_reload:
            cache.put(hit_id, html)
    return html


_NOTICES = {
    "ok": "Thank you: your answers were saved.",
    "comment": "Thank you: your comment was saved.",  # see app.web.annotate_participants
    "consent": "Thank you: you agreed to take part.",
    "late": "Your time for that HIT had run out, but your answers were saved.",
    "returned": "The HIT was returned.",
}
KEPT = (
    "These answers had already been sent (from another tab, or by an earlier click). "
    "The answers sent first were kept; the later, different ones were not saved."
)


# -- invite (and Prolific) links -------------------------------------------------------------


@router.get("/a/{token}", response_class=HTMLResponse)
async def invite_page(request: Request):
    # Parameters read from the request directly: FastAPI's validation of declared
    # parameters was a tenth of this page's CPU, for two plain strings.
    token, n = request.path_params["token"], request.query_params.get("n")
    ref = read_invite_token(request.app.state.settings.secret_key, token)

    def render(data: PageData) -> Response:
        notice = _NOTICES.get(n or "")
        if data.work.expired_previous:
            notice = "Your time for the previous HIT ran out; here is another one."
        return _render(request, data, _invite_channel(token, data.annotator), notice=notice)

    try:
        return await _transaction(request, open_invite, (ref,), render)
    except ConsentNeeded:  # no consent, no HIT: the consent page first
        return RedirectResponse(f"/a/{token}/consent", status.HTTP_303_SEE_OTHER, LINK_HEADERS)


MAX_FORM_FIELDS = 1000  # as Starlette's form parser: a page posts about 25
# The page posts under 2 kB; a form is read into memory, so anything much larger is refused
# before it is read (by its Content-Length) or while it streams in (chunked).
MAX_BODY = 64 * 1024
_TOO_LARGE = "The form is too large."


async def _read_body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()):
            raise AnnotationError("The request is malformed.", 400)
        if int(length) > MAX_BODY:
            raise AnnotationError(_TOO_LARGE, 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise AnnotationError(_TOO_LARGE, 413)
        chunks.append(chunk)
    return b"".join(chunks)


async def _read_form(request: Request) -> dict[str, str]:
    """The posted fields (the last value of a repeated name), files refused; at most
    MAX_BODY bytes.

    A plain urlencoded form, what the page posts, is decoded with `parse_qsl`: several
    times cheaper than the streaming multipart parser behind `request.form()`.
    """
    body = await _read_body(request)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):

        async def stream() -> AsyncIterator[bytes]:
            yield body

        parser = MultiPartParser(request.headers, stream(), max_files=0, max_fields=MAX_FORM_FIELDS)
        try:
            form = await parser.parse()
        except MultiPartException:
            raise AnnotationError("The form is malformed.", 400) from None
        return {k: v for k, v in form.items() if isinstance(v, str)}
    try:
        return dict(
            parse_qsl(
                body.decode("utf-8", "replace"),
                keep_blank_values=True,
                max_num_fields=MAX_FORM_FIELDS,
            )
        )
    except ValueError:
        raise AnnotationError("The form has too many fields.", 400) from None


@router.post("/a/{token}/submit", response_class=HTMLResponse)
async def invite_submit(request: Request):
    token = request.path_params["token"]  # see invite_page
    # The signature first: a post to a made-up link is refused before its body is read.
    ref = read_invite_token(request.app.state.settings.secret_key, token)
    form = await _read_form(request)  # on the loop; then one hop: session, submit, commit

    def render(outcome: Sent | PageData) -> Response:
        if isinstance(outcome, PageData):  # refused: the HIT again, with the error
            ch = _invite_channel(token, outcome.annotator)
            return _render(request, outcome, ch, status_code=outcome.status_code)
        if not outcome.completed:  # a step of a HIT (ratings): its page shows the next one
            return RedirectResponse(f"/a/{token}", status.HTTP_303_SEE_OTHER, LINK_HEADERS)
        if outcome.kept is not None:
            return templates.TemplateResponse(
                request,
                "annotate/kept.html",
                {"page": outcome.kept, "notice": KEPT, "next_url": f"/a/{token}"},
                headers=LINK_HEADERS,
            )
        flag = "late" if outcome.late else "ok"
        return RedirectResponse(f"/a/{token}?n={flag}", status.HTTP_303_SEE_OTHER, LINK_HEADERS)

    return await _transaction(request, send_invite, (ref, form), render, resend=form)


@router.post("/a/{token}/return")
async def invite_return(request: Request, token: str) -> RedirectResponse:
    ref = read_invite_token(request.app.state.settings.secret_key, token)
    form = await _read_form(request)
    assignment = form.get("assignment", "")
    return await _transaction(
        request,
        return_invite,
        (ref, assignment),
        lambda _: RedirectResponse(
            f"/a/{token}?n=returned", status.HTTP_303_SEE_OTHER, LINK_HEADERS
        ),
        resend={"assignment": assignment},
        unsaved="The HIT was not given back \u2014 press Send again in a few seconds.",
    )


def _enrolment(request: Request) -> Enrolment:
    settings = request.app.state.settings
    return Enrolment(
        secret_key=settings.secret_key,
        address=request.client.host if request.client else None,
        per_address_per_hour=settings.enrol_per_address_per_hour,
        per_study_per_minute=settings.enrol_per_study_per_minute,
    )


@router.get("/p/{slug}")
async def prolific_entry(request: Request, slug: str) -> RedirectResponse:
    """A Prolific participant arrives with their ids; from here on they use a signed link.

    The entry must carry the study's entry key (shown on the dashboard as the URL to give
    Prolific), checked before anything is looked up.
    """
    secret_key = request.app.state.settings.secret_key
    check_prolific_key(secret_key, slug, request.query_params)
    args = (secret_key, slug, request.query_params, _enrolment(request))
    return await _transaction(
        request,
        enter_prolific,
        args,
        lambda token: RedirectResponse(f"/a/{token}", status.HTTP_303_SEE_OTHER, LINK_HEADERS),
    )


# -- MTurk ----------------------------------------------------------------------------------


@router.get("/mturk/{slug}", response_class=HTMLResponse)
async def mturk_page(
    request: Request,
    slug: str,
    assignmentId: str = "",
    hitId: str = "",
    workerId: str = "",
    turkSubmitTo: str = "",
):
    def render(view: Study | MturkDone | PageData) -> Response:
        if isinstance(view, MturkDone):
            return _mturk_done(request, view)
        if isinstance(view, PageData):
            ch = _mturk_channel(slug, view.origin, assignmentId, workerId, view.annotator)
            return _render(request, view, ch, notice=_NOTICES.get(n))
        return templates.TemplateResponse(  # a preview: no assignment yet
            request, "annotate/mturk_preview.html", {"study": view}, headers=mturk_headers()
        )

    n = request.query_params.get("n") or ""
    args = (slug, assignmentId, hitId, workerId, turkSubmitTo, _enrolment(request))
    try:
        return await _transaction(request, open_mturk, args, render)
    except ConsentNeeded:  # no consent, no HIT: the consent page first, the same ids
        query = urlencode(mturk_ids(request.query_params))
        url = f"/mturk/{quote(slug)}/consent?{query}"
        return RedirectResponse(url, status.HTTP_303_SEE_OTHER, mturk_headers())


MTURK_IDS = ("assignmentId", "hitId", "workerId", "turkSubmitTo")


def mturk_ids(params) -> dict[str, str]:
    """The ids MTurk gave the page, passed on through the consent page."""
    return {name: params.get(name, "") for name in MTURK_IDS}


@router.post("/mturk/{slug}/submit", response_class=HTMLResponse)
async def mturk_submit(request: Request, slug: str):
    form = await _read_form(request)

    def render(outcome: MturkDone | Sent | PageData) -> Response:
        if isinstance(outcome, MturkDone):
            return _mturk_done(request, outcome)
        if isinstance(outcome, Sent):  # a step of a HIT (ratings): its page, next step
            lease = outcome.assignment
            query = urlencode(
                {
                    "assignmentId": lease.external_assignment_id or "",
                    "workerId": form.get("workerId", ""),
                    "turkSubmitTo": lease.submit_to or "",
                }
            )
            url = f"/mturk/{quote(slug)}?{query}"
            return RedirectResponse(url, status.HTTP_303_SEE_OTHER, mturk_headers())
        worker_id = outcome.annotator.external_id or ""
        assignment_id = form.get("assignmentId", "")
        ch = _mturk_channel(slug, outcome.origin, assignment_id, worker_id, outcome.annotator)
        return _render(request, outcome, ch, status_code=outcome.status_code)

    return await _transaction(request, send_mturk, (slug, form), render, resend=form)


def _mturk_done(request: Request, done: MturkDone) -> HTMLResponse:
    """Stored; now the browser posts to MTurk (automatically with JS, a button without).

    After a repeat with different answers the page says which were kept and waits for the
    button, so the worker reads it.
    """
    assignment = done.assignment
    return templates.TemplateResponse(
        request,
        "annotate/mturk_done.html",
        {
            "action": f"{assignment.submit_to.rstrip('/')}/mturk/externalSubmit",
            "assignment_id": assignment.external_assignment_id,
            "late": assignment.late,
            "page": done.kept,
            "notice": KEPT if done.kept else None,
            "stored": {"assignment": assignment.public_id, "fields": done.fields},
        },
        headers=mturk_headers(done.origin),
    )


def annotation_error(request: Request, exc: AnnotationError) -> HTMLResponse:
    """A refused annotator request: a clear message, framed like the page it came from.

    429 and 503 say when to try again (Retry-After); a 503 of a post offers its form,
    unchanged, to send again.
    """
    headers = dict(mturk_headers() if request.url.path.startswith("/mturk") else LINK_HEADERS)
    if exc.retry_after:
        headers["Retry-After"] = str(exc.retry_after)
    resend = getattr(exc, "resend", None)
    kind = "unavailable" if exc.status_code == 503 else "error"
    return templates.TemplateResponse(
        request,
        "annotate/message.html",
        {
            "kind": kind,
            "message": exc.message,
            "work": None,
            "ch": None,
            "resend": {"action": request.url.path, "fields": resend} if resend else None,
        },
        status_code=exc.status_code,
        headers=headers,
    )


# Shared with `app.web.annotate_participants` (the consent and comment routes): one
# transaction per request, the form read as every annotator post is, the enrolment limits.
transaction = _transaction
read_form = _read_form
enrolment = _enrolment
