"""Researcher pages: login (throttled), logout, the study list."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from app.audit.service import login_attempt, login_throttled
from app.auth.service import authenticate
from app.db import SessionDep
from app.studies.queries import studies_progress
from app.studies.service import list_studies
from app.web.pages import LOGIN, render
from app.web.security import SESSION_USER, CsrfDep, csrf_token
from app.web.templating import templates

router = APIRouter(include_in_schema=False)
pages = APIRouter(include_in_schema=False, dependencies=LOGIN)

THROTTLED = "Too many failed logins. Wait 15 minutes and try again."


def _safe_next(target: str | None) -> str:
    # Only same-site paths: never an open redirect.
    if not target or not target.startswith("/") or target.startswith("//"):
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
    return request.client.host if request.client else "unknown"


@router.post("/login", response_class=HTMLResponse, dependencies=[CsrfDep])
def login(
    request: Request,
    session: SessionDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/dashboard",
):
    ip = _client_ip(request)
    if login_throttled(session, username.strip(), ip):
        return _login_page(request, next, THROTTLED, status.HTTP_429_TOO_MANY_REQUESTS)
    user = authenticate(session, username, password)
    login_attempt(session, username.strip(), ip, user)
    if user is None:
        return _login_page(
            request, next, "Wrong username or password.", status.HTTP_401_UNAUTHORIZED
        )
    request.session.clear()  # a fresh session on login: no fixation
    request.session[SESSION_USER] = user.id
    csrf_token(request)
    return RedirectResponse(_safe_next(next), status.HTTP_303_SEE_OTHER)


@router.post("/logout", dependencies=[CsrfDep])
def logout(request: Request) -> RedirectResponse:
    request.session.clear()
    return RedirectResponse("/login", status.HTTP_303_SEE_OTHER)


@pages.get("/dashboard", response_class=HTMLResponse)
def dashboard(request: Request, session: SessionDep) -> HTMLResponse:
    studies = list_studies(session)
    return render(
        request,
        "dashboard.html",
        {"studies": studies, "progress": studies_progress(session, studies)},
    )
