"""Who is asking: researcher sessions, CSRF tokens, API bearer tokens."""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from fastapi import Depends, Form, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

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


def current_user(request: Request, session: SessionDep) -> User:
    uid = request.session.get(SESSION_USER)
    user = session.get(User, uid) if isinstance(uid, int) else None
    if user is None or not user.is_active:
        raise LoginRequired
    return user


UserDep = Annotated[User, Depends(current_user)]

_bearer = HTTPBearer(auto_error=False, description="an API token created by an admin")


def api_user(
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    user = user_for_token(session, credentials.credentials) if credentials else None
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid API token is required (Authorization: Bearer ebc_...)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return user


ApiUserDep = Annotated[User, Depends(api_user)]
