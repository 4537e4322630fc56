"""Ratings of continuations (the later paper's human protocol) and a study's stored scores."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow


class Rating(Base):
    """One annotator's ratings of one context-continuation pair (docs/design.md "Second protocol").

    The quality rating is given first, with only the continuation shown, and is stored at
    that moment (`quality_at`); the context is revealed only after, and the consistency
    rating completes the row (`consistency_at`). A stored quality is never changed.
    Ratings lie on the study's scale (0 to `scale_max` in steps of `step`).
    """

    __tablename__ = "ratings"
    __table_args__ = (UniqueConstraint("assignment_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"))
    position: Mapped[int]
    item_id: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    quality: Mapped[float]
    consistency: Mapped[float | None]
    quality_ms: Mapped[int | None]  # client-reported time before the quality rating, bounded
    consistency_ms: Mapped[int | None]
    quality_at: Mapped[datetime] = mapped_column(default=utcnow)
    consistency_at: Mapped[datetime | None]
    too_fast: Mapped[bool] = mapped_column(default=False)
    late: Mapped[bool] = mapped_column(default=False)


class StudyScore(Base):
    """Automatic scores of a study computed by a results job, never in a web request (EB-M:
    BLEU, NIST, METEOR, backward-BLEU, n-gram entropy per length and kind, with intervals).

    `scores` is the job's whole document; the newest row of a (study, name) is current.
    """

    __tablename__ = "study_scores"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(32))  # e.g. "ebm"
    scores: Mapped[dict[str, Any]]
    provenance: Mapped[dict[str, Any]]  # libraries and versions, seed, settings
    computed_at: Mapped[datetime] = mapped_column(default=utcnow)
