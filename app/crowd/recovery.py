"""Recovering a submission that reached MTurk but not us, from MTurk's copy of its answers.

The MTurk done page (`annotate/mturk_done.html`) posts on to `externalSubmit` what our
store holds for the assignment, so MTurk's answer XML is a complete copy of it: our
assignment's public id (`assignment`) and, for a next-word HIT, the screen slot chosen per
position (`o{pos}`), or, for a ratings HIT, every pair's quality and consistency as scale
points (`q{pos}`, `c{pos}`). Positions and slots only: never a rank, a kind or an item id.

A sync (`app.crowd.sync.reconcile`) reads that copy strictly (`recovered_answers`: it
comes from the worker's browser) and stores it through the annotation services, by the
rules of a live submission (`store_recovered_submission`), its study type's
(`StudyTypePlugin.store_copy`: a next-word HIT's answers at once, a ratings HIT's quality
first, then consistency, in position order). One savepoint per assignment: a copy that
does not fit the HIT, names another worker's assignment or conflicts with a stored rating
stores nothing, and the reason is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crowd.base import PlatformSubmission
from app.models import Assignment, AssignmentStatus, Channel, Study, utcnow

_ANSWER_FIELD = re.compile(r"([oqc])(0|[1-9][0-9]{0,2})")
_PUBLIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SLOT = re.compile(r"[0-9]{1,2}", re.ASCII)
# A rating as a scale point (0, 0.5, ..., 99.5); whether it is one of the study's scale is
# for the ratings' `Scale.parse` to say when it is stored.
_POINT = re.compile(r"(?:0|[1-9][0-9]?)(?:\.[05])?", re.ASCII)


@dataclass(frozen=True)
class RecoveredSubmission:
    """An MTurk submission we never stored, with the answers its XML carries: next-word
    answers (`answers`) or ratings (`ratings`), never both."""

    external_worker_id: str
    external_assignment_id: str
    external_hit_id: str | None
    assignment_public_id: str  # ours, from the form's hidden `assignment` field
    answers: dict[int, int] = field(default_factory=dict)  # position -> screen slot
    # position -> (quality, consistency), scale points as posted ("3", "4.5")
    ratings: dict[int, tuple[str, str]] = field(default_factory=dict)
    submitted_at: datetime | None = None  # when the platform took it (MTurk SubmitTime)


@dataclass(frozen=True)
class Recovery:
    """What storing MTurk's copy did: the assignment it submitted, or why nothing was
    stored (`refused`)."""

    assignment: Assignment | None
    refused: str | None = None
    # The lease was submitted meanwhile (a live request of the worker, before the sync
    # took the worker's lock): taken as stored, nothing recovered.
    already: bool = False


class NotRecovered(Exception):
    """MTurk's copy of a submission does not fit what we hold: nothing is stored."""


def recovered_answers(sub: PlatformSubmission) -> RecoveredSubmission | None:
    """The answers a submission's XML carries, strictly parsed: they come from the worker's
    browser. `assignment` = our assignment's public id; `o{pos}` = the screen slot chosen
    (a next-word HIT), or `q{pos}` and `c{pos}` = the pair's quality and consistency (a
    ratings HIT: both for every pair). None when it carries no answers or anything does
    not parse (a slot that is not a number, a rating that is not a scale point, a quality
    without its consistency, next-word answers mixed with ratings)."""
    fields = sub.answers or {}
    public_id = fields.get("assignment", "")
    if not _PUBLIC_ID.fullmatch(public_id):
        return None
    found: dict[str, dict[int, str]] = {"o": {}, "q": {}, "c": {}}
    for name, value in fields.items():
        match = _ANSWER_FIELD.fullmatch(name)
        if match is None:
            continue
        kind, position = match.group(1), int(match.group(2))
        if not (_SLOT if kind == "o" else _POINT).fullmatch(value):
            return None
        found[kind][position] = value
    slots, quality, consistency = found["o"], found["q"], found["c"]
    if slots and (quality or consistency):
        return None
    if quality.keys() != consistency.keys():
        return None
    if not (slots or quality):
        return None
    return RecoveredSubmission(
        external_worker_id=sub.external_worker_id,
        external_assignment_id=sub.external_assignment_id,
        external_hit_id=sub.external_hit_id,
        assignment_public_id=public_id,
        answers={p: int(v) for p, v in slots.items()},
        ratings={p: (quality[p], consistency[p]) for p in sorted(quality)},
        submitted_at=_utc(sub.submitted_at),
    )


def _utc(when: datetime | None) -> datetime | None:
    if when is None:
        return None
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def store_recovered_submission(
    session: Session, study: Study, recovered: RecoveredSubmission
) -> Recovery:
    """Store a recovered submission through the annotation services, in a savepoint of its
    own: the assignment it submitted, or why nothing was stored (no such lease of this
    worker, a lease of another MTurk assignment, answers that do not fit the HIT or the
    study, a rating that conflicts with the one stored).

    The one place the crowd service stores answers. It needs from the annotation code:
    the worker's annotator, locked (`crowd_annotator`); its study type's `store_copy` (a
    next-word HIT: d from the stored screen order, late and cap flags, a repeat stores
    nothing twice; a ratings HIT: step by step, as a live rater's).
    It is submitted as of the time the platform took it (`submitted_at`, never later than
    now), so `late` and `too_fast` are judged as if it had reached us then; a platform
    time not after the page was served (the two clocks differ) says nothing of how long
    the worker took, so nothing is judged too fast then. A lease found submitted once the
    worker is locked (a live request stored it after the sync read it) is taken as
    stored (`already`).
    """
    from app.annotation.errors import AnnotationError

    try:
        with session.begin_nested():
            return _store(session, study, recovered)
    except NotRecovered as exc:
        return Recovery(None, str(exc))
    except AnnotationError as exc:
        return Recovery(None, exc.message)


def _store(session: Session, study: Study, recovered: RecoveredSubmission) -> Recovery:
    from app.annotation.identities import crowd_annotator
    from app.studytypes.registry import study_type_of

    annotator = crowd_annotator(session, study, Channel.mturk, recovered.external_worker_id)
    # Read anew under the worker's lock: the sync read the lease before, and a live
    # request may have submitted it since (the services write with Core statements).
    lease = session.scalar(
        select(Assignment)
        .where(
            Assignment.public_id == recovered.assignment_public_id,
            Assignment.annotator_id == annotator.id,
        )
        .execution_options(populate_existing=True)
    )
    if lease is None:
        raise NotRecovered("it names no assignment of this worker")
    if lease.external_assignment_id not in (None, recovered.external_assignment_id):
        raise NotRecovered("it names our assignment of another MTurk assignment")
    if lease.status is AssignmentStatus.submitted:
        return Recovery(lease, already=True)
    now = utcnow()
    when = min(recovered.submitted_at, now) if recovered.submitted_at else now
    # Its type's answers, through its services (a next-word HIT's `submit`, a ratings HIT's
    # `rate` step by step); a copy of the other type's answers is refused.
    study_type_of(study).pages.store_copy(session, study, annotator, lease, recovered, when)
    # The services write with Core statements: reload the lease read above.
    return Recovery(session.get(Assignment, lease.id, populate_existing=True))
