"""The worker with a reference model (synthetic EB-C) against a real database: every
non-skipped item gets its `items.reference` record, studies without one keep SQL NULL, and an
incompatible reference fails every shard with its reason before any item is made."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from app.models import Item, JobStatus, PrecomputeJob, PrecomputeShard, ShardStatus
from app.precompute import service
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from tests.worker.conftest import bpe_tokenizer, corpus_lines, tiny_gpt2, word_tokenizer
from worker.runner import Worker, WorkerOptions


def _save(path: Path, tokenizer, seed: int, init: float) -> Path:
    tiny_gpt2(tokenizer, seed=seed, init=init).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Tiny GPT-2s saved like any Hugging Face model: two word-level ones and a BPE one."""
    base = tmp_path_factory.mktemp("models")
    return {
        "m": _save(base / "m", word_tokenizer(), 1, 0.2),
        "d": _save(base / "d", word_tokenizer(), 5, 0.2),
        "bpe": _save(base / "bpe", bpe_tokenizer(), 2, 0.6),
    }


@pytest.fixture
def dataset_file(tmp_path) -> Path:
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(corpus_lines(200)) + "\n", encoding="utf-8")
    return path


def _study(sm, model: Path, dataset: Path, *, reference: dict | None, slug="s", **kw) -> int:
    cfg = StudyConfig(
        slug=slug,
        title="S",
        model={"name": str(model)},
        dataset={"path": str(dataset)},
        prefix_lengths=[3, 4],
        items_per_cell=6,
        seed=7,
        hits={"mix": {"data": 5, "model": 5}, "attention": kw.pop("attention", 0)},
        reference=reference or {},
        **kw,
    )
    with sm() as session, session.begin():
        study = create_study(session, cfg)
        service.plan_job(session, study, shard_size=4)
        return study.id


def _run(database, engine) -> int:
    options = WorkerOptions(once=True, device="cpu")
    return Worker(database.settings(), options, engine=engine).run()


def _items(sm, study_id: int) -> list[Item]:
    with sm() as session:
        return session.scalars(select(Item).where(Item.study_id == study_id)).all()


@pytest.mark.parametrize("data_prefixes", ["dataset", "reference"])
def test_every_item_gets_its_reference_record(db, models, dataset_file, data_prefixes):
    database, engine, sm = db
    study_id = _study(
        sm,
        models["m"],
        dataset_file,
        reference={"model": str(models["d"]), "data_prefixes": data_prefixes},
        kinds=["data", "model", "random", "data_corrupted@1"],
        decoding={"resample_on_eos": False},  # a prefix ended early is skipped
        attention=1,
    )
    _run(database, engine)
    items = _items(sm, study_id)
    assert len([i for i in items if not i.is_attention]) == 2 * 4 * 6
    made = [i for i in items if i.skip_reason is None]
    assert made and any(i.skip_reason for i in items)  # some model prefixes ended early
    lines = [line.split() for line in corpus_lines(200)]
    for item in items:
        if item.skip_reason is not None:
            assert item.reference is None
            continue
        record = item.reference
        assert record["reference_model"] == str(models["d"])
        assert set(record["token"]) == {"tv", "js", "gd", "vocab"}
        assert record["token"]["vocab"] == len(word_tokenizer())
        assert len(record["choice_probs"]) == len(item.choices)
        assert record["word_gd"] == int(record["reference_top_word"] != item.choices[0]["word"])
        assert record["none_prob"] == pytest.approx(max(0.0, 1 - sum(record["choice_probs"])))
        assert "compare directly" in record["method"]
        if item.kind == "data" and not item.is_attention:
            sampled = data_prefixes == "reference"
            assert (item.true_next_word is None) == sampled
            assert (item.provenance.get("data_prefix_model") == str(models["d"])) == sampled
        if item.is_attention:  # attention candidates stay dataset lines with a true next word
            assert item.true_next_word is not None
            assert item.words.split() in [line[: item.length] for line in lines]
    assert {i.reference["token"]["gd"] for i in made} <= {0, 1}
    assert sum(i.reference["word_gd"] for i in made) > 0
    with sm() as session:
        # Skipped items hold SQL NULL (not JSON null): the results' filter is IS NULL.
        nulls = session.scalar(
            text("SELECT count(*) FROM items WHERE reference IS NULL AND study_id = :s"),
            {"s": study_id},
        )
        assert nulls == len(items) - len(made)


def test_a_study_without_a_reference_stores_null(db, models, dataset_file):
    database, engine, sm = db
    study_id = _study(sm, models["m"], dataset_file, reference=None)
    _run(database, engine)
    with sm() as session:
        total = session.scalar(select(func.count()).select_from(Item))
        nulls = session.scalar(text("SELECT count(*) FROM items WHERE reference IS NULL"))
    assert total == 2 * 2 * 6 == nulls
    assert all(i.reference is None for i in _items(sm, study_id))


def test_the_same_model_as_reference_gives_zero(db, models, dataset_file):
    database, engine, sm = db
    study_id = _study(sm, models["m"], dataset_file, reference={"model": str(models["m"])})
    _run(database, engine)
    made = [i for i in _items(sm, study_id) if i.skip_reason is None]
    assert made
    for item in made:
        assert item.reference["token"]["gd"] == 0 and item.reference["word_gd"] == 0
        assert item.reference["token"]["tv"] < 1e-5


def test_an_incompatible_reference_fails_every_shard_before_any_item(db, models, dataset_file):
    database, engine, sm = db
    _study(sm, models["m"], dataset_file, reference={"model": str(models["bpe"])})
    assert _run(database, engine) == 0
    with sm() as session:
        shards = session.scalars(select(PrecomputeShard)).all()
        assert shards and all(s.status is ShardStatus.failed for s in shards)
        for shard in shards:
            assert "synthetic EB-C cannot compare model" in shard.error
            assert str(models["bpe"]) in shard.error and "tokenizers differ" in shard.error
        assert session.scalar(select(func.count()).select_from(Item)) == 0
        assert session.scalar(select(PrecomputeJob.status)) is JobStatus.failed
