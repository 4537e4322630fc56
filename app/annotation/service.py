"""Annotators, assignments and submissions (DESIGN.md §2). Services flush; the caller commits.

Concurrency. Every entry point that writes first takes the annotator's row
lock (an UPDATE of `last_seen_at`: a row lock on PostgreSQL; on SQLite the
transaction is opened with BEGIN IMMEDIATE, which serialises writers), so one
annotator's requests run one at a time: the cap and the "never the same HIT
twice" rule are checked and written under that lock.

Replica slots. Each HIT counts its `leased` and `submitted` assignments
(`Hit.leased_count`, `Hit.submitted_count`) and keeps `Hit.next_expiry`, a
lower bound of its leases' expiry times. Every change of an assignment's
status updates these in the same transaction, under the HIT's row lock. A
claim is one UPDATE of the first HIT, fewest submitted first, that has a slot
by its counters or a lease that may have lapsed, picked with `FOR UPDATE SKIP
LOCKED`; the counters it reads are those of the row it locked (PostgreSQL
rechecks a row changed since the statement began), so two annotators never fill
the same last slot. A slot freed only by a lapsed lease is recounted after the
lock is held. Locks are taken in the order annotator, assignment, HIT; a claim
never waits for a HIT lock, so no deadlock can form.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import quote, urlsplit

from itsdangerous import BadData, URLSafeSerializer
from itsdangerous.encoding import base64_decode, base64_encode
from sqlalchemy import (
    Boolean,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    null,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.annotation.schemas import (
    ANNOTATOR_COLUMNS,
    LEASE_COLUMNS,
    STUDY_COLUMNS,
    AnnotatorRef,
    HitPage,
    InviteRef,
    Lease,
    PositionView,
    StudyRef,
    Submission,
    Work,
    WorkStatus,
)
from app.db import begin_write
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Channel,
    Hit,
    HitPosition,
    Item,
    Judgment,
    Study,
    StudyStatus,
    utcnow,
)
from app.models.base import UTCDateTime

INVITE_SALT = "ebc-invite"
MAX_CLIENT_MS = 3_600_000  # client-reported time per item is clipped to [0, 1 h]
MTURK_FRAME_ANCESTORS = (
    "https://worker.mturk.com",
    "https://www.mturk.com",
    "https://workersandbox.mturk.com",
)
MTURK_SUBMIT_ORIGINS = ("https://www.mturk.com", "https://workersandbox.mturk.com")
PREVIEW_ASSIGNMENT = "ASSIGNMENT_ID_NOT_AVAILABLE"
_PASSES = 40  # passes when every free HIT was momentarily locked by others


class AnnotationError(Exception):
    """A request an annotator page must refuse; `status_code` is a 4xx."""

    status_code = 400

    def __init__(
        self, message: str, status_code: int | None = None, *, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.retry_after = retry_after  # seconds, sent as Retry-After (429, 503)


class InvalidAnswers(AnnotationError):
    """The form is incomplete or holds an impossible option: show it again."""

    def __init__(self, message: str, answers: dict[int, int]) -> None:
        super().__init__(message, 400)
        self.answers = answers


# -- links and identities ---------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _serializer(secret_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret_key, salt=INVITE_SALT)


def _canonical(part: str) -> bool:
    """Is `part` the one base64 spelling of its bytes? (Its last character may carry unused
    bits: `...Kw` and `...Kx` decode alike; a decoder also skips stray characters.)"""
    try:
        return base64_encode(base64_decode(part)) == part.encode()
    except BadData:
        return False


_INVALID_LINK = "This link is not valid. Please use the link you were given."
# An itsdangerous token: URL-safe base64 of the payload (after a dot when zlib made it
# shorter), a dot, the signature. Anything else (control characters, other alphabets,
# over-long text) is refused before decoding.
_TOKEN = re.compile(r"\.?[A-Za-z0-9_-]{1,2000}\.[A-Za-z0-9_-]{20,100}")
# Platform ids (MTurk workerId / assignmentId / hitId: 12-30 uppercase letters and digits;
# Prolific PID / STUDY_ID / SESSION_ID: 24 hex digits) fit this with room for other panels.
PLATFORM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def invite_token(secret_key: str, annotator: Annotator, session_id: str | None = None) -> str:
    """The signed token of `annotator`'s link: the link nonce (and the panel session) only.

    Rotating or clearing `invite_nonce` revokes it. No annotator id travels in it.
    """
    if annotator.invite_nonce is None:
        raise AnnotationError("This annotator's link was revoked.", 409)
    payload: list[object] = [annotator.invite_nonce]
    if session_id:
        payload.append(session_id)
    return _serializer(secret_key).dumps(payload)


def read_invite_token(secret_key: str, token: str) -> InviteRef:
    """Check the signature only (no database): a tampered token is refused here.

    Only the canonical encoding of a payload is accepted (base64 has several spellings of
    the same bytes): one link, one spelling. Links of the first format, signed
    `[annotator id, nonce, session?]`, still open (their nonce is checked the same way).
    """
    if len(token) > 2102 or not _TOKEN.fullmatch(token):
        raise AnnotationError(_INVALID_LINK, 404)
    try:
        payload = _serializer(secret_key).loads(token)
    except BadData:
        raise AnnotationError(_INVALID_LINK, 404) from None
    body, _, signature = token.rpartition(".")
    canonical = _canonical(body.removeprefix(".")) and _canonical(signature)
    if not isinstance(payload, list) or not canonical:
        raise AnnotationError(_INVALID_LINK, 404)
    legacy_id = None
    if payload and type(payload[0]) is int:  # the first format
        legacy_id, payload = payload[0], payload[1:]
    if not 1 <= len(payload) <= 2 or not all(isinstance(p, str) and p for p in payload):
        raise AnnotationError(_INVALID_LINK, 404)
    session_id = payload[1] if len(payload) == 2 else None
    if session_id is not None and not PLATFORM_ID.fullmatch(session_id):
        # Signed before panel ids were checked (e.g. a SESSION_ID longer than its column,
        # which made every load fail): the link still opens, without the session id.
        session_id = None
    return InviteRef(payload[0], session_id, legacy_id)


def create_local_annotators(
    session: Session, study: Study, count: int = 1, label: str | None = None
) -> list[Annotator]:
    """Create `count` invited annotators (channel local), each with its own link nonce."""
    if count < 1:
        raise AnnotationError("count must be at least 1")
    made = [
        Annotator(
            study_id=study.id,
            channel=Channel.local,
            external_id=f"local-{secrets.token_hex(8)}",
            label=f"{label or 'invite'} {i + 1}" if count > 1 or not label else label,
            invite_nonce=secrets.token_urlsafe(16),
        )
        for i in range(count)
    ]
    session.add_all(made)
    session.flush()
    return made


_annotators = Annotator.__table__
_studies = Study.__table__
_assignments = Assignment.__table__
_hits = Hit.__table__
_TIME = UTCDateTime()

# The hot path (an invite page and its submit) runs SQLAlchemy Core statements built once
# here: their cache keys are memoised on the objects, so executing one costs neither
# statement construction nor compilation, and the rows come back as plain tuples (no ORM
# identity map, no unit of work). The ORM models stay the schema and serve everything else.
_ANNOTATOR_COLS = tuple(_annotators.c[name] for name in ANNOTATOR_COLUMNS)
_STUDY_COLS = tuple(_studies.c[name] for name in STUDY_COLUMNS)
_N_ANNOTATOR = len(_ANNOTATOR_COLS)


def _lock_statements(key):
    """UPDATE the annotator row matching `key` (returning it): one plain, one that also
    returns the study's row (PostgreSQL: UPDATE ... FROM, one statement for both)."""
    plain = (
        update(_annotators)
        .where(key)
        .values(last_seen_at=bindparam("now", type_=_TIME))
        .returning(*_ANNOTATOR_COLS)
    )
    with_study = (
        update(_annotators)
        .where(key, _annotators.c.study_id == _studies.c.id)
        .values(last_seen_at=bindparam("now", type_=_TIME))
        .returning(*_ANNOTATOR_COLS, *(c.label(f"study_{c.name}") for c in _STUDY_COLS))
    )
    return plain, with_study


