"""Where the host's time goes in one run of the worker: a cProfile of ``--items`` `model` items
at length ``--length`` on `benchmarks/precompute.py`'s model (GPT-2 small's shape), one batch,
after a warm-up; the top functions by own time and, under ``worker/``, by cumulative time.

On a GPU the run is host-bound when the word search and the uploads of a step's inputs, not the
forwards, fill the profile (docs/benchmarks.md, "GPU"). ``python benchmarks/host_profile.py
--device cuda`` (about 30 s on an H200); on a CPU pass small ``--items``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from precompute import build_model, needed_tokens

from worker.prefixes import PrefixSpec, make_items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    device = torch.device(args.device)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    lm = build_model(device, 8.0, getattr(torch, args.dtype), 0.9)
    spec = PrefixSpec(batch_size=args.items, max_word_tokens=16)
    make_items(lm, None, spec, args.length, "model", 0, min(64, args.items), seed=9)  # warm up
    synchronize()
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    items = make_items(lm, None, spec, args.length, "model", 0, args.items, seed=1)
    synchronize()
    profile.disable()
    wall = time.perf_counter() - start
    print(
        f"{device} {args.dtype}, l = {args.length}: {len(items)} items in {wall:.2f} s under the "
        f"profiler, {needed_tokens(items) / wall:.0f} needed tokens/s"
    )
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats("worker/", args.top)


if __name__ == "__main__":
    main()
