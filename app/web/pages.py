"""Shared pieces of the dashboard's routers: rendering with the user and CSRF token,
one-shot notices, and the study a URL names."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from app.models import Study
from app.web.security import ViewStudyDep, csrf_token, current_user
from app.web.templating import templates

SESSION_FLASH = "flash"
# Every dashboard router requires a logged-in researcher before anything else runs
# (so a request without a session is sent to the login page, not refused for CSRF).
LOGIN = [Depends(current_user)]


def flash(request: Request, message: str, kind: str = "ok") -> None:
    """A notice shown once on the next page. Never put a secret here: the session
    cookie is signed, not encrypted."""
    waiting = request.session.get(SESSION_FLASH, [])
    # Assigned, not appended: the session is saved only when it sees an assignment.
    request.session[SESSION_FLASH] = [*waiting, [kind, message]]


def render(
    request: Request,
    template: str,
    context: dict[str, Any] | None = None,
    *,
    status_code: int = 200,
) -> HTMLResponse:
    notices = request.session.pop(SESSION_FLASH, [])
    ctx = {
        "user": current_user_of(request),
        "csrf": csrf_token(request),
        "notices": notices,
        **(context or {}),
    }
    return templates.TemplateResponse(request, template, ctx, status_code=status_code)


def current_user_of(request: Request):
    return getattr(request.state, "user", None)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status.HTTP_303_SEE_OTHER)


# The study a URL names, if the researcher may see it (404 otherwise, as if it did not
# exist). Routes that change a study take ManageStudyDep from app.web.security instead.
StudyDep = ViewStudyDep


def study_url(study: Study, suffix: str = "") -> str:
    return f"/dashboard/studies/{study.slug}{suffix}"