_LOCK, _LOCK_WITH_STUDY = _lock_statements(_annotators.c.id == bindparam("key"))
# Invite links name the annotator by their link nonce (unique), not by id.
_LOCK_NONCE, _LOCK_NONCE_WITH_STUDY = _lock_statements(
    _annotators.c.invite_nonce == bindparam("key")
)
_STUDY = select(*_STUDY_COLS).where(_studies.c.id == bindparam("study_id"))


def study_ref(session: Session, study_id: int) -> StudyRef:
    """The study's settings the annotator pages need, read now (they may change while it runs)."""
    row = session.execute(_STUDY, {"study_id": study_id}).one()
    return StudyRef(*row)


def _lock_annotator(
    session: Session, key: int | str, now: datetime, *, by_nonce: bool = False
) -> AnnotatorRef | None:
    """Lock the annotator's row (by id, or by link nonce); their study's settings are
    read alongside.

    SQLite cannot return columns of an UPDATE's FROM table, so it reads the study next.
    """
    begin_write(session)
    session.flush()  # the Core statements below do not autoflush pending ORM changes
    params = {"key": key, "now": now}
    if session.get_bind().dialect.name == "postgresql":
        stmt = _LOCK_NONCE_WITH_STUDY if by_nonce else _LOCK_WITH_STUDY
        row = session.execute(stmt, params).first()
        if row is None:
            return None
        return AnnotatorRef(*row[:_N_ANNOTATOR], study=StudyRef(*row[_N_ANNOTATOR:]))
    row = session.execute(_LOCK_NONCE if by_nonce else _LOCK, params).first()
    if row is None:
        return None
    return AnnotatorRef(*row, study=study_ref(session, row.study_id))


def annotator_for_invite(
    session: Session, ref: InviteRef, now: datetime | None = None
) -> AnnotatorRef:
    """The annotator a signed link names, locked for this transaction (404 if revoked)."""
    annotator = _lock_annotator(session, ref.nonce, now or utcnow(), by_nonce=True)
    if (
        annotator is None
        or annotator.invite_nonce is None
        or not hmac.compare_digest(annotator.invite_nonce, ref.nonce)
        or (ref.annotator_id is not None and ref.annotator_id != annotator.id)
    ):
        raise AnnotationError("This link is no longer valid. Please ask for a new one.", 404)
    return annotator


@dataclass(frozen=True, slots=True)
class Enrolment:
    """Where a new crowd identity comes from, and the limits on making them."""

    address_key: str | None  # `address_key` of the client's address
    per_address_per_hour: int = 20  # new identities per address per study per hour; 0: off
    per_study_per_minute: int = 300  # new crowd identities per study per minute; 0: off


def address_key(secret_key: str, address: str | None) -> str | None:
    """A keyed hash of a client address (64 hex digits): the address itself is never kept.

    An IPv6 client holds a whole /64 (and can rotate through it at will), so its network is
    what is counted, not the single address.
    """
    if not address:
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        ip = None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        address = str(ipaddress.ip_network(f"{ip}/64", strict=False))
    digest = hmac.new(secret_key.encode(), b"ebc-enrol\0" + address.encode(), hashlib.sha256)
    return digest.hexdigest()


def platform_id(value: str | None, what: str = "worker id", *, required: bool = True) -> str | None:
    """A platform's id as sent, if it is one (letters, digits, - and _, at most 64)."""
    if not value:
        if required:
            raise AnnotationError(f"The platform did not send a {what}.", 400)
        return None
    if not PLATFORM_ID.fullmatch(value):
        raise AnnotationError(f"The platform sent a {what} that is not valid.", 400)
    return value


_annotators_since = (
    select(func.count(), func.min(_annotators.c.created_at))
    .where(_annotators.c.study_id == bindparam("study_id"))
    .where(_annotators.c.created_at > bindparam("since", type_=_TIME))
)
_RECENT_CROWD = _annotators_since.where(_annotators.c.channel != Channel.local)
_RECENT_FROM = _annotators_since.where(_annotators.c.enrolled_from == bindparam("key"))


def _check_enrolment(session: Session, study: Study, enrolment: Enrolment, now: datetime) -> None:
    """Refuse a new identity (429) past the study's limits. Soft limits: two first requests
    at the same instant may both pass, which is harmless at these rates."""
    if enrolment.per_study_per_minute > 0:
        n, _ = session.execute(
            _RECENT_CROWD, {"study_id": study.id, "since": now - timedelta(minutes=1)}
        ).one()
        if n >= enrolment.per_study_per_minute:
            raise AnnotationError(
                "Many people are joining this study right now. Please try again in a minute.",
                429,
                retry_after=60,
            )
    if enrolment.address_key and enrolment.per_address_per_hour > 0:
        params = {"study_id": study.id, "since": now - timedelta(hours=1)}
        n, oldest = session.execute(_RECENT_FROM, {**params, "key": enrolment.address_key}).one()
        if n >= enrolment.per_address_per_hour:
            wait = 3600 - (now - oldest).total_seconds() if oldest is not None else 3600
            raise AnnotationError(
                "Too many new participants have joined this study from your network "
                "in the last hour. Please try again later.",
                429,
                retry_after=max(1, math.ceil(wait)),
            )


