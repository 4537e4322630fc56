"""Forced-prefix samples (issue 34; the first paper's Tables 1, 5, 8, 9)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow


class ForcedSample(Base):
    """What the model wrote after one forced prefix, made by the worker when a study asks for
    samples (`app.studies.schemas.SamplesSection`), apart from the study's items: the samples
    have their own lengths (the paper's 3) and kinds, and are never shown to annotators.

    A language model's sample is a continuation of ``prompt`` + ``prefix`` (``words`` words,
    sampled); a translation model's is its beam search after the forced target ``prefix``, the
    ``source`` intact, and ``reference`` is the row's reference translation (BLEU's).
    ``scores``: ``{"bleu": sentence BLEU}`` where the kind's BLEU means something (DATA,
    NORMAL), else NULL. ``provenance`` records how it was made (seeds, decoding, data line).
    """

    __tablename__ = "forced_samples"
    __table_args__ = (UniqueConstraint("study_id", "length", "kind", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    length: Mapped[int]
    kind: Mapped[str] = mapped_column(String(64))
    index: Mapped[int]
    source: Mapped[str | None] = mapped_column(Text)
    prompt: Mapped[str | None] = mapped_column(Text)
    prefix: Mapped[str] = mapped_column(Text)
    continuation: Mapped[str | None] = mapped_column(Text)  # None: skipped
    reference: Mapped[str | None] = mapped_column(Text)
    skip_reason: Mapped[str | None] = mapped_column(String(32))
    scores: Mapped[dict[str, Any] | None]
    provenance: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
