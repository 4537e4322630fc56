"""What the annotation service hands to the pages: screen data only.

Nothing here carries an item id, a kind, a model rank or a probability: the
page can only show what these objects hold (DESIGN.md §2, "Annotators never
learn an item's kind, the model's ranking or probabilities").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from app.models import Assignment


class WorkStatus(StrEnum):
    assigned = "assigned"
    cap_reached = "cap_reached"
    no_work = "no_work"
    blocked = "blocked"
    closed = "closed"
    not_open = "not_open"


@dataclass
class Work:
    """The answer to "what should this annotator do now?"."""

    status: WorkStatus
    assignment: Assignment | None = None
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


@dataclass
class HitPage:
    public_id: str
    positions: list[PositionView]
    task: str  # "lm" or "seq2seq": decides the page's wording only
    expires_at_iso: str
    answers: dict[int, int] = field(default_factory=dict)  # to refill a rejected form


@dataclass
class Submission:
    assignment: Assignment
    late: bool
    repeated: bool  # the same assignment was already submitted: nothing was written
    too_fast: int  # judgments flagged as faster than the study's minimum


@dataclass(frozen=True)
class InviteRef:
    """What a signed link names: an annotator, and the panel session if any."""

    annotator_id: int
    nonce: str
    session_id: str | None = None