def crowd_annotator(
    session: Session,
    study: Study,
    channel: Channel,
    external_id: str,
    now: datetime | None = None,
    *,
    enrolment: Enrolment | None = None,
) -> AnnotatorRef:
    """The study's annotator for a platform id (MTurk workerId, panel participant), made once.

    A new identity is made only within `enrolment`'s limits (429 past them), and records
    the keyed hash of the address it came from.
    """
    now = now or utcnow()
    external_id = platform_id(external_id)
    begin_write(session)
    query = select(Annotator.id).where(
        Annotator.study_id == study.id,
        Annotator.channel == channel,
        Annotator.external_id == external_id,
    )
    annotator_id = session.scalar(query)
    if annotator_id is None:
        if enrolment is not None:
            _check_enrolment(session, study, enrolment, now)
        try:
            with session.begin_nested():
                new = Annotator(
                    study_id=study.id,
                    channel=channel,
                    external_id=external_id,
                    invite_nonce=secrets.token_urlsafe(16),
                    enrolled_from=enrolment.address_key if enrolment else None,
                    created_at=now,
                )
                session.add(new)
            annotator_id = new.id
        except IntegrityError:  # made by a concurrent first request
            annotator_id = session.scalar(query)
    annotator = _lock_annotator(session, annotator_id, now)
    assert annotator is not None
    if annotator.invite_nonce is None:
        annotator.invite_nonce = secrets.token_urlsafe(16)
        session.execute(
            update(_annotators)
            .where(_annotators.c.id == annotator.id)
            .values(invite_nonce=annotator.invite_nonce)
        )
    return annotator


def study_by_slug(session: Session, slug: str) -> Study:
    if not _SLUG.fullmatch(slug):  # never sent to the database (NUL bytes, over-long text)
        raise AnnotationError("There is no such study.", 404)
    study = session.scalar(select(Study).where(Study.slug == slug))
    if study is None:
        raise AnnotationError("There is no such study.", 404)
    return study


def channel_settings(study: Study | StudyRef, channel: Channel) -> dict:
    """The study's settings of a crowd channel, if the study takes people through it.

    Channels are opt-in: a study that does not enable one answers as if it did not exist
    (no oracle for which studies exist), so anyone who knows a slug cannot enrol.
    """
    settings = (study.channels or {}).get(channel.value) or {}
    if not settings.get("enabled"):
        raise AnnotationError("There is no such study.", 404)
    return settings


def panel_entry_key(secret_key: str, slug: str) -> str:
    """The study's panel entry key: proves a panel URL came from the researcher's dashboard.

    Derived from the secret key (HMAC of the slug), so it needs no storage and changes
    with the secret key.
    """
    mac = hmac.new(secret_key.encode(), b"ebc-panel-entry\0" + slug.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()[:16]).rstrip(b"=").decode()


PANEL_KEY_PARAM = "key"


def panel_entry_url(base_url: str, secret_key: str, study: Study) -> str:
    """The URL to paste into the panel (Prolific's placeholders for its ids)."""
    panel = (study.channels or {}).get("panel") or {}
    names = [
        panel.get("participant_param") or "PROLIFIC_PID",
        panel.get("study_param") or "STUDY_ID",
        panel.get("session_param") or "SESSION_ID",
    ]
    ids = "&".join(f"{quote(n)}={{{{%{quote(n)}%}}}}" for n in names)
    key = panel_entry_key(secret_key, study.slug)
    return f"{base_url.rstrip('/')}/p/{study.slug}?{PANEL_KEY_PARAM}={key}&{ids}"


def crowd_entry_urls(base_url: str, secret_key: str, study: Study) -> dict[str, str | None]:
    """The URLs to give each enabled crowd channel (None: the channel is off)."""
    channels = study.channels or {}
    panel = (channels.get("panel") or {}).get("enabled")
    mturk = (channels.get("mturk") or {}).get("enabled")
    return {
        "panel": panel_entry_url(base_url, secret_key, study) if panel else None,
        "mturk": f"{base_url.rstrip('/')}/mturk/{study.slug}" if mturk else None,
    }


def check_panel_key(secret_key: str, slug: str, params: Mapping[str, str]) -> None:
    """403 unless the entry carries the study's panel entry key (checked before any lookup)."""
    presented = (params.get(PANEL_KEY_PARAM) or "").encode()
    if not hmac.compare_digest(presented, panel_entry_key(secret_key, slug).encode()):
        raise AnnotationError(
            "This link did not come from the study's panel. Please open the study again "
            "from the panel's website.",
            403,
        )


def check_panel_entry(study: Study, params: Mapping[str, str]) -> tuple[str, str | None]:
    """A panel entry's (participant id, session id), once its key was checked
    (`check_panel_key`): 404 if the study takes nobody through a panel, 403 for another
    panel study's id, 400 for ids that are not platform ids."""
    panel = channel_settings(study, Channel.panel)
    expected = panel.get("study_id")
    study_param = panel.get("study_param") or "STUDY_ID"
    if expected and params.get(study_param) != expected:
        raise AnnotationError(
            "This link belongs to another study on the panel. Please open the study again "
            "from the panel's website.",
            403,
        )
    participant = platform_id(
        params.get(panel.get("participant_param") or "PROLIFIC_PID"), "participant id"
    )
    session_id = platform_id(
        params.get(panel.get("session_param") or "SESSION_ID"), "session id", required=False
    )
    return participant, session_id


def check_submit_to(study: Study | StudyRef, submit_to: str) -> str:
    """`turkSubmitTo` must be an MTurk site (or one the study lists, for a sandbox stand-in)."""
    extra = (study.channels.get("mturk") or {}).get("submit_origins") or []
    refused = AnnotationError("This page was opened with an unknown turkSubmitTo.", 400)
    if len(submit_to) > 1024 or not submit_to.isascii() or not submit_to.isprintable():
        raise refused
    try:
        parts = urlsplit(submit_to)
    except ValueError:  # e.g. an unbalanced "[" in the host
        raise refused from None
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin not in (*MTURK_SUBMIT_ORIGINS, *extra) or parts.query or parts.fragment:
        raise refused
    return origin


