"""The simulator's god-view of the database, beside what a simulated annotator sees.

A simulated annotator (``app.simulate.http``) sees what a person sees: the page's texts
and shown words, in screen order (``app.simulate.page``). Its study type's judge needs
more than that, and the line between the two is kept here, explicit:

- **the page** (what an annotator sees): the HIT's form, each position's shown words in
  screen order, the "none" option;
- **the god-view** (:class:`GodView`, what only the simulator reads, from the database,
  never from the page): each position's item (id, kind, length, attention flag), its
  choices in model rank order and, for a model P_D, ``items.reference``. Nothing read
  here is ever sent to the server: the form carries only what a browser's does.

Each type's judges turn both into honest answers (a next-word study's:
``app.studytypes.nextword.judges``; a ratings study's raters:
``app.studytypes.ratings.judges``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.annotation.content import hit_content
from app.models import Assignment, AssignmentStatus, Hit, Item, Study
from app.results.queries import ATTENTION_KIND, kind_codes


class SimulationError(RuntimeError):
    """The simulated crowd cannot go on (the message says why)."""


@dataclass(frozen=True)
class ItemTruth:
    """God-view of one position of a HIT: what an annotator never sees."""

    hit_id: int
    position: int
    item_id: int
    length: int
    kind: str
    attention: bool
    words: tuple[str, ...]  # the item's choices in model rank order (0: the top-1)
    reference: dict[str, Any] | None
    true_next_word: str | None

    def rank(self, word: str) -> int:
        """Model rank (1-based) of a shown word."""
        try:
            return self.words.index(word) + 1
        except ValueError:
            raise SimulationError(
                f"the page shows {word!r} for item {self.item_id}, not one of its choices"
            ) from None


@dataclass(frozen=True)
class StudyView:
    """God-view of the study's settings the simulation needs."""

    id: int
    slug: str
    kinds: list[str]  # by code (app.results.queries.kind_codes)
    lengths: tuple[int, ...]
    top_k: int
    min_ms_per_item: int
    cap: int
    study_type: str  # the study's type (``StudyType`` value): which simulated crowd fits
    ratings: dict[str, Any]  # a ratings study's scale (``RatingsSection``; {} elsewhere)


class GodView:
    """The simulator's reads of the database (see the module docstring): one short
    transaction each, from ``make_session``; it never writes."""

    def __init__(self, make_session: Callable[[], Session], study_id: int) -> None:
        self.make_session = make_session
        self.study_id = study_id

    def study(self) -> StudyView:
        with self.make_session() as session:
            s = session.get(Study, self.study_id)
            if s is None:
                raise SimulationError(f"no study with id {self.study_id}")
            return StudyView(
                id=s.id,
                slug=s.slug,
                kinds=kind_codes(s),
                lengths=tuple(int(x) for x in s.prefix_lengths),
                top_k=int(s.top_k),
                min_ms_per_item=int(s.min_ms_per_item),
                cap=int(s.per_annotator_cap),
                study_type=s.study_type.value,
                ratings=dict(s.ratings or {}),
            )

    def open_slots(self) -> int:
        """Assignments the study's HITs still take (replica slots less submitted ones)."""
        with self.make_session() as session:
            slots = session.scalar(
                select(func.coalesce(func.sum(Hit.replicas), 0)).where(
                    Hit.study_id == self.study_id
                )
            )
            submitted = session.scalar(
                select(func.count(Assignment.id))
                .join(Hit, Hit.id == Assignment.hit_id)
                .where(
                    Hit.study_id == self.study_id,
                    Assignment.status == AssignmentStatus.submitted,
                )
            )
        return max(0, int(slots or 0) - int(submitted or 0))

    def hit(self, public_id: str) -> dict[int, ItemTruth]:
        """The HIT behind an assignment's public id (as the page's form names it), by
        position."""
        with self.make_session() as session:
            hit_id = session.scalar(
                select(Assignment.hit_id).where(Assignment.public_id == public_id)
            )
            if hit_id is None:
                raise SimulationError(f"no assignment {public_id!r}")
            slots = hit_content(session, hit_id).slots
            rows = session.execute(
                select(
                    Item.id,
                    Item.length,
                    Item.kind,
                    Item.is_attention,
                    Item.reference,
                    Item.true_next_word,
                ).where(Item.id.in_([s.item_id for s in slots.values()]))
            ).all()
        items = {r.id: r for r in rows}
        out = {}
        for position, slot in slots.items():
            r = items[slot.item_id]
            out[position] = ItemTruth(
                hit_id=hit_id,
                position=position,
                item_id=r.id,
                length=int(r.length),
                kind=r.kind,
                attention=bool(r.is_attention) or r.kind == ATTENTION_KIND,
                words=slot.words,
                reference=r.reference,
                true_next_word=r.true_next_word,
            )
        return out


__all__ = ["GodView", "ItemTruth", "SimulationError", "StudyView"]
