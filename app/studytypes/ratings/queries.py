"""The SQL of a ratings study's results (the later paper's second protocol).

- :func:`load_ratings`: the ratings of a study's submitted HITs as the columns the ratings
  statistics read (:class:`~app.results.stats.ratings_columns.RatingColumns`), with what
  the exclusion rules and the quality table need beside them (:class:`Ratings`): one query
  joins the ratings to the study's assignments (:func:`app.results.queries.study_assignments`,
  the same join and the same flags of kept work that may not count as the judgments') and
  to their pairs, shown pairs only; plus the study's annotators
  (:func:`app.results.queries.load_annotators`). A rating counts once its assignment is
  submitted, as a next-word judgment (stored only at submission) does, so the late, cap,
  replica and block flags that the submission sets apply to it; the ratings of unfinished
  HITs stay stored and are only counted (``unfinished_ratings``, ``unfinished_hits``).
  Which work counts is decided after, by :mod:`app.results.exclusions`, from those flags:
  exactly as for judgments.
- :func:`iter_rating_rows`: every rating, unfinished HITs' too, with its pair, its
  assignment's status and its annotator's opaque id, streamed in batches (the
  ``ratings.csv`` export).

A rating is one annotator's ratings of one context-continuation pair: the quality (always
there) and the consistency (NaN while the rater is between the two steps).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Boolean, Float, Integer, SmallInteger, case, func, or_, select
from sqlalchemy.orm import Session

from app.models import Annotator, Assignment, AssignmentStatus, Hit, Item, Rating, Study
from app.results import queries as shared
from app.results.stats.ratings_columns import RatingColumns
from app.results.stats.ratings_figures import attention_max, attention_passed
from app.studytypes.ratings.config import RatingsSection

# A consistency not given yet travels as this (no NULL in the packed columns).
_OPEN = -1.0
_DEFAULTS = RatingsSection()


@dataclass
class Ratings(shared.Flagged, RatingColumns):
    """A study's counted ratings (:class:`RatingColumns`, in rating-id order: those of
    submitted HITs) and, beside them, what the exclusion rules read: per rating its
    assignment's flags (``FLAG_*`` bits), per annotator (indexed like ``annotator_ids``)
    blocked, exclude_past, label, channel, simulated. It reads as
    :class:`app.results.queries.Judgments` does where the rules look (``flagged``,
    ``attention_correct``), so :func:`app.results.exclusions.exclusion_mask` applies to it
    as it is. ``unfinished_ratings``: the ratings stored in ``unfinished_hits``
    assignments not submitted (begun, given back or lapsed), which count nowhere."""

    rating_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    unfinished_ratings: int = 0
    unfinished_hits: int = 0

    def __len__(self) -> int:
        return self.n

    @property
    def attention_max(self) -> float:
        """The quality an attention pair should get at most on this scale (scale_max / 5)."""
        return attention_max(self.scale_max)

    @property
    def attention_correct(self) -> np.ndarray:
        """Per rating: an attention pair (shuffled words) rated as expected, a quality of
        at most :attr:`attention_max`."""
        return attention_passed(self.quality, self.scale_max)


def scale_of(study: Study) -> tuple[int, float]:
    """The study's rating scale: ``(scale_max, step)``."""
    ratings = study.ratings or {}
    return (
        int(ratings.get("scale_max", _DEFAULTS.scale_max)),
        float(ratings.get("step", _DEFAULTS.step)),
    )


def _attention():
    """A pair is an attention pair when it is marked one (the worker's shuffled
    continuations) or is of the attention kind."""
    return or_(Item.is_attention, Item.kind == shared.ATTENTION_KIND)


