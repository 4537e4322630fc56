"""Who is asking: researcher sessions, CSRF tokens, API bearer tokens."""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from fastapi import Depends, Form, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.annotation.service import AnnotationError, read_invite_token
from app.auth.service import user_for_token
from app.db import SessionDep
from app.models import User

SESSION_USER = "uid"
SESSION_CSRF = "csrf"


class LoginRequired(Exception):
    """Raised by page dependencies; answered with a redirect to the login page."""


def csrf_token(request: Request) -> str:
    token = request.session.get(SESSION_CSRF)
    if token is None:
        token = request.session[SESSION_CSRF] = secrets.token_urlsafe(32)
    return token


def verify_csrf(request: Request, csrf_token: Annotated[str, Form()] = "") -> None:
    expected = request.session.get(SESSION_CSRF)
    if not expected or not hmac.compare_digest(expected, csrf_token):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid or missing CSRF token; reload")


CsrfDep = Depends(verify_csrf)


def _annotator_credentials(request: Request, presented: str | None) -> bool:
    """Is `presented` an annotator's signed invite token? (It opens annotator pages only.)"""
    if not presented:
        return False
    try:
        read_invite_token(request.app.state.settings.secret_key, presented)
    except AnnotationError:
        return False
    return True


def _presented_token(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip()
    return request.query_params.get("token")


def current_user(request: Request, session: SessionDep) -> User:
    uid = request.session.get(SESSION_USER)
    user = session.get(User, uid) if isinstance(uid, int) else None
    if user is None or not user.is_active:
        if _annotator_credentials(request, _presented_token(request)):
            raise HTTPException(status.HTTP_403_FORBIDDEN, ANNOTATOR_FORBIDDEN)
        raise LoginRequired
    request.state.user = user
    return user


UserDep = Annotated[User, Depends(current_user)]


def admin_user(user: UserDep) -> User:
    if not user.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only an administrator can do this")
    return user


AdminDep = Annotated[User, Depends(admin_user)]
ANNOTATOR_FORBIDDEN = "an annotator's link opens annotator pages only, not the dashboard or API"

_bearer = HTTPBearer(auto_error=False, description="an API token created by an admin")


def api_user(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    user = user_for_token(session, credentials.credentials) if credentials else None
    if user is None and credentials and _annotator_credentials(request, credentials.credentials):
        raise HTTPException(status.HTTP_403_FORBIDDEN, ANNOTATOR_FORBIDDEN)
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API token is required (Authorization: Bearer ebc_...)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return user


ApiUserDep = Annotated[User, Depends(api_user)]