def safe_redirect(url: str | None) -> str | None:
    """A panel's return URL if it is an http(s) URL (never `javascript:` or `data:`)."""
    if not url or len(url) > 2048 or not url.isascii() or not url.isprintable():
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") and parts.netloc else None


# -- work -------------------------------------------------------------------------------


def _active(now):
    return or_(
        Assignment.status == AssignmentStatus.submitted,
        and_(Assignment.status == AssignmentStatus.leased, Assignment.expires_at > now),
    )


_LEASE_COLS = tuple(_assignments.c[name] for name in LEASE_COLUMNS)


def _annotator_state(by_external: bool):
    """One statement: the annotator's submitted and active counts, plus the leases to resume.

    The counts come from a one-row subquery outer-joined to the assignments a
    request may resume: the annotator's open leases without an external id, in
    lease order; or (MTurk) the assignment with the given external id, whoever holds it.
    """
    a = _assignments.c
    active = or_(
        a.status == AssignmentStatus.submitted,
        and_(a.status == AssignmentStatus.leased, a.expires_at > bindparam("now", type_=_TIME)),
    )
    counts = (
        select(
            func.coalesce(
                func.sum(case((a.status == AssignmentStatus.submitted, 1), else_=0)), 0
            ).label("done"),
            func.coalesce(func.sum(case((active, 1), else_=0)), 0).label("held"),
        )
        .where(a.annotator_id == bindparam("annotator_id"))
        .subquery("counts")
    )
    if by_external:
        resumable = a.external_assignment_id == bindparam("external")
    else:
        resumable = and_(
            a.annotator_id == bindparam("annotator_id"),
            a.status == AssignmentStatus.leased,
            a.external_assignment_id.is_(None),
        )
    return (
        select(counts.c.done, counts.c.held, *_LEASE_COLS)
        .select_from(counts)
        .outerjoin(_assignments, resumable)
        .order_by(a.leased_at)
    )


_STATE = {False: _annotator_state(False), True: _annotator_state(True)}
# Conditional: `expire_leases` (not under the annotator's lock) may have expired it first,
# and its slot must be given back once only.
_EXPIRE_ONE = (
    update(_assignments)
    .where(
        _assignments.c.id == bindparam("assignment_id"),
        _assignments.c.status == AssignmentStatus.leased,
    )
    .values(status=AssignmentStatus.expired)
)
_NEW_LEASE = insert(_assignments).returning(_assignments.c.id)


def annotator_cap(annotator: Annotator | AnnotatorRef, study: Study | StudyRef) -> int:
    return annotator.hit_cap if annotator.hit_cap is not None else study.per_annotator_cap


def submitted_count(session: Session, annotator: Annotator) -> int:
    return session.scalar(
        select(func.count()).where(
            Assignment.annotator_id == annotator.id,
            Assignment.status == AssignmentStatus.submitted,
        )
    )


def _study_for(session: Session, annotator: Annotator | AnnotatorRef) -> StudyRef:
    """The study read with the annotator's lock, else read now (callers with an ORM annotator)."""
    study = getattr(annotator, "study", None)
    if isinstance(study, StudyRef):
        return study
    session.flush()  # the Core statements of this module do not autoflush pending ORM changes
    return study_ref(session, annotator.study_id)


def next_assignment(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    *,
    now: datetime | None = None,
    external_assignment_id: str | None = None,
    external_hit_id: str | None = None,
    external_session_id: str | None = None,
    submit_to: str | None = None,
    serve: bool = False,
) -> Work:
    """What `annotator` works on now: their open lease, else a new one, else why not.

    Call with the annotator locked (`annotator_for_invite`, `crowd_annotator`).
    Without an external assignment id the annotator's unexpired lease is
    resumed (a reload shows the same HIT). With one (MTurk) the assignment
    for that id is resumed or created, as a worker may hold several. `serve`:
    the HIT's page is about to be shown, so a new lease records it as served.
    """
    now = now or utcnow()
    study = _study_for(session, annotator)
    cap = annotator_cap(annotator, study)
    by_external = external_assignment_id is not None
    rows = session.execute(
        _STATE[by_external],
        {"annotator_id": annotator.id, "now": now, "external": external_assignment_id},
    ).all()
    done, held_count = int(rows[0][0]), int(rows[0][1])
    work = Work(WorkStatus.no_work, done=done, cap=cap)
    if annotator.blocked:
        work.status = WorkStatus.blocked
        return work
    if study.status is StudyStatus.closed:
        work.status = WorkStatus.closed
        return work
    if study.status is not StudyStatus.collecting:
        work.status = WorkStatus.not_open
        return work

    leases = [Lease(*r[2:]) for r in rows if r[2] is not None]
    if by_external:
        if leases:
            held = leases[0]
            if held.annotator_id != annotator.id:
                raise AnnotationError("This assignment belongs to another worker.", 403)
            work.status, work.assignment = WorkStatus.assigned, held
            return work
    else:
        lapsed = []
        for lease in leases:
            if lease.expires_at > now:
                work.status, work.assignment = WorkStatus.assigned, lease
                break
            lapsed.append(lease)
        for lease in sorted(lapsed, key=lambda a: a.hit_id):  # HIT locks in id order
            expired = session.execute(_EXPIRE_ONE, {"assignment_id": lease.id}).rowcount
            if expired:  # its slot is back in the pool
                _leave_slot(session, lease.hit_id, was_leased=True, submitted=False)
            work.expired_previous = True
        if work.status is WorkStatus.assigned:
            return work

    # `held_count` counted only unexpired leases, so the ones just expired change nothing.
    if held_count >= cap:
        work.status = WorkStatus.cap_reached
        return work
    expires_at = now + timedelta(seconds=study.lease_seconds)
    hit_id = _claim_slot(session, study, annotator, now, expires_at)
    if hit_id is None:
        return work
    lease = Lease(
        id=0,
        public_id=secrets.token_urlsafe(24),
        hit_id=hit_id,
        annotator_id=annotator.id,
        status=AssignmentStatus.leased,
        leased_at=now,
        expires_at=expires_at,
        page_served_at=now if serve else None,
        submitted_at=None,
        late=False,
        external_assignment_id=external_assignment_id,
        submit_to=submit_to,
    )
    lease.id = session.execute(
        _NEW_LEASE,
        {
            "public_id": lease.public_id,
            "hit_id": hit_id,
            "annotator_id": annotator.id,
            "status": AssignmentStatus.leased,
            "leased_at": now,
            "expires_at": expires_at,
            "page_served_at": lease.page_served_at,
            "late": False,
            "external_assignment_id": external_assignment_id,
            "external_hit_id": external_hit_id,
            "external_session_id": external_session_id,
            "submit_to": submit_to,
            # MTurk work counts once the assignment is confirmed through the MTurk API.
            "unverified": annotator.channel is Channel.mturk,
        },
    ).scalar_one()
    work.status, work.assignment = WorkStatus.assigned, lease
    return work


