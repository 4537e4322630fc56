"""A next-word HIT's annotator side: its page (the texts and their options in the stored
screen order), its answers read from the form, checked, resolved to d and stored once
(:func:`submit`), the repeat of a stored HIT, and MTurk's copy of what was stored.

Services flush; the caller commits. Lock order as in app.annotation.leases: the
annotator (taken by the caller), the assignment, the HIT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.orm import Session

from app.annotation.content import hit_content
from app.annotation.errors import AnnotationError, InvalidAnswers, given_back
from app.annotation.leases import leave_slot, own_assignment, record_served, study_for
from app.annotation.queries import (
    INSERT_JUDGMENTS,
    JUDGMENT_COLUMNS,
    PG_STORE_SUBMISSION,
    STORED_ANSWERS,
    SUBMITTED,
)
from app.annotation.schemas import AnnotatorRef, Lease, PositionView, Sent, StudyRef
from app.annotation.submissions import (
    MAX_CLIENT_MS,
    NO_FLAGS,
    Flags,
    submission_flags,
)
from app.models import Annotator, AssignmentStatus, StudyType, utcnow

# The annotator's task in a few words: the MTurk preview page's title, and what a crowd
# posting says of the work when the researcher says nothing else.
PREVIEW_TITLE = "Guess the next word"
CROWD_DESCRIPTION = (
    "Read the start of a short text and pick the word you think comes next. "
    "About 10 texts per HIT; a research study on language models."
)
CROWD_KEYWORDS = ("language", "next word", "guess", "research")


@dataclass
class HitPage:
    """A next-word HIT as shown: its texts and options in screen order (no item id, no
    kind, no rank: docs/design.md §2). Its options are rendered once per HIT and process
    (``fragment``, kept by the web layer unless `answers` refill a refused form)."""

    public_id: str
    positions: list[PositionView]
    task: str  # "lm" or "seq2seq": decides the page's wording only
    expires_at_iso: str
    answers: dict[int, int] = field(default_factory=dict)  # to refill a rejected form

    template: ClassVar[str] = "nextword/hit.html"
    fragment: ClassVar[str | None] = "nextword/_items.html"

    def fragment_context(self) -> dict[str, Any]:
        return {"positions": self.positions, "answers": self.answers}

    @property
    def cacheable(self) -> bool:
        """The texts and options depend on the HIT alone (no refilled answers)."""
        return not self.answers


@dataclass
class KeptPage(HitPage):
    """A submitted HIT with the answers that were kept, after a repeat that differed."""

    template: ClassVar[str] = "nextword/_kept.html"


@dataclass
class Submission:
    assignment: Lease
    late: bool
    repeated: bool  # the same assignment was already submitted: nothing was written
    too_fast: int  # judgments flagged as faster than the study's minimum
    # A repeat whose answers differ from the stored ones (a second tab, a re-click after a
    # change): the stored answers by position, to show what was kept. Empty otherwise.
    kept: dict[int, int] = field(default_factory=dict)


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


def _store_submission(
    session: Session,
    assignment: Lease,
    *,
    was_leased: bool,
    late: bool,
    now: datetime,
    rows: list[tuple],
    flags: Flags = NO_FLAGS,
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
        raise given_back("its answers can no longer be sent")
    study = study_for(session, annotator)
    if study.study_type is not StudyType.nextword:  # a ratings study's answers are ratings
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
    flags = submission_flags(session, annotator, assignment, study, now, late=late)
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


# -- the page, a posted form, MTurk's copy ------------------------------------------------


def page(
    session: Session,
    lease: Lease,
    study: StudyRef,
    now: datetime,
    *,
    first_hit: bool = False,
    refused: tuple[AnnotationError, Mapping[str, str]] | None = None,
) -> HitPage:
    """The HIT as shown: contexts and their words in the stored screen order, recorded as
    served. `refused`: a refused form, whose answers are shown again on the HIT they were
    given for only (a lapsed lease may have been replaced by another HIT, whose texts they
    do not belong to)."""
    record_served(session, lease, now)
    page = HitPage(
        public_id=lease.public_id,
        positions=list(hit_content(session, lease.hit_id).positions),
        task=str(study.task),
        expires_at_iso=lease.expires_at.isoformat(timespec="seconds"),
    )
    if refused is not None:
        exc, form = refused
        if isinstance(exc, InvalidAnswers) and lease.public_id == form.get("assignment"):
            page.answers = exc.answers
    return page


def kept_page(session: Session, result: Submission) -> KeptPage | None:
    """A submitted HIT with the answers that were kept, after a repeat that differed."""
    if not result.kept:
        return None
    lease = result.assignment
    return KeptPage(
        public_id=lease.public_id,
        positions=list(hit_content(session, lease.hit_id).positions),
        task="",
        expires_at_iso=lease.expires_at.isoformat(timespec="seconds"),
        answers=dict(result.kept),
    )


def send(session: Session, annotator: AnnotatorRef, form: Mapping[str, str]) -> Sent:
    """Store the form's answers (the whole HIT at once): `InvalidAnswers` when it is
    incomplete or holds a bad option (its page is shown again)."""
    answers, times = answers_from_form(form)
    result = submit(session, annotator, form.get("assignment", ""), answers, times)
    kept = kept_page(session, result)
    return Sent(result.assignment, result.late, kept=kept, repeated=result.repeated)


def mturk_fields(session: Session, assignment: Lease) -> list[tuple[str, str]]:
    """What the MTurk done page posts on to MTurk besides our assignment's id: the screen
    slot chosen per position (``o{position}``), read back (after a repeat that differed,
    the kept ones). Slots only: never a rank or a kind."""
    slots = session.execute(STORED_ANSWERS, {"assignment_id": assignment.id}).all()
    return [(f"o{position}", str(slot)) for position, slot in sorted(slots)]


def store_copy(
    session: Session, study: Any, annotator: AnnotatorRef, lease: Any, copy: Any, when: datetime
) -> None:
    """Store a copy of a HIT's answers that reached a platform but not us (MTurk's answer
    XML: ``copy.answers``, the screen slot per position), submitted as of `when` by the
    rules of a live submission; a copy that carries ratings is refused."""
    if copy.ratings or not copy.answers:
        raise AnnotationError("it carries ratings, which this study does not collect")
    served = lease.page_served_at or lease.leased_at
    timed = when > served  # else the platform's clock is behind ours: the time is unknown
    submit(
        session,
        annotator,
        lease.public_id,
        copy.answers,
        {},
        now=max(when, served),
        timed=timed,
    )
