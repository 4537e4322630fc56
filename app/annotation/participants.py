"""What every participant meets besides a HIT, whatever the study's type and channel
(issue 33): the consent page, the comment boxes, the page signals of outside help, and the
exclusion of people who took part in named earlier studies.

The study file's `[participants]` section sets them (`ParticipantsSection`):

- ``consent``: a text accepted once, before the first HIT (per participant and study; the
  time is stored in `Annotator.consented_at`). Without it no HIT is claimed and no answer
  is stored: a HIT page redirects to the consent page, a post is refused (403).
- ``comments``: an optional comment box with each HIT (`Assignment.comment`; a ratings HIT
  offers it at its last step) and one at the end of the study (`Annotator.comment`).
- ``exclude_studies``: earlier studies (slugs) whose people may not take part: a new
  identity on any channel whose platform id (a local annotator: the name the researcher
  gave) is among theirs is refused (`check_not_excluded`); a platform with a filter of its
  own also gets it when the study is published (`app.crowd.platform.Capabilities`).

Page signals are recorded where the page's script runs (`app/static/participant.js`): per
item, how often the participant left the page (the tab hidden or the window unfocused) and
for how long. A page without JavaScript records none (NULL, not zero). They are shown beside
the statistical LLM-assistance flag and exported; a flag to look at, never an exclusion.

Services flush; the caller commits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.schemas import AnnotatorRef, Lease, StudyRef
from app.models import Annotator, Assignment, Channel, Hit, Study, utcnow

_assignments = Assignment.__table__
MAX_COMMENT = 2000  # characters of one comment
# A page signal's form field: `sig{position}` (a next-word HIT's item) or
# `sig{position}.{step}` (a ratings HIT's step), valued "times away,milliseconds away".
_SIGNAL_NAME = re.compile(r"sig([0-9]{1,3}(?:\.[a-z]{1,16})?)")
_SIGNAL_VALUE = re.compile(r"([0-9]{1,6}),([0-9]{1,10})")
MAX_SIGNALS = 200  # signal fields read from one post (a HIT has about 10 items)
MAX_AWAY_MS = 24 * 3600 * 1000  # a day: longer is clipped
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

CONSENT_REFUSED = (
    "Please read and accept the consent form before the first HIT: nothing was saved. "
    "Reload the page to see the consent form."
)


class ConsentNeeded(AnnotationError):
    """The study asks for consent and this participant has not given it: a HIT page
    redirects to the consent page; a post is refused (403) and changes nothing."""

    def __init__(self) -> None:
        super().__init__(CONSENT_REFUSED, 403)


def settings_of(study: Study | StudyRef | None) -> dict[str, Any]:
    """The study's `participants` section as stored ({}: the defaults)."""
    return (getattr(study, "participants", None) or {}) if study is not None else {}


def consent_text(study: Study | StudyRef | None) -> str:
    return str(settings_of(study).get("consent") or "")


def comments_on(study: Study | StudyRef | None) -> bool:
    return bool(settings_of(study).get("comments", True))


def needs_consent(annotator: AnnotatorRef) -> bool:
    """Whether `annotator` must accept the study's consent text before any HIT."""
    return bool(consent_text(annotator.study)) and annotator.consented_at is None


def require_consent(annotator: AnnotatorRef) -> None:
    if needs_consent(annotator):
        raise ConsentNeeded


def check_asks_consent(annotator: AnnotatorRef) -> None:
    """A study without a consent text has no consent page (404)."""
    if not consent_text(annotator.study):
        raise AnnotationError("This study has no consent form.", 404)


def give_consent(
    session: Session,
    annotator: AnnotatorRef,
    form: Mapping[str, str],
    *,
    at: datetime | None = None,
) -> None:
    """Record the participant's consent, once: the earliest time it was given is kept (a
    repeat keeps the first). The form must carry the ticked box (`agree=yes`): else a 400
    that stores nothing. `at`: when it was given (default now; an imported batch row's
    time, as its rows may come in any order)."""
    check_asks_consent(annotator)
    if form.get("agree") != "yes":
        raise AnnotationError("Tick the box to say that you agree, or close this page.", 400)
    at = at or utcnow()
    if annotator.consented_at is not None and annotator.consented_at <= at:
        return
    session.execute(
        update(Annotator)
        .where(Annotator.id == annotator.id)
        .where(Annotator.consented_at.is_(None) | (Annotator.consented_at > at))
        .values(consented_at=at)
    )
    annotator.consented_at = at


