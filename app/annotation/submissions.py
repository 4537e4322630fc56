"""What submitting an assignment means, whatever the study's type: its status, its `late`
flag, the flags of kept work that may not count (past the cap or the replicas, after a
block) and its HIT's counters, by one set of rules. Each type stores its own answers
(a next-word HIT's judgments at once: ``app.studytypes.nextword.annotation.submit``; a
ratings HIT's pair by pair, then :func:`mark_submitted`).

Services flush; the caller commits. Lock order as in app.annotation.leases: the
annotator (taken by the caller), the assignment, the HIT.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.annotation.leases import annotator_cap, leave_slot, study_for
from app.annotation.queries import LATE_COUNTS, LOCK_HIT, SUBMITTED
from app.annotation.schemas import AnnotatorRef, Lease, StudyRef
from app.models import Annotator, AssignmentStatus

MAX_CLIENT_MS = 3_600_000  # client-reported time per item is clipped to [0, 1 h]


@dataclass(frozen=True, slots=True)
class Flags:
    """Why a kept submission may not count (assignments' flags; see the results' rules)."""

    over_cap: bool = False  # past the annotator's cap (a late answer after others)
    extra_replica: bool = False  # past the HIT's replicas (a late answer after a re-let)
    after_block: bool = False  # sent after the annotator was blocked


NO_FLAGS = Flags()


def late_flags(
    session: Session, annotator: Annotator | AnnotatorRef, assignment: Lease, cap: int, now
) -> tuple[bool, bool]:
    """(over_cap, extra_replica) of a late submission, counted under the HIT's row lock.

    Only late ones need this: an unexpired lease holds one of the annotator's cap and
    one of the HIT's replica slots, counted when it was leased. A lapsed lease's slot
    may have gone to someone else, and the annotator may have taken other work since:
    kept, but flagged when the others already fill the cap or the replicas.
    """
    replicas = session.execute(LOCK_HIT, {"hit_id": assignment.hit_id}).scalar_one()
    mine, theirs = session.execute(
        LATE_COUNTS,
        {
            "annotator_id": annotator.id,
            "hit_id": assignment.hit_id,
            "self": assignment.id,
            "now": now,
        },
    ).one()
    return mine >= cap, theirs >= replicas


def submission_flags(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    assignment: Lease,
    study: StudyRef,
    now: datetime,
    *,
    late: bool,
) -> Flags:
    """A submission's flags: late ones counted under the HIT's row lock, `after_block`."""
    if not (late or annotator.blocked):
        return NO_FLAGS
    over_cap = extra = False
    if late:
        over_cap, extra = late_flags(
            session, annotator, assignment, annotator_cap(annotator, study), now
        )
    return Flags(over_cap, extra, bool(annotator.blocked))


def mark_submitted(
    session: Session, annotator: Annotator | AnnotatorRef, assignment: Lease, now: datetime
) -> bool:
    """Submit an assignment whose answers are already stored (a ratings HIT, rated pair by
    pair): its status, `late` and flags and its HIT's counters, by `submit`'s rules. Returns
    `late`. Call with the annotator and the assignment locked (`own_assignment(lock=True)`).
    """
    study = study_for(session, annotator)
    was_leased = assignment.status is AssignmentStatus.leased
    late = not was_leased or now > assignment.expires_at
    flags = submission_flags(session, annotator, assignment, study, now, late=late)
    params = {
        "assignment_id": assignment.id,
        "now": now,
        "late": late,
        "over_cap": flags.over_cap,
        "extra_replica": flags.extra_replica,
        "after_block": flags.after_block,
    }
    session.execute(SUBMITTED, params)
    leave_slot(session, assignment.hit_id, was_leased=was_leased, submitted=True)
    assignment.status = AssignmentStatus.submitted
    assignment.submitted_at = now
    assignment.late = late
    return late
