"""A study: the full configuration of one human EB-C measurement."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow
from app.models.enums import SpecialTop1, StudyStatus, StudyType, Task, str_enum


class Study(Base):
    """One study (docs/design.md §2). Columns mirror `app.studies.schemas.StudyConfig`.

    Lists and nested settings (lengths, kinds, decoding, HIT layout, channels,
    exclusion rules) are JSON; the knobs the HIT engine filters on while the
    study runs (caps, leases, minimum time) are plain columns.
    """

    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(255))
    description: Mapped[str] = mapped_column(Text, default="")
    task: Mapped[Task] = mapped_column(str_enum(Task))
    study_type: Mapped[StudyType] = mapped_column(
        str_enum(StudyType), default=StudyType.nextword, server_default=StudyType.nextword.value
    )
    status: Mapped[StudyStatus] = mapped_column(str_enum(StudyStatus), default=StudyStatus.draft)

    # What is measured.
    model_name: Mapped[str] = mapped_column(String(1024))  # hub name or local directory
    model_revision: Mapped[str | None] = mapped_column(String(255))
    tokenizer_name: Mapped[str | None] = mapped_column(String(1024))
    dataset_path: Mapped[str] = mapped_column(String(1024))
    dataset_format: Mapped[str] = mapped_column(String(16), default="text")
    dataset_sha256: Mapped[str | None] = mapped_column(String(64))
    # Synthetic EB-C: a second model as P_D (`ReferenceSection`: model, revision,
    # data_prefixes); {} or NULL (studies made before it existed): none.
    reference: Mapped[dict[str, Any] | None]
    # Ratings studies (`RatingsSection`: continuation length, sampling, scale); {} or NULL
    # for next-word studies.
    ratings: Mapped[dict[str, Any] | None]
    # Forced-prefix samples (`SamplesSection`: per kind, lengths, kinds, words); {} or NULL
    # (studies made before issue 34): none.
    samples: Mapped[dict[str, Any] | None]

    # How items are made.
    prefix_lengths: Mapped[list[Any]]  # e.g. [10, 20, 30]
    kinds: Mapped[list[Any]]  # e.g. ["data", "model", "data_corrupted@0.3"]
    items_per_cell: Mapped[int]
    top_k: Mapped[int] = mapped_column(default=5)
    prompt_words: Mapped[int] = mapped_column(default=0)  # 0: no prompt C
    decoding: Mapped[dict[str, Any]]  # temperature, top_k, top_p, beam_width, eos policy
    special_top1: Mapped[SpecialTop1] = mapped_column(
        str_enum(SpecialTop1), default=SpecialTop1.skip
    )
    seed: Mapped[int] = mapped_column(BigInteger)

    # How items are shown and collected.
    hit_layout: Mapped[dict[str, Any]]  # {"mix": {"data": 5, "model": 5}, "attention": 1}
    replicas: Mapped[int] = mapped_column(default=1)
    overlap_share: Mapped[float] = mapped_column(default=0.05)
    overlap_replicas: Mapped[int] = mapped_column(default=3)
    per_annotator_cap: Mapped[int] = mapped_column(default=200)
    max_cell_share: Mapped[float | None]  # e.g. 0.05 of any cell's judgments
    lease_seconds: Mapped[int] = mapped_column(default=1800)
    min_ms_per_item: Mapped[int] = mapped_column(default=1000)
    exclusions: Mapped[dict[str, Any]]  # pre-declared exclusion rules
    # Per platform (`channels.<name>`): Prolific's parameters and code, MTurk's settings.
    channels: Mapped[dict[str, Any]]
    # What participants see and who may take part (`ParticipantsSection`: consent text,
    # comment boxes, earlier studies whose participants are excluded); NULL: the defaults.
    participants: Mapped[dict[str, Any] | None]

    # Payment, for the cost planner and the crowd channels.
    reward_cents: Mapped[int] = mapped_column(default=0)  # per assignment
    platform_fee: Mapped[float] = mapped_column(default=0.0)  # share on top of the reward

    created_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    closed_at: Mapped[datetime | None]


class StudyMember(Base):
    """A researcher other than the owner (`Study.created_by_id`) who may see or run a study.

    `role` is `view` (dashboard pages, results, downloads without secrets) or
    `manage` (everything the owner can do). Administrators see every study.
    """

    __tablename__ = "study_members"
    __table_args__ = (UniqueConstraint("study_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