# -- comments and page signals ---------------------------------------------------------


def comment_from(form: Mapping[str, str], name: str = "comment") -> str | None:
    """A posted comment, trimmed (None: none); over-long or with control characters: 400."""
    text = (form.get(name) or "").replace("\r\n", "\n").strip()
    if not text:
        return None
    if len(text) > MAX_COMMENT:
        raise AnnotationError(
            f"Your comment is longer than {MAX_COMMENT} characters: please shorten it. "
            "Nothing was saved.",
            400,
        )
    if _CONTROL.search(text):
        raise AnnotationError("Your comment contains characters that are not allowed.", 400)
    return text


@dataclass(frozen=True)
class Extras:
    """What a HIT's post carries besides its answers: its comment and page signals."""

    comment: str | None = None
    signals: dict[str, list[int]] = field(default_factory=dict)


def extras_from(form: Mapping[str, str]) -> Extras:
    """The comment and page signals of a posted HIT page, checked before anything is stored
    (a bad one: 400, nothing saved). Signal fields left empty (no script ran) are none."""
    signals: dict[str, list[int]] = {}
    for name, value in form.items():
        if name[:3] != "sig" or value == "":
            continue
        key = _SIGNAL_NAME.fullmatch(name)
        numbers = _SIGNAL_VALUE.fullmatch(value)
        if key is None or numbers is None:
            raise AnnotationError(f"The page field {name[:20]} is not valid.", 400)
        if len(signals) >= MAX_SIGNALS:
            raise AnnotationError("The form has too many page fields.", 400)
        signals[key.group(1)] = [int(numbers.group(1)), min(int(numbers.group(2)), MAX_AWAY_MS)]
    return Extras(comment_from(form), signals)


def store_extras(
    session: Session, study: StudyRef | None, lease: Lease, extras: Extras, *, last_step: bool
) -> None:
    """Keep a stored post's page signals (each item's, as last sent) and, at the HIT's last
    step, its comment (when the study offers comment boxes).

    One statement when the assignment has no signals yet (a next-word HIT's one post, a
    ratings HIT's first step); a later step's are merged with those stored (three)."""
    values: dict[str, Any] = {}
    if last_step and extras.comment is not None and comments_on(study):
        values["comment"] = extras.comment
    this = _assignments.c.id == lease.id
    if extras.signals:
        first = session.execute(
            update(_assignments)
            .where(this, _assignments.c.page_signals.is_(None))
            .values(page_signals=extras.signals, **values)
        )
        if first.rowcount:
            return
        stored = session.scalar(select(_assignments.c.page_signals).where(this))
        values["page_signals"] = {**(stored or {}), **extras.signals}
    if values:
        session.execute(update(_assignments).where(this).values(**values))


def end_comment(session: Session, annotator: AnnotatorRef, form: Mapping[str, str]) -> bool:
    """Store the participant's comment on the study (the end-of-study box; a later one
    replaces it). A study without comment boxes: 404; an empty comment: 400."""
    if not comments_on(annotator.study):
        raise AnnotationError("This study takes no comments.", 404)
    text = comment_from(form)
    if text is None:
        raise AnnotationError("Write your comment first (nothing was sent).", 400)
    session.execute(
        update(Annotator)
        .where(Annotator.id == annotator.id)
        .values(comment=text, commented_at=utcnow())
    )
    return True


def item_signals(signals: Mapping[str, Any] | None, position: int) -> tuple[int, int] | None:
    """An item's page signals (times away, milliseconds away) summed over its steps; None:
    none recorded (no script ran)."""
    if not signals:
        return None
    found = [v for k, v in signals.items() if k.partition(".")[0] == str(position)]
    if not found:
        return None
    return sum(int(v[0]) for v in found), sum(int(v[1]) for v in found)


PAGE_SIGNAL_FIELDS = ["hit_comment", "page_away", "page_away_ms"]
"""The export columns of an answer's participant side: its HIT's comment, and its item's
page signals (times away from the page, milliseconds away; empty: none recorded)."""


def with_page_signals(record: dict[str, Any]) -> dict[str, Any]:
    """An export record with its assignment's `page_signals` made its item's `page_away`
    and `page_away_ms` (by its `position`)."""
    raw = record.pop("page_signals", None)
    signals = json.loads(raw) if isinstance(raw, str) else raw
    found = item_signals(signals, record["position"])
    record["page_away"], record["page_away_ms"] = found if found is not None else (None, None)
    return record


