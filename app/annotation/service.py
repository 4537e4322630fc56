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

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeSerializer
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

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code


class InvalidAnswers(AnnotationError):
    """The form is incomplete or holds an impossible option: show it again."""

    def __init__(self, message: str, answers: dict[int, int]) -> None:
        super().__init__(message, 400)
        self.answers = answers


# -- links and identities ---------------------------------------------------------------


def _serializer(secret_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret_key, salt=INVITE_SALT)


def invite_token(secret_key: str, annotator: Annotator, session_id: str | None = None) -> str:
    """The signed token of `annotator`'s link; rotating `invite_nonce` revokes it."""
    payload: list[object] = [annotator.id, annotator.invite_nonce]
    if session_id:
        payload.append(session_id)
    return _serializer(secret_key).dumps(payload)


def read_invite_token(secret_key: str, token: str) -> InviteRef:
    """Check the signature only (no database): a tampered token is refused here."""
    try:
        payload = _serializer(secret_key).loads(token)
    except BadSignature:
        raise AnnotationError(
            "This link is not valid. Please use the link you were given.", 404
        ) from None
    if (
        not isinstance(payload, list)
        or len(payload) not in (2, 3)
        or not isinstance(payload[0], int)
        or not isinstance(payload[1], str)
    ):
        raise AnnotationError("This link is not valid. Please use the link you were given.", 404)
    return InviteRef(payload[0], payload[1], payload[2] if len(payload) == 3 else None)


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
_LOCK = (
    update(_annotators)
    .where(_annotators.c.id == bindparam("annotator_id"))
    .values(last_seen_at=bindparam("now", type_=_TIME))
    .returning(*_ANNOTATOR_COLS)
)
# PostgreSQL also returns the study's row (UPDATE ... FROM): one statement for both.
_LOCK_WITH_STUDY = (
    update(_annotators)
    .where(_annotators.c.id == bindparam("annotator_id"), _annotators.c.study_id == _studies.c.id)
    .values(last_seen_at=bindparam("now", type_=_TIME))
    .returning(*_ANNOTATOR_COLS, *(c.label(f"study_{c.name}") for c in _STUDY_COLS))
)
_STUDY = select(*_STUDY_COLS).where(_studies.c.id == bindparam("study_id"))


def study_ref(session: Session, study_id: int) -> StudyRef:
    """The study's settings the annotator pages need, read now (they may change while it runs)."""
    row = session.execute(_STUDY, {"study_id": study_id}).one()
    return StudyRef(*row)


def _lock_annotator(session: Session, annotator_id: int, now: datetime) -> AnnotatorRef | None:
    """Lock the annotator's row; their study's settings are read alongside.

    SQLite cannot return columns of an UPDATE's FROM table, so it reads the study next.
    """
    begin_write(session)
    session.flush()  # the Core statements below do not autoflush pending ORM changes
    if session.get_bind().dialect.name == "postgresql":
        row = session.execute(_LOCK_WITH_STUDY, {"annotator_id": annotator_id, "now": now}).first()
        if row is None:
            return None
        return AnnotatorRef(*row[:_N_ANNOTATOR], study=StudyRef(*row[_N_ANNOTATOR:]))
    row = session.execute(_LOCK, {"annotator_id": annotator_id, "now": now}).first()
    if row is None:
        return None
    return AnnotatorRef(*row, study=study_ref(session, row.study_id))


def annotator_for_invite(
    session: Session, ref: InviteRef, now: datetime | None = None
) -> AnnotatorRef:
    """The annotator a signed link names, locked for this transaction (404 if revoked)."""
    annotator = _lock_annotator(session, ref.annotator_id, now or utcnow())
    if (
        annotator is None
        or annotator.invite_nonce is None
        or not hmac.compare_digest(annotator.invite_nonce, ref.nonce)
    ):
        raise AnnotationError("This link is no longer valid. Please ask for a new one.", 404)
    return annotator


