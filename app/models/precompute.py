"""Precompute jobs and their shards, claimed by workers with leases."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, utcnow
from app.models.enums import JobStatus, ShardStatus, str_enum


class PrecomputeJob(Base):
    __tablename__ = "precompute_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    status: Mapped[JobStatus] = mapped_column(str_enum(JobStatus), default=JobStatus.pending)
    total_items: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    cancelled_at: Mapped[datetime | None]


class PrecomputeShard(Base):
    """A deterministic slice of a job: items [start, stop) of one (length, kind) cell.

    A worker holds a shard through `lease_expires_at`, renewed by heartbeats;
    once it lapses another worker may take the shard over. Items are unique per
    (study, length, kind, index), so a retried shard never writes twice.
    """

    __tablename__ = "precompute_shards"
    __table_args__ = (
        UniqueConstraint("job_id", "length", "kind", "shard_index"),
        Index("ix_precompute_shards_claim", "status", "lease_expires_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("precompute_jobs.id", ondelete="CASCADE"))
    length: Mapped[int]
    kind: Mapped[str] = mapped_column(String(64))
    shard_index: Mapped[int]
    start_index: Mapped[int]
    stop_index: Mapped[int]
    status: Mapped[ShardStatus] = mapped_column(str_enum(ShardStatus), default=ShardStatus.pending)
    attempts: Mapped[int] = mapped_column(default=0)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    items_done: Mapped[int] = mapped_column(default=0)
    seconds: Mapped[float | None]  # wall time of the successful attempt
    error: Mapped[str | None] = mapped_column(Text)  # last traceback
