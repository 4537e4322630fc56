"""The worker against a real database: shards, leases, crashes, idempotent writes."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, text, update

from app.models import (
    Item,
    JobStatus,
    PrecomputeJob,
    PrecomputeShard,
    ShardStatus,
    Study,
    utcnow,
)
from app.precompute import service
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from tests.worker.conftest import corpus_lines
from worker.runner import Worker, WorkerOptions, _Heartbeat, spec_for

EBC = str(Path(sys.executable).with_name("ebc"))


def _study(sessionmaker, model_dir, dataset_file, *, per_cell=10, lengths=(3, 5), shard=4, **kw):
    cfg = StudyConfig(
        slug="s",
        title="S",
        model={"name": str(model_dir)},
        dataset={"path": str(dataset_file)},
        prefix_lengths=list(lengths),
        items_per_cell=per_cell,
        seed=7,
        hits={"mix": {"data": 5, "model": 5}, "attention": kw.pop("attention", 0)},
        **kw,
    )
    with sessionmaker() as session, session.begin():
        study = create_study(session, cfg)
        job = service.plan_job(session, study, shard_size=shard)
        return study.id, job.id


def _items(sessionmaker, study_id):
    with sessionmaker() as session:
        return session.scalars(
            select(Item).where(Item.study_id == study_id).order_by(Item.id)
        ).all()


def test_worker_makes_every_item_once_and_finishes_the_job(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id, job_id = _study(sm, model_dir, dataset_file)
    worker = Worker(database.settings(), WorkerOptions(once=True, device="cpu"), engine=engine)
    assert worker.run() == 2 * 2 * 3  # 2 lengths x 2 kinds x ceil(10 / 4) shards
    items = _items(sm, study_id)
    cells = Counter((i.length, i.kind) for i in items)
    assert cells == {(3, "data"): 10, (3, "model"): 10, (5, "data"): 10, (5, "model"): 10}
    lines = [line.split() for line in corpus_lines(400)]
    for item in items:
        assert len(item.words.split()) == item.length
        assert 1 <= len(item.choices) <= 5
        probs = [c["prob"] for c in item.choices]
        assert probs == sorted(probs, reverse=True)
        assert not {"<unk>", "<eos>"} & {c["word"] for c in item.choices}
        if item.kind == "data":
            # the prefix is the start of a dataset line and the true next word follows it
            line = next(w for w in lines if w[: item.length] == item.words.split())
            assert item.true_next_word == line[item.length]
        else:
            assert item.true_next_word is None
        assert item.provenance["spec"]["top_k"] == 5
        assert item.provenance["spec"]["max_word_tokens"] == 16  # the study file's default
    with sm() as session:
        job = session.get(PrecomputeJob, job_id)
        study = session.get(Study, study_id)
        assert job.status is JobStatus.done and study.status.value == "ready"
        assert study.dataset_sha256 and len(study.dataset_sha256) == 64
        progress = service.job_progress(session, job)
        assert progress.items_done == progress.items_total == 40


def test_a_rerun_shard_makes_the_same_items_and_writes_nothing_twice(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id, _ = _study(sm, model_dir, dataset_file, lengths=(4,))
    opts = WorkerOptions(once=True, device="cpu")
    Worker(database.settings(), opts, engine=engine).run()
    before = {(i.kind, i.index): (i.words, i.choices) for i in _items(sm, study_id)}
    with sm() as session, session.begin():
        shard = session.scalars(
            select(PrecomputeShard).where(PrecomputeShard.kind == "model")
        ).first()
        # half of its items are lost, then the shard is handed out again
        session.execute(
            delete(Item).where(Item.shard_id == shard.id, Item.index >= shard.start_index + 2)
        )
        session.execute(
            update(PrecomputeShard)
            .where(PrecomputeShard.id == shard.id)
            .values(status=ShardStatus.pending)
        )
        session.execute(update(PrecomputeJob).values(status=JobStatus.running))
    assert Worker(database.settings(), opts, engine=engine).run() == 1
    after = {(i.kind, i.index): (i.words, i.choices) for i in _items(sm, study_id)}
    assert after == before


def test_attention_candidates_are_extra_data_prefixes(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id, _ = _study(sm, model_dir, dataset_file, lengths=(3,), per_cell=10, attention=1)
    Worker(database.settings(), WorkerOptions(once=True, device="cpu"), engine=engine).run()
    items = _items(sm, study_id)
    attention = [i for i in items if i.is_attention]
    assert len(attention) == 2 * 2 * 1  # 2 HITs of 5 data items, 1 slot each, 2 candidates per slot
    assert {i.kind for i in attention} == {"data"}
    assert min(i.index for i in attention) == 10
    study_lines = {i.provenance["line"] for i in items if not i.is_attention and i.kind == "data"}
    assert not study_lines & {i.provenance["line"] for i in attention}  # held-out lines


def test_a_failing_shard_records_its_traceback_and_gives_up_after_bounded_retries(
    db, model_dir, tmp_path
):
    database, engine, sm = db
    missing = tmp_path / "gone.txt"
    # Four shards per cell: the first claim takes a cell's four, and its failure is each one's
    # (then each is retried alone).
    _study_id, job_id = _study(sm, model_dir, missing, lengths=(3,), per_cell=8, shard=2)
    opts = WorkerOptions(once=True, device="cpu", shards_per_claim=4)
    Worker(database.settings(), opts, engine=engine).run()
    with sm() as session:
        shards = session.scalars(select(PrecomputeShard)).all()
        assert len(shards) == 2 * 4
        assert all(s.status is ShardStatus.failed for s in shards)
        assert all(s.attempts == service.MAX_ATTEMPTS for s in shards)
        assert all("dataset file not found" in s.error and "Traceback" in s.error for s in shards)
        assert session.get(PrecomputeJob, job_id).status is JobStatus.failed
        assert session.scalar(select(func.count()).select_from(Item)) == 0


def test_a_cancelled_job_hands_out_nothing(db, model_dir, dataset_file):
    database, engine, sm = db
    _, job_id = _study(sm, model_dir, dataset_file)
    with sm() as session, session.begin():
        service.cancel_job(session, session.get(PrecomputeJob, job_id))
    assert Worker(database.settings(), WorkerOptions(once=True), engine=engine).run() == 0


def _ebc(database, *args, **popen):
    env = {**os.environ, "DATABASE_URL": database.url, "EBC_ENV": "test", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [EBC, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )


def _check_exactly_once(sm, study_id, expected):
    with sm() as session:
        keys = session.execute(
            select(Item.is_attention, Item.length, Item.kind, Item.index).where(
                Item.study_id == study_id
            )
        ).all()
    assert len(keys) == len(set(keys)) == expected


@pytest.mark.postgres
def test_two_worker_processes_share_the_shards(db, model_dir, dataset_file):
    database, _engine, sm = db
    study_id, job_id = _study(sm, model_dir, dataset_file, per_cell=24, shard=2)
    procs = [_ebc(database, "worker", "--once", "--device", "cpu") for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    with sm() as session:
        shards = session.scalars(select(PrecomputeShard)).all()
        by_worker = Counter(s.worker_id for s in shards)
        assert session.get(PrecomputeJob, job_id).status is JobStatus.done
    assert all(s.attempts == 1 for s in shards)  # no shard was made twice
    assert len(by_worker) == 2, by_worker  # both processes took part
    _check_exactly_once(sm, study_id, 2 * 2 * 24)


@pytest.mark.postgres
def test_a_killed_worker_shard_is_taken_over_after_its_lease(db, model_dir, dataset_file):
    database, _engine, sm = db
    # Two shards a cell: the victim's claim holds both of the first cell's.
    study_id, job_id = _study(sm, model_dir, dataset_file, per_cell=120, lengths=(8,), shard=60)
    lease = 4
    victim = _ebc(
        database, "worker", "--once", "--device", "cpu", "--lease", str(lease),
        "--shards-per-claim", "2",
    )  # fmt: skip
    deadline = time.monotonic() + 120
    leased = None
    while leased is None and time.monotonic() < deadline:
        with sm() as session:
            leased = session.scalars(
                select(PrecomputeShard).where(PrecomputeShard.status == ShardStatus.leased)
            ).first()
        time.sleep(0.05)
    assert leased is not None, "the worker never claimed a shard"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    with sm() as session:  # killed mid-claim: both shards of its cell still its own
        cell = session.scalars(
            select(PrecomputeShard).where(
                PrecomputeShard.length == leased.length, PrecomputeShard.kind == leased.kind
            )
        ).all()
        assert [(s.status, s.worker_id, s.attempts) for s in cell] == [
            (ShardStatus.leased, leased.worker_id, 1)
        ] * 2
    time.sleep(lease + 1)  # the lease lapses without heartbeats
    rescuer = _ebc(database, "worker", "--once", "--device", "cpu")
    out = rescuer.communicate(timeout=300)[0]
    assert rescuer.returncode == 0, out
    with sm() as session:
        held = session.scalars(
            select(PrecomputeShard).where(
                PrecomputeShard.length == leased.length, PrecomputeShard.kind == leased.kind
            )
        ).all()
        assert len(held) == 2
        for shard in held:
            assert shard.error is None, shard.error
            assert shard.status is ShardStatus.done and shard.attempts == 2
            assert shard.worker_id != leased.worker_id
        assert session.get(PrecomputeJob, job_id).status is JobStatus.done
    _check_exactly_once(sm, study_id, 2 * 120)


def _create_study_cli(database, tmp_path, model_dir, dataset_path) -> None:
    study = tmp_path / "study.toml"
    study.write_text(
        f'slug = "cli"\ntitle = "CLI"\nprefix_lengths = [3]\nitems_per_cell = 6\nseed = 3\n'
        f'[model]\nname = "{model_dir}"\n[dataset]\npath = "{dataset_path}"\n'
        "[hits]\nattention = 0\n"
    )
    proc = _ebc(database, "study", "create", "--config", str(study))
    assert proc.wait(timeout=60) == 0, proc.stdout.read()


def test_precompute_command_runs_the_study_with_a_progress_bar(
    db, model_dir, dataset_file, tmp_path
):
    database, _engine, sm = db
    _create_study_cli(database, tmp_path, model_dir, dataset_file)
    proc = _ebc(database, "precompute", "cli", "--device", "cpu", "--shard-size", "4")
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "precompute cli" in out and "12/12" in out
    assert "done, 12/12 items" in out
    with sm() as session:
        assert session.scalar(select(func.count()).select_from(Item)) == 12
        assert session.scalar(select(Study.status)).value == "ready"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "dataset file not found"),
        ("", "the dataset is empty"),
        ("too short\nalso short\n", "need 6 lines with at least 4 words; only 0"),
    ],
)
def test_precompute_refuses_a_bad_dataset_and_writes_nothing(
    db, model_dir, tmp_path, content, message
):
    database, _engine, sm = db
    path = tmp_path / "data.txt"
    if content is not None:
        path.write_text(content)
    _create_study_cli(database, tmp_path, model_dir, path)
    proc = _ebc(database, "precompute", "cli", "--device", "cpu")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1 and message in out, out
    with sm() as session:
        assert session.scalar(select(func.count()).select_from(PrecomputeJob)) == 0
        assert session.scalar(select(func.count()).select_from(Item)) == 0
        assert session.scalar(select(Study.status)).value == "draft"


@pytest.mark.postgres
def test_the_job_ends_when_its_last_two_shards_end_at_once(db, model_dir, dataset_file):
    """Two workers finish the job's last two shards in overlapping transactions: whichever
    commits second must see the other's shard done and mark the job done."""
    _database, _engine, sm = db
    _study_id, job_id = _study(sm, model_dir, dataset_file, per_cell=2, lengths=(3,), shard=2)
    with sm() as session, session.begin():
        shards = [service.claim_shard(session, f"w{i}", lease_seconds=60) for i in range(2)]
        assert None not in shards and session.scalar(select(func.count(PrecomputeShard.id))) == 2
        ids = [s.id for s in shards]
    first_done, errors = threading.Event(), []

    def second() -> None:
        first_done.wait(10)
        try:
            with sm() as session, session.begin():
                service.complete_shard(session, ids[1], "w1", [], seconds=0.1)
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    with sm() as session, session.begin():
        service.complete_shard(session, ids[0], "w0", [], seconds=0.1)
        first_done.set()
        # The second transaction runs (or waits for the job's lock) before this one commits.
        time.sleep(0.5)
    thread.join(30)
    assert not errors and not thread.is_alive()
    with sm() as session:
        assert session.get(PrecomputeJob, job_id).status is JobStatus.done