def crowd_annotator(
    session: Session, study: Study, channel: Channel, external_id: str, now: datetime | None = None
) -> AnnotatorRef:
    """The study's annotator for a platform id (MTurk workerId, panel participant), made once."""
    now = now or utcnow()
    external_id = external_id.strip()
    if not external_id or len(external_id) > 255:
        raise AnnotationError("The platform did not send a valid worker id.", 400)
    begin_write(session)
    query = select(Annotator.id).where(
        Annotator.study_id == study.id,
        Annotator.channel == channel,
        Annotator.external_id == external_id,
    )
    annotator_id = session.scalar(query)
    if annotator_id is None:
        try:
            with session.begin_nested():
                new = Annotator(
                    study_id=study.id,
                    channel=channel,
                    external_id=external_id,
                    invite_nonce=secrets.token_urlsafe(16),
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
    study = session.scalar(select(Study).where(Study.slug == slug))
    if study is None:
        raise AnnotationError("There is no such study.", 404)
    return study


def check_submit_to(study: Study, submit_to: str) -> str:
    """`turkSubmitTo` must be an MTurk site (or one the study lists, for a sandbox stand-in)."""
    extra = (study.channels.get("mturk") or {}).get("submit_origins") or []
    parts = urlsplit(submit_to)
    origin = f"{parts.scheme}://{parts.netloc}"
    if origin not in (*MTURK_SUBMIT_ORIGINS, *extra) or parts.query or parts.fragment:
        raise AnnotationError("This page was opened with an unknown turkSubmitTo.", 400)
    return origin


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


# -- submissions ------------------------------------------------------------------------


def answers_from_form(form: Mapping[str, str]) -> tuple[dict[int, int], dict[int, int]]:
    """`o{pos}` -> chosen screen slot, `ms{pos}` -> client milliseconds. Junk is refused."""
    answers: dict[int, int] = {}
    times: dict[int, int] = {}
    for name, value in form.items():
        if name.startswith("o"):
            target, rest = answers, name[1:]
        elif name.startswith("ms"):
            target, rest = times, name[2:]
        else:
            continue
        if rest.isdigit() and len(rest) <= 3:
            if value == "" and target is times:
                continue
            try:
                target[int(rest)] = int(value)
            except ValueError:
                raise AnnotationError(f"The answer field {name} is not valid.", 400) from None
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
        UPDATE assignments SET status = :status, submitted_at = :now, late = :late
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


def _store_submission(
    session: Session,
    assignment: Lease,
    *,
    was_leased: bool,
    late: bool,
    now: datetime,
    rows: list[tuple],
) -> None:
    """Write a HIT's judgments (`rows` hold `_JUDGMENT_COLUMNS`), its status and counters."""
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
        )
        session.execute(_PG_STORE_SUBMISSION, params)
        return
    common = {"assignment_id": assignment.id, "late": late, "created_at": now}
    session.execute(
        _INSERT_JUDGMENTS,
        [{**common, **dict(zip(_JUDGMENT_COLUMNS, row, strict=True))} for row in rows],
    )
    session.execute(_SUBMITTED, {"assignment_id": assignment.id, "now": now, "late": late})
    _leave_slot(session, assignment.hit_id, was_leased=was_leased, submitted=True)


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
    result. A submission after the lease ran out (or after a return) is
    stored and flagged late. Call with the annotator locked.
    """
    now = now or utcnow()
    client_ms = client_ms or {}
    # The assignment, locked: a concurrent duplicate waits here, then sees it submitted.
    assignment = _own_assignment(session, annotator, public_id, lock=True)
    if assignment.status is AssignmentStatus.submitted:
        return Submission(assignment, assignment.late, repeated=True, too_fast=0)
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
    _store_submission(session, assignment, was_leased=was_leased, late=late, now=now, rows=rows)
    assignment.status = AssignmentStatus.submitted
    assignment.submitted_at = now
    assignment.late = late
    return Submission(assignment, late, repeated=False, too_fast=too_fast)