def load_ratings(session: Session, study: Study) -> Ratings:
    """The ratings of `study` on shown (not skipped) pairs in its submitted HITs, as columns
    in rating-id order; the ratings of HITs not submitted (a rater between two pairs, one
    who gave the HIT back or let it lapse) are counted in ``unfinished_ratings`` and
    ``unfinished_hits`` (assignments) and left out: a HIT's flags (late, past the cap or
    the replicas, after a block) are set when it is submitted, so a rating counts, as a
    next-word judgment does, once its HIT is. They stay stored (``ratings.csv`` has them).

    ``kind`` is a code into :func:`app.results.queries.kind_codes` (data 0, model 1; -1 for
    a kind the study does not list); ``simulated`` marks the ratings of simulated
    annotators; ``assignment_flags`` the kept work that may not count (unconfirmed MTurk
    work, answers after a block, past the cap or the replicas).
    """
    names = shared.kind_codes(study)
    codes = {k: i for i, k in enumerate(names)}
    asg = shared.study_assignments(study)
    spec = [
        ("id", Rating.id, Integer, ">i4"),
        ("item", Rating.item_id, Integer, ">i4"),
        ("assignment", Rating.assignment_id, Integer, ">i4"),
        ("submitted", asg.status == AssignmentStatus.submitted, Boolean, "?"),
        ("annotator", asg.annotator_id, Integer, ">i4"),
        ("hit", asg.hit_id, Integer, ">i4"),
        ("flags", shared.assignment_flags(asg), Integer, ">i4"),
        ("length", Item.length, Integer, ">i4"),
        ("kind", case(codes, value=Item.kind, else_=-1), SmallInteger, ">i2"),
        ("attention", _attention(), Boolean, "?"),
        ("too_fast", Rating.too_fast, Boolean, "?"),
        ("late", Rating.late, Boolean, "?"),
        ("quality", Rating.quality, Float, ">f8"),
        ("consistency", func.coalesce(Rating.consistency, _OPEN), Float, ">f8"),
    ]
    stmt = (
        shared.select_spec(spec)
        .join(asg, asg.id == Rating.assignment_id)
        .join(Item, Item.id == Rating.item_id)
        .where(Item.skip_reason.is_(None))
    )
    cols = shared.spec_columns(session, stmt, spec)
    submitted = cols["submitted"].astype(bool)
    unfinished = cols["assignment"][~submitted]
    order = np.argsort(cols["id"][submitted], kind="stable")
    cols = {k: v[submitted][order] for k, v in cols.items()}
    annotators = shared.load_annotators(session, study)
    annotator = cols["annotator"].astype(np.int64)
    scale_max, step = scale_of(study)
    consistency = cols["consistency"].astype(float)
    return Ratings(
        kinds=names,
        annotator=annotator,
        hit=cols["hit"].astype(np.int64),
        item=cols["item"].astype(np.int64),
        length=cols["length"].astype(np.int64),
        kind=cols["kind"].astype(np.int64),
        quality=cols["quality"].astype(float),
        consistency=np.where(consistency == _OPEN, np.nan, consistency),
        attention=cols["attention"].astype(bool),
        too_fast=cols["too_fast"].astype(bool),
        late=cols["late"].astype(bool),
        scale_max=scale_max,
        step=step,
        simulated=np.isin(annotator, annotators.ids[annotators.simulated]),
        rating_id=cols["id"].astype(np.int64),
        assignment_flags=cols["flags"].astype(np.int64),
        **annotators.columns(),
        unfinished_ratings=int(unfinished.size),
        unfinished_hits=int(np.unique(unfinished).size),
    )


