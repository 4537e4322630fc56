"""What the annotation service hands to the pages: screen data only.

Nothing here carries an item id, a kind, a model rank or a probability: the
page can only show what these objects hold (DESIGN.md §2, "Annotators never
learn an item's kind, the model's ranking or probabilities").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from app.models import AssignmentStatus, Channel, StudyStatus, StudyType, Task


class WorkStatus(StrEnum):
    assigned = "assigned"
    cap_reached = "cap_reached"
    no_work = "no_work"
    blocked = "blocked"
    closed = "closed"
    not_open = "not_open"


@dataclass(slots=True)
class StudyRef:
    """A study's settings as the annotator pages use them, read in the request's transaction."""

    id: int
    task: Task
    status: StudyStatus
    per_annotator_cap: int
    max_cell_share: float | None
    lease_seconds: int
    min_ms_per_item: int
    channels: dict[str, Any]
    study_type: StudyType
    ratings: dict[str, Any] | None  # a ratings study's scale (`RatingsSection`); else {}/None


@dataclass(slots=True)
class AnnotatorRef:
    """An annotator as locked by the annotation service, with their study's settings."""

    id: int
    study_id: int
    channel: Channel
    external_id: str | None
    invite_nonce: str | None
    hit_cap: int | None
    blocked: bool
    study: StudyRef | None = None


@dataclass(slots=True)
class Lease:
    """An assignment (one annotator's lease on one replica slot of a HIT) as the pages use it."""

    id: int
    public_id: str
    hit_id: int
    annotator_id: int
    status: AssignmentStatus
    leased_at: datetime
    expires_at: datetime
    page_served_at: datetime | None
    submitted_at: datetime | None
    late: bool
    external_assignment_id: str | None
    submit_to: str | None


ANNOTATOR_COLUMNS = tuple(f for f in AnnotatorRef.__dataclass_fields__ if f != "study")
STUDY_COLUMNS = tuple(StudyRef.__dataclass_fields__)
LEASE_COLUMNS = tuple(Lease.__dataclass_fields__)


@dataclass
class Work:
    """The answer to "what should this annotator do now?"."""

    status: WorkStatus
    assignment: Lease | None = None
    done: int = 0  # HITs this annotator submitted in this study
    cap: int = 0
    expired_previous: bool = False  # their previous lease ran out unanswered


@dataclass(frozen=True)
class PositionView:
    number: int  # 0-based position in the HIT: the form field is `o{number}`
    prompt: str | None
    words: str
    source: str | None
    options: list[str]  # words in screen order; "none" is added by the page
    continuation: str | None = None  # ratings studies: the text to rate


@dataclass
class HitPage:
    public_id: str
    positions: list[PositionView]
    task: str  # "lm" or "seq2seq": decides the page's wording only
    expires_at_iso: str
    answers: dict[int, int] = field(default_factory=dict)  # to refill a rejected form


@dataclass
class Submission:
    assignment: Lease
    late: bool
    repeated: bool  # the same assignment was already submitted: nothing was written
    too_fast: int  # judgments flagged as faster than the study's minimum
    # A repeat whose answers differ from the stored ones (a second tab, a re-click after a
    # change): the stored answers by position, to show what was kept. Empty otherwise.
    kept: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class InviteRef:
    """What a signed link names: an annotator's link nonce, and the Prolific session if any.

    `annotator_id` is set only by links of the first format, which also carried the
    annotator's (sequential) id; it must then match the annotator the nonce names.
    """

    nonce: str
    session_id: str | None = None
    annotator_id: int | None = None


@dataclass(slots=True)
class PageData:
    """One annotator page, from one call of app.annotation.pages: who asks, what they work
    on now (or why nothing) and, when it is a HIT, that HIT as shown."""

    annotator: AnnotatorRef
    work: Work
    page: HitPage | None = None  # the HIT as shown, when `work` is assigned
    error: str | None = None  # why a posted form was refused (its HIT is shown again)
    origin: str | None = None  # MTurk: the checked turkSubmitTo's origin, where forms post
    rating: RatingStep | None = None  # ratings studies: the step shown instead of `page`
    status_code: int = 200  # a refused rating's 4xx (its step is shown again)


@dataclass(slots=True)
class Sent:
    """A stored (or repeated) submission of an invite or Prolific link."""

    submission: Submission
    kept: HitPage | None = None  # a repeat with other answers: the ones that were kept


@dataclass(slots=True)
class MturkDone:
    """An MTurk assignment stored by the service: the browser posts it to MTurk next."""

    assignment: Lease
    origin: str  # the checked origin of the assignment's turkSubmitTo
    kept: HitPage | None = None  # a repeat with other answers: the ones that were kept
    # The stored answers (position -> screen slot; the kept ones after a repeat that
    # differed), posted on to MTurk so that its answer XML can restore ours.
    slots: dict[int, int] = field(default_factory=dict)
    # Ratings studies: position -> (quality, consistency) as scale points, posted on likewise.
    ratings: dict[int, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RatingStep:
    """One step of a ratings HIT as shown: the pair at `number`, rated for `step`.

    At the quality step it holds the continuation only: the context (`prompt`, `words`) is
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
    quality: str | None = None  # consistency step: the stored (locked) quality


@dataclass(slots=True)
class Rated:
    """A stored (or repeated) rating; `completed`: it was the HIT's last, so the assignment
    is submitted (`late` as a submission's)."""

    assignment: Lease
    completed: bool
    late: bool
    repeated: bool  # the same rating was already stored: nothing was written
