"""Researcher pages: login (throttled), logout, the study list."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from app.audit.service import login_attempt, login_throttled, record
from app.auth.service import authenticate, end_sessions
from app.studies.queries import studies_progress
from app.studies.service import visible_studies
from app.validation import MAX_PASSWORD, MAX_USERNAME, BadInput, check_text
from app.web.deps import SessionDep
from app.web.pages import LOGIN, render
from app.web.security import CsrfDep, UserDep, csrf_token, session_user, start_session
from app.web.templating import templates

router = APIRouter(include_in_schema=False)
pages = APIRouter(include_in_schema=False, dependencies=LOGIN)

THROTTLED = "Too many failed logins. Wait 15 minutes and try again."
MALFORMED = "The username or password is too long or holds characters that are not allowed."


def _safe_next(target: str | None) -> str:
    # Only same-site paths: never an open redirect.
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/dashboard"
    try:
        check_text(target, max_length=2048)
    except BadInput:
        return "/dashboard"
    parts = urlsplit(target)
    return parts.path + (f"?{parts.query}" if parts.query else "")


@router.get("/")
def index() -> RedirectResponse:
    return RedirectResponse("/dashboard", status.HTTP_303_SEE_OTHER)


def _login_page(
    request: Request, next: str | None, error: str | None = None, status_code: int = 200
) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "login.html",
        {"csrf": csrf_token(request), "next": _safe_next(next), "error": error},
        status_code=status_code,
    )


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str | None = None) -> HTMLResponse:
    return _login_page(request, next)


def _client_ip(request: Request) -> str:
    # X-Forwarded-For counts only from EBC_TRUSTED_PROXIES: the app's proxy-headers
    # middleware (app.main) has already put the client's address here.
    return request.client.host if request.client else "unknown"


@router.post("/login", response_class=HTMLResponse, dependencies=[CsrfDep])
def login(
    request: Request,
    session: SessionDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/dashboard",
):
    try:
        check_text(username.strip(), max_length=MAX_USERNAME, field="username")
        check_text(password, max_length=MAX_PASSWORD, multiline=True, field="password")
    except BadInput:
        # Not an attempt at anyone's account: nothing is looked up or recorded.
        return _login_page(request, next, MALFORMED, status.HTTP_400_BAD_REQUEST)
    ip = _client_ip(request)
    if login_throttled(session, username.strip(), ip):
        return _login_page(request, next, THROTTLED, status.HTTP_429_TOO_MANY_REQUESTS)
    user = authenticate(session, username, password)
    login_attempt(session, username.strip(), ip, user)
    if user is None:
        return _login_page(
            request, next, "Wrong username or password.", status.HTTP_401_UNAUTHORIZED
        )
    start_session(request, user)
    return RedirectResponse(_safe_next(next), status.HTTP_303_SEE_OTHER)


@router.post("/logout", dependencies=[CsrfDep])
def logout(request: Request, session: SessionDep) -> RedirectResponse:
    """Ends every session of the user, not only this browser's: a copy of the cookie
    (another device, or a stolen one) stops working too."""
    user = session_user(request, session)
    if user is not None:
        end_sessions(session, user)
        record(session, "logout", user=user)
    request.session.clear()
    return RedirectResponse("/login", status.HTTP_303_SEE_OTHER)


@pages.get("/dashboard", response_class=HTMLResponse)
def dashboard(request: Request, session: SessionDep, user: UserDep) -> HTMLResponse:
    studies = visible_studies(session, user)
    return render(
        request,
        "dashboard.html",
        {"studies": studies, "progress": studies_progress(session, studies)},
    )
