"""The fake causal LM (`worker.fake`) and the whole pipeline on it, without ``transformers``:
study -> planned shards -> the worker's items -> HITs, in a process that cannot import it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worker.fake import WORDS, FakeCausalLM
from worker.models import CausalLM, load_model
from worker.prefixes import PrefixSpec, make_items

# Runs in a fresh interpreter: importing transformers (or its tokenizers) there fails, so the
# pipeline must reach the model through the registry and the fake backend alone.
PIPELINE = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("transformers", "tokenizers"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, Blocked())

    from sqlalchemy import func, select

    from app.config import Settings
    from app.db import build_engine, make_sessionmaker
    from app.hits.service import build_hits
    from app.migrate import upgrade
    from app.models import Hit, Item, JobStatus, PrecomputeJob
    from app.precompute import service
    from app.studies.schemas import StudyConfig
    from app.studies.service import create_study
    from worker.runner import Worker, WorkerOptions

    url, dataset = sys.argv[1:3]
    settings = Settings(database_url=url, env="test")
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sessionmaker = make_sessionmaker(engine)
    config = StudyConfig(
        slug="fake",
        title="Fake",
        model={"name": "fake:3"},
        dataset={"path": dataset},
        prefix_lengths=[3, 5],
        items_per_cell=10,
        seed=7,
        hits={"mix": {"data": 5, "model": 5}, "attention": 0},
    )
    with sessionmaker() as session, session.begin():
        study = create_study(session, config)
        job = service.plan_job(session, study, shard_size=4)
        study_id, job_id = study.id, job.id
    worker = Worker(settings, WorkerOptions(once=True), engine=engine)
    shards = worker.run()
    with sessionmaker() as session, session.begin():
        study = session.get(type(study), study_id)
        status = session.get(PrecomputeJob, job_id).status
        report = build_hits(session, study)
        items = session.scalars(select(Item).where(Item.study_id == study_id)).all()
        out = {
            "shards": shards,
            "job": status is JobStatus.done,
            "hits": report.hits,
            "hit_rows": session.scalar(select(func.count()).select_from(Hit)),
            "items": sorted(
                [i.length, i.kind, i.index, i.words, [c["word"] for c in i.choices]]
                for i in items
            ),
            "models": sorted({i.provenance["model"] for i in items}),
            "loaded": sorted(m for m in ("transformers", "tokenizers") if m in sys.modules),
        }
    engine.dispose()
    print(json.dumps(out))
    """
)


def fake_lines(n: int) -> list[str]:
    """Lines of 7 to 12 words over the fake vocabulary, distinct in their first three words."""
    base = len(WORDS)
    return [
        " ".join(
            [WORDS[(i // base**d) % base] for d in range(3)]
            + list(WORDS[i % 5 : i % 5 + 4 + i % 6])
        )
        for i in range(n)
    ]


def run_pipeline(url: str, dataset: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PIPELINE, url, str(dataset)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_fake_model_is_loaded_by_name_and_keeps_the_protocol():
    model = load_model("fake:3")
    assert isinstance(model, FakeCausalLM) and isinstance(model, CausalLM)
    assert model.name == "fake:3" and load_model("fake").name == "fake:0"
    with pytest.raises(ValueError):
        load_model("fake:x")
    with pytest.raises(ValueError):
        load_model("fake", task="seq2seq")
    # The table is a distribution after every token; the seed decides it.
    assert all(abs(sum(row.values()) - 1) < 1e-9 for row in model.table.values())
    assert model.table != FakeCausalLM(4).table
    assert model.encode("the cats sat") == [
        model.tokenizer.ids["Ġthe"], model.tokenizer.ids["Ġcat"], model.tokenizer.ids["s"],
        model.tokenizer.ids["Ġsat"],
    ]  # fmt: skip


def test_fake_items_do_not_depend_on_the_batch():
    model = load_model("fake:3")
    runs = [
        make_items(model, None, PrefixSpec(batch_size=b), 4, "model", 0, 24, seed=1)
        for b in (3, 64)
    ]
    first, second = ([(i.words, i.choices, i.skip_reason) for i in run] for run in runs)
    assert first == second
    assert all(len(i.words) == 4 and len(i.choices) == 5 for i in runs[0] if not i.skipped)
    # Suffix pieces make words of two tokens: the subword search, not a top-k of tokens, runs.
    assert runs[0][0].provenance["choices"]["method"].startswith("best-first")


@pytest.mark.sqlite
def test_study_to_hits_on_the_fake_model_without_transformers(empty_db, tmp_path):
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(fake_lines(200)) + "\n", encoding="utf-8")
    first = run_pipeline(empty_db.url, dataset)
    assert first["loaded"] == []
    assert first["shards"] == 2 * 2 * 3  # 2 lengths x 2 kinds x ceil(10 / 4) shards
    assert first["job"] and first["models"] == ["fake:3"]
    assert len(first["items"]) == 40
    assert first["hits"] == first["hit_rows"] > 0
    for length, _, _, words, choices in first["items"]:
        assert len(words.split()) == length and 1 <= len(choices) <= 5
    # The same study on a fresh database makes the same items.
    db2 = tmp_path / "again.db"
    again = run_pipeline(f"sqlite:///{db2}", dataset)
    assert again["items"] == first["items"]
