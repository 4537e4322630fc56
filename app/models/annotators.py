"""Annotators, their assignments (leases on HIT replica slots) and judgments."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow
from app.models.enums import AssignmentStatus, Channel, ReviewStatus, str_enum


class Annotator(Base):
    """A person working on one study, through one channel.

    Local annotators reach the study through a signed invite link that embeds
    `invite_nonce` (rotating it revokes the link); crowd workers are known by
    the platform's id (`external_id`: MTurk workerId, Prolific participant id).
    """

    __tablename__ = "annotators"
    __table_args__ = (
        UniqueConstraint("study_id", "channel", "external_id"),
        # Invite tokens carry the nonce only (no sequential id): the link is looked up by it.
        # A unique index, not a constraint: SQLite adds an index in place, while adding a
        # constraint recreates the table (see revision 0004).
        Index("ix_annotators_invite_nonce", "invite_nonce", unique=True),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    channel: Mapped[Channel] = mapped_column(str_enum(Channel))
    external_id: Mapped[str | None] = mapped_column(String(255))
    label: Mapped[str | None] = mapped_column(String(255))  # the researcher's name for them
    invite_nonce: Mapped[str | None] = mapped_column(String(64))
    hit_cap: Mapped[int | None]  # overrides the study's per-annotator cap
    blocked: Mapped[bool] = mapped_column(default=False)
    blocked_at: Mapped[datetime | None]
    blocked_reason: Mapped[str | None] = mapped_column(Text)
    exclude_past: Mapped[bool] = mapped_column(default=False)  # drop their judgments from results
    # A simulated annotator (`ebc simulate --http`, the demo's simulated crowd): its judgments
    # are labelled as simulated wherever results are shown.
    simulated: Mapped[bool] = mapped_column(default=False, server_default=false())
    revoked_at: Mapped[datetime | None]  # their invite link was revoked (nonce cleared)
    # A keyed hash of the address a crowd identity was first seen from (rate limits on
    # new identities); never the address itself.
    enrolled_from: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime | None]
    # The study's consent text accepted (`participants.consent`): when; NULL: not (yet).
    consented_at: Mapped[datetime | None]
    # Their comment on the whole study (the end-of-study box), untrusted text, and when.
    comment: Mapped[str | None] = mapped_column(Text)
    commented_at: Mapped[datetime | None]

    @property
    def invited(self) -> bool:
        """Whether they came by an invite link (the researcher's), not by a platform's URL."""
        return self.channel is Channel.local


class Assignment(Base):
    """One annotator doing one HIT: a lease on one of the HIT's replica slots.

    `public_id` is the opaque handle used in URLs and forms. An annotator holds
    at most one assignment per HIT (unique hit, annotator). A submission after
    `expires_at` is kept and flagged `late`, never thrown away.
    """

    __tablename__ = "assignments"
    __table_args__ = (
        UniqueConstraint("hit_id", "annotator_id"),
        Index("ix_assignments_annotator_status", "annotator_id", "status"),
        Index("ix_assignments_hit_status", "hit_id", "status"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    public_id: Mapped[str] = mapped_column(String(43), unique=True)
    hit_id: Mapped[int] = mapped_column(ForeignKey("hits.id", ondelete="CASCADE"))
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotators.id", ondelete="CASCADE"))
    status: Mapped[AssignmentStatus] = mapped_column(
        str_enum(AssignmentStatus), default=AssignmentStatus.leased
    )
    leased_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    page_served_at: Mapped[datetime | None]
    submitted_at: Mapped[datetime | None]
    returned_at: Mapped[datetime | None]
    late: Mapped[bool] = mapped_column(default=False)
    # Flags on work that is kept but may not count (DESIGN.md §2: an answer is never
    # thrown away). The results apply them as documented exclusion rules.
    over_cap: Mapped[bool] = mapped_column(default=False, server_default=false())
    extra_replica: Mapped[bool] = mapped_column(default=False, server_default=false())
    after_block: Mapped[bool] = mapped_column(default=False, server_default=false())
    # MTurk work counts once the assignment is confirmed through the MTurk API.
    unverified: Mapped[bool] = mapped_column(default=False, server_default=false())

    # Crowd platform ids and the platform's review of this work.
    external_assignment_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    external_hit_id: Mapped[str | None] = mapped_column(String(255))
    external_session_id: Mapped[str | None] = mapped_column(String(255))
    submit_to: Mapped[str | None] = mapped_column(String(1024))  # MTurk turkSubmitTo
    review_status: Mapped[ReviewStatus | None] = mapped_column(str_enum(ReviewStatus))
    reviewed_at: Mapped[datetime | None]
    review_error: Mapped[str | None] = mapped_column(Text)
    bonus_cents: Mapped[int] = mapped_column(default=0)
    # The participant's optional comment on this HIT (untrusted text).
    comment: Mapped[str | None] = mapped_column(Text)
    # Page signals of outside help, recorded where the page's script ran
    # (`app.annotation.participants`): {"<position>[.<step>]": [times away, ms away]};
    # NULL: none recorded (no JavaScript, or sent before they existed). A flag, never a rule.
    page_signals: Mapped[dict[str, Any] | None]


class Judgment(Base):
    """One annotator's choice for one item.

    `option` is the screen slot chosen (0..k-1 a word, k "none"); `chosen_rank`
    is its model rank resolved on the server from the stored order (0 is the
    model's top-1; NULL for "none"); `d` = 0 when the top-1 was chosen, else 1.
    One judgment per (assignment, position).
    """

    __tablename__ = "judgments"
    __table_args__ = (UniqueConstraint("assignment_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    position: Mapped[int]
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    option: Mapped[int]
    chosen_rank: Mapped[int | None]
    chosen_word: Mapped[str | None] = mapped_column(String(255))
    d: Mapped[float]
    client_ms: Mapped[int | None]  # client-reported time on this item, bounded
    too_fast: Mapped[bool] = mapped_column(default=False)
    late: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
