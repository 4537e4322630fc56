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
tokens plus word-search expansions, as `benchmarks/precompute.py` counts them) per CPU second
and per wall second (read the wall figure on a GPU), and whether the two runs made the same
items (they should, float rounding of other batch shapes aside: the count of items whose
prefix words or choices differ is printed).  ``--device cuda`` (default: cuda when present)
and ``--dtype`` run the worker there (the model is built on the CPU, saved and loaded by the
worker as any model is).

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


def item_key(item) -> tuple:
    """What must not change with the batch's composition: the prefix's words and the choices'
    words in their order (their probabilities move with float rounding, see `differences`)."""
    return item.words, [c["word"] for c in item.choices], [c["prob"] for c in item.choices]


def differences(one: dict, other: dict) -> str:
    """Items whose prefix words, whose choices' words (or their order) differ, and the largest
    difference of a choice's probability among the others."""
    words = sum(other[k][0] != v[0] for k, v in one.items())
    choices = sum(other[k][0] == v[0] and other[k][1] != v[1] for k, v in one.items())
    probs = [
        abs(a - b)
        for k, v in one.items()
        if other[k][:2] == v[:2]
        for a, b in zip(v[2], other[k][2], strict=True)
    ]
    return (
        f"{words} of {len(one)} items with other prefix words, {choices} with other choices or "
        f"order; the others' probabilities differ by at most {max(probs, default=0):.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1024, help="items per cell")
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--shard-size", type=int, default=service.DEFAULT_SHARD_SIZE)
    parser.add_argument("--claims", default="1,4")
    parser.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
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
        f"{args.shard_size}; SQLite; {device} ({args.dtype}), {torch.get_num_threads()} CPU "
        "threads"
    )
    if device.startswith("cuda"):
        print(f"GPU: {torch.cuda.get_device_name(device)}")
    print(
        f"{'per claim':>9} {'shards':>6} {'items/s':>8} {'CPU s':>7} {'tok/CPU s':>9} "
        f"{'tok/wall s':>10} {'load':>5}"
    )
    words, rates = {}, {}
    worker = Worker(
        settings, WorkerOptions(once=True, device=device, dtype=args.dtype), engine=engine
    )
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
            words[per_claim] = {(i.kind, i.index): item_key(i) for i in items}
            rate = needed_tokens(items) / cpu
            wall_rate = needed_tokens(items) / wall
        rates[per_claim] = wall_rate if device.startswith("cuda") else rate
        print(
            f"{per_claim:>9} {done:>6} {len(items) / wall:>8.2f} {cpu:>7.1f} {rate:>9.1f} "
            f"{wall_rate:>10.1f} {os.getloadavg()[0]:>5.1f}",
            flush=True,
        )
    claims = sorted(rates)
    if len(claims) > 1:
        base = claims[0]
        for k in claims[1:]:
            print(
                f"{k} a claim against {base}: {rates[k] / rates[base]:.2f}x the needed tokens per "
                f"{'wall' if device.startswith('cuda') else 'CPU'} second; "
                f"{differences(words[base], words[k])}"
            )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
