"""Prefix items: a text prefix and the model's top-k next words."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow


class Item(Base):
    """One prefix W_{1:l} with its choices (docs/design.md §1).

    `words` is the prefix as space-joined words (the dataset's own
    tokenisation, so the join is lossless). `choices` is the model's top-k next
    words in model rank order: `[{"word": str, "prob": float}, ...]`; the
    first is the model's top-1. Annotators never see the order or the
    probabilities: the HIT stores a shuffled screen order per position.
    `provenance` records how the item was made (seed, data line, decoding,
    word-search method, special-token handling).
    """

    __tablename__ = "items"
    __table_args__ = (UniqueConstraint("study_id", "is_attention", "length", "kind", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    shard_id: Mapped[int | None] = mapped_column(
        ForeignKey("precompute_shards.id", ondelete="SET NULL"), index=True
    )
    length: Mapped[int]
    kind: Mapped[str] = mapped_column(String(64))
    index: Mapped[int]
    is_attention: Mapped[bool] = mapped_column(default=False)  # kept out of CGD
    words: Mapped[str] = mapped_column(Text)
    prompt: Mapped[str | None] = mapped_column(Text)  # the data prompt C, if any
    source: Mapped[str | None] = mapped_column(Text)  # seq2seq source sentence
    true_next_word: Mapped[str | None] = mapped_column(String(255))  # data prefixes; never shown
    choices: Mapped[list[Any]]
    # Set when the prefix must not be shown (e.g. a special token was the top-1 and
    # the study skips such prefixes); the row stays as a record of what was made.
    skip_reason: Mapped[str | None] = mapped_column(String(32))
    provenance: Mapped[dict[str, Any]]
    # Synthetic EB-C (a study with a reference model P_D), written by `worker.synthetic`:
    # {"token": {"tv", "js", "gd"} or null, "word_gd": 0 | 1, "reference_top_word": str,
    #  "choice_probs": [P_D of each choice, model rank order], "none_prob": float,
    #  "reference_model", "method", "exact" (P_D's word search), "special_top1" and
    #  "special_mass" (P_D's special tokens: recorded, never a reason to skip)}.
    reference: Mapped[dict[str, Any] | None]
    # Ratings studies: the model's continuation of prompt + prefix (l_gen words, space-joined);
    # such items have no choices ([]).
    continuation: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
