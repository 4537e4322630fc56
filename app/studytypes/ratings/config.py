"""A ratings study's section of the study file (``[ratings]``), and what it adds to the
study's checks and to the worker's settings (``app.studies.schemas`` calls both for every
study; they apply to a ratings study only)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from app.models.enums import StudyType, Task
from app.studies.kinds import forced_translation_kind
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
        """What a ratings study must be (a `ValueError` otherwise): a model's continuations,
        without a reference model. A gap kind (EB-M_gap) needs a data cell at l + g, as in a
        next-word study (`app.studies.schemas` checks it for both). A translation model's are
        its translations after the first paper's forced prefixes only (DATA, NORMAL, UNREL,
        RAND: `forced_translation_kind`); they run to their end, so `continuation_words` does
        not apply to them."""
        if config.type is not StudyType.ratings:
            return
        if config.reference.model:
            raise ValueError("a ratings study has no reference model (synthetic EB-C)")
        if config.task is Task.seq2seq:
            refused = [k for k in config.kinds if not forced_translation_kind(k)]
            if refused:
                raise ValueError(
                    f"{refused}: a translation ratings study rates translations after the first "
                    "paper's forced target prefixes: data (DATA), model (NORMAL), unrelated "
                    "(UNREL) and random (RAND); shuffled, corrupted and gap prefixes are "
                    "language-model diagnostics (task = 'lm')"
                )

    def words_per_continuation(self, config: Any) -> int | None:
        """l_gen of the study's continuations: ``continuation_words`` for a language model;
        None for a translation, which runs to its end and is scored against the reference's
        rest (the one place the ratings type tells the two apart)."""
        return self.continuation_words if config.task is Task.lm else None

    def worker_settings(self, config: Any) -> dict[str, Any]:
        """The worker's settings of a ratings study's continuations (none for another type:
        the worker's defaults)."""
        if config.type is not StudyType.ratings:
            return {}
        return {
            "continuation_words": self.continuation_words,
            "continuation_top_k": self.continuation_top_k,
        }
