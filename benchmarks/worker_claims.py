"""Benchmark: a study's precompute through the real worker, one shard a claim against four.

The same study twice (GPT-2 small shape, random weights peaked as in `benchmarks/precompute.py`,
saved and loaded by path like any Hugging Face model; a SQLite database migrated as in
production; the job planned by `app.precompute.service.plan_job` in shards of 256), each made
by `worker.runner.Worker` until no shard is left, one after the other in this process:

- **one a claim**: ``--shards-per-claim 1`` (a CPU worker's default): every shard is one
  sampler run of 256 items, i.e. one batch on a CPU, and pays its own tail;
- **four a claim**: a GPU worker's default (`app.precompute.service.SHARDS_PER_CLAIM`): the
  next shard and up to three that follow it in its cell are made in one run.

Printed per run: items per second (wall), CPU seconds, needed tokens (sampled and context
tokens plus word-search expansions, as `benchmarks/precompute.py` counts them) per CPU second,
and whether the two runs made the same words (they should, float rounding of other batch
shapes aside: the count of items whose words differ is printed).

Run: ``python benchmarks/worker_claims.py`` (l = 20, 1,024 items a cell, data and model
kinds: 8 shards a run, about 10 minutes on the 2-core CPU) or smaller, e.g.
``--items 512 --shard-size 128``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from precompute import build_model, needed_tokens
from sqlalchemy import delete, select, update

from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.migrate import upgrade
from app.models import (
    Item,
    JobStatus,
    PrecomputeJob,
    PrecomputeShard,
    ShardStatus,
    Study,
)
from app.precompute import service
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from worker.runner import Worker, WorkerOptions


def dataset(path: Path, lines: int, words: int) -> None:
    """Lines of random lowercase words (the synthetic vocabulary spells them as pieces)."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(3000)]
    text = "\n".join(" ".join(rng.choice(vocab) for _ in range(words)) for _ in range(lines))
    path.write_text(text + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1024, help="items per cell")
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--shard-size", type=int, default=service.DEFAULT_SHARD_SIZE)
    parser.add_argument("--claims", default="1,4")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()} ({os.cpu_count()} CPUs)")
    tmp = Path(tempfile.mkdtemp(prefix="ebc-claims-"))
    lm = build_model(torch.device("cpu"), 8.0, torch.float32, 0.9)
    lm.model.save_pretrained(tmp / "model")
    lm.tokenizer.save_pretrained(tmp / "model")
    del lm
    dataset(tmp / "lines.txt", args.items + 64, args.length + 10)
    settings = Settings(database_url=f"sqlite:///{tmp / 'ebc.db'}", env="test")
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sm = make_sessionmaker(engine)
    cfg = StudyConfig(
        slug="claims",
        title="claims",
        model={"name": str(tmp / "model")},
        dataset={"path": str(tmp / "lines.txt")},
        prefix_lengths=[args.length],
        items_per_cell=args.items,
        seed=1,
        hits={"mix": {"data": 5, "model": 5}, "attention": 0},
    )
    with sm() as session, session.begin():
        study = create_study(session, cfg)
        service.plan_job(session, study, shard_size=args.shard_size)
        study_id = study.id
    print(
        f"l = {args.length}, {args.items} items a cell (data and model), shards of "
        f"{args.shard_size}; SQLite; CPU, {torch.get_num_threads()} threads"
    )
    print(
        f"{'per claim':>9} {'shards':>6} {'items/s':>8} {'CPU s':>7} {'tok/CPU s':>9} {'load':>5}"
    )
    words, rates = {}, {}
    worker = Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine)
    with sm() as session:
        worker.model_for(session.get(Study, study_id))  # loaded once, outside the timings
    for per_claim in [int(x) for x in args.claims.split(",")]:
        with sm() as session, session.begin():
            session.execute(delete(Item))
            session.execute(
                update(PrecomputeShard).values(status=ShardStatus.pending, attempts=0, error=None)
            )
            session.execute(update(PrecomputeJob).values(status=JobStatus.running))
        worker.options.shards_per_claim = per_claim
        wall, cpu = time.perf_counter(), time.process_time()
        done = worker.run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        with sm() as session:
            items = session.scalars(select(Item).where(Item.study_id == study_id)).all()
            words[per_claim] = {(i.kind, i.index): i.words for i in items}
            rate = needed_tokens(items) / cpu
        rates[per_claim] = rate
        print(
            f"{per_claim:>9} {done:>9} {len(items) / wall:>9.2f} {cpu:>9.1f} {rate:>9.1f} "
            f"{os.getloadavg()[0]:>9.1f}",
            flush=True,
        )
    claims = sorted(rates)
    if len(claims) > 1:
        base = claims[0]
        for k in claims[1:]:
            differ = sum(words[k][key] != w for key, w in words[base].items())
            print(
                f"{k} a claim against {base}: {rates[k] / rates[base]:.2f}x the needed tokens per "
                f"CPU second; {differ} of {len(words[base])} items with other words"
            )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
