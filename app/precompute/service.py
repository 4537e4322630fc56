"""Precompute jobs split into shards that any number of workers claim with leases.

A shard is a deterministic slice of one (length, kind) cell: items
[start_index, stop_index). Workers claim a shard (PostgreSQL: `FOR UPDATE SKIP
LOCKED`; both backends: a compare-and-set UPDATE, so two claimers never both
win), renew the lease with heartbeats, and write its items with
insert-or-ignore on the item's unique key, so a shard re-run after a crash or a
lapsed lease writes nothing twice. Services flush; the caller commits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, null, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.models import (
    Item,
    JobStatus,
    PrecomputeJob,
    PrecomputeShard,
    ShardStatus,
    Study,
    StudyStatus,
    utcnow,
)
from app.precompute.datasets import check_dataset, load_dataset
from app.studytypes.registry import study_type_of

# Items per shard: the worker's default batch (256 rows, GPU and CPU), so that one shard fills
# a batch.  Four shards of 64 made 256 items 10-25 % slower on the 2-core CPU (each shard ends
# in its own sampling and word-search tail; 2026-11-24, GPT-2 small shape, l = 20), and a GPU
# is mostly idle at 64 rows.  A lost shard costs at most one batch's work.
DEFAULT_SHARD_SIZE = 256
MAX_ATTEMPTS = 3
# Shards a GPU worker claims at once by default (`claim_shards`): four shards of 256 fill its
# up to 1,024 rows (not measured here: no GPU was lent).  A CPU worker claims one: on the 2-core
# CPU four a claim made 2,048 items at l = 20 at 0.99x the needed tokens per CPU second of one
# a claim (`benchmarks/worker_claims.py`, 2026-11-26).  A worker that dies holds all of its
# shards until their leases lapse; another then takes them over.
SHARDS_PER_CLAIM = {"cuda": 4, "cpu": 1}
ATTENTION_KIND = "data"  # attention candidates are extra data prefixes (see plan_job)


class PrecomputeError(ValueError):
    """A request about precompute jobs that cannot be carried out."""


@dataclass(frozen=True)
class Cell:
    length: int
    kind: str
    start: int
    stop: int
    attention: bool = False


def attention_candidates(study: Study) -> int:
    """Extra data prefixes per length from which attention items are chosen.

    They are the data cell's items past `items_per_cell` (so their dataset
    lines never repeat a study item's), twice the attention slots needed.
    """
    per_hit = int(study.hit_layout.get("attention", 0))
    data_per_hit = int(study.hit_layout["mix"].get("data", 0))
    if per_hit == 0 or data_per_hit == 0:
        return 0
    hits = math.ceil(study.items_per_cell / data_per_hit)
    return 2 * hits * per_hit


def cells(study: Study, max_attention: int | None = None) -> list[Cell]:
    out = []
    extra = attention_candidates(study)
    if max_attention is not None:
        extra = max(0, min(extra, max_attention))
    for length in study.prefix_lengths:
        for kind in study.kinds:
            out.append(Cell(length, kind, 0, study.items_per_cell))
        if extra:
            n = study.items_per_cell
            out.append(Cell(length, ATTENTION_KIND, n, n + extra, attention=True))
    return out


def is_attention_shard(study: Study, shard: PrecomputeShard) -> bool:
    """Whether the shard makes attention candidates: next-word items with an unambiguous next
    word, or a ratings study's attention pairs (their real continuation shuffled)."""
    return shard.kind == ATTENTION_KIND and shard.start_index >= study.items_per_cell


def words_after_prefix(study: Study) -> int:
    """Words a data prefix's dataset line must hold after it, as the study's type needs
    them: the true next word (1), or a ratings study's real continuation (l_gen words:
    EB-M's references and the attention pairs' words)."""
    return study_type_of(study).hits.words_after_prefix(study)


