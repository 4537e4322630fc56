"""HITs: 10 items of one prefix length, each with a stored screen order."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow


class Hit(Base):
    """A HIT and its replica-slot counters.

    `leased_count` / `submitted_count` count the HIT's assignments whose status
    is `leased` / `submitted`; `next_expiry` is at most the earliest
    `expires_at` of its leased assignments (NULL when none): a lapsed lease
    frees its slot without any write, and this is how a claim finds it. The
    annotation service keeps them, under the HIT's row lock, in the same
    transaction as the assignment change; a claim is then a walk of
    `ix_hits_claim` (fewest submitted first) with `FOR UPDATE SKIP LOCKED`.
    """

    __tablename__ = "hits"
    __table_args__ = (
        UniqueConstraint("study_id", "index"),
        Index("ix_hits_claim", "study_id", "submitted_count", "index"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    index: Mapped[int]
    length: Mapped[int]
    replicas: Mapped[int] = mapped_column(default=1)  # annotators wanted for this HIT
    is_overlap: Mapped[bool] = mapped_column(default=False)  # in the agreement subset
    leased_count: Mapped[int] = mapped_column(default=0, server_default="0")
    submitted_count: Mapped[int] = mapped_column(default=0, server_default="0")
    next_expiry: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class HitPosition(Base):
    """Item `item_id` at `position` of a HIT.

    `choice_order[s]` is the model rank (0-based) of the choice shown at screen
    slot `s`; "None of the above is plausible" always follows, at slot k.
    An item appears in exactly one HIT (unique `item_id`).
    """

    __tablename__ = "hit_positions"
    __table_args__ = (UniqueConstraint("hit_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    hit_id: Mapped[int] = mapped_column(ForeignKey("hits.id", ondelete="CASCADE"))
    position: Mapped[int]
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), unique=True)
    choice_order: Mapped[list[Any]]
