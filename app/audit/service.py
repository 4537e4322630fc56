"""The audit log: who did what to which study, and when. Services flush; the caller commits.

Failed logins are audit events too (`login_failed`, with the username and the
client address), so login throttling needs no table of its own.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import AuditEvent, Study, User, utcnow

LOGIN_FAILED = "login_failed"
LOGIN_OK = "login"
# Per username and address: 5 failures in 15 minutes lock that pair out until
# the oldest ages past the window. Per address: 30 (a spray over many usernames).
THROTTLE_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_USER_IP = 5
MAX_FAILURES_PER_IP = 30


def record(
    session: Session,
    action: str,
    *,
    user: User | None = None,
    study: Study | None = None,
    **detail: Any,
) -> AuditEvent:
    event = AuditEvent(
        user_id=user.id if user else None,
        study_id=study.id if study else None,
        action=action,
        detail=detail,
    )
    session.add(event)
    session.flush()
    return event


CLI = "cli"
Actor = User | str
"""Who did it: a researcher (dashboard, API) or `CLI`, the operator at the command line."""


def record_by(
    session: Session, by: Actor | None, action: str, *, study: Study | None = None, **detail: Any
) -> None:
    """Record `action` done by `by`, as the services do for every verb they carry out.

    `by=None` records nothing: set-up code (fixtures, the demo's seed) that nobody did.
    """
    if by is None:
        return
    if isinstance(by, User):
        record(session, action, user=by, study=study, **detail)
    else:
        record(session, action, study=study, by=by, **detail)


def study_events(session: Session, study: Study, limit: int = 50) -> list[tuple[AuditEvent, str]]:
    """The study's latest events, newest first, with the username ("" when none)."""
    rows = session.execute(
        select(AuditEvent, User.username)
        .outerjoin(User, User.id == AuditEvent.user_id)
        .where(AuditEvent.study_id == study.id)
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
        .limit(limit)
    ).all()
    return [(event, username or "") for event, username in rows]


def _failures_since(session: Session, since: datetime, ip: str, username: str | None) -> int:
    query = select(func.count()).where(
        AuditEvent.action == LOGIN_FAILED,
        AuditEvent.created_at >= since,
        AuditEvent.detail["ip"].as_string() == ip,
    )
    if username is not None:
        query = query.where(AuditEvent.detail["username"].as_string() == username)
    return session.scalar(query) or 0


def login_throttled(session: Session, username: str, ip: str, now: datetime | None = None) -> bool:
    """Too many recent failed logins for this username from this address (or from it at all).

    Failures before the pair's last successful login do not count.
    """
    now = now or utcnow()
    since = now - THROTTLE_WINDOW
    last_ok = session.scalar(
        select(func.max(AuditEvent.created_at)).where(
            AuditEvent.action == LOGIN_OK,
            AuditEvent.created_at >= since,
            AuditEvent.detail["ip"].as_string() == ip,
            AuditEvent.detail["username"].as_string() == username,
        )
    )
    pair_since = max(since, last_ok) if last_ok else since
    return (
        _failures_since(session, pair_since, ip, username) >= MAX_FAILURES_PER_USER_IP
        or _failures_since(session, since, ip, None) >= MAX_FAILURES_PER_IP
    )


def login_attempt(session: Session, username: str, ip: str, user: User | None) -> None:
    """Record a login attempt: `user` is who logged in, None for a failure."""
    if user is None:
        record(session, LOGIN_FAILED, username=username[:64], ip=ip)
    else:
        record(session, LOGIN_OK, user=user, username=user.username, ip=ip)
