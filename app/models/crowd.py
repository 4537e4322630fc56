"""Crowd platform state: what was published where, and every money call made.

A study is published to a platform as one **posting** (MTurk: a HIT type plus one
platform HIT per our HIT; Prolific: one platform study). Each platform HIT made for one
of our HITs is a `CrowdHit` whose `request_token` is deterministic (study, HIT,
attempt), so a retried publish never makes a second one. Every call that moves money or
changes a worker's standing (approve, reject, bonus, block, qualify, expire) is a
`CrowdCall` row, written before the call is made and finished after it: the row's
`request_token` makes the call idempotent on our side (a finished call is not made
again) and on the platform's (a retried bonus carries the same token).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow


class CrowdPosting(Base):
    """One study on one crowd platform environment (`mturk`/`prolific`; sandbox or live)."""

    __tablename__ = "crowd_postings"
    __table_args__ = (UniqueConstraint("study_id", "provider", "environment"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    provider: Mapped[str] = mapped_column(String(16))  # "mturk", "prolific"
    environment: Mapped[str] = mapped_column(String(16))  # "sandbox", "production"
    # MTurk HIT type id, or the Prolific study id.
    external_id: Mapped[str | None] = mapped_column(String(255))
    # What was asked for: reward, title, qualifications, places... (provider-specific).
    settings: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16), default="draft")
    error: Mapped[str | None] = mapped_column(Text)
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    published_at: Mapped[datetime | None]
    synced_at: Mapped[datetime | None]


class CrowdHit(Base):
    """One platform HIT made (or being made) for one of our HITs."""

    __tablename__ = "crowd_hits"
    __table_args__ = (UniqueConstraint("posting_id", "hit_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    posting_id: Mapped[int] = mapped_column(ForeignKey("crowd_postings.id", ondelete="CASCADE"))
    hit_id: Mapped[int] = mapped_column(ForeignKey("hits.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(default=0)  # bumped only to publish a HIT anew
    request_token: Mapped[str] = mapped_column(String(64), unique=True)
    external_hit_id: Mapped[str | None] = mapped_column(String(255), index=True)
    max_assignments: Mapped[int]
    # pending, sending, failed, published, expired; unknown: an expire or reopen of it
    # may have taken effect (its answer was lost), so the next of either includes it.
    status: Mapped[str] = mapped_column(String(16), default="pending")
    error: Mapped[str | None] = mapped_column(Text)
    published_at: Mapped[datetime | None]
    # When the platform stops listing it by itself (MTurk: the posting's lifetime from its
    # publish or last reopen); NULL where units never lapse (local, Prolific). A published
    # unit past it is expired (`app.crowd.common.unit_state`).
    expires_at: Mapped[datetime | None]


class CrowdCall(Base):
    """One money or standing call to a platform, recorded before it is made."""

    __tablename__ = "crowd_calls"
    __table_args__ = (Index("ix_crowd_calls_posting_kind", "posting_id", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    posting_id: Mapped[int] = mapped_column(ForeignKey("crowd_postings.id", ondelete="CASCADE"))
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="SET NULL"), index=True
    )
    annotator_id: Mapped[int | None] = mapped_column(
        ForeignKey("annotators.id", ondelete="SET NULL")
    )
    kind: Mapped[str] = mapped_column(String(16))  # approve, reject, bonus, block, unblock, ...
    # Deterministic per (posting, kind, target[, n]): the same call is never made twice.
    request_token: Mapped[str] = mapped_column(String(64), unique=True)
    amount_cents: Mapped[int | None]
    reason: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # ok, failed
    error: Mapped[str | None] = mapped_column(Text)
    by: Mapped[str | None] = mapped_column(String(255))  # user email or "cli"
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
