"""The worker on a ratings study against a real database: planned like any study, its items
hold continuations and no choices, its attention shard holds attention pairs, and a re-run shard
makes the same continuations."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import delete, func, select, update

from app.models import Item, JobStatus, PrecomputeJob, PrecomputeShard, ShardStatus, Study
from app.precompute import service
from app.precompute.datasets import DatasetError
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from tests.worker.conftest import corpus_lines
from worker.runner import Worker, WorkerOptions, spec_for

L_GEN = 5


def _config(model_dir, dataset_file, **kw) -> StudyConfig:
    return StudyConfig(
        **{
            "slug": "rate",
            "title": "Ratings",
            "type": "ratings",
            "model": {"name": str(model_dir)},
            "dataset": {"path": str(dataset_file)},
            "prefix_lengths": [3, 4],
            "kinds": ["data", "model", "data_shuffled"],
            "prompt_words": 2,
            "items_per_cell": 6,
            "seed": 3,
            "hits": {"mix": {"data": 5, "model": 5}, "attention": 1},
            "ratings": {"continuation_words": L_GEN, "continuation_top_k": 40},
            **kw,
        }
    )


def _plan(sm, config) -> int:
    with sm() as session, session.begin():
        study = create_study(session, config)
        service.plan_precompute(session, study, shard_size=4)
        return study.id


def _items(sm, study_id):
    with sm() as session:
        return session.scalars(
            select(Item).where(Item.study_id == study_id).order_by(Item.id)
        ).all()


def test_a_ratings_study_gets_continuations_and_attention_pairs(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id = _plan(sm, _config(model_dir, dataset_file))
    with sm() as session:
        spec = spec_for(session.get(Study, study_id), None)
    assert (spec.continuation_words, spec.continuation_top_k) == (L_GEN, 40)
    Worker(database.settings(), WorkerOptions(once=True, device="cpu"), engine=engine).run()
    items = _items(sm, study_id)
    study_items = [i for i in items if not i.is_attention]
    cells = Counter((i.length, i.kind) for i in study_items)
    assert cells == {(n, k): 6 for n in (3, 4) for k in ("data", "model", "data_shuffled")}
    lines = [line.split() for line in corpus_lines(400)]
    for item in study_items:
        assert item.choices == []
        assert item.provenance["spec"]["continuation_words"] == L_GEN
        if item.skip_reason is not None:
            assert item.skip_reason in {"eos_before_l", "eos_before_l_gen"}
            continue
        assert len(item.words.split()) == item.length
        assert len(item.continuation.split()) == L_GEN
        assert item.provenance["continuation"]["sampling"]["top_k"] == 40
        assert item.prompt is not None and len(item.prompt.split()) == 2
        if item.kind == "data":
            line = lines[item.provenance["line"] - 1]
            assert item.prompt.split() + item.words.split() == line[: 2 + item.length]
            real = line[2 + item.length : 2 + item.length + L_GEN]
            assert item.provenance["data_continuation"].split() == real
    assert sum(i.skip_reason is None for i in study_items) >= len(study_items) // 2
    # Attention pairs: held-out data lines, their real continuation's words out of order.
    attention = [i for i in items if i.is_attention]
    assert len(attention) == 2 * 2 * 2  # per length: 2 HITs of 5 data items, 2 candidates each
    assert {i.kind for i in attention} == {"data"} and min(i.index for i in attention) == 6
    for item in attention:
        real = item.provenance["data_continuation"].split()
        assert Counter(item.continuation.split()) == Counter(real)
        assert item.continuation.split() != real and item.skip_reason is None
        assert item.provenance["attention"]["expected_quality_max"] == 1
        assert item.choices == []
    data_lines = {i.provenance["line"] for i in study_items if i.kind == "data"}
    assert not data_lines & {i.provenance["line"] for i in attention}
    with sm() as session:
        study = session.get(Study, study_id)
        job = service.latest_job(session, study)
        assert job.status is JobStatus.done and study.status.value == "ready"


def test_a_rerun_ratings_shard_makes_the_same_continuations(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id = _plan(sm, _config(model_dir, dataset_file, prefix_lengths=[3]))
    opts = WorkerOptions(once=True, device="cpu")
    Worker(database.settings(), opts, engine=engine).run()

    def made():
        return {
            (i.is_attention, i.kind, i.index): (i.words, i.continuation, i.skip_reason)
            for i in _items(sm, study_id)
        }

    before = made()
    with sm() as session, session.begin():
        session.execute(delete(Item).where(Item.study_id == study_id))
        session.execute(update(PrecomputeShard).values(status=ShardStatus.pending))
        session.execute(update(PrecomputeJob).values(status=JobStatus.running))
    Worker(
        database.settings(), WorkerOptions(once=True, device="cpu", batch_size=2), engine=engine
    ).run()
    assert made() == before


def test_planning_checks_the_lines_hold_the_real_continuation(db, model_dir, tmp_path):
    _database, _engine, sm = db
    # Lines of 2 + 4 + 1 words: enough for a next-word study, not for continuations of 5.
    short = tmp_path / "short.txt"
    short.write_text("\n".join(line.split()[0] + " a b c d e f" for line in corpus_lines(40)))
    with sm() as session, session.begin():
        study = create_study(session, _config(model_dir, short, prefix_lengths=[4]))
        with pytest.raises(DatasetError, match="at least 11 words"):
            service.plan_precompute(session, study)
        assert session.scalar(select(func.count()).select_from(PrecomputeJob)) == 0
        nextword = create_study(
            session, _config(model_dir, short, slug="next", type="nextword", prefix_lengths=[4])
        )
        job = service.plan_precompute(session, nextword)
        assert job.total_items > 0