def active_job(session: Session, study: Study) -> PrecomputeJob | None:
    return session.scalar(
        select(PrecomputeJob)
        .where(
            PrecomputeJob.study_id == study.id,
            PrecomputeJob.status.in_([JobStatus.pending, JobStatus.running]),
        )
        .order_by(PrecomputeJob.id.desc())
    )


def plan_job(
    session: Session,
    study: Study,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    max_attention: int | None = None,
) -> PrecomputeJob:
    """Create the study's precompute job and its shards; reuse an unfinished one.

    `max_attention` caps the attention candidates per length (the dataset lines
    left over after the data cell, which the caller knows and this layer does not).
    """
    if study.status is StudyStatus.closed:
        raise PrecomputeError("the study is closed")
    existing = active_job(session, study)
    if existing is not None:
        return existing
    if shard_size < 1:
        raise PrecomputeError("shard size must be at least 1")
    job = PrecomputeJob(study_id=study.id, status=JobStatus.pending)
    session.add(job)
    session.flush()
    shards, total = [], 0
    next_index: dict[tuple[int, str], int] = {}  # attention shards continue the data cell's
    for cell in cells(study, max_attention):
        for start in range(cell.start, cell.stop, shard_size):
            stop = min(start + shard_size, cell.stop)
            key = (cell.length, cell.kind)
            index = next_index[key] = next_index.get(key, -1) + 1
            shards.append(
                PrecomputeShard(
                    job_id=job.id,
                    length=cell.length,
                    kind=cell.kind,
                    shard_index=index,
                    start_index=start,
                    stop_index=stop,
                )
            )
            total += stop - start
    job.total_items = total
    session.add_all(shards)
    study.status = StudyStatus.precomputing
    session.flush()
    return job


def plan_precompute(
    session: Session,
    study: Study,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    by: Actor | None = None,
) -> PrecomputeJob:
    """Check a draft study's dataset, then plan its precompute job (nothing is written on
    error): the dashboard's, the API's and `ebc precompute`'s one way to plan.

    Raises `DatasetError` when the dataset cannot give every cell its items, and
    `PrecomputeError` for a study that is not a draft. Attention candidates (extra data
    prefixes) are limited to the lines left over.
    """
    if study.status is not StudyStatus.draft:
        raise PrecomputeError(
            f"the study is {study.status.value}: precompute is planned for draft studies"
        )
    dataset = load_dataset(study.dataset_path, study.dataset_format)
    following = words_after_prefix(study)
    check_dataset(
        dataset,
        study.prefix_lengths,
        study.items_per_cell,
        prompt_words=study.prompt_words,
        task=study.task.value,
        following=following,
    )
    spare = min(
        len(dataset.eligible(study.prompt_words + length + following)) - study.items_per_cell
        for length in study.prefix_lengths
    )
    job = plan_job(session, study, shard_size=shard_size, max_attention=spare)
    record_by(session, by, "precompute_planned", study=study, job=job.id, items=job.total_items)
    return job


def _claimable(now: datetime):
    return or_(
        PrecomputeShard.status == ShardStatus.pending,
        and_(PrecomputeShard.status == ShardStatus.leased, PrecomputeShard.lease_expires_at < now),
        and_(PrecomputeShard.status == ShardStatus.failed, PrecomputeShard.attempts < MAX_ATTEMPTS),
    )


def _lease(session: Session, shard_id: int, worker_id: str, now, lease_seconds, *also) -> bool:
    """Lease a shard to `worker_id` if it is still claimable (and ``also`` holds): the
    compare-and-set UPDATE that makes two claimers never both win."""
    return bool(
        session.execute(
            update(PrecomputeShard)
            .where(PrecomputeShard.id == shard_id, _claimable(now), *also)
            .values(
                status=ShardStatus.leased,
                worker_id=worker_id,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                heartbeat_at=now,
                started_at=now,
                attempts=PrecomputeShard.attempts + 1,
            )
            .execution_options(synchronize_session=False)
        ).rowcount
    )


