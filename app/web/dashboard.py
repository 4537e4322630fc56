"""Researcher pages: login, logout, the study list."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from app.auth.service import authenticate
from app.db import SessionDep
from app.studies.service import list_studies
from app.web.security import SESSION_USER, CsrfDep, UserDep, csrf_token
from app.web.templating import templates

router = APIRouter(include_in_schema=False)


def _safe_next(target: str | None) -> str:
    # Only same-site paths: never an open redirect.
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/dashboard"
    parts = urlsplit(target)
    return parts.path + (f"?{parts.query}" if parts.query else "")


@router.get("/")
def index() -> RedirectResponse:
    return RedirectResponse("/dashboard", status.HTTP_303_SEE_OTHER)


def _login_page(request: Request, next: str | None, error: str | None = None) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "login.html",
        {"csrf": csrf_token(request), "next": _safe_next(next), "error": error},
        status_code=status.HTTP_401_UNAUTHORIZED if error else status.HTTP_200_OK,
    )


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str | None = None) -> HTMLResponse:
    return _login_page(request, next)


@router.post("/login", response_class=HTMLResponse, dependencies=[CsrfDep])
def login(
    request: Request,
    session: SessionDep,
    username: Annotated[str, Form()],
    password: Annotated[str, Form()],
    next: Annotated[str, Form()] = "/dashboard",
):
    user = authenticate(session, username, password)
    if user is None:
        return _login_page(request, next, "Wrong username or password.")
    request.session.clear()  # a fresh session on login: no fixation
    request.session[SESSION_USER] = user.id
    csrf_token(request)
    return RedirectResponse(_safe_next(next), status.HTTP_303_SEE_OTHER)


@router.post("/logout", dependencies=[CsrfDep])
def logout(request: Request) -> RedirectResponse:
    request.session.clear()
    return RedirectResponse("/login", status.HTTP_303_SEE_OTHER)


@router.get("/dashboard", response_class=HTMLResponse)
def dashboard(request: Request, session: SessionDep, user: UserDep) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        "dashboard.html",
        {"user": user, "studies": list_studies(session), "csrf": csrf_token(request)},
    )
