"""The study file (TOML) and its validation.

One `StudyConfig` describes a whole study (DESIGN.md §2); it maps one to one
onto the `studies` table (`app.studies.service.create_study`) and back
(`config_of`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.models.enums import SpecialTop1, Task

STUDY_KINDS = ("data", "model")
_KIND_RE = re.compile(
    r"^(data|model|data_shuffled|random|(data|model)_corrupted@(0(\.\d+)?|1(\.0+)?))$"
)


def parse_kind(kind: str) -> tuple[str, float | None]:
    """`"data_corrupted@0.3"` -> `("data_corrupted", 0.3)`; `"model"` -> `("model", None)`."""
    if not _KIND_RE.match(kind):
        raise ValueError(
            f"unknown prefix kind {kind!r}: use data, model, data_shuffled, random, "
            "data_corrupted@c or model_corrupted@c with 0 < c <= 1"
        )
    base, _, rate = kind.partition("@")
    if rate and not 0 < float(rate) <= 1:
        raise ValueError(f"corruption rate of {kind!r} must be in (0, 1]")
    return base, float(rate) if rate else None


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSection(_Section):
    name: str = Field(min_length=1, description="Hugging Face hub name or local directory")
    revision: str | None = None
    tokenizer: str | None = Field(None, description="defaults to the model's own")


class DatasetSection(_Section):
    path: str = Field(min_length=1)
    format: Literal["text", "jsonl", "tsv"] = "text"


class DecodingSection(_Section):
    temperature: float = Field(1.0, gt=0)
    top_k: int | None = Field(None, ge=1, description="sampling top-k; None: full vocabulary")
    top_p: float | None = Field(None, gt=0, le=1)
    beam_width: int = Field(10, ge=1, description="seq2seq model prefixes")
    resample_on_eos: bool = Field(True, description="re-sample a prefix that ends too early")
    # The word search's longest choice word, in tokens.  Without a limit a model that keeps a
    # partial word probable token after token ("bpupbpupbpup...": seen with random weights, and
    # possible on odd inputs of real models) makes the search run one sequential forward per
    # token.  An item where a longer word could have been among the choices is flagged inexact
    # in its provenance.  0: no limit (the exact search, as for studies made before this setting;
    # 0 rather than null, which TOML cannot write).
    max_word_tokens: int = Field(
        16, ge=0, le=256, description="longest choice word in tokens; 0: no limit"
    )


class HitSection(_Section):
    mix: dict[str, int] = Field(default_factory=lambda: {"data": 5, "model": 5})
    attention: int = Field(1, ge=0, description="attention items per HIT")
    replicas: int = Field(1, ge=1, le=50)
    overlap_share: float = Field(0.05, ge=0, le=1)
    overlap_replicas: int = Field(3, ge=2, le=50)

    @field_validator("mix")
    @classmethod
    def _mix_counts(cls, mix: dict[str, int]) -> dict[str, int]:
        for kind, n in mix.items():
            parse_kind(kind)
            if n < 0:
                raise ValueError(f"mix count for {kind!r} must be >= 0")
        if sum(mix.values()) < 1:
            raise ValueError("a HIT needs at least one item")
        return mix


class AnnotatorSection(_Section):
    per_annotator_cap: int = Field(200, ge=1)
    max_cell_share: float | None = Field(None, gt=0, le=1)
    lease_minutes: float = Field(30, gt=0, le=24 * 60)
    min_seconds_per_item: float = Field(1.0, ge=0)


class ExclusionSection(_Section):
    """Pre-declared exclusion rules, fixed before looking at EB-C."""

    blocked: bool = True
    attention_min_accuracy: float | None = Field(0.5, ge=0, le=1)
    too_fast: bool = True


class PaymentSection(_Section):
    reward_cents: int = Field(0, ge=0, description="per assignment (one HIT)")
    platform_fee: float = Field(0.0, ge=0, le=2, description="share paid on top, e.g. 0.2")


class PanelSection(_Section):
    participant_param: str = "PROLIFIC_PID"
    study_param: str = "STUDY_ID"
    session_param: str = "SESSION_ID"
    completion_code: str | None = None
    redirect_url: str | None = None


class MTurkSection(_Section):
    sandbox: bool = True
    # Extra origins allowed as `turkSubmitTo` besides MTurk's own (a local stand-in in tests).
    submit_origins: list[str] = Field(default_factory=list)


class ChannelSection(_Section):
    panel: PanelSection = Field(default_factory=PanelSection)
    mturk: MTurkSection = Field(default_factory=MTurkSection)


class StudyConfig(_Section):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    title: str = Field(min_length=1, max_length=255)
    description: str = ""
    task: Task = Task.lm
    model: ModelSection
    dataset: DatasetSection
    prefix_lengths: list[int] = Field(min_length=1)
    kinds: list[str] = Field(default_factory=lambda: list(STUDY_KINDS))
    items_per_cell: int = Field(ge=1, le=1_000_000)
    top_k: int = Field(5, ge=2, le=10)
    prompt_words: int = Field(0, ge=0, le=512)
    decoding: DecodingSection = Field(default_factory=DecodingSection)
    special_top1: SpecialTop1 = SpecialTop1.skip
    seed: int = Field(0, ge=0, lt=2**63)
    hits: HitSection = Field(default_factory=HitSection)
    annotators: AnnotatorSection = Field(default_factory=AnnotatorSection)
    exclusions: ExclusionSection = Field(default_factory=ExclusionSection)
    payment: PaymentSection = Field(default_factory=PaymentSection)
    channels: ChannelSection = Field(default_factory=ChannelSection)

    @field_validator("prefix_lengths")
    @classmethod
    def _lengths(cls, lengths: list[int]) -> list[int]:
        if any(n < 1 or n > 1000 for n in lengths):
            raise ValueError("prefix lengths must be between 1 and 1000 words")
        if len(set(lengths)) != len(lengths):
            raise ValueError("prefix lengths must be distinct")
        return sorted(lengths)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, kinds: list[str]) -> list[str]:
        for kind in kinds:
            parse_kind(kind)
        if len(set(kinds)) != len(kinds):
            raise ValueError("prefix kinds must be distinct")
        missing = [k for k in STUDY_KINDS if k not in kinds]
        if missing:
            raise ValueError(f"EB-C needs both 'data' and 'model' prefixes; missing {missing}")
        return kinds

    @model_validator(mode="after")
    def _consistent(self) -> StudyConfig:
        unknown = sorted(set(self.hits.mix) - set(self.kinds))
        if unknown:
            raise ValueError(f"hits.mix names kinds the study does not make: {unknown}")
        if self.task is Task.seq2seq:
            if self.prompt_words:
                raise ValueError("a prompt applies to language models only (task = 'lm')")
            if self.dataset.format == "text":
                raise ValueError("seq2seq needs source and reference: dataset format jsonl or tsv")
            if any(k not in ("data", "model") for k in self.kinds):
                raise ValueError("seq2seq studies support the 'data' and 'model' kinds only")
        return self