def iter_rating_rows(session: Session, study: Study) -> Iterator[tuple[list[str], list[tuple]]]:
    """Every rating of `study` (skipped pairs' and unfinished HITs' too, flagged by
    ``skip_reason`` and ``assignment_status``) with its pair and its annotator's opaque id:
    ``(column names, batch of rows)`` in rating-id order, streamed like
    :func:`app.results.queries.iter_item_rows`."""
    spec = [
        (Rating.id.label("rating_id"), None),
        (Hit.id.label("hit_id"), None),
        (Hit.index.label("hit_index"), None),
        (Rating.position, None),
        (Item.id.label("item_id"), None),
        (Item.kind, None),
        (Item.length, None),
        (Item.is_attention, "bool"),
        (Item.skip_reason, None),
        (Item.prompt, None),
        (Item.words, None),
        (Item.continuation, None),
        (Rating.quality, None),
        (Rating.consistency, None),
        (Rating.quality_ms, None),
        (Rating.consistency_ms, None),
        (Rating.quality_at, "time"),
        (Rating.consistency_at, "time"),
        (Rating.too_fast, "bool"),
        (Rating.late, "bool"),
        (Annotator.id.label("annotator_id"), None),
        (Annotator.channel, "enum"),
        (Annotator.blocked.label("annotator_blocked"), "bool"),
        (Annotator.exclude_past.label("annotator_exclude_past"), "bool"),
        (Annotator.simulated.label("simulated"), "bool"),
        (Assignment.public_id.label("assignment"), None),
        (Assignment.status.label("assignment_status"), "enum"),
        *shared.ASSIGNMENT_FLAG_COLUMNS,
        *shared.PARTICIPANT_COLUMNS,
    ]
    stmt = shared.answer_rows(spec, Rating).where(Hit.study_id == study.id).order_by(Rating.id)
    yield from shared.stream_rows(session, stmt)


@dataclass(frozen=True)
class Continuation:
    """A shown item of a ratings study with its continuation (EB-M's input): ``line`` is
    the dataset line its prompt (and a data kind's prefix) came from, from its provenance."""

    item_id: int
    length: int
    kind: str
    index: int
    prompt: str | None
    words: str
    true_next_word: str | None
    continuation: str
    line: int | None
    data_continuation: str | None  # data-line kinds: the worker's record of the line's words


def load_continuations(session: Session, study: Study) -> list[Continuation]:
    """Every shown (not skipped), non-attention item of `study` that has a continuation,
    by length, kind and index."""
    line = Item.provenance["line"].as_integer()
    recorded = Item.provenance["data_continuation"].as_string()
    rows = session.execute(
        select(
            Item.id,
            Item.length,
            Item.kind,
            Item.index,
            Item.prompt,
            Item.words,
            Item.true_next_word,
            Item.continuation,
            line,
            recorded,
        )
        .where(
            Item.study_id == study.id,
            Item.skip_reason.is_(None),
            Item.is_attention.is_(False),
            Item.continuation.is_not(None),
        )
        .order_by(Item.length, Item.kind, Item.index)
    ).all()
    return [Continuation(*row) for row in rows]


def iter_sample_rows(session: Session, study: Study) -> Iterator[tuple[list[str], list[tuple]]]:
    """Every item of `study` with a continuation (skipped and attention ones flagged):
    the prefix-switching samples, streamed like :func:`iter_item_rows`."""
    spec = [
        (Item.id.label("item_id"), None),
        (Item.kind, None),
        (Item.length, None),
        (Item.index, None),
        (Item.is_attention, "bool"),
        (Item.skip_reason, None),
        (Item.prompt, None),
        (Item.words, None),
        (Item.continuation, None),
    ]
    stmt = (
        select(*shared.raw_columns(spec))
        .where(Item.study_id == study.id, Item.continuation.is_not(None))
        .order_by(Item.id)
    )
    yield from shared.stream_rows(session, stmt)


def ratings_per_cell(session: Session, items: Any) -> dict[tuple[int, str], tuple[int, int]]:
    """Per (length, kind) of the items matching `items`, their ratings (a pair's quality
    given, one per rater) and of those the ones with their consistency too (every cell: 0
    where none): the study page's collection table."""
    return shared.answers_per_cell(session, items, Rating, complete=Rating.consistency)


__all__ = [
    "Continuation",
    "Ratings",
    "iter_rating_rows",
    "iter_sample_rows",
    "load_continuations",
    "load_ratings",
    "ratings_per_cell",
    "scale_of",
]
