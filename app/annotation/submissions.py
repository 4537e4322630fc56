"""Submissions: a HIT's answers read from its form, checked, resolved to d and stored once.

Services flush; the caller commits. Lock order as in app.annotation.leases: the
annotator (taken by the caller), the assignment, the HIT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.annotation.content import hit_content
from app.annotation.errors import AnnotationError, InvalidAnswers
from app.annotation.leases import annotator_cap, leave_slot, own_assignment, study_for
from app.annotation.queries import (
    INSERT_JUDGMENTS,
    JUDGMENT_COLUMNS,
    LATE_COUNTS,
    LOCK_HIT,
    PG_STORE_SUBMISSION,
    STORED_ANSWERS,
    SUBMITTED,
)
from app.annotation.schemas import AnnotatorRef, Lease, StudyRef, Submission
from app.models import Annotator, AssignmentStatus, StudyType, utcnow

MAX_CLIENT_MS = 3_600_000  # client-reported time per item is clipped to [0, 1 h]


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
    """Write a HIT's judgments (`rows` hold `JUDGMENT_COLUMNS`), its status, flags and
    counters: one statement on PostgreSQL (`PG_STORE_SUBMISSION`), three elsewhere."""
    flag_params = {
        "over_cap": flags.over_cap,
        "extra_replica": flags.extra_replica,
        "after_block": flags.after_block,
    }
    if session.get_bind().dialect.name == "postgresql":
        columns = [list(column) for column in zip(*rows, strict=True)]
        params: dict[str, object] = dict(zip(JUDGMENT_COLUMNS, columns, strict=True))
        params.update(
            assignment_id=assignment.id,
            hit=assignment.hit_id,
            late=late,
            now=now,
            **flag_params,
        )
        session.execute(PG_STORE_SUBMISSION[was_leased], params)
        return
    common = {"assignment_id": assignment.id, "late": late, "created_at": now}
    session.execute(
        INSERT_JUDGMENTS,
        [{**common, **dict(zip(JUDGMENT_COLUMNS, row, strict=True))} for row in rows],
    )
    session.execute(
        SUBMITTED, {"assignment_id": assignment.id, "now": now, "late": late, **flag_params}
    )
    leave_slot(session, assignment.hit_id, was_leased=was_leased, submitted=True)


def _late_flags(
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


def _flags(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    assignment: Lease,
    study: StudyRef,
    now: datetime,
    *,
    late: bool,
) -> _Flags:
    """A submission's flags: late ones counted under the HIT's row lock, `after_block`."""
    if not (late or annotator.blocked):
        return _NO_FLAGS
    over_cap = extra = False
    if late:
        over_cap, extra = _late_flags(
            session, annotator, assignment, annotator_cap(annotator, study), now
        )
    return _Flags(over_cap, extra, bool(annotator.blocked))


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
    flags = _flags(session, annotator, assignment, study, now, late=late)
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


def submit(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    public_id: str,
    answers: Mapping[int, int],
    client_ms: Mapping[int, int] | None = None,
    now: datetime | None = None,
    *,
    timed: bool = True,
) -> Submission:
    """Store one judgment per position; d comes from the stored screen order.

    Repeating a submitted assignment writes nothing and returns the stored
    result (with the stored answers when the repeat's differ). A submission after the
    lease ran out is stored and flagged late (and `over_cap` / `extra_replica` when
    others took the annotator's cap or the HIT's replicas meanwhile); one from a blocked
    annotator is stored and flagged `after_block`. A HIT the annotator gave back cannot
    be submitted (409). Call with the annotator locked. `timed=False`: how long the
    worker took is unknown (a recovered copy whose platform time is not after the page
    was served), so no answer is judged too fast.
    """
    now = now or utcnow()
    client_ms = client_ms or {}
    # The assignment, locked: a concurrent duplicate waits here, then sees it submitted.
    assignment = own_assignment(session, annotator, public_id, lock=True)
    if assignment.status is AssignmentStatus.submitted:
        stored = dict(session.execute(STORED_ANSWERS, {"assignment_id": assignment.id}).all())
        kept = stored if stored != dict(answers) else {}
        return Submission(assignment, assignment.late, repeated=True, too_fast=0, kept=kept)
    if assignment.status is AssignmentStatus.returned:
        raise AnnotationError(
            "You gave this HIT back (\u201cSkip this HIT\u201d), so its answers can no longer "
            "be sent. Nothing was saved; reload the page for your next HIT.",
            409,
        )
    study = study_for(session, annotator)
    if study.study_type is StudyType.ratings:  # its answers are ratings (app.annotation.ratings)
        raise AnnotationError("This study collects ratings, not next-word answers.", 409)
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
    flags = _flags(session, annotator, assignment, study, now, late=late)
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
        fast = timed and (ms if ms is not None else server_ms_per_item) < study.min_ms_per_item
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