def _until(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not (met := condition()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(met)


def _waiting_for_a_lock(sm) -> bool:
    """Whether a session of this database waits for a row lock (PostgreSQL)."""
    with sm() as session:
        return bool(
            session.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
            )
        )


def _cancel_meanwhile(sm, job_id: int, other, ready) -> list[Exception]:
    """Take the job's lock (`cancel_job`'s first write), run ``other`` in a thread, wait until
    ``ready()`` (it holds or waits for its locks), then cancel the job in that transaction: what
    either side raised (PostgreSQL aborts one of them on a lock cycle)."""
    job_locked, errors = threading.Event(), []

    def run() -> None:
        job_locked.wait(10)
        try:
            other()
        except Exception as exc:  # returned to the test
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        with sm() as session, session.begin():
            job = session.get(PrecomputeJob, job_id, with_for_update=True)
            job_locked.set()
            if not _until(ready):  # else the cancel would not meet the other side at all
                raise AssertionError("the other side never took or waited for its locks")
            service.cancel_job(session, job)
    except Exception as exc:  # returned to the test
        errors.append(exc)
    thread.join(30)
    assert not thread.is_alive()
    return errors


@pytest.mark.postgres
def test_a_first_claim_and_a_cancel_of_a_pending_job_do_not_deadlock(db, model_dir, dataset_file):
    """`cancel_job` locks the job, then its shards; the job's first claim locks a shard and
    moves the pending job to running.  Interleaved (the cancel holding the job while the
    claim takes its shard), waiting for the job's lock closed a cycle that PostgreSQL broke
    by aborting one of them as a deadlock."""
    _, _, sm = db
    _study_id, job_id = _study(sm, model_dir, dataset_file, lengths=(3,), per_cell=4, shard=2)
    with sm() as session:
        assert session.get(PrecomputeJob, job_id).status is JobStatus.pending
    claimed = []

    def claim() -> None:
        with sm() as session, session.begin():
            claimed.append(service.claim_shard(session, "w", lease_seconds=60).id)
            time.sleep(0.3)  # the cancel now waits for this shard's lock

    errors = _cancel_meanwhile(sm, job_id, claim, lambda: claimed or _waiting_for_a_lock(sm))
    assert not errors and len(claimed) == 1
    with sm() as session:
        assert session.get(PrecomputeJob, job_id).status is JobStatus.cancelled
        shards = session.scalars(select(PrecomputeShard)).all()
        assert {s.status for s in shards} == {ShardStatus.cancelled}
        assert session.get(PrecomputeShard, claimed[0]).attempts == 1


@pytest.mark.postgres
def test_a_shard_ending_while_its_study_is_stopped_does_not_deadlock(db, model_dir, dataset_file):
    """A study created without its dataset's hash (`ebc study create`) gets it with its first
    stored shard.  Written before the shard's job was locked, it took the study's lock first,
    while a cancel (stop or close) takes the job, its shards, then the study."""
    database, engine, sm = db
    study_id, job_id = _study(sm, model_dir, dataset_file, lengths=(3,), per_cell=4, shard=2)
    with sm() as session, session.begin():
        assert session.get(Study, study_id).dataset_sha256 is None
        shard = service.claim_shard(session, "w", lease_seconds=60)
    with sm() as session:
        study = session.get(Study, study_id)
        session.expunge(study)
    worker = Worker(database.settings(), WorkerOptions(device="cpu"), engine=engine, worker_id="w")
    stored = []

    def end_the_shard() -> None:
        stored.append(worker._complete(study, shard, [], 0.1))

    errors = _cancel_meanwhile(sm, job_id, end_the_shard, lambda: _waiting_for_a_lock(sm))
    assert not errors and stored == [False]
    with sm() as session:
        assert session.get(PrecomputeJob, job_id).status is JobStatus.cancelled
        assert session.get(PrecomputeShard, shard.id).status is ShardStatus.cancelled


def test_a_claim_moves_a_pending_job_to_running(db, model_dir, dataset_file):
    _, _, sm = db
    _study_id, job_id = _study(sm, model_dir, dataset_file, lengths=(3,), per_cell=4, shard=2)
    with sm() as session, session.begin():
        assert service.claim_shard(session, "w", lease_seconds=60) is not None
    with sm() as session:
        job = session.get(PrecomputeJob, job_id)
        assert job.status is JobStatus.running and job.started_at is not None


def test_a_study_made_before_max_word_tokens_keeps_the_unlimited_search(
    db, model_dir, dataset_file
):
    """Its retried shards must make the items its other shards made: no limit where its stored
    decoding has none."""
    _, _, sm = db
    study_id, _ = _study(sm, model_dir, dataset_file, decoding={"max_word_tokens": 4})
    with sm() as session, session.begin():
        study = session.get(Study, study_id)
        assert spec_for(study, None).max_word_tokens == 4
        study.decoding = {**study.decoding, "max_word_tokens": 0}  # 0: no limit
    with sm() as session, session.begin():
        study = session.get(Study, study_id)
        assert spec_for(study, None).max_word_tokens is None
        study.decoding = {k: v for k, v in study.decoding.items() if k != "max_word_tokens"}
    with sm() as session:
        assert spec_for(session.get(Study, study_id), None).max_word_tokens is None


def _claim(sm, worker_id, most):
    with sm() as session, session.begin():
        shards = service.claim_shards(session, worker_id, lease_seconds=60, most=most)
        return [(s.kind, s.start_index, s.stop_index) for s in shards]


def test_a_claim_takes_the_shards_that_follow_in_one_cell(db, model_dir, dataset_file):
    """`claim_shards`: the next claimable shard and those after it in its cell, up to ``most``;
    never into another cell or the attention candidates, and a shard someone holds ends it."""
    _, _, sm = db
    # Cells of l = 3: data [0, 10) and model [0, 10) in shards of 4, then 4 attention
    # candidates (data [10, 14): 2 HITs x 1 slot x 2 candidates).
    _study(sm, model_dir, dataset_file, lengths=(3,), attention=1)
    with sm() as session, session.begin():
        # Someone else holds model [4, 8).
        session.execute(
            update(PrecomputeShard)
            .where(PrecomputeShard.kind == "model", PrecomputeShard.start_index == 4)
            .values(
                status=ShardStatus.leased,
                worker_id="other",
                lease_expires_at=utcnow() + timedelta(minutes=5),
            )
        )
    assert _claim(sm, "w0", 2) == [("data", 0, 4), ("data", 4, 8)]
    assert _claim(sm, "w1", 4) == [("data", 8, 10)]  # the data cell ends at 10
    assert _claim(sm, "w2", 4) == [("model", 0, 4)]  # model [4, 8) is held
    assert _claim(sm, "w3", 4) == [("model", 8, 10)]
    assert _claim(sm, "w4", 4) == [("data", 10, 14)]
    assert _claim(sm, "w5", 4) == []
    with sm() as session, session.begin():
        # A shard that failed (data [4, 8)) joins no claim, and is retried alone.
        session.execute(
            update(PrecomputeShard)
            .where(PrecomputeShard.kind == "data", PrecomputeShard.start_index.in_([0, 8]))
            .values(status=ShardStatus.pending, worker_id=None)
        )
        session.execute(
            update(PrecomputeShard)
            .where(PrecomputeShard.kind == "data", PrecomputeShard.start_index == 4)
            .values(status=ShardStatus.failed, error="Traceback: ...", worker_id="w0")
        )
    assert _claim(sm, "w6", 4) == [("data", 0, 4)]
    assert _claim(sm, "w7", 4) == [("data", 4, 8)]  # [8, 10) would follow it
    assert _claim(sm, "w8", 4) == [("data", 8, 10)]
    with sm() as session:
        owners = Counter(s.worker_id for s in session.scalars(select(PrecomputeShard)))
    assert owners == {"w6": 1, "w7": 1, "w8": 1, "w2": 1, "w3": 1, "w4": 1, "other": 1}


def test_the_heartbeat_keeps_the_shards_still_held(db, model_dir, dataset_file):
    """One shard of a claim taken over by another worker: the others' leases go on."""
    _, engine, sm = db
    _study(sm, model_dir, dataset_file, lengths=(3,))
    assert len(_claim(sm, "w0", 3)) == 3
    with sm() as session:
        ids = sorted(
            session.scalars(select(PrecomputeShard.id).where(PrecomputeShard.worker_id == "w0"))
        )
    with sm() as session, session.begin():
        session.execute(
            update(PrecomputeShard).where(PrecomputeShard.id == ids[1]).values(worker_id="w9")
        )
        session.execute(update(PrecomputeShard).values(lease_expires_at=utcnow()))
    beat = _Heartbeat(engine, ids, "w0", lease_seconds=0.4)
    beat.start()
    try:
        deadline = time.monotonic() + 20
        while not beat.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # a beat or two after the loss
    finally:
        beat.stop.set()
        beat.join(10)
    assert beat.lost == [ids[1]] and beat.held == [ids[0], ids[2]]
    with sm() as session:
        expires = {s.id: s.lease_expires_at for s in session.scalars(select(PrecomputeShard))}
    assert expires[ids[0]] > expires[ids[1]] and expires[ids[2]] > expires[ids[1]]


def test_a_job_cancelled_during_a_claim_counts_only_what_was_stored(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id, job_id = _study(sm, model_dir, dataset_file, lengths=(3,), per_cell=8, shard=2)
    seen = []

    def cancel_after_first(shard, n) -> None:
        seen.append((shard.kind, shard.start_index, n))
        with sm() as session, session.begin():
            service.cancel_job(session, session.get(PrecomputeJob, job_id))

    opts = WorkerOptions(once=True, device="cpu", shards_per_claim=4)
    done = Worker(database.settings(), opts, engine=engine).run(cancel_after_first)
    assert done == 1 and seen == [("data", 0, 2)]
    with sm() as session:
        stored = session.scalars(select(Item.index).where(Item.study_id == study_id)).all()
    assert sorted(stored) == [0, 1]


@pytest.mark.postgres
def test_concurrent_claims_never_share_a_shard(db, model_dir, dataset_file):
    _, _, sm = db
    _study(sm, model_dir, dataset_file, lengths=(3,), per_cell=48, shard=2)
    start, claims, errors = threading.Barrier(6), {}, []

    def claimer(i: int) -> None:
        try:
            start.wait(10)
            got = []
            while part := _claim(sm, f"w{i}", 3):
                got.append(part)
            claims[i] = got
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    taken = [s for got in claims.values() for part in got for s in part]
    assert len(taken) == len(set(taken)) == 2 * 24  # every shard once
    for got in claims.values():
        for part in got:  # each claim: one cell, contiguous
            assert len({s[0] for s in part}) == 1
            assert all(a[2] == b[1] for a, b in itertools.pairwise(part))
    with sm() as session:
        assert all(s.attempts == 1 for s in session.scalars(select(PrecomputeShard)))


def test_shards_made_together_are_the_shards_made_alone(db, model_dir, dataset_file):
    """Four shards of a cell in one run: the same items as one shard a run, each shard stored
    with its own items and time, and reported one by one."""
    database, engine, sm = db
    study_id, job_id = _study(sm, model_dir, dataset_file, lengths=(4,), per_cell=16, shard=4)

    def run(per_claim: int) -> tuple[dict, list]:
        seen = []
        opts = WorkerOptions(once=True, device="cpu", shards_per_claim=per_claim)
        done = Worker(database.settings(), opts, engine=engine).run(
            lambda shard, n: seen.append((shard.kind, shard.start_index, n))
        )
        assert done == 2 * 4
        items = {(i.kind, i.index): i for i in _items(sm, study_id)}
        return items, seen

    alone, seen_alone = run(1)
    with sm() as session, session.begin():
        session.execute(delete(Item))
        session.execute(update(PrecomputeShard).values(status=ShardStatus.pending, attempts=0))
        session.execute(update(PrecomputeJob).values(status=JobStatus.running))
    together, seen_together = run(4)
    assert together.keys() == alone.keys() and len(alone) == 2 * 16
    for key, a in alone.items():
        t = together[key]
        # The same words and skips; probabilities up to float rounding of other batch shapes.
        assert (t.words, t.skip_reason, t.true_next_word) == (
            a.words,
            a.skip_reason,
            a.true_next_word,
        )
        assert [c["word"] for c in t.choices] == [c["word"] for c in a.choices]
        probs = [c["prob"] for c in a.choices]
        assert [c["prob"] for c in t.choices] == pytest.approx(probs, rel=1e-5)
        first = a.provenance["run"]["start"]
        assert a.provenance["run"] == {"start": first, "stop": first + 4}  # one shard a run
        assert t.provenance["run"] == {"start": 0, "stop": 16}
    assert seen_together == [(k, s, 4) for k in ("data", "model") for s in (0, 4, 8, 12)]
    assert sorted(seen_alone) == sorted(seen_together)
    with sm() as session:
        shards = session.scalars(select(PrecomputeShard)).all()
        assert all(s.status is ShardStatus.done and s.items_done == 4 for s in shards)
        assert all(s.seconds and s.seconds > 0 for s in shards)
        for item in session.scalars(select(Item)):
            shard = session.get(PrecomputeShard, item.shard_id)
            assert shard.kind == item.kind and shard.start_index <= item.index < shard.stop_index
        assert session.get(PrecomputeJob, job_id).status is JobStatus.done


def test_a_gpu_worker_claims_four_shards_and_a_cpu_worker_one(db):
    """The default claim size by device (`service.SHARDS_PER_CLAIM`), capped by max_shards."""
    database, engine, _ = db

    def size(done=0, **options) -> int:
        return Worker(database.settings(), WorkerOptions(**options), engine=engine)._claim_size(
            done
        )

    assert size(device="cpu") == 1
    assert size(device="cuda") == size(device="cuda:1") == 4
    assert size(device="cuda", max_shards=6, done=3) == 3
    assert size(device="cpu", shards_per_claim=3) == 3