def _leave_slot(session: Session, hit_id: int, *, was_leased: bool, submitted: bool) -> None:
    """Count an assignment's change of status on its HIT (waits for the HIT's row lock).

    `next_expiry` stays a lower bound of the remaining leases' expiry (exact
    again at the next claim that finds it stale) and is cleared with the last lease.
    """
    if was_leased:
        stmt = _LEAVE_SUBMITTED if submitted else _LEAVE
    elif submitted:
        stmt = _LATE_SUBMITTED
    else:
        return
    session.execute(stmt, {"hit_id": hit_id})


_LEAVE = (
    update(_hits)
    .where(_hits.c.id == bindparam("hit_id"))
    .values(
        leased_count=_hits.c.leased_count - 1,
        next_expiry=case((_hits.c.leased_count <= 1, null()), else_=_hits.c.next_expiry),
    )
)
_LEAVE_SUBMITTED = _LEAVE.values(submitted_count=_hits.c.submitted_count + 1)
_LATE_SUBMITTED = (
    update(_hits)
    .where(_hits.c.id == bindparam("hit_id"))
    .values(submitted_count=_hits.c.submitted_count + 1)
)


def _allowed_lengths(
    session: Session, study: Study, annotator: Annotator, now: datetime
) -> list[int] | None:
    """Lengths where the annotator is under `max_cell_share` (None: no limit).

    Every HIT of a length has the same mix, so an annotator's share of a
    (length, kind) cell's judgments is their share of that length's replica slots.
    """
    if not study.max_cell_share:
        return None
    slots = dict(
        session.execute(
            select(Hit.length, func.sum(Hit.replicas))
            .where(Hit.study_id == study.id)
            .group_by(Hit.length)
        ).all()
    )
    mine = dict(
        session.execute(
            select(Hit.length, func.count())
            .join(Assignment, Assignment.hit_id == Hit.id)
            .where(Assignment.annotator_id == annotator.id, _active(now))
            .group_by(Hit.length)
        ).all()
    )
    return [
        length
        for length, n in slots.items()
        if mine.get(length, 0) + 1 <= max(1.0, study.max_cell_share * n)
    ]


def _candidates(lengths: list[int] | None, seen: list[int]):
    """HITs that may have a slot for the annotator, fewest submitted replicas first.

    By the counters a HIT has a free slot, or a lease that may have lapsed
    (`next_expiry` passed); the annotator never had it. A walk of `ix_hits_claim`.
    """
    c = _hits.alias("candidate").c
    mine = exists().where(
        _assignments.c.hit_id == c.id, _assignments.c.annotator_id == bindparam("annotator_id")
    )
    query = select(c.id).where(
        c.study_id == bindparam("p_study"),
        or_(
            c.leased_count + c.submitted_count < c.replicas,
            c.next_expiry <= bindparam("now", type_=_TIME),
        ),
        ~mine,
    )
    if lengths is not None:
        query = query.where(c.length.in_(lengths))
    if seen:
        query = query.where(c.id.not_in(seen))
    return query.order_by(c.submitted_count, c.index).limit(1)


def _claim_statement(candidate):
    """Lock the first unlocked candidate and count a lease on it, in one statement."""
    return (
        update(_hits)
        .where(_hits.c.id == candidate.with_for_update(skip_locked=True).scalar_subquery())
        .values(
            leased_count=_hits.c.leased_count + 1,
            next_expiry=case(
                (
                    or_(
                        _hits.c.next_expiry.is_(None),
                        _hits.c.next_expiry > bindparam("expires_at", type_=_TIME),
                    ),
                    bindparam("expires_at", type_=_TIME),
                ),
                else_=_hits.c.next_expiry,
            ),
        )
        .returning(_hits.c.id, _hits.c.leased_count, _hits.c.submitted_count, _hits.c.replicas)
    )


_PLAIN = _candidates(None, [])
_CLAIM = _claim_statement(_PLAIN)
_RECOUNT = select(
    func.coalesce(func.sum(case((_active(bindparam("now", type_=_TIME)), 1), else_=0)), 0),
    func.min(case((Assignment.status == AssignmentStatus.leased, Assignment.expires_at))),
).where(Assignment.hit_id == bindparam("hit_id"))
_UNCLAIM = (
    update(_hits)
    .where(_hits.c.id == bindparam("hit_id"))
    .values(leased_count=_hits.c.leased_count - 1, next_expiry=bindparam("floor", type_=_TIME))
)


def _claim_slot(
    session: Session, study: Study, annotator: Annotator, now: datetime, expires_at: datetime
) -> int | None:
    """Take a replica slot for a lease ending at `expires_at`: the HIT's id, or None."""
    lengths = _allowed_lengths(session, study, annotator, now)
    if lengths == []:
        return None
    seen: list[int] = []
    params = {
        "p_study": study.id,
        "annotator_id": annotator.id,
        "now": now,
        "expires_at": expires_at,
    }
    for attempt in range(_PASSES):
        plain = _PLAIN if lengths is None and not seen else _candidates(lengths, seen)
        claim = _CLAIM if plain is _PLAIN else _claim_statement(plain)
        row = session.execute(claim, params).first()
        if row is None:
            # Nothing free, or every free HIT is being filled by another request right now.
            if session.execute(plain, params).first() is None:
                return None
            time.sleep(min(0.005 * (attempt + 1), 0.05))
            continue
        if row.leased_count + row.submitted_count <= row.replicas:
            return row.id  # a free slot by the counters, read under the lock
        # Full by the counters: the slot is free only if one of its leases lapsed.
        # Recount now that the lock is held (a new statement sees every commit before it).
        taken, floor = session.execute(_RECOUNT, {"now": now, "hit_id": row.id}).one()
        if taken < row.replicas:
            return row.id
        session.execute(_UNCLAIM, {"hit_id": row.id, "floor": floor})  # and a tight bound
        seen.append(row.id)
    return None


