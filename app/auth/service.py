"""Users, password hashing (argon2id) and bearer API tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.models import ApiToken, User, utcnow

_hasher = PasswordHasher()  # argon2id with the library's current recommended parameters
TOKEN_PREFIX = "ebc_"
MIN_PASSWORD_LENGTH = 10


class AuthError(ValueError):
    """A user-facing problem with credentials or account data."""


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def generate_password() -> str:
    return secrets.token_urlsafe(12)


def create_user(
    session: Session,
    username: str,
    password: str,
    *,
    is_admin: bool = False,
    by: Actor | None = None,
) -> User:
    username = username.strip()
    if not username or len(username) > 64:
        raise AuthError("username must be 1 to 64 characters")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AuthError(f"password must be at least {MIN_PASSWORD_LENGTH} characters")
    if session.scalar(select(User.id).where(User.username == username)) is not None:
        raise AuthError(f"user {username!r} already exists")
    user = User(username=username, password_hash=hash_password(password), is_admin=is_admin)
    session.add(user)
    session.flush()
    record_by(session, by, "user_created", username=username, is_admin=is_admin)
    return user


def end_sessions(session: Session, user: User) -> int:
    """Invalidate every session cookie of `user` (each carries the epoch it was issued under).

    Incremented in SQL, so two requests ending sessions at once cannot lose a bump.
    Returns the new epoch.
    """
    user.session_epoch = User.session_epoch + 1
    session.flush()
    return user.session_epoch  # reloaded from the row


def set_password(session: Session, user: User, password: str, *, by: Actor | None = None) -> None:
    """A new password (change or reset) ends every session of the user."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AuthError(f"password must be at least {MIN_PASSWORD_LENGTH} characters")
    user.password_hash = hash_password(password)
    end_sessions(session, user)
    record_by(session, by, "password_reset", username=user.username)


def authenticate(session: Session, username: str, password: str) -> User | None:
    user = session.scalar(select(User).where(User.username == username.strip()))
    if user is None:
        # Spend the same time as a real check, so timing does not reveal usernames.
        verify_password(_DUMMY_HASH, password)
        return None
    if not user.is_active or not verify_password(user.password_hash, password):
        return None
    if _hasher.check_needs_rehash(user.password_hash):
        user.password_hash = hash_password(password)
    user.last_login_at = utcnow()
    session.flush()
    return user


_DUMMY_HASH = _hasher.hash("not-a-real-password")


def _token_hash(token: str) -> str:
    # Tokens are 256-bit random: a fast hash suffices (no dictionary to guard against).
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str  # shown once, never stored


def create_api_token(
    session: Session, user: User, name: str, *, by: Actor | None = None
) -> NewToken:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(user_id=user.id, name=name, token_hash=_token_hash(secret), prefix=secret[:12])
    session.add(row)
    session.flush()
    record_by(session, by, "token_created", name=name, prefix=row.prefix, **_owner(user, by))
    return NewToken(row, secret)


def revoke_api_token(session: Session, token: ApiToken, *, by: Actor | None = None) -> None:
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.flush()
    if by is not None:
        owner = _owner(session.get(User, token.user_id), by)
        record_by(session, by, "token_revoked", name=token.name, prefix=token.prefix, **owner)


def _owner(user: User, by: Actor | None) -> dict:
    """Names the token's owner when somebody else (the CLI) acted on it."""
    return {} if by is user else {"username": user.username}


def tokens_by_prefix(session: Session, prefix: str) -> list[ApiToken]:
    """The tokens whose first 12 characters are those of `prefix`."""
    return list(session.scalars(select(ApiToken).where(ApiToken.prefix == prefix[:12])))


def user_for_token(session: Session, secret: str) -> User | None:
    row = session.execute(
        select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == _token_hash(secret))
    ).first()
    if row is None:
        return None
    token, user = row
    if token.revoked_at is not None or not user.is_active:
        return None
    token.last_used_at = utcnow()
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.username)))


def get_user(session: Session, user_id: int) -> User | None:
    return session.get(User, user_id)


def user_by_name(session: Session, username: str) -> User | None:
    return session.scalar(select(User).where(User.username == username.strip()))


def set_active(session: Session, user: User, active: bool, *, by: User | None = None) -> None:
    """Deactivation also ends the user's sessions; their API tokens stop working while the
    account is inactive (`user_for_token` checks it)."""
    if by is not None and user.id == by.id and not active:
        raise AuthError("you cannot deactivate your own account")
    user.is_active = active
    if not active:
        end_sessions(session, user)
    session.flush()
    action = "user_activated" if active else "user_deactivated"
    record_by(session, by, action, username=user.username)


def list_tokens(session: Session, user: User) -> list[ApiToken]:
    return list(
        session.scalars(
            select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.created_at.desc())
        )
    )


def get_token(session: Session, user: User, token_id: int) -> ApiToken | None:
    """One of `user`'s own tokens (None for anybody else's)."""
    token = session.get(ApiToken, token_id)
    return token if token is not None and token.user_id == user.id else None
