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
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import and_, bindparam, case, exists, func, null, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from app.annotation.schemas import (
    HitPage,
    InviteRef,
    PositionView,
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


def _lock_annotator(session: Session, annotator_id: int, now: datetime) -> Annotator | None:
    """Lock the annotator's row (one statement); their study is loaded alongside.

    On PostgreSQL the UPDATE also returns the study's row (UPDATE ... FROM), so
    `session.get(Study, annotator.study_id)` costs nothing afterwards.
    """
    begin_write(session)
    if session.get_bind().dialect.name == "postgresql":
        row = session.execute(_LOCK_WITH_STUDY, {"annotator_id": annotator_id, "now": now}).first()
        if row is None:
            return None
        annotator, study = row
        # The identity map holds unmodified objects weakly: keep the study for the session.
        session.info.setdefault("ebc_studies", {})[study.id] = study
        return annotator
    annotator = session.execute(
        _LOCK, {"annotator_id": annotator_id, "now": now}
    ).scalar_one_or_none()
    if annotator is not None:
        session.get(Study, annotator.study_id, populate_existing=True)
    return annotator


def annotator_for_invite(
    session: Session, ref: InviteRef, now: datetime | None = None
) -> Annotator:
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
) -> Annotator:
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


_TIME = UTCDateTime()

# The hot statements are built once: their cache keys are memoised on the objects, so
# executing one costs no statement construction and no cache-key traversal.
_LOCK = (
    update(Annotator)
    .where(Annotator.id == bindparam("annotator_id"))
    .values(last_seen_at=bindparam("now", type_=_TIME))
    .returning(Annotator)
    .execution_options(populate_existing=True, synchronize_session=False)
)
_LOCK_WITH_STUDY = (
    update(Annotator)
    .where(Annotator.id == bindparam("annotator_id"), Annotator.study_id == Study.id)
    .values(last_seen_at=bindparam("now", type_=_TIME))
    .returning(Annotator, Study)
    .execution_options(populate_existing=True, synchronize_session=False)
)


def _annotator_state(by_external: bool):
    """One statement: the annotator's submitted and active counts, plus the leases to resume.

    The counts come from a one-row subquery outer-joined to the assignments a
    request may resume: the annotator's open leases without an external id, in
    lease order; or (MTurk) the assignment with the given external id, whoever holds it.
    """
    counts = (
        select(
            func.coalesce(
                func.sum(case((Assignment.status == AssignmentStatus.submitted, 1), else_=0)), 0
            ).label("done"),
            func.coalesce(
                func.sum(case((_active(bindparam("now", type_=_TIME)), 1), else_=0)), 0
            ).label("held"),
        )
        .where(Assignment.annotator_id == bindparam("annotator_id"))
        .subquery("counts")
    )
    if by_external:
        resumable = Assignment.external_assignment_id == bindparam("external")
    else:
        resumable = and_(
            Assignment.annotator_id == bindparam("annotator_id"),
            Assignment.status == AssignmentStatus.leased,
            Assignment.external_assignment_id.is_(None),
        )
    return (
        select(counts.c.done, counts.c.held, Assignment)
        .select_from(counts)
        .outerjoin(Assignment, resumable)
        .order_by(Assignment.leased_at)
    )


_STATE = {False: _annotator_state(False), True: _annotator_state(True)}


def annotator_cap(annotator: Annotator, study: Study) -> int:
    return annotator.hit_cap if annotator.hit_cap is not None else study.per_annotator_cap


def submitted_count(session: Session, annotator: Annotator) -> int:
    return session.scalar(
        select(func.count()).where(
            Assignment.annotator_id == annotator.id,
            Assignment.status == AssignmentStatus.submitted,
        )
    )


