"""Dashboard: researcher accounts (admins) and one's own API tokens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse

from app.auth.service import (
    AuthError,
    create_api_token,
    create_user,
    generate_password,
    get_token,
    get_user,
    list_tokens,
    list_users,
    revoke_api_token,
    set_active,
    set_password,
)
from app.models import User
from app.validation import MAX_PASSWORD, MAX_USERNAME, BadInput, check_text
from app.web.deps import RowId, SessionDep
from app.web.pages import LOGIN, flash, redirect, render
from app.web.security import SESSION_EPOCH, AdminDep, CsrfDep, UserDep

router = APIRouter(prefix="/dashboard", include_in_schema=False, dependencies=LOGIN)


def _users_page(request: Request, session, **extra) -> HTMLResponse:
    code = extra.pop("status_code", 200)
    return render(request, "users.html", {"users": list_users(session), **extra}, status_code=code)


def _user(session, user_id: int) -> User:
    user = get_user(session, user_id)
    if user is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "There is no such user.")
    return user


@router.get("/users", response_class=HTMLResponse)
def users(request: Request, session: SessionDep, _admin: AdminDep) -> HTMLResponse:
    return _users_page(request, session)


@router.post("/users", response_class=HTMLResponse, dependencies=[CsrfDep])
def add_user(
    request: Request,
    session: SessionDep,
    admin: AdminDep,
    username: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    is_admin: Annotated[bool, Form()] = False,
):
    shown = password or generate_password()
    try:
        check_text(username.strip(), max_length=MAX_USERNAME, field="username")
        check_text(password, max_length=MAX_PASSWORD, multiline=True, field="password")
        made = create_user(session, username, shown, is_admin=is_admin, by=admin)
    except (AuthError, BadInput) as exc:
        form = {"username": username, "is_admin": is_admin}
        return _users_page(request, session, error=str(exc), form=form, status_code=400)
    # Rendered, not redirected: a generated password is shown once and never stored in clear.
    return _users_page(request, session, created=made, password=None if password else shown)


@router.post("/users/{user_id}/password", response_class=HTMLResponse, dependencies=[CsrfDep])
def reset_password(
    request: Request, session: SessionDep, admin: AdminDep, user_id: RowId
) -> HTMLResponse:
    target = _user(session, user_id)
    new = generate_password()
    set_password(session, target, new, by=admin)  # ends every session of theirs
    if target.id == admin.id:
        request.session[SESSION_EPOCH] = target.session_epoch  # except this one
    return _users_page(request, session, reset=target, password=new)


@router.post("/users/{user_id}/active", dependencies=[CsrfDep])
def set_user_active(
    request: Request,
    session: SessionDep,
    admin: AdminDep,
    user_id: RowId,
    active: Annotated[bool, Form()] = False,
) -> RedirectResponse:
    target = _user(session, user_id)
    try:
        set_active(session, target, active, by=admin)
    except AuthError as exc:
        flash(request, str(exc), "error")
        return redirect("/dashboard/users")
    flash(request, f"{target.username} is {'active' if active else 'deactivated'}.")
    return redirect("/dashboard/users")


@router.get("/tokens", response_class=HTMLResponse)
def tokens(request: Request, session: SessionDep, user: UserDep) -> HTMLResponse:
    return render(request, "tokens.html", {"tokens": list_tokens(session, user)})


@router.post("/tokens", response_class=HTMLResponse, dependencies=[CsrfDep])
def add_token(
    request: Request, session: SessionDep, user: UserDep, name: Annotated[str, Form()] = ""
) -> HTMLResponse:
    name = name.strip()
    try:
        check_text(name, max_length=128, field="name")
    except BadInput:
        name = ""
    if not name:
        return render(
            request,
            "tokens.html",
            {"tokens": list_tokens(session, user), "error": "Give the token a name (1-128)."},
            status_code=400,
        )
    new = create_api_token(session, user, name, by=user)
    # The secret is shown in this response only.
    return render(request, "tokens.html", {"tokens": list_tokens(session, user), "new": new})


@router.post("/tokens/{token_id}/revoke", dependencies=[CsrfDep])
def revoke_token(
    request: Request, session: SessionDep, user: UserDep, token_id: RowId
) -> RedirectResponse:
    token = get_token(session, user, token_id)
    if token is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "There is no such token.")
    revoke_api_token(session, token, by=user)
    flash(request, f"Token {token.prefix}… revoked.")
    return redirect("/dashboard/tokens")
