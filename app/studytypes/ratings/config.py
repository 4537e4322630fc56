"""A ratings study's section of the study file (``[ratings]``), and what it adds to the
study's checks and to the worker's settings (``app.studies.schemas`` calls both for every
study; they apply to a ratings study only)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from app.models.enums import StudyType, Task
from app.validation import Section


class RatingsSection(Section):
    """Ratings studies (`type = "ratings"`, the later paper's second protocol): the model
    continues prompt + prefix by `continuation_words` words (l_gen), people rate each
    continuation's quality, then its consistency with the revealed context, on 0 to
    `scale_max` in steps of `step`; `hits.replicas` ratings per pair (the paper: 5).
    """

    continuation_words: int = Field(20, ge=1, le=200, description="l_gen: words per continuation")
    continuation_top_k: int | None = Field(
        None, ge=1, le=10_000_000, description="continuation sampling top-k; None: ancestral"
    )
    scale_max: int = Field(5, ge=1, le=10, description="ratings run from 0 to this")
    step: float = Field(0.5, description="half points (0.5) or whole points (1)")

    @field_validator("step")
    @classmethod
    def _half_or_whole(cls, step: float) -> float:
        if step not in (0.5, 1.0):
            raise ValueError("the rating step is 0.5 (half points) or 1 (whole points)")
        return step

    def check_study(self, config: Any) -> None:
        """What a ratings study must be (a `ValueError` otherwise): a language model's
        continuations, without a reference model. A gap kind (EB-M_gap) needs a data cell at
        l + g, as in a next-word study (`app.studies.schemas` checks it for both)."""
        if config.type is not StudyType.ratings:
            return
        if config.task is not Task.lm:
            raise ValueError("ratings of continuations are for language models (task = 'lm')")
        if config.reference.model:
            raise ValueError("a ratings study has no reference model (synthetic EB-C)")

    def worker_settings(self, config: Any) -> dict[str, Any]:
        """The worker's settings of a ratings study's continuations (none for another type:
        the worker's defaults)."""
        if config.type is not StudyType.ratings:
            return {}
        return {
            "continuation_words": self.continuation_words,
            "continuation_top_k": self.continuation_top_k,
        }
