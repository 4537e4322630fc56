"""The precompute worker loop: claim a shard, make its items, store them, repeat.

Any number of workers on any machines that reach the database may run at once;
`app.precompute.service` hands each shard to one of them at a time and makes
re-runs harmless. A heartbeat thread keeps the lease while a shard is made; a
worker that dies (even by SIGKILL) simply stops renewing it, and another worker
takes the shard over once the lease lapses.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from app.config import Settings
from app.db import begin_write, build_engine, make_sessionmaker, unit_of_work
from app.models import JobStatus, PrecomputeShard, Study
from app.precompute import samples as forced
from app.precompute import service
from app.precompute.datasets import Dataset, DatasetError, load_dataset
from app.software import software
from app.studies.schemas import config_from_columns, worker_settings
from app.studytypes.registry import study_type_of
from worker.continuations import attention_pairs
from worker.prefixes import PrefixItem, PrefixSpec, make_items
from worker.samples import make_samples
from worker.synthetic import check_pair, reference_records

log = logging.getLogger("ebc.worker")


@dataclass
class WorkerOptions:
    device: str | None = None  # None: cuda when present, else cpu
    dtype: str = "float32"
    batch_size: int | None = None  # None: worker.models.auto_batch_size
    lease_seconds: float = 120.0
    poll_seconds: float = 2.0
    once: bool = False  # stop when no shard is claimable instead of waiting
    study_id: int | None = None  # only this study's shards
    max_shards: int | None = None
    # Shards of one cell claimed and made together (`service.claim_shards`): one sampler run
    # over their items, so that a GPU's rows are filled (on the CPU it gained nothing).
    shards_per_claim: int | None = None  # None: service.SHARDS_PER_CLAIM of the device


def spec_for(study: Study, batch_size: int | None) -> PrefixSpec:
    """The settings the worker makes `study`'s items with (`app.studies.schemas`' mapping)."""
    return PrefixSpec(**worker_settings(config_from_columns(study)), batch_size=batch_size)


def item_row(
    item: PrefixItem,
    *,
    attention: bool,
    spec: PrefixSpec,
    reference: dict | None = None,
    run: tuple[int, int] | None = None,
) -> dict:
    """A `PrefixItem` as the columns of `app.models.Item` (``reference``: its synthetic EB-C
    record, `worker.synthetic`; None without a reference model or for a skipped item;
    ``continuation``: a ratings item's words, space-joined).  ``run``: the item indices made
    in the same sampler run (its possible batch-mates: float rounding of other batch shapes
    can, rarely, change a sampled token, so this is what reproduces an item bit for bit)."""
    extra = {} if run is None else {"run": {"start": run[0], "stop": run[1]}}
    return {
        "length": item.length,
        "kind": item.kind,
        "index": item.index,
        "is_attention": attention,
        "words": item.text,
        "prompt": " ".join(item.prompt_words) or None,
        "source": item.source,
        "true_next_word": item.true_next_word,
        "choices": [{"word": w, "prob": float(p)} for w, p in item.choices],
        "skip_reason": item.skip_reason if item.skipped else None,
        "provenance": {
            **item.provenance,
            "spec": _spec_record(spec),
            "software": _SOFTWARE(),
            **extra,
        },
        "reference": reference,
        "continuation": None if item.continuation is None else " ".join(item.continuation),
    }


def sample_row(item: PrefixItem, reference: str | None, spec: PrefixSpec) -> dict:
    """A forced-prefix sample (`worker.samples`) as the columns of `app.models.ForcedSample`
    (its sentence BLEU is added as it is stored)."""
    return {
        "length": item.length,
        "kind": item.kind,
        "index": item.index,
        "source": item.source,
        "prompt": " ".join(item.prompt_words) or None,
        "prefix": item.text,
        "continuation": None if item.skipped else " ".join(item.continuation or []),
        "reference": reference,
        "skip_reason": item.skip_reason if item.skipped else None,
        "provenance": {**item.provenance, "spec": _spec_record(spec), "software": _SOFTWARE()},
    }


# The versions that made the items (the results' manifest shows them): once per process.
_SOFTWARE = functools.cache(software)


def _spec_record(spec: PrefixSpec) -> dict:
    from dataclasses import asdict

    record = asdict(spec)
    record.pop("batch_size")  # a performance knob, not part of what an item is
    return record


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class _Heartbeat(threading.Thread):
    """Renews the leases of a claim's shards every lease/4 seconds, each in its own
    transaction (a shard's row is the only one it locks, as `cancel_job` locks the job's
    first); a shard no longer this worker's is dropped and the others are kept."""

    def __init__(self, engine: Engine, shard_ids: list[int], worker_id: str, lease_seconds: float):
        super().__init__(daemon=True, name=f"heartbeat-{shard_ids[0]}")
        self.sessionmaker = make_sessionmaker(engine)
        self.held, self.worker_id, self.lease = list(shard_ids), worker_id, lease_seconds
        self.stop = threading.Event()
        self.lost: list[int] = []

    def run(self) -> None:
        while self.held and not self.stop.wait(self.lease / 4):
            for shard_id in list(self.held):
                try:
                    with unit_of_work(self.sessionmaker) as session:
                        ok = service.heartbeat(
                            session, shard_id, self.worker_id, lease_seconds=self.lease
                        )
                except Exception:  # a missed beat is not fatal; the lease has slack
                    log.warning("heartbeat for shard %s failed", shard_id, exc_info=True)
                    continue
                if not ok:
                    # Finishing still stores its (deterministic) items: `complete_shard`.
                    self.held.remove(shard_id)
                    self.lost.append(shard_id)


ProgressCallback = Callable[[PrecomputeShard, int], None]


class Worker:
    """Claims and processes shards until none is left (`once`) or forever."""

    def __init__(
        self,
        settings: Settings,
        options: WorkerOptions | None = None,
        *,
        engine: Engine | None = None,
        worker_id: str | None = None,
    ):
        self.options = options or WorkerOptions()
        self._own_engine = engine is None
        self.engine = engine or build_engine(settings)
        self.sessionmaker = make_sessionmaker(self.engine)
        self.worker_id = worker_id or default_worker_id()
        self._models: dict[tuple, object] = {}
        self._datasets: dict[tuple[str, str], Dataset] = {}

    def close(self) -> None:
        if self._own_engine:
            self.engine.dispose()

    def model_for(self, study: Study):
        return self._load(study.model_name, study.model_revision, study.task.value)

    def reference_for(self, study: Study):
        """The study's reference model P_D (synthetic EB-C), or None.  Loaded once, with the
        model's device and dtype; a reference named like the model is the same object."""
        section = config_from_columns(study).reference
        if not section.model:
            return None
        return self._load(section.model, section.revision, study.task.value)

    def _load(self, name: str, revision: str | None, task: str):
        from worker.models import load_model

        key = (name, revision, task)
        if key not in self._models:
            log.info("loading model %s", name)
            self._models[key] = load_model(
                name,
                task=task,
                device=self.options.device,
                dtype=self.options.dtype,
                revision=revision,
            )
        return self._models[key]

    def dataset_for(self, study: Study) -> Dataset:
        key = (study.dataset_path, study.dataset_format)
        if key not in self._datasets:
            self._datasets[key] = load_dataset(study.dataset_path, study.dataset_format)
        dataset = self._datasets[key]
        if study.dataset_sha256 and study.dataset_sha256 != dataset.sha256:
            raise DatasetError(
                f"{study.dataset_path} changed since the study started (sha256 "
                f"{dataset.sha256[:12]}… instead of {study.dataset_sha256[:12]}…)"
            )
        return dataset

    def run(self, on_shard: ProgressCallback | None = None) -> int:
        """Process shards; returns how many this worker completed."""
        done = 0
        while self.options.max_shards is None or done < self.options.max_shards:
            outcome = self.run_one(on_shard, most=self._claim_size(done))
            if outcome is None:
                if self.options.once:
                    break
                time.sleep(self.options.poll_seconds)
                continue
            done += outcome
        return done

    def _claim_size(self, done: int) -> int:
        most = self.options.shards_per_claim
        if most is None:
            from worker.hf_common import default_device

            device = self.options.device or default_device().type
            most = service.SHARDS_PER_CLAIM.get(str(device).split(":")[0], 1)
        most = max(1, most)
        if self.options.max_shards is not None:
            most = min(most, self.options.max_shards - done)
        return most

    def run_one(self, on_shard: ProgressCallback | None = None, *, most: int = 1) -> int | None:
        """Claim up to ``most`` contiguous shards of one cell (`service.claim_shards`) and make
        their items in one run; each shard is then stored in its own transaction.  Returns how
        many were completed (0 if the run failed: each shard records the failure), None if
        there was nothing to claim."""
        lease = self.options.lease_seconds
        with unit_of_work(self.sessionmaker) as session:
            begin_write(session)  # SQLite: the claim writes; take the lock before reading
            shards = service.claim_shards(
                session,
                self.worker_id,
                lease_seconds=lease,
                study_id=self.options.study_id,
                most=most,
            )
            if not shards:
                return None
            job = session.get(service.PrecomputeJob, shards[0].job_id)
            study = session.get(Study, job.study_id)
            session.expunge_all()
        ids = [shard.id for shard in shards]
        beat = _Heartbeat(self.engine, ids, self.worker_id, lease)
        beat.start()
        started = time.perf_counter()
        try:
            rows = self._make(study, shards)
        except Exception:
            beat.stop.set()
            error = traceback.format_exc()
            log.error("shards %s failed:\n%s", ids, error)
            for shard in shards:
                with unit_of_work(self.sessionmaker) as session:
                    service.fail_shard(session, shard.id, self.worker_id, error)
            return 0
        finally:
            beat.stop.set()
        # Each shard's share of the run's time, by its items (the dashboard's rate per shard).
        elapsed = time.perf_counter() - started
        n_items = sum(len(r) for r in rows.values())
        completed = 0
        for shard in shards:
            mine = rows[shard.id]
            seconds = elapsed * len(mine) / n_items if n_items else elapsed / len(shards)
            if not self._complete(study, shard, mine, seconds):
                continue  # the job was cancelled: nothing was written
            completed += 1
            if on_shard is not None:
                on_shard(shard, len(mine))
        scores = study_type_of(study).scores
        if scores is not None:
            self._score_when_done(study, shards[0].job_id, scores)
        self.samples_when_done(study, shards[0].job_id)
        return completed

    def _complete(self, study: Study, shard, rows: list[dict], seconds: float) -> bool:
        """Store a shard's items and end it; False if its job was cancelled.  A study planned
        without its dataset's hash (`ebc study create`) gets it here, in the same transaction
        and after `complete_shard` has locked the job: locking the study first would take the
        locks in the opposite order to `cancel_job` (job, shards, study), a deadlock on
        PostgreSQL when a study is stopped or closed as a shard ends."""
        with unit_of_work(self.sessionmaker) as session:
            stored = service.complete_shard(
                session, shard.id, self.worker_id, rows, seconds=seconds
            )
            if stored and study.dataset_sha256 is None:
                fresh = session.get(Study, study.id)
                fresh.dataset_sha256 = fresh.dataset_sha256 or self.dataset_for(study).sha256
                study.dataset_sha256 = fresh.dataset_sha256
        return stored

    def _score_when_done(self, study: Study, job_id: int, scores) -> None:
        """The study type's automatic scores (a ratings study's EB-M), once its precompute
        job is done: the type's results job (`app.studytypes.base.Scores`) run here, where
        the dataset is. Its failure is logged and leaves the items as they are; `ebc results
        score STUDY` computes them again."""
        try:
            with unit_of_work(self.sessionmaker) as session:
                job = session.get(service.PrecomputeJob, job_id)
                if job is None or job.status is not JobStatus.done:
                    return
                fresh = session.get(Study, study.id)
                last = scores.computed_at(session, fresh)
                if last is not None and last >= job.finished_at:
                    return  # another worker's last shard already scored this job
                scores.score(session, fresh, by="worker", dataset=self.dataset_for(fresh))
        except Exception:
            log.exception(
                "%s scores of %s failed (ebc results score computes them)",
                scores.label,
                study.slug,
            )

    def samples_when_done(self, study: Study, job_id: int) -> tuple[int, str | None]:
        """The study's forced-prefix samples (`worker.samples`), once its precompute job is
        done: the cells still short of ``samples.per_kind`` are made and stored (insert-or-
        ignore: a re-run, or another worker's, stores nothing twice), then each cell's corpus
        BLEU.  Returns how many were stored and the error that stopped them (logged and
        recorded for the samples page; the items stay; `ebc samples STUDY` tries again).  Each
        cell is stored as it is made, so a failure loses at most the cell being made."""
        with unit_of_work(self.sessionmaker) as session:
            job = session.get(service.PrecomputeJob, job_id)
            if job is None or job.status is not JobStatus.done:
                return 0, None
            cells = forced.missing_cells(session, study)
        if not cells:
            return 0, None
        stored = 0
        try:
            config = config_from_columns(study)
            spec = spec_for(study, self.options.batch_size)
            model, dataset = self.model_for(study), self.dataset_for(study)
            for cell in cells:
                made = make_samples(model, dataset, config, spec, [cell])
                rows = [sample_row(item, reference, spec) for item, reference in made]
                with unit_of_work(self.sessionmaker) as session:
                    stored += forced.write_samples(session, study.id, rows)
            with unit_of_work(self.sessionmaker) as session:
                forced.score_samples(session, session.get(Study, study.id))
            return stored, None
        except Exception as exc:
            log.exception("forced-prefix samples of %s failed", study.slug)
            error = f"{type(exc).__name__}: {exc}"
            with unit_of_work(self.sessionmaker) as session:
                forced.score_samples(session, session.get(Study, study.id), error=error)
            return stored, error

    def _make(self, study: Study, shards: list[PrecomputeShard]) -> dict[int, list[dict]]:
        """The item rows of contiguous shards of one cell, made in one run, by shard id."""
        first, last = shards[0], shards[-1]
        rows = self._make_range(study, first, first.start_index, last.stop_index)
        return {
            shard.id: [r for r in rows if shard.start_index <= r["index"] < shard.stop_index]
            for shard in shards
        }

    def _make_range(
        self, study: Study, shard: PrecomputeShard, start: int, stop: int
    ) -> list[dict]:
        model = self.model_for(study)
        reference = self.reference_for(study)
        # An incompatible pair fails every shard with its reason before any item is made.
        pair = check_pair(model, reference) if reference is not None else None
        dataset = self.dataset_for(study)
        spec = spec_for(study, self.options.batch_size)
        attention = service.is_attention_shard(study, shard)
        if spec.continuation_words and attention:
            # Items with continuations (a ratings study's): attention pairs are data prefixes
            # with their real continuation's words shuffled.
            items = make_items(
                model,
                dataset,
                spec,
                shard.length,
                shard.kind,
                start,
                stop,
                study.seed,
                prefixes_only=True,
            )
            return [
                item_row(item, attention=True, spec=spec, run=(start, stop))
                for item in attention_pairs(items, study.seed)
            ]
        # Attention candidates need a true next word: they stay dataset lines.
        sampled = config_from_columns(study).reference.data_prefixes == "reference"
        items = make_items(
            model,
            dataset,
            spec,
            shard.length,
            shard.kind,
            start,
            stop,
            study.seed,
            data_from=reference if sampled and not attention else None,
            keep_roots=reference is not None,
        )
        records: list[dict | None] = [None] * len(items)
        if reference is not None:
            records = reference_records(model, reference, items, spec, pair)
        return [
            item_row(item, attention=attention, spec=spec, reference=record, run=(start, stop))
            for item, record in zip(items, records, strict=True)
        ]
