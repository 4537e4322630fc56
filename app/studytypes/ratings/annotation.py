"""Ratings of continuations (the later paper's human protocol): a HIT rated pair by pair.

Each pair of a ratings HIT is rated in two steps, in position order: its continuation
alone, for quality, stored at once (a `Rating` whose consistency is open); then, shown
only after that, its context with the continuation, for consistency. A stored rating is
never changed: the same value sent again is a repeat (nothing written, the same answer),
another value a refusal (409). The last pair's consistency submits the assignment by the
rules of a next-word HIT (`submissions.mark_submitted`: late, cap and replica flags, the
HIT's counters).

Services flush; the caller commits. Lock order as in app.annotation.leases: the
annotator (taken by the caller), the assignment, the HIT.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy.orm import Session

from app.annotation.content import hit_content
from app.annotation.errors import AnnotationError, FormRefused, given_back
from app.annotation.leases import own_assignment, record_served, study_for
from app.annotation.queries import INSERT_RATING, RATINGS_OF, SET_CONSISTENCY
from app.annotation.schemas import AnnotatorRef, Lease, Sent, StudyRef
from app.annotation.submissions import MAX_CLIENT_MS, mark_submitted
from app.models import Annotator, AssignmentStatus, StudyType, utcnow
from app.studytypes.ratings.config import RatingsSection

# The rater's task in a few words: the MTurk preview page's title, and what a crowd posting
# says of the work when the researcher says nothing else.
PREVIEW_TITLE = "Rate short texts"
CROWD_DESCRIPTION = (
    "Rate short texts: first how well written each one is, then how well it fits the "
    "text before it. About 10 texts per HIT; a research study on language models."
)
CROWD_KEYWORDS = ("language", "rating", "text quality", "research")


QUALITY, CONSISTENCY = "quality", "consistency"
STEPS = (QUALITY, CONSISTENCY)
# A rating as posted: 0-99 with an optional .0 or .5, plain ASCII (no "inf", "²", " 3").
_POINT = re.compile(r"(?:0|[1-9][0-9]?)(?:\.[05])?", re.ASCII)
_DEFAULTS = RatingsSection()


class RatingRefused(FormRefused):
    """A rating the server will not store (off the scale, out of order, a locked quality):
    its step is shown again with the message, under this 4xx."""


@dataclass(frozen=True, slots=True)
class RatingStep:
    """One step of a ratings HIT as shown: the pair at `number`, rated for `step`.

    At the quality step it holds the continuation only: the context (`prompt`, `words`; a
    translation's `source`, the sentence it translates, and `words`, its forced start) is
    filled in only at the consistency step, once the quality is stored, so a page cannot
    show what its step does not hold. No item id, no kind.
    """

    public_id: str
    number: int  # 0-based position in the HIT: the form's `position`
    total: int  # pairs in the HIT
    step: str  # "quality" or "consistency"
    continuation: str
    values: tuple[str, ...]  # the scale's points, as posted ("0", "0.5", ..., "5")
    scale_max: int
    expires_at_iso: str
    first: bool  # the first step of the annotator's first HIT: instructions open
    prompt: str | None = None  # consistency step only
    words: str | None = None  # consistency step only
    source: str | None = None  # consistency step only: a translation's input
    quality: str | None = None  # consistency step: the stored (locked) quality

    template: ClassVar[str] = "ratings/rate.html"
    fragment: ClassVar[str | None] = None


@dataclass(slots=True)
class Rated:
    """A stored (or repeated) rating; `completed`: it was the HIT's last, so the assignment
    is submitted (`late` as a submission's)."""

    assignment: Lease
    completed: bool
    late: bool
    repeated: bool  # the same rating was already stored: nothing was written


def point(value: float) -> str:
    """A scale point as shown and posted: 0, 0.5, 1, ..., 5."""
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class Scale:
    """A ratings study's scale: 0 to `scale_max` in steps of `step` (0.5 or 1)."""

    scale_max: int
    step: float

    @classmethod
    def of(cls, ratings: Mapping[str, Any] | None) -> Scale:
        ratings = ratings or {}
        return cls(
            int(ratings.get("scale_max", _DEFAULTS.scale_max)),
            float(ratings.get("step", _DEFAULTS.step)),
        )

    def points(self) -> tuple[str, ...]:
        return tuple(point(i * self.step) for i in range(round(self.scale_max / self.step) + 1))

    def parse(self, text: str) -> float:
        """The posted rating, if it is a point of this scale; else refused (400)."""
        if not text:
            raise RatingRefused("Please choose a rating first.", 400)
        value = float(text) if _POINT.fullmatch(text) else -1.0
        halves, per_step = round(value * 2), round(self.step * 2)
        if not 0 <= value <= self.scale_max or halves % per_step:
            raise RatingRefused(
                f"A rating is one of {', '.join(self.points())}; {text[:20]!r} is not.", 400
            )
        return value


@dataclass(frozen=True, slots=True)
class RatingPost:
    """A posted step: the assignment's public id, the pair's position, the step, the rating
    as posted (checked against the study's scale), the client's milliseconds if any."""

    public_id: str
    position: int
    step: str
    value: str
    client_ms: int | None


def rating_from_form(form: Mapping[str, str]) -> RatingPost:
    """The form's `assignment`, `position`, `step`, `rating` and `ms`; junk refused (400)."""
    position = form.get("position", "")
    if not (0 < len(position) <= 3 and position.isascii() and position.isdigit()):
        raise AnnotationError("The form names no text of this HIT.", 400)
    step = form.get("step", "")
    if step not in STEPS:
        raise AnnotationError("The form names no rating step.", 400)
    ms_text = form.get("ms", "")
    number = ms_text[1:] if ms_text[:1] == "-" else ms_text
    if ms_text and not (0 < len(number) <= 12 and number.isascii() and number.isdigit()):
        raise AnnotationError("The form's time field is not valid.", 400)
    return RatingPost(
        public_id=form.get("assignment", ""),
        position=int(position),
        step=step,
        value=form.get("rating", ""),
        client_ms=int(ms_text) if ms_text else None,
    )


@dataclass(frozen=True, slots=True)
class StoredRating:
    quality: float
    consistency: float | None
    quality_at: datetime
    consistency_at: datetime | None
    too_fast: bool
    late: bool


def stored_ratings(session: Session, assignment_id: int) -> dict[int, StoredRating]:
    """An assignment's ratings by position."""
    rows = session.execute(RATINGS_OF, {"assignment_id": assignment_id})
    return {r.position: StoredRating(*r[1:]) for r in rows}


def current_step(
    positions: Iterable[int], stored: Mapping[int, StoredRating]
) -> tuple[int, str] | None:
    """The step due: the first pair, in position order, without both ratings (None: all
    rated). Qualities are only stored when due, so at most one pair has its consistency
    open, and it is this one."""
    for position in sorted(positions):
        row = stored.get(position)
        if row is None:
            return position, QUALITY
        if row.consistency is None:
            return position, CONSISTENCY
    return None


def rate(
    session: Session,
    annotator: Annotator | AnnotatorRef,
    post: RatingPost,
    now: datetime | None = None,
    *,
    timed: bool = True,
) -> Rated:
    """Store one step's rating; the last one submits the assignment.

    Refused (`RatingRefused`, nothing written): a position not in the HIT or a rating off
    the scale (400); a consistency before its quality, a step that is not due, a stored
    rating sent again with another value (409). A stored rating sent again with the same
    value is answered as stored. A rating after the lease ran out is stored and flagged
    late (both the rating and, at the end, the assignment); a HIT given back takes no more
    (409). Call with the annotator locked. `timed=False`: how long the step took is
    unknown (a recovered copy whose platform time is not after our last stored step), so
    it is not judged too fast.
    """
    now = now or utcnow()
    assignment = own_assignment(session, annotator, post.public_id, lock=True)
    study = study_for(session, annotator)
    if study.study_type is not StudyType.ratings:  # a next-word study's answers are words
        raise AnnotationError("This study collects next-word answers, not ratings.", 409)
    slots = hit_content(session, assignment.hit_id).slots
    slot = slots.get(post.position)
    if slot is None:
        raise RatingRefused("The form names a text that is not in this HIT.", 400)
    value = Scale.of(study.ratings).parse(post.value)
    stored = stored_ratings(session, assignment.id)
    row = stored.get(post.position)
    text = f"text {post.position + 1}"
    if post.step == QUALITY and row is not None:
        locked = f"The quality of {text} was already given ({point(row.quality)}) and can no "
        return _repeat(assignment, row.quality, value, locked + "longer be changed.")
    if post.step == CONSISTENCY:
        if row is None:
            raise RatingRefused(
                f"Rate the quality of {text} first; its context is shown after that.", 409
            )
        if row.consistency is not None:
            given = f"The consistency of {text} was already given ({point(row.consistency)})"
            return _repeat(assignment, row.consistency, value, given + " and is kept.")
    if assignment.status is AssignmentStatus.returned:
        raise given_back("it takes no more ratings")
    due = current_step(slots, stored)
    if due != (post.position, post.step):
        raise RatingRefused("Please rate the texts in order, as the page shows them.", 409)

    late = assignment.status is not AssignmentStatus.leased or now > assignment.expires_at
    ms = None if post.client_ms is None else min(max(post.client_ms, 0), MAX_CLIENT_MS)
    # Without JavaScript: the server's time since this step was shown (the previous
    # step's answer, or the HIT's first page), as with a next-word HIT.
    if post.step == QUALITY:
        answered = [r.consistency_at for r in stored.values() if r.consistency_at is not None]
        since = max(answered, default=assignment.page_served_at or assignment.leased_at)
    else:
        since = row.quality_at
    elapsed = ms if ms is not None else (now - since).total_seconds() * 1000
    fast = timed and elapsed < study.min_ms_per_item
    if post.step == QUALITY:
        session.execute(
            INSERT_RATING,
            {
                "assignment_id": assignment.id,
                "position": post.position,
                "item_id": slot.item_id,
                "quality": value,
                "quality_ms": ms,
                "quality_at": now,
                "too_fast": fast,
                "late": late,
            },
        )
        return Rated(assignment, completed=False, late=late, repeated=False)
    session.execute(
        SET_CONSISTENCY,
        {
            "p_assignment": assignment.id,
            "p_position": post.position,
            "p_consistency": value,
            "p_consistency_ms": ms,
            "now": now,
            "p_too_fast": row.too_fast or fast,
            "p_late": row.late or late,
        },
    )
    if any(p != post.position and stored.get(p) is None for p in slots):
        return Rated(assignment, completed=False, late=late, repeated=False)
    late = mark_submitted(session, annotator, assignment, now)
    return Rated(assignment, completed=True, late=late, repeated=False)


def _repeat(assignment: Lease, stored: float, value: float, refusal: str) -> Rated:
    """A rating sent again: answered as stored when the same, refused when different."""
    if stored != value:
        raise RatingRefused(refusal, 409)
    done = assignment.status is AssignmentStatus.submitted
    return Rated(assignment, completed=done, late=assignment.late, repeated=True)


def rating_step(
    session: Session, lease: Lease, study: StudyRef, *, first_hit: bool
) -> RatingStep | None:
    """The step due on `lease`'s HIT as shown (None: every pair is rated). The context is
    read into it at the consistency step only."""
    content = hit_content(session, lease.hit_id)
    stored = stored_ratings(session, lease.id)
    due = current_step(content.slots, stored)
    if due is None:
        return None
    position, step = due
    view = next(p for p in content.positions if p.number == position)
    scale = Scale.of(study.ratings)
    shown = {
        "public_id": lease.public_id,
        "number": position,
        "total": len(content.positions),
        "step": step,
        "continuation": view.continuation or "",
        "values": scale.points(),
        "scale_max": scale.scale_max,
        "expires_at_iso": lease.expires_at.isoformat(timespec="seconds"),
        "first": first_hit and position == min(content.slots),
    }
    if step == QUALITY:
        return RatingStep(**shown)
    return RatingStep(
        **shown,
        prompt=view.prompt,
        words=view.words,
        source=view.source,
        quality=point(stored[position].quality),
    )


# -- the page, a posted step, MTurk's copy -------------------------------------------------


def page(
    session: Session,
    lease: Lease,
    study: StudyRef,
    now: datetime,
    *,
    first_hit: bool,
    refused: Any = None,
) -> RatingStep | None:
    """The step due on `lease`'s HIT, the HIT recorded as served (None: every pair is
    rated). A refused step is the step due again."""
    record_served(session, lease, now)
    return rating_step(session, lease, study, first_hit=first_hit)


def send(session: Session, annotator: AnnotatorRef, form: Mapping[str, str]) -> Sent:
    """Store a posted step (`RatingRefused`: its page is shown again); the last one
    completes the HIT."""
    rated = rate(session, annotator, rating_from_form(form))
    return Sent(rated.assignment, rated.late, completed=rated.completed, repeated=rated.repeated)


def mturk_fields(session: Session, assignment: Lease) -> list[tuple[str, str]]:
    """What the MTurk done page posts on to MTurk besides our assignment's id: each pair's
    quality and consistency as scale points (``q{position}``, ``c{position}``)."""
    fields = []
    for position, r in sorted(stored_ratings(session, assignment.id).items()):
        fields.append((f"q{position}", point(r.quality)))
        if r.consistency is not None:
            fields.append((f"c{position}", point(r.consistency)))
    return fields


def store_copy(
    session: Session, study: Any, annotator: AnnotatorRef, lease: Any, copy: Any, when: datetime
) -> None:
    """Store the ratings of a platform's copy (MTurk's answer XML: ``copy.ratings``, the
    quality and consistency per position as scale points) that we do not hold, through
    :func:`rate`: for
    each pair in position order its quality, then its consistency; the last one submits
    the assignment (`app.annotation.submissions.mark_submitted`: late, cap and replica
    flags). A copy that carries next-word answers is refused.

    A rating we hold with the same value is left as it is (a repeat); one we hold with
    another value is a conflict: ours is kept (a stored rating is never changed) and
    nothing is stored. The copy must rate every pair of the HIT on the study's scale.

    The copy carries no times, so the steps not stored are spread evenly between the last
    step we hold (or the page's first showing) and the platform's submit time: each step
    is judged too fast by the time per step, as a next-word HIT without JavaScript is by
    the time per item. A submit time not after that last step (MTurk's clock behind ours)
    says nothing of how long the steps took: they are stored at that step's time and none
    is judged too fast.
    """
    ratings = copy.ratings
    if not ratings:
        raise AnnotationError("it carries next-word answers, which this study does not collect")
    positions = sorted(hit_content(session, lease.hit_id).slots)
    if sorted(ratings) != positions:
        raise AnnotationError(
            f"MTurk's copy rates {len(ratings)} texts at other positions than the HIT's "
            f"{len(positions)}"
        )
    scale = Scale.of(study.ratings)
    stored = stored_ratings(session, lease.id)
    todo: list[RatingPost] = []
    for position in positions:
        row = stored.get(position)
        ours = (row.quality, row.consistency) if row is not None else (None, None)
        for step, text, have in zip(STEPS, ratings[position], ours, strict=True):
            value = scale.parse(text)
            if have is None:
                todo.append(RatingPost(lease.public_id, position, step, text, None))
            elif have != value:
                raise AnnotationError(
                    f"conflict: the {step} of text {position + 1} is {point(have)} here and "
                    f"{point(value)} in MTurk's copy; ours is kept (a stored rating is never "
                    "changed) and nothing was recovered"
                )
    if not todo:
        raise AnnotationError("every rating is stored, yet the assignment was never submitted")
    times = [t for r in stored.values() for t in (r.quality_at, r.consistency_at) if t]
    since = max(times, default=lease.page_served_at or lease.leased_at)
    timed = when > since
    span = when - since if timed else timedelta(0)
    for k, post in enumerate(todo, 1):
        rated = rate(session, annotator, post, now=since + span * k / len(todo), timed=timed)
    if not rated.completed:
        raise AnnotationError("MTurk's copy does not complete the HIT")