_OWN = select(*_LEASE_COLS).where(_assignments.c.public_id == bindparam("public_id"))
_OWN_LOCKED = _OWN.with_for_update()
_RETURN = (
    update(_assignments)
    .where(_assignments.c.id == bindparam("assignment_id"))
    .values(status=AssignmentStatus.returned, returned_at=bindparam("now", type_=_TIME))
)


def return_assignment(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    public_id: str,
    now: datetime | None = None,
) -> Lease:
    """Give a leased HIT back: its slot returns to the pool; the annotator won't get it again."""
    assignment = _own_assignment(session, annotator, public_id, lock=True)
    if assignment.status is AssignmentStatus.submitted:
        raise AnnotationError("This HIT was already submitted.", 409)
    if assignment.status is AssignmentStatus.leased:
        assignment.status = AssignmentStatus.returned
        session.execute(_RETURN, {"assignment_id": assignment.id, "now": now or utcnow()})
        _leave_slot(session, assignment.hit_id, was_leased=True, submitted=False)
    return assignment


def expire_leases(session: Session, study: Study, now: datetime | None = None) -> int:
    """Mark lapsed leases expired (bookkeeping: lapsed leases already free their slot)."""
    now = now or utcnow()
    hit_ids = select(Hit.id).where(Hit.study_id == study.id)
    expired = session.execute(
        update(Assignment)
        .where(
            Assignment.hit_id.in_(hit_ids),
            Assignment.status == AssignmentStatus.leased,
            Assignment.expires_at <= now,
        )
        .values(status=AssignmentStatus.expired)
        .returning(Assignment.hit_id)
        .execution_options(synchronize_session=False)
    ).all()
    per_hit: dict[int, int] = {}
    for (hit_id,) in expired:
        per_hit[hit_id] = per_hit.get(hit_id, 0) + 1
    if per_hit:
        session.execute(
            update(_hits)
            .where(_hits.c.id == bindparam("hit_id"))
            .values(
                leased_count=_hits.c.leased_count - bindparam("n"),
                next_expiry=case(
                    (_hits.c.leased_count <= bindparam("n"), null()), else_=_hits.c.next_expiry
                ),
            ),
            [{"hit_id": h, "n": n} for h, n in sorted(per_hit.items())],  # in id order
        )
    return len(expired)


def _own_assignment(
    session: Session, annotator: Annotator | AnnotatorRef, public_id: str, *, lock: bool = False
) -> Lease:
    row = None
    if PLATFORM_ID.fullmatch(public_id or ""):  # a public id is token_urlsafe(24)
        session.flush()  # Core statements do not autoflush pending ORM changes
        row = session.execute(_OWN_LOCKED if lock else _OWN, {"public_id": public_id}).first()
    # Someone else's assignment gets the same answer as a made-up one: no oracle.
    if row is None or row.annotator_id != annotator.id:
        raise AnnotationError("This HIT is not one of yours. Reload the page to continue.", 404)
    return Lease(*row)


# -- a HIT's content --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Slot:
    """What a submit needs of one position: the screen order and the words by model rank."""

    item_id: int
    choice_order: tuple[int | str, ...]
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HitContent:
    """A HIT as built: what its page shows and how its answers resolve. Immutable."""

    positions: tuple[PositionView, ...]
    slots: dict[int, _Slot]
    fragments: dict[str, str] = field(default_factory=dict)  # the web layer's, see HitPage


