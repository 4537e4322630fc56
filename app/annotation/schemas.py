"""What the annotation service hands to the pages: screen data only.

Nothing here carries an item id, a kind, a model rank or a probability: the
page can only show what these objects hold (docs/design.md §2, "Annotators never
learn an item's kind, the model's ranking or probabilities").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Protocol

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
    participants: dict[str, Any] | None  # consent, comments, exclusions (`ParticipantsSection`)


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
    consented_at: datetime | None  # the study's consent text accepted (None: not yet)
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


@dataclass(frozen=True)
class InviteRef:
    """What a signed link names: an annotator's link nonce, and the Prolific session if any.

    `annotator_id` is set only by links of the first format, which also carried the
    annotator's (sequential) id; it must then match the annotator the nonce names.
    """

    nonce: str
    session_id: str | None = None
    annotator_id: int | None = None


class PageView(Protocol):
    """A HIT's page as its study type shows it (a next-word HIT's texts and options, a
    ratings HIT's step): the template that renders it (``page`` in its context) and,
    optionally, a part rendered from the HIT alone that the web layer may keep per HIT
    (``fragment``: its template, ``fragment_context()``, ``cacheable``)."""

    public_id: str
    template: ClassVar[str]
    fragment: ClassVar[str | None]


@dataclass(slots=True)
class PageData:
    """One annotator page, from one call of app.annotation.pages: who asks, what they work
    on now (or why nothing) and, when it is a HIT, that HIT as its type shows it."""

    annotator: AnnotatorRef
    work: Work
    page: Any = None  # the HIT as shown (a PageView), when `work` is assigned
    error: str | None = None  # why a posted form was refused (its HIT is shown again)
    origin: str | None = None  # MTurk: the checked turkSubmitTo's origin, where forms post
    status_code: int = 200  # a refused form's 4xx (its page is shown again)


@dataclass(slots=True)
class Sent:
    """A stored (or repeated) post of a HIT's page: the whole HIT (next-word), or one step
    of it (ratings: `completed` once the last step submitted the assignment)."""

    assignment: Lease
    late: bool  # as the submission's (a step's, until the HIT is completed)
    completed: bool = True
    kept: Any = None  # a repeat with other answers: the ones that were kept (a PageView)
    repeated: bool = False  # already stored: this post wrote nothing (nor its comment)


@dataclass(slots=True)
class MturkDone:
    """An MTurk assignment stored by the service: the browser posts it to MTurk next."""

    assignment: Lease
    origin: str  # the checked origin of the assignment's turkSubmitTo
    kept: Any = None  # a repeat with other answers: the ones that were kept (a PageView)
    # What was stored, as form fields posted on to MTurk so that its answer XML can restore
    # ours: a next-word HIT's screen slot per position (o{pos}; the kept ones after a repeat
    # that differed), a ratings HIT's quality and consistency per pair (q{pos}, c{pos}).
    fields: list[tuple[str, str]] = field(default_factory=list)