def next_assignment(
    session: Session,
    annotator: Annotator,
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
    study = session.get(Study, annotator.study_id)
    assert study is not None
    cap = annotator_cap(annotator, study)
    by_external = external_assignment_id is not None
    rows = session.execute(
        _STATE[by_external],
        {"annotator_id": annotator.id, "now": now, "external": external_assignment_id},
    ).all()
    done, held_count = int(rows[0].done), int(rows[0].held)
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

    leases = [r.Assignment for r in rows if r.Assignment is not None]
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
            lease.status = AssignmentStatus.expired  # its slot is back in the pool
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
    assignment = Assignment(
        public_id=secrets.token_urlsafe(24),
        hit_id=hit_id,
        annotator_id=annotator.id,
        leased_at=now,
        expires_at=expires_at,
        page_served_at=now if serve else None,
        external_assignment_id=external_assignment_id,
        external_hit_id=external_hit_id,
        external_session_id=external_session_id,
        submit_to=submit_to,
    )
    session.add(assignment)
    session.flush()
    work.status, work.assignment = WorkStatus.assigned, assignment
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


_hits = Hit.__table__
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
    c = aliased(Hit, name="candidate")
    mine = exists().where(
        Assignment.hit_id == c.id, Assignment.annotator_id == bindparam("annotator_id")
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


def return_assignment(
    session: Session, annotator: Annotator, public_id: str, now: datetime | None = None
) -> Assignment:
    """Give a leased HIT back: its slot returns to the pool; the annotator won't get it again."""
    assignment = _own_assignment(session, annotator, public_id)
    if assignment.status is AssignmentStatus.submitted:
        raise AnnotationError("This HIT was already submitted.", 409)
    if assignment.status is AssignmentStatus.leased:
        assignment.status = AssignmentStatus.returned
        assignment.returned_at = now or utcnow()
        session.flush()
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
    session: Session, annotator: Annotator, public_id: str, *, lock: bool = False
) -> Assignment:
    query = select(Assignment).where(Assignment.public_id == public_id)
    if lock:
        query = query.with_for_update()
    assignment = session.scalar(query.execution_options(populate_existing=True))
    # Someone else's assignment gets the same answer as a made-up one: no oracle.
    if assignment is None or assignment.annotator_id != annotator.id:
        raise AnnotationError("This HIT is not one of yours. Reload the page to continue.", 404)
    return assignment


# -- the page ---------------------------------------------------------------------------

_PAGE = (
    select(
        HitPosition.position,
        HitPosition.choice_order,
        Item.words,
        Item.prompt,
        Item.source,
        Item.choices,
    )
    .join(Item, Item.id == HitPosition.item_id)
    .where(HitPosition.hit_id == bindparam("hit_id"))
    .order_by(HitPosition.position)
)


def _study_of(session: Session, assignment: Assignment) -> Study:
    """The assignment's study, from the session when the request already loaded it."""
    annotator = session.get(Annotator, assignment.annotator_id)
    study = session.get(Study, annotator.study_id) if annotator is not None else None
    assert study is not None
    return study


def hit_page(session: Session, assignment: Assignment, now: datetime | None = None) -> HitPage:
    """The HIT as shown: contexts and their words in the stored screen order."""
    if assignment.page_served_at is None:
        assignment.page_served_at = now or utcnow()
    study_task = _study_of(session, assignment).task
    rows = session.execute(_PAGE, {"hit_id": assignment.hit_id}).all()
    positions = [
        PositionView(
            number=r.position,
            prompt=r.prompt,
            words=r.words,
            source=r.source,
            options=[r.choices[rank]["word"] for rank in r.choice_order if rank != "none"],
        )
        for r in rows
    ]
    return HitPage(
        public_id=assignment.public_id,
        positions=positions,
        task=str(study_task),
        expires_at_iso=assignment.expires_at.isoformat(timespec="seconds"),
    )


# -- submissions ------------------------------------------------------------------------


def answers_from_form(form: Mapping[str, str]) -> tuple[dict[int, int], dict[int, int]]:
    """`o{pos}` -> chosen screen slot, `ms{pos}` -> client milliseconds. Junk is refused."""
    answers: dict[int, int] = {}
    times: dict[int, int] = {}
    for name, value in form.items():
        for prefix, target in (("o", answers), ("ms", times)):
            rest = name[len(prefix) :]
            if name.startswith(prefix) and rest.isdigit() and len(rest) <= 3:
                if value == "" and target is times:
                    continue
                try:
                    target[int(rest)] = int(value)
                except ValueError:
                    raise AnnotationError(f"The answer field {name} is not valid.", 400) from None
    return answers, times


_SUBMIT_ROWS = (
    select(
        Assignment,
        HitPosition.position,
        HitPosition.choice_order,
        HitPosition.item_id,
        Item.choices,
    )
    .join(HitPosition, HitPosition.hit_id == Assignment.hit_id)
    .join(Item, Item.id == HitPosition.item_id)
    .where(Assignment.public_id == bindparam("public_id"))
    .order_by(HitPosition.position)
    .with_for_update(of=Assignment)
    .execution_options(populate_existing=True)
)
_INSERT_JUDGMENTS = Judgment.__table__.insert()


def submit(
    session: Session,
    annotator: Annotator,
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
    # The assignment, locked, and its HIT's positions: one statement.
    rows = session.execute(_SUBMIT_ROWS, {"public_id": public_id}).all()
    assignment = rows[0].Assignment if rows else None
    # Someone else's assignment gets the same answer as a made-up one: no oracle.
    if assignment is None or assignment.annotator_id != annotator.id:
        raise AnnotationError("This HIT is not one of yours. Reload the page to continue.", 404)
    if assignment.status is AssignmentStatus.submitted:
        return Submission(assignment, assignment.late, repeated=True, too_fast=0)
    study = _study_of(session, assignment)
    valid = {r.position: len(r.choice_order) for r in rows}
    kept = {p: o for p, o in answers.items() if p in valid and 0 <= o < valid[p]}
    if set(answers) - set(valid):
        raise AnnotationError("The form names a text that is not in this HIT.", 400)
    if len(kept) != len(answers):
        raise InvalidAnswers("One of the answers is not a valid option.", kept)
    if len(kept) != len(valid):
        missing = len(valid) - len(kept)
        raise InvalidAnswers(
            f"Please choose an answer for every text ({missing} still open).", kept
        )

    was_leased = assignment.status is AssignmentStatus.leased
    late = not was_leased or now > assignment.expires_at
    # No client time (no JavaScript): the server's time since the page was
    # served, spread over the items, is the best evidence of haste.
    served = assignment.page_served_at or assignment.leased_at
    server_ms_per_item = (now - served).total_seconds() * 1000 / max(1, len(rows))
    too_fast = 0
    judgments = []
    for r in rows:
        option = kept[r.position]
        rank = r.choice_order[option]
        ms = client_ms.get(r.position)
        ms = None if ms is None else min(max(ms, 0), MAX_CLIENT_MS)
        fast = (ms if ms is not None else server_ms_per_item) < study.min_ms_per_item
        too_fast += fast
        judgments.append(
            {
                "assignment_id": assignment.id,
                "position": r.position,
                "item_id": r.item_id,
                "option": option,
                "chosen_rank": None if rank == "none" else int(rank),
                "chosen_word": None if rank == "none" else r.choices[int(rank)]["word"],
                "d": 0.0 if rank == 0 else 1.0,
                "client_ms": ms,
                "too_fast": fast,
                "late": late,
                "created_at": now,
            }
        )
    session.execute(_INSERT_JUDGMENTS, judgments)
    assignment.status = AssignmentStatus.submitted
    assignment.submitted_at = now
    assignment.late = late
    session.flush()
    _leave_slot(session, assignment.hit_id, was_leased=was_leased, submitted=True)
    return Submission(assignment, late, repeated=False, too_fast=too_fast)