def claim_shard(
    session: Session,
    worker_id: str,
    *,
    lease_seconds: float,
    study_id: int | None = None,
) -> PrecomputeShard | None:
    """Lease the next shard of a running job to `worker_id`, or None if there is none.

    Candidates are pending shards, shards whose lease lapsed (their worker died)
    and failed shards with attempts left. The final UPDATE re-checks the
    condition, so under any isolation level only one claimer wins a shard.
    """
    now = utcnow()
    query = (
        select(PrecomputeShard.id)
        .join(PrecomputeJob, PrecomputeJob.id == PrecomputeShard.job_id)
        .where(
            PrecomputeJob.status.in_([JobStatus.pending, JobStatus.running]),
            _claimable(now),
        )
        .order_by(PrecomputeShard.attempts, PrecomputeShard.id)
        .limit(8)
    )
    if study_id is not None:
        query = query.where(PrecomputeJob.study_id == study_id)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(of=PrecomputeShard, skip_locked=True)
    for shard_id in session.scalars(query).all():
        if _lease(session, shard_id, worker_id, now, lease_seconds):
            shard = session.get(PrecomputeShard, shard_id, populate_existing=True)
            _mark_running(session, shard.job_id, now)
            session.flush()
            return shard
    return None


def _mark_running(session: Session, job_id: int, now: datetime) -> None:
    """A pending job becomes running at its first claim, unless its row is locked.

    The claim already holds a shard's lock here, and `cancel_job` locks the job and then
    its shards: waiting for the job's lock could close that cycle on PostgreSQL (one of the
    two transactions aborted as a deadlock).  So the job is taken with SKIP LOCKED: whoever
    holds its lock is a cancel (which then cancels this shard too), another first claim
    (which moves it on) or a shard's end; each later claim tries again while the job is
    pending (a job left pending is only shown so: every path accepts it)."""
    query = select(PrecomputeJob).where(
        PrecomputeJob.id == job_id, PrecomputeJob.status == JobStatus.pending
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    job = session.scalars(query.execution_options(populate_existing=True)).first()
    if job is not None:
        job.status, job.started_at = JobStatus.running, now


def claim_shards(
    session: Session,
    worker_id: str,
    *,
    lease_seconds: float,
    study_id: int | None = None,
    most: int = 1,
) -> list[PrecomputeShard]:
    """Lease the next shard (as `claim_shard`) and up to ``most - 1`` shards that follow it
    in its cell (same job, length and kind, each starting where the one before stops, on the
    same side of the attention candidates' start), pending or with a lapsed lease, in index
    order; [] if there is none.  A worker makes their items in one run (a GPU's batch stays
    full across them) and still ends each shard on its own
    (`complete_shard`, `fail_shard`).  Each follower is won by the same compare-and-set
    UPDATE as the first, so a shard another worker holds ends the run of shards there.  A
    shard that failed before is retried alone, and is no follower: one bad item (or a run
    too big for the device) does not spend the attempts of the healthy shards beside it."""
    first = claim_shard(session, worker_id, lease_seconds=lease_seconds, study_id=study_id)
    if first is None:
        return []
    shards = [first]
    if most <= 1 or first.error is not None:
        return shards
    job = session.get(PrecomputeJob, first.job_id)
    study = session.get(Study, job.study_id)
    now = utcnow()
    postgres = session.get_bind().dialect.name == "postgresql"
    while len(shards) < most:
        if first.kind == ATTENTION_KIND and shards[-1].stop_index == study.items_per_cell:
            break  # the attention candidates (`cells`) are made another way
        query = select(PrecomputeShard.id).where(
            PrecomputeShard.job_id == first.job_id,
            PrecomputeShard.length == first.length,
            PrecomputeShard.kind == first.kind,
            PrecomputeShard.start_index == shards[-1].stop_index,
            PrecomputeShard.error.is_(None),
            _claimable(now),
        )
        if postgres:
            query = query.with_for_update(skip_locked=True)
        shard_id = session.scalar(query)
        if shard_id is None:
            break
        if not _lease(
            session, shard_id, worker_id, now, lease_seconds, PrecomputeShard.error.is_(None)
        ):
            break
        shards.append(session.get(PrecomputeShard, shard_id, populate_existing=True))
    session.flush()
    return shards


def heartbeat(session: Session, shard_id: int, worker_id: str, *, lease_seconds: float) -> bool:
    """Extend the lease; False when the shard is no longer this worker's."""
    now = utcnow()
    renewed = session.execute(
        update(PrecomputeShard)
        .where(
            PrecomputeShard.id == shard_id,
            PrecomputeShard.worker_id == worker_id,
            PrecomputeShard.status == ShardStatus.leased,
        )
        .values(heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    ).rowcount
    return bool(renewed)


def write_items(session: Session, study_id: int, shard_id: int, rows: list[dict[str, Any]]) -> int:
    """Insert items, ignoring any that exist (same study, attention flag, length, kind, index).

    Returns how many rows were new. Each row holds `Item`'s columns; a missing or None
    `reference` (no reference model, a skipped item) is stored as SQL NULL, not JSON null.
    """
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    now = utcnow()
    values = [
        {
            "study_id": study_id,
            "shard_id": shard_id,
            "created_at": now,
            **r,
            "reference": null() if r.get("reference") is None else r["reference"],
        }
        for r in rows
    ]
    stmt = (
        insert(Item)
        .values(values)
        .on_conflict_do_nothing(
            index_elements=["study_id", "is_attention", "length", "kind", "index"]
        )
    )
    return session.execute(stmt).rowcount


def complete_shard(
    session: Session,
    shard_id: int,
    worker_id: str,
    rows: list[dict[str, Any]],
    *,
    seconds: float,
) -> bool:
    """Store a shard's items and mark it done. Idempotent.

    A worker whose lease lapsed may still finish: its items are the same
    deterministic ones, so they are stored (or ignored if already there) and
    the shard is marked done unless it already is. Returns False when the
    shard's job was cancelled (nothing is written then).
    """
    job, shard = _lock_job_and_shard(session, shard_id)
    if job.status is JobStatus.cancelled or shard.status is ShardStatus.cancelled:
        return False
    write_items(session, job.study_id, shard.id, rows)
    if shard.status is not ShardStatus.done:
        shard.status = ShardStatus.done
        shard.items_done = shard.stop_index - shard.start_index
        shard.finished_at = utcnow()
        shard.seconds = seconds
        shard.worker_id = worker_id
        shard.lease_expires_at = None
        shard.error = None
    session.flush()
    _finish_job_if_done(session, job)
    return True


def fail_shard(session: Session, shard_id: int, worker_id: str, error: str) -> None:
    """Record a failed attempt with its traceback; the shard is retried up to MAX_ATTEMPTS."""
    job, shard = _lock_job_and_shard(session, shard_id)
    if shard.status is not ShardStatus.leased or shard.worker_id != worker_id:
        return  # someone else owns it now; their outcome stands
    shard.status = ShardStatus.failed
    shard.error = error[-20_000:]
    shard.lease_expires_at = None
    shard.finished_at = utcnow()
    session.flush()
    _finish_job_if_done(session, job)


def _lock_job_and_shard(session: Session, shard_id: int) -> tuple[PrecomputeJob, PrecomputeShard]:
    """Lock a shard's job, then the shard (the order `cancel_job` takes them in).

    The job's lock makes ending its shards one at a time: two workers that finish the
    job's last two shards at once would otherwise each count the other's shard as still
    leased (not yet committed), and neither would mark the job done.
    """
    job_id = session.scalar(select(PrecomputeShard.job_id).where(PrecomputeShard.id == shard_id))
    job = session.get(PrecomputeJob, job_id, with_for_update=True, populate_existing=True)
    shard = session.get(PrecomputeShard, shard_id, with_for_update=True, populate_existing=True)
    return job, shard


def _finish_job_if_done(session: Session, job: PrecomputeJob) -> None:
    counts = dict(
        session.execute(
            select(PrecomputeShard.status, func.count())
            .where(PrecomputeShard.job_id == job.id)
            .group_by(PrecomputeShard.status)
        ).all()
    )
    exhausted = session.scalar(
        select(func.count()).where(
            PrecomputeShard.job_id == job.id,
            PrecomputeShard.status == ShardStatus.failed,
            PrecomputeShard.attempts >= MAX_ATTEMPTS,
        )
    )
    open_ = counts.get(ShardStatus.pending, 0) + counts.get(ShardStatus.leased, 0)
    retryable = counts.get(ShardStatus.failed, 0) - exhausted
    if open_ or retryable:
        return
    job.finished_at = utcnow()
    study = session.get(Study, job.study_id)
    if exhausted:
        job.status = JobStatus.failed
        study.status = StudyStatus.draft
    else:
        job.status = JobStatus.done
        study.status = StudyStatus.ready
    session.flush()


def cancel_job(session: Session, job: PrecomputeJob) -> None:
    """Stop handing out the job's shards; items already made stay."""
    if job.status not in (JobStatus.pending, JobStatus.running):
        raise PrecomputeError(f"the job is {job.status.value}, not running")
    now = utcnow()
    job.status, job.cancelled_at, job.finished_at = JobStatus.cancelled, now, now
    session.execute(
        update(PrecomputeShard)
        .where(
            PrecomputeShard.job_id == job.id,
            PrecomputeShard.status.in_(
                [ShardStatus.pending, ShardStatus.leased, ShardStatus.failed]
            ),
        )
        .values(status=ShardStatus.cancelled, lease_expires_at=None)
        .execution_options(synchronize_session=False)
    )
    study = session.get(Study, job.study_id)
    if study.status is StudyStatus.precomputing:
        study.status = StudyStatus.draft
    session.flush()


@dataclass(frozen=True)
class CellProgress:
    length: int
    kind: str
    attention: bool
    items_done: int
    items_total: int
    shards_failed: int
    items_per_second: float | None
    last_error: str | None


@dataclass(frozen=True)
class JobProgress:
    job: PrecomputeJob
    cells: list[CellProgress]

    @property
    def items_done(self) -> int:
        return sum(c.items_done for c in self.cells)

    @property
    def items_total(self) -> int:
        return sum(c.items_total for c in self.cells)


def job_progress(session: Session, job: PrecomputeJob) -> JobProgress:
    """Items done / total per (length, kind) cell, throughput, and the last error."""
    shards = session.scalars(
        select(PrecomputeShard)
        .where(PrecomputeShard.job_id == job.id)
        .order_by(PrecomputeShard.length, PrecomputeShard.kind, PrecomputeShard.start_index)
    ).all()
    study = session.get(Study, job.study_id)
    grouped: dict[tuple[int, str, bool], list[PrecomputeShard]] = {}
    for s in shards:
        attention = is_attention_shard(study, s)
        grouped.setdefault((s.length, s.kind, attention), []).append(s)
    out = []
    for (length, kind, attention), group in grouped.items():
        done = [s for s in group if s.status is ShardStatus.done]
        seconds = sum(s.seconds or 0.0 for s in done)
        n_done = sum(s.items_done for s in done)
        errors = [s for s in group if s.error]
        out.append(
            CellProgress(
                length=length,
                kind=kind,
                attention=attention,
                items_done=n_done,
                items_total=sum(s.stop_index - s.start_index for s in group),
                shards_failed=sum(1 for s in group if s.status is ShardStatus.failed),
                items_per_second=n_done / seconds if seconds > 0 else None,
                last_error=errors[-1].error if errors else None,
            )
        )
    return JobProgress(job, out)


def latest_job(session: Session, study: Study) -> PrecomputeJob | None:
    return session.scalar(
        select(PrecomputeJob)
        .where(PrecomputeJob.study_id == study.id)
        .order_by(PrecomputeJob.id.desc())
        .limit(1)
    )
