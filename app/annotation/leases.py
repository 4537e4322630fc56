"""Assignments: what an annotator works on now, claims of replica slots, returns, expiry.

Services flush; the caller commits.

Concurrency. Every entry point that writes first takes the annotator's row
lock (an UPDATE of `last_seen_at`: a row lock on PostgreSQL; on SQLite the
transaction is opened with BEGIN IMMEDIATE, which serialises writers), so one
annotator's requests run one at a time: the cap and the "never the same HIT
twice" rule are checked and written under that lock.

Replica slots. Each HIT counts its `leased` and `submitted` assignments
(`Hit.leased_count`, `Hit.submitted_count`) and keeps `Hit.next_expiry`, a
lower bound of its leases' expiry times. Every change of an assignment's
status updates these in the same transaction, under the HIT's row lock, by one
rule (`queries.slot_counters`). A claim is one UPDATE of the first HIT, fewest
submitted first, that has a slot by its counters or a lease that may have
lapsed, picked with `FOR UPDATE SKIP LOCKED`; the counters it reads are those
of the row it locked (PostgreSQL rechecks a row changed since the statement
began), so two annotators never fill the same last slot. A slot freed only by a
lapsed lease is recounted after the lock is held. Locks are taken in the order
annotator, assignment, HIT; a claim never waits for a HIT lock, so no deadlock
can form. `lease_hit` (one given HIT, for imported work) waits for that HIT's lock while
holding only the annotator's, which keeps the order.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime, timedelta

from sqlalchemy import bindparam, case, or_, select, update
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.identities import PLATFORM_ID, study_ref
from app.annotation.queries import (
    CLAIM,
    EXPIRE_LAPSED,
    EXPIRE_ONE,
    LEAVE,
    LEAVE_MANY,
    LOCAL_CLOSED,
    MINE_BY_LENGTH,
    NEW_LEASE,
    OWN,
    OWN_LOCKED,
    PLAIN,
    RECOUNT,
    RETURN,
    SERVED,
    SLOTS_BY_LENGTH,
    STATE,
    TIME,
    UNCLAIM,
    assignments,
    candidates,
    claim_statement,
    hits,
)
from app.annotation.schemas import AnnotatorRef, Lease, StudyRef, Work, WorkStatus
from app.crowd.registry import unverified_until_synced
from app.models import Annotator, AssignmentStatus, Channel, Study, StudyStatus, utcnow

_PASSES = 40  # passes when every free HIT was momentarily locked by others


def annotator_cap(annotator: Annotator | AnnotatorRef, study: Study | StudyRef) -> int:
    return annotator.hit_cap if annotator.hit_cap is not None else study.per_annotator_cap


def study_for(session: Session, annotator: Annotator | AnnotatorRef) -> StudyRef:
    """The study read with the annotator's lock, else read now (callers with an ORM annotator)."""
    study = getattr(annotator, "study", None)
    if isinstance(study, StudyRef):
        return study
    session.flush()  # the Core statements of this package do not autoflush pending ORM changes
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
    study = study_for(session, annotator)
    cap = annotator_cap(annotator, study)
    by_external = external_assignment_id is not None
    rows = session.execute(
        STATE[by_external],
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
            expired = session.execute(EXPIRE_ONE, {"assignment_id": lease.id}).rowcount
            if expired:  # its slot is back in the pool
                leave_slot(session, lease.hit_id, was_leased=True, submitted=False)
            work.expired_previous = True
        if work.status is WorkStatus.assigned:
            return work

    # A lease held is handed in as usual; an expired local posting only stops new ones.
    if annotator.channel is Channel.local and session.scalar(LOCAL_CLOSED, {"study_id": study.id}):
        work.status = WorkStatus.closed
        return work
    # `held_count` counted only unexpired leases, so the ones just expired change nothing.
    if held_count >= cap:
        work.status = WorkStatus.cap_reached
        return work
    expires_at = now + timedelta(seconds=study.lease_seconds)
    hit_id = _claim_slot(session, study, annotator, now, expires_at)
    if hit_id is None:
        return work
    lease = _insert_lease(
        session,
        annotator,
        hit_id,
        now=now,
        expires_at=expires_at,
        served_at=now if serve else None,
        external_assignment_id=external_assignment_id,
        external_hit_id=external_hit_id,
        external_session_id=external_session_id,
        submit_to=submit_to,
    )
    work.status, work.assignment = WorkStatus.assigned, lease
    return work


def record_served(session: Session, lease: Lease, now: datetime) -> None:
    """Record when the HIT's page was first shown (the time check without JavaScript)."""
    if lease.page_served_at is None:
        lease.page_served_at = now
        session.execute(SERVED, {"assignment_id": lease.id, "now": now})


def leave_slot(session: Session, hit_id: int, *, was_leased: bool, submitted: bool) -> None:
    """Count an assignment's change of status on its HIT (waits for the HIT's row lock), by
    `queries.slot_counters`."""
    stmt = LEAVE.get((was_leased, submitted))
    if stmt is not None:
        session.execute(stmt, {"hit_id": hit_id})


def _allowed_lengths(
    session: Session, study: StudyRef, annotator: Annotator | AnnotatorRef, now: datetime
) -> list[int] | None:
    """Lengths where the annotator is under `max_cell_share` (None: no limit).

    Every HIT of a length has the same mix, so an annotator's share of a
    (length, kind) cell's judgments is their share of that length's replica slots.
    """
    if not study.max_cell_share:
        return None
    slots = dict(session.execute(SLOTS_BY_LENGTH, {"study_id": study.id}).all())
    mine = dict(session.execute(MINE_BY_LENGTH, {"annotator_id": annotator.id, "now": now}).all())
    return [
        length
        for length, n in slots.items()
        if mine.get(length, 0) + 1 <= max(1.0, study.max_cell_share * n)
    ]


def _claim_slot(
    session: Session,
    study: StudyRef,
    annotator: Annotator | AnnotatorRef,
    now: datetime,
    expires_at: datetime,
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
        plain = PLAIN if lengths is None and not seen else candidates(lengths, seen)
        claim = CLAIM if plain is PLAIN else claim_statement(plain)
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
        taken, floor = session.execute(RECOUNT, {"now": now, "hit_id": row.id}).one()
        if taken < row.replicas:
            return row.id
        session.execute(UNCLAIM, {"hit_id": row.id, "floor": floor})  # and a tight bound
        seen.append(row.id)
    return None


# A given HIT's slot (`lease_hit`): counted as a claim counts it (`claim_statement`), but the
# HIT's row lock is waited for, not skipped: no other HIT will do.
_EXPIRES = bindparam("expires_at", type_=TIME)
_TAKE_HIT = (
    update(hits)
    .where(hits.c.id == bindparam("hit_id"), hits.c.study_id == bindparam("p_study"))
    .values(
        leased_count=hits.c.leased_count + 1,
        next_expiry=case(
            (or_(hits.c.next_expiry.is_(None), hits.c.next_expiry > _EXPIRES), _EXPIRES),
            else_=hits.c.next_expiry,
        ),
    )
    .returning(hits.c.leased_count, hits.c.submitted_count, hits.c.replicas)
)
_HAD_HIT = select(assignments.c.id).where(
    assignments.c.hit_id == bindparam("hit_id"),
    assignments.c.annotator_id == bindparam("annotator_id"),
)


def lease_hit(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    hit_id: int,
    *,
    now: datetime | None = None,
    served_at: datetime | None = None,
    external_assignment_id: str | None = None,
) -> Lease:
    """Lease the HIT `hit_id` for `annotator`: for work done elsewhere that names its HIT
    (an imported results file), where no other HIT will do.

    Call with the annotator locked. A claim's rules, for one HIT: refused (409) when the
    annotator is blocked, holds their cap or ever had this HIT, or when the HIT has no free
    replica slot (by its counters, then a recount of the active assignments under its row
    lock, as `_claim_slot` does); 404 for a HIT of another study. Locks: the annotator,
    then the HIT (waited for). The cell-share limit is not applied: the file already says
    which HIT was done. `served_at`: when the work began, for the submission's time check.
    """
    now = now or utcnow()
    study = study_for(session, annotator)
    if annotator.blocked:
        raise AnnotationError("This worker is blocked in this study.", 409)
    params = {"annotator_id": annotator.id, "now": now, "external": None}
    held = session.execute(STATE[False], params).first()[1]
    if held >= annotator_cap(annotator, study):
        raise AnnotationError("This worker has reached their limit of HITs in this study.", 409)
    if session.execute(_HAD_HIT, {"hit_id": hit_id, "annotator_id": annotator.id}).first():
        raise AnnotationError("This worker already had this HIT (a HIT is done once).", 409)
    expires_at = now + timedelta(seconds=study.lease_seconds)
    row = session.execute(
        _TAKE_HIT, {"hit_id": hit_id, "p_study": study.id, "expires_at": expires_at}
    ).first()
    if row is None:
        raise AnnotationError("There is no such HIT in this study.", 404)
    if row.leased_count + row.submitted_count > row.replicas:
        taken, floor = session.execute(RECOUNT, {"now": now, "hit_id": hit_id}).one()
        if taken >= row.replicas:
            session.execute(UNCLAIM, {"hit_id": hit_id, "floor": floor})
            raise AnnotationError("This HIT has no free replica slot.", 409)
    lease = _insert_lease(
        session,
        annotator,
        hit_id,
        now=now,
        expires_at=expires_at,
        served_at=served_at,
        external_assignment_id=external_assignment_id,
    )
    return lease


def return_assignment(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    public_id: str,
    now: datetime | None = None,
) -> Lease:
    """Give a leased HIT back: its slot returns to the pool; the annotator won't get it again."""
    assignment = own_assignment(session, annotator, public_id, lock=True)
    if assignment.status is AssignmentStatus.submitted:
        raise AnnotationError("This HIT was already submitted.", 409)
    if assignment.status is AssignmentStatus.leased:
        assignment.status = AssignmentStatus.returned
        session.execute(RETURN, {"assignment_id": assignment.id, "now": now or utcnow()})
        leave_slot(session, assignment.hit_id, was_leased=True, submitted=False)
    return assignment


def expire_leases(session: Session, study: Study, now: datetime | None = None) -> int:
    """Mark lapsed leases expired (bookkeeping: lapsed leases already free their slot)."""
    session.flush()  # Core statements do not autoflush pending ORM changes
    expired = session.execute(EXPIRE_LAPSED, {"study_id": study.id, "now": now or utcnow()}).all()
    per_hit: dict[int, int] = {}
    for (hit_id,) in expired:
        per_hit[hit_id] = per_hit.get(hit_id, 0) + 1
    if per_hit:
        # In id order, as every HIT lock is taken.
        batch = [{"hit_id": h, "n": n} for h, n in sorted(per_hit.items())]
        session.execute(LEAVE_MANY, batch)
    return len(expired)


def own_assignment(
    session: Session, annotator: Annotator | AnnotatorRef, public_id: str, *, lock: bool = False
) -> Lease:
    """The annotator's assignment by its public id (locked with `lock`); 404 for any other."""
    row = None
    if PLATFORM_ID.fullmatch(public_id or ""):  # a public id is token_urlsafe(24)
        session.flush()  # Core statements do not autoflush pending ORM changes
        row = session.execute(OWN_LOCKED if lock else OWN, {"public_id": public_id}).first()
    # Someone else's assignment gets the same answer as a made-up one: no oracle.
    if row is None or row.annotator_id != annotator.id:
        raise AnnotationError("This HIT is not one of yours. Reload the page to continue.", 404)
    return Lease(*row)


def _insert_lease(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    hit_id: int,
    *,
    now: datetime,
    expires_at: datetime,
    served_at: datetime | None,
    external_assignment_id: str | None = None,
    external_hit_id: str | None = None,
    external_session_id: str | None = None,
    submit_to: str | None = None,
) -> Lease:
    """A new lease on a slot the caller has taken (the HIT's counters already count it)."""
    lease = Lease(
        id=0,
        public_id=secrets.token_urlsafe(24),
        hit_id=hit_id,
        annotator_id=annotator.id,
        status=AssignmentStatus.leased,
        leased_at=now,
        expires_at=expires_at,
        page_served_at=served_at,
        submitted_at=None,
        late=False,
        external_assignment_id=external_assignment_id,
        submit_to=submit_to,
    )
    lease.id = session.execute(
        NEW_LEASE,
        {
            "public_id": lease.public_id,
            "hit_id": hit_id,
            "annotator_id": annotator.id,
            "status": AssignmentStatus.leased,
            "leased_at": now,
            "expires_at": expires_at,
            "page_served_at": served_at,
            "late": False,
            "external_assignment_id": external_assignment_id,
            "external_hit_id": external_hit_id,
            "external_session_id": external_session_id,
            "submit_to": submit_to,
            # MTurk work counts once the assignment is confirmed through the MTurk API.
            "unverified": unverified_until_synced(annotator.channel),
        },
    ).scalar_one()
    return lease