def signal_totals(signals: Iterable[Mapping[str, Any] | None]) -> dict[str, int]:
    """Over assignments' page signals: the items recorded, those with time away, the times
    away and the seconds away (the Annotators page's figures)."""
    items = away_items = times = ms = 0
    for one in signals:
        for value in (one or {}).values():
            items += 1
            away_items += int(value[0]) > 0
            times += int(value[0])
            ms += int(value[1])
    return {"items": items, "away_items": away_items, "times": times, "seconds": ms // 1000}


@dataclass
class ParticipantSide:
    """One annotator's side on the Annotators page: their page signals over their HITs and
    their comments on HITs (HIT index, text), oldest first."""

    signals: dict[str, int]
    comments: list[tuple[int, str]]


def participant_sides(session: Session, study_id: int) -> dict[int, ParticipantSide]:
    """Per annotator of the study with page signals or HIT comments: what they sent."""
    rows = session.execute(
        select(Assignment.annotator_id, Hit.index, Assignment.comment, Assignment.page_signals)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Hit.study_id == study_id)
        .where(Assignment.comment.is_not(None) | Assignment.page_signals.is_not(None))
        .order_by(Assignment.annotator_id, Assignment.submitted_at, Assignment.id)
    ).all()
    signals: dict[int, list[Any]] = {}
    comments: dict[int, list[tuple[int, str]]] = {}
    for annotator_id, index, comment, page_signals in rows:
        signals.setdefault(annotator_id, []).append(page_signals)
        if comment:
            comments.setdefault(annotator_id, []).append((index, comment))
    return {a: ParticipantSide(signal_totals(s), comments.get(a, [])) for a, s in signals.items()}


# -- exclusion of earlier studies' people ------------------------------------------------


def excluded_studies(session: Session, study_id: int, slugs: list[str]) -> list[int]:
    """The ids of the earlier studies named (unknown slugs are skipped: the crowd page
    says which)."""
    if not slugs:
        return []
    return list(
        session.scalars(select(Study.id).where(Study.slug.in_(slugs), Study.id != study_id))
    )


def earlier_participant(
    session: Session, study: Study | StudyRef, channel: Channel, external_id: str
) -> str | None:
    """The slug of a named earlier study in which this platform id took part (None: none)."""
    slugs = list(settings_of(study).get("exclude_studies") or [])
    if not slugs:
        return None
    return session.scalar(
        select(Study.slug)
        .join(Annotator, Annotator.study_id == Study.id)
        .where(
            Study.slug.in_(slugs),
            Study.id != study.id,
            Annotator.channel == channel,
            Annotator.external_id == external_id,
        )
        .limit(1)
    )


def check_not_excluded(
    session: Session, study: Study | StudyRef, channel: Channel, external_id: str
) -> None:
    """Refuse (403) a new identity that took part in one of the earlier studies named."""
    if earlier_participant(session, study, channel, external_id) is not None:
        raise AnnotationError(
            "This study is for people who did not take part in the researchers' earlier "
            "studies, and our records show that you did. Thank you for your interest.",
            403,
        )


def earlier_workers(session: Session, study: Study, channel: Channel) -> list[str]:
    """The platform ids of `channel`'s people in the earlier studies named (an MTurk
    exclusion qualification is granted to them)."""
    ids = excluded_studies(session, study.id, list(settings_of(study).get("exclude_studies") or []))
    if not ids:
        return []
    rows = session.scalars(
        select(Annotator.external_id)
        .where(Annotator.study_id.in_(ids), Annotator.channel == channel)
        .where(Annotator.external_id.is_not(None), Annotator.simulated.is_(False))
        .distinct()
        .order_by(Annotator.external_id)
    )
    return [r for r in rows if r]


def earlier_labels(session: Session, study: Study) -> set[str]:
    """The names the researchers gave local annotators of the earlier studies named."""
    ids = excluded_studies(session, study.id, list(settings_of(study).get("exclude_studies") or []))
    if not ids:
        return set()
    return set(
        session.scalars(
            select(Annotator.label).where(
                Annotator.study_id.in_(ids),
                Annotator.channel == Channel.local,
                Annotator.label.is_not(None),
            )
        )
    )