class HitContentCache:
    """A bounded, thread-safe cache of `HitContent` by HIT id, for one database.

    A HIT's positions, their screen orders and their items' words never change
    once built (app.hits writes them once; nothing updates or deletes them), so
    a web process may keep them: correctness never depends on the cache, which
    only saves reading and decoding the same ten items on every page and submit.
    Whatever is mutable (counters, leases, the study's settings) is always read. An entry,
    with its rendered texts, is about 30 KB: the default bound keeps a worker under ~30 MB.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._data: OrderedDict[int, HitContent] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, hit_id: int) -> HitContent | None:
        with self._lock:
            content = self._data.get(hit_id)
            if content is not None:
                self._data.move_to_end(hit_id)
            return content

    def put(self, hit_id: int, content: HitContent) -> None:
        with self._lock:
            self._data[hit_id] = content
            self._data.move_to_end(hit_id)
            while len(self._data) > self.size:
                self._data.popitem(last=False)


HIT_CACHE = "ebc_hit_cache"  # key of a session's `info` (set by the web app's sessionmaker)

_positions = HitPosition.__table__
_items = Item.__table__
_PAGE = (
    select(
        _positions.c.position,
        _positions.c.choice_order,
        _positions.c.item_id,
        _items.c.words,
        _items.c.prompt,
        _items.c.source,
        _items.c.choices,
    )
    .join(_items, _items.c.id == _positions.c.item_id)
    .where(_positions.c.hit_id == bindparam("hit_id"))
    .order_by(_positions.c.position)
)


def hit_content(session: Session, hit_id: int) -> HitContent:
    """The HIT's positions, from the session's cache when it has one (see HitContentCache)."""
    cache: HitContentCache | None = session.info.get(HIT_CACHE)
    content = cache.get(hit_id) if cache is not None else None
    if content is not None:
        return content
    positions, slots = [], {}
    for r in session.execute(_PAGE, {"hit_id": hit_id}):
        words = tuple(choice["word"] for choice in r.choices)
        positions.append(
            PositionView(
                number=r.position,
                prompt=r.prompt,
                words=r.words,
                source=r.source,
                options=[words[rank] for rank in r.choice_order if rank != "none"],
            )
        )
        slots[r.position] = _Slot(r.item_id, tuple(r.choice_order), words)
    content = HitContent(tuple(positions), slots)
    if cache is not None and slots:
        cache.put(hit_id, content)
    return content


# -- the page ---------------------------------------------------------------------------

_SERVED = (
    update(_assignments)
    .where(_assignments.c.id == bindparam("assignment_id"))
    .values(page_served_at=bindparam("now", type_=_TIME))
)


def hit_page(
    session: Session,
    assignment: Lease,
    now: datetime | None = None,
    *,
    study: StudyRef | None = None,
) -> HitPage:
    """The HIT as shown: contexts and their words in the stored screen order."""
    if assignment.page_served_at is None:
        assignment.page_served_at = now or utcnow()
        session.execute(_SERVED, {"assignment_id": assignment.id, "now": assignment.page_served_at})
    if study is None:
        annotator_study = select(_annotators.c.study_id).where(
            _annotators.c.id == assignment.annotator_id
        )
        study = study_ref(session, session.execute(annotator_study).scalar_one())
    content = hit_content(session, assignment.hit_id)
    return HitPage(
        public_id=assignment.public_id,
        positions=list(content.positions),
        task=str(study.task),
        expires_at_iso=assignment.expires_at.isoformat(timespec="seconds"),
        fragments=content.fragments,
    )


def kept_page(session: Session, result: Submission) -> HitPage:
    """A submitted HIT with the answers that were kept (after a repeat that differed)."""
    lease = result.assignment
    return HitPage(
        public_id=lease.public_id,
        positions=list(hit_content(session, lease.hit_id).positions),
        task="",
        expires_at_iso=lease.expires_at.isoformat(timespec="seconds"),
        answers=dict(result.kept),
    )


# -- submissions ------------------------------------------------------------------------


def answers_from_form(form: Mapping[str, str]) -> tuple[dict[int, int], dict[int, int]]:
    """`o{pos}` -> chosen screen slot, `ms{pos}` -> client milliseconds. Junk is refused.

    Numbers are plain ASCII digits (`str.isdigit` alone also takes `²` and other
    scripts' digits, and `int()` takes those, underscores and spaces; `inf` is no number
    here). Client times may be negative (clipped to 0 when stored). Checked inline: this
    runs for every field of every submission.
    """
    answers: dict[int, int] = {}
    times: dict[int, int] = {}
    for name, value in form.items():
        if name[:1] == "o":
            rest = name[1:]
            if not (0 < len(rest) <= 3 and rest.isascii() and rest.isdigit()):
                continue
            if not (0 < len(value) <= 2 and value.isascii() and value.isdigit()):
                raise AnnotationError(f"The answer field {name} is not valid.", 400)
            answers[int(rest)] = int(value)
        elif name[:2] == "ms":
            rest = name[2:]
            if value == "" or not (0 < len(rest) <= 3 and rest.isascii() and rest.isdigit()):
                continue
            number = value[1:] if value[:1] == "-" else value
            if not (0 < len(number) <= 12 and number.isascii() and number.isdigit()):
                raise AnnotationError(f"The answer field {name} is not valid.", 400)
            times[int(rest)] = int(value)
    return answers, times


_judgments = Judgment.__table__
_INSERT_JUDGMENTS = insert(_judgments)
_SUBMITTED = (
    update(_assignments)
    .where(_assignments.c.id == bindparam("assignment_id"))
    .values(
        status=AssignmentStatus.submitted,
        submitted_at=bindparam("now", type_=_TIME),
        late=bindparam("late"),
        over_cap=bindparam("over_cap"),
        extra_replica=bindparam("extra_replica"),
        after_block=bindparam("after_block"),
    )
)
# PostgreSQL stores a submission in one statement of fixed text: the judgments (one array
# per column, unnested), the assignment's new status and the HIT's counters (as
# `_leave_slot` counts them), so its compiled form and the server's prepared statement
# are reused and the three writes cost one round trip. The locks are those of the
# separate statements, in the same order: the assignment (already held), then the HIT.
_PG_STORE_SUBMISSION = text(
    """
    WITH judged AS (
        INSERT INTO judgments (assignment_id, position, item_id, "option", chosen_rank,
                               chosen_word, d, client_ms, too_fast, late, created_at)
        SELECT :assignment_id, u.position, u.item_id, u.option, u.chosen_rank,
               u.chosen_word, u.d, u.client_ms, u.too_fast, :late, :now
        FROM unnest(CAST(:position AS integer[]), CAST(:item_id AS integer[]),
                    CAST(:option AS integer[]), CAST(:chosen_rank AS integer[]),
                    CAST(:chosen_word AS varchar[]), CAST(:d AS float8[]),
                    CAST(:client_ms AS integer[]), CAST(:too_fast AS boolean[]))
             AS u(position, item_id, option, chosen_rank, chosen_word, d, client_ms, too_fast)
    ), submitted AS (
        UPDATE assignments SET status = :status, submitted_at = :now, late = :late,
                               over_cap = :over_cap, extra_replica = :extra_replica,
                               after_block = :after_block
        WHERE id = :assignment_id
    )
    UPDATE hits
    SET leased_count = leased_count - CASE WHEN :was_leased THEN 1 ELSE 0 END,
        submitted_count = submitted_count + 1,
        next_expiry = CASE WHEN :was_leased AND leased_count <= 1 THEN NULL
                           ELSE next_expiry END
    WHERE id = :hit_id
    """
).bindparams(
    bindparam("now", type_=_TIME),
    bindparam("status", type_=_assignments.c.status.type),
    bindparam("was_leased", type_=Boolean()),
    *(bindparam(flag, type_=Boolean()) for flag in ("over_cap", "extra_replica", "after_block")),
)
_JUDGMENT_COLUMNS = (
    "position",
    "item_id",
    "option",
    "chosen_rank",
    "chosen_word",
    "d",
    "client_ms",
    "too_fast",
)


@dataclass(frozen=True, slots=True)
class _Flags:
    """Why a kept submission may not count (assignments' flags; see the results' rules)."""

    over_cap: bool = False  # past the annotator's cap (a late answer after others)
    extra_replica: bool = False  # past the HIT's replicas (a late answer after a re-let)
    after_block: bool = False  # sent after the annotator was blocked


_NO_FLAGS = _Flags()


def _store_submission(
    session: Session,
    assignment: Lease,
    *,
    was_leased: bool,
    late: bool,
    now: datetime,
    rows: list[tuple],
    flags: _Flags = _NO_FLAGS,
) -> None:
    """Write a HIT's judgments (`rows` hold `_JUDGMENT_COLUMNS`), its status, flags and
    counters."""
    flag_params = {
        "over_cap": flags.over_cap,
        "extra_replica": flags.extra_replica,
        "after_block": flags.after_block,
    }
    if session.get_bind().dialect.name == "postgresql":
        columns = [list(column) for column in zip(*rows, strict=True)]
        params: dict[str, object] = dict(zip(_JUDGMENT_COLUMNS, columns, strict=True))
        params.update(
            assignment_id=assignment.id,
            hit_id=assignment.hit_id,
            status=AssignmentStatus.submitted,
            was_leased=was_leased,
            late=late,
            now=now,
            **flag_params,
        )
        session.execute(_PG_STORE_SUBMISSION, params)
        return
    common = {"assignment_id": assignment.id, "late": late, "created_at": now}
    session.execute(
        _INSERT_JUDGMENTS,
        [{**common, **dict(zip(_JUDGMENT_COLUMNS, row, strict=True))} for row in rows],
    )
    session.execute(
        _SUBMITTED, {"assignment_id": assignment.id, "now": now, "late": late, **flag_params}
    )
    _leave_slot(session, assignment.hit_id, was_leased=was_leased, submitted=True)


_STORED_ANSWERS = select(_judgments.c.position, _judgments.c.option).where(
    _judgments.c.assignment_id == bindparam("assignment_id")
)
_LOCK_HIT = select(_hits.c.replicas).where(_hits.c.id == bindparam("hit_id")).with_for_update()
_a = _assignments.c
_held = or_(
    _a.status == AssignmentStatus.submitted,
    and_(_a.status == AssignmentStatus.leased, _a.expires_at > bindparam("now", type_=_TIME)),
)
# What a late submission competes with, besides itself: the annotator's work held (for the
# cap) and the HIT's replica slots held by others (submitted, or leased and unexpired).
_LATE_COUNTS = select(
    select(func.count())
    .where(_a.annotator_id == bindparam("annotator_id"), _a.id != bindparam("self"), _held)
    .scalar_subquery(),
    select(func.count())
    .where(_a.hit_id == bindparam("hit_id"), _a.id != bindparam("self"), _held)
    .scalar_subquery(),
)


def _late_flags(
    session: Session, annotator: Annotator | AnnotatorRef, assignment: Lease, cap: int, now
) -> tuple[bool, bool]:
    """(over_cap, extra_replica) of a late submission, counted under the HIT's row lock.

    Only late ones need this: an unexpired lease holds one of the annotator's cap and
    one of the HIT's replica slots, counted when it was leased. A lapsed lease's slot
    may have gone to someone else, and the annotator may have taken other work since:
    kept, but flagged when the others already fill the cap or the replicas.
    """
    replicas = session.execute(_LOCK_HIT, {"hit_id": assignment.hit_id}).scalar_one()
    mine, theirs = session.execute(
        _LATE_COUNTS,
        {
            "annotator_id": annotator.id,
            "hit_id": assignment.hit_id,
            "self": assignment.id,
            "now": now,
        },
    ).one()
    return mine >= cap, theirs >= replicas


def submit(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    public_id: str,
    answers: Mapping[int, int],
    client_ms: Mapping[int, int] | None = None,
    now: datetime | None = None,
) -> Submission:
    """Store one judgment per position; d comes from the stored screen order.

    Repeating a submitted assignment writes nothing and returns the stored
    result (with the stored answers when the repeat's differ). A submission after the
    lease ran out is stored and flagged late (and `over_cap` / `extra_replica` when
    others took the annotator's cap or the HIT's replicas meanwhile); one from a blocked
    annotator is stored and flagged `after_block`. A HIT the annotator gave back cannot
    be submitted (409). Call with the annotator locked.
    """
    now = now or utcnow()
    client_ms = client_ms or {}
    # The assignment, locked: a concurrent duplicate waits here, then sees it submitted.
    assignment = _own_assignment(session, annotator, public_id, lock=True)
    if assignment.status is AssignmentStatus.submitted:
        stored = dict(session.execute(_STORED_ANSWERS, {"assignment_id": assignment.id}).all())
        kept = stored if stored != dict(answers) else {}
        return Submission(assignment, assignment.late, repeated=True, too_fast=0, kept=kept)
    if assignment.status is AssignmentStatus.returned:
        raise AnnotationError(
            "You gave this HIT back (\u201cSkip this HIT\u201d), so its answers can no longer "
            "be sent. Nothing was saved; reload the page for your next HIT.",
            409,
        )
    study = _study_for(session, annotator)
    slots = hit_content(session, assignment.hit_id).slots
    if not slots:  # never built that way; refused rather than stored empty
        raise AnnotationError("This HIT has no texts to answer.", 409)
    kept = {p: o for p, o in answers.items() if p in slots and 0 <= o < len(slots[p].choice_order)}
    if any(p not in slots for p in answers):
        raise AnnotationError("The form names a text that is not in this HIT.", 400)
    if len(kept) != len(answers):
        raise InvalidAnswers("One of the answers is not a valid option.", kept)
    if len(kept) != len(slots):
        missing = len(slots) - len(kept)
        raise InvalidAnswers(
            f"Please choose an answer for every text ({missing} still open).", kept
        )

    was_leased = assignment.status is AssignmentStatus.leased
    late = not was_leased or now > assignment.expires_at
    flags = _NO_FLAGS
    if late or annotator.blocked:
        over_cap = extra = False
        if late:
            over_cap, extra = _late_flags(
                session, annotator, assignment, annotator_cap(annotator, study), now
            )
        flags = _Flags(over_cap, extra, bool(annotator.blocked))
    # No client time (no JavaScript): the server's time since the page was
    # served, spread over the items, is the best evidence of haste.
    served = assignment.page_served_at or assignment.leased_at
    server_ms_per_item = (now - served).total_seconds() * 1000 / max(1, len(slots))
    too_fast = 0
    rows = []
    for position, slot in sorted(slots.items()):
        option = kept[position]
        rank = slot.choice_order[option]
        ms = client_ms.get(position)
        ms = None if ms is None else min(max(ms, 0), MAX_CLIENT_MS)
        fast = (ms if ms is not None else server_ms_per_item) < study.min_ms_per_item
        too_fast += fast
        if rank == "none":
            rows.append((position, slot.item_id, option, None, None, 1.0, ms, fast))
        else:
            word = slot.words[int(rank)]
            d = 0.0 if rank == 0 else 1.0
            rows.append((position, slot.item_id, option, int(rank), word, d, ms, fast))
    _store_submission(
        session, assignment, was_leased=was_leased, late=late, now=now, rows=rows, flags=flags
    )
    assignment.status = AssignmentStatus.submitted
    assignment.submitted_at = now
    assignment.late = late
    return Submission(assignment, late, repeated=False, too_fast=too_fast)
