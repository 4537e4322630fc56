"""Who is asking, and what they may do: researcher sessions (ended by logout, a new
password or deactivation through the user's session epoch), CSRF tokens, API bearer
tokens, and each researcher's access to a study (owner, member, administrator).

A study someone may not see answers 404, as if it did not exist; one they may see but
not change answers 403.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from fastapi import Depends, Form, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.annotation.errors import AnnotationError
from app.annotation.identities import read_invite_token
from app.auth.service import user_for_token
from app.models import Study, User
from app.studies.service import Access, get_study, study_access
from app.web.deps import SessionDep

SESSION_USER = "uid"
SESSION_CSRF = "csrf"
# The user's session epoch when the session began; a session whose epoch is behind the
# user's row has been ended (logout anywhere, a new password, deactivation).
SESSION_EPOCH = "epoch"


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


def start_session(request: Request, user: User) -> None:
    """A fresh session for `user` (no fixation: whatever the cookie held is dropped)."""
    request.session.clear()
    request.session[SESSION_USER] = user.id
    request.session[SESSION_EPOCH] = user.session_epoch
    csrf_token(request)


def session_user(request: Request, session: SessionDep) -> User | None:
    """The user of a live session, or None (an ended session is forgotten here)."""
    uid = request.session.get(SESSION_USER)
    user = session.get(User, uid) if isinstance(uid, int) else None
    if user is None:
        return None
    epoch = request.session.get(SESSION_EPOCH)
    if not user.is_active or not isinstance(epoch, int) or epoch != user.session_epoch:
        request.session.clear()
        return None
    return user


def current_user(request: Request, session: SessionDep) -> User:
    user = session_user(request, session)
    if user is None:
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


# -- a study and the caller's access to it ----------------------------------------------


def _study_for(
    session, slug: str, user: User, needed: Access, request: Request, missing: str
) -> Study:
    study = get_study(session, slug)
    access = study_access(session, study, user) if study is not None else None
    if study is None or access is None:
        # The same answer as for a study that does not exist: its existence is not revealed.
        raise HTTPException(status.HTTP_404_NOT_FOUND, missing.format(slug=slug))
    if access < needed:
        raise HTTPException(status.HTTP_403_FORBIDDEN, _REFUSED[needed])
    request.state.study_access = access
    return study


_PAGE_404 = "There is no study {slug!r}."
_REFUSED = {
    Access.manage: "You may view this study but not change it; ask its owner for manage access.",
    Access.share: "Only the study's owner or an administrator can change who has access.",
}


def viewable_study(request: Request, slug: str, session: SessionDep, user: UserDep) -> Study:
    return _study_for(session, slug, user, Access.view, request, _PAGE_404)


def managed_study(request: Request, slug: str, session: SessionDep, user: UserDep) -> Study:
    return _study_for(session, slug, user, Access.manage, request, _PAGE_404)


def shared_study(request: Request, slug: str, session: SessionDep, user: UserDep) -> Study:
    return _study_for(session, slug, user, Access.share, request, _PAGE_404)


def api_study(request: Request, slug: str, session: SessionDep, user: ApiUserDep) -> Study:
    return _study_for(session, slug, user, Access.view, request, "no study {slug!r}")


ViewStudyDep = Annotated[Study, Depends(viewable_study)]
ManageStudyDep = Annotated[Study, Depends(managed_study)]
ShareStudyDep = Annotated[Study, Depends(shared_study)]
ApiStudyDep = Annotated[Study, Depends(api_study)]


def access_of(request: Request) -> Access:
    """The access the study dependency found (for templates: which forms to show)."""
    return request.state.study_access
