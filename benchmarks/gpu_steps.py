"""Benchmark and check on a GPU: the worker's three ways of issuing a slot step, side by side.

For each dtype (float32, bfloat16), on `benchmarks/precompute.py`'s model (GPT-2 small's shape,
random weights peaked as there), ``--items`` `model` items at each length, batch ``--rows``:

- **eager**: each step at its own shape (``HFCausalLM(static_steps=False)``, the CPU's way);
- **fixed**: every slot, a power of two of queries a slot, every column (``static_steps=True,
  graphs=False``): the shapes a graph replays, run eagerly;
- **graphs**: the fixed shapes captured once per shape as CUDA graphs and replayed (the GPU's
  default, `worker.hf_steps.StepGraphs`).

Printed per run: items per second (wall), needed tokens per second, the share of steps that
were graph replays, whether a capture failed (and why), the synchronisations outside the one
read a step (`worker.models.host_read`, as the sampler and the word search call it; counted
with ``torch.cuda.set_sync_debug_mode``), and
how many items differ from the eager run's in prefix words, in choices, and the largest
difference of a choice's probability among the rest (float rounding of other shapes: how far
batch composition moves a word on this GPU).

Run on a GPU machine: ``python benchmarks/gpu_steps.py`` (about 2 minutes on an H200).
``--device cpu`` checks the script itself on a CPU (small ``--items``/``--rows``): the "graphs"
way runs its fixed shapes eagerly there and no synchronisation is counted.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from precompute import build_model, needed_tokens

from worker import sampler, words
from worker.hf import HFCausalLM
from worker.prefixes import PrefixSpec, make_items


class Syncs:
    """Counts CUDA synchronisations outside `worker.models.host_read` (sync debug mode "warn"
    turned off while a step reads its parts)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.count = 0
        self.reads = 0
        self.real = sampler.host_read  # the step's reads: the sampler's and the word search's

    def __enter__(self):
        def host_read(parts):
            self.reads += 1
            if not self.cuda:
                return self.real(parts)
            torch.cuda.set_sync_debug_mode(0)
            try:
                return self.real(parts)
            finally:
                torch.cuda.set_sync_debug_mode(1)

        sampler.host_read = words.host_read = host_read
        self.catch = warnings.catch_warnings(record=True)
        self.seen = self.catch.__enter__()
        warnings.simplefilter("always")
        if self.cuda:
            torch.cuda.set_sync_debug_mode(1)
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.set_sync_debug_mode(0)
        self.catch.__exit__(*exc)
        sampler.host_read = words.host_read = self.real
        self.count = sum("synchroniz" in str(w.message) for w in self.seen)
        self.where = sorted(
            {str(w.message)[:120] for w in self.seen if "synchroniz" in str(w.message)}
        )


def key(items) -> list[tuple]:
    return [(i.words, [w for w, _ in i.choices], [p for _, p in i.choices]) for i in items]


def compare(base: list[tuple], other: list[tuple]) -> str:
    words = sum(a[0] != b[0] for a, b in zip(base, other, strict=True))
    choices = sum(a[0] == b[0] and a[1] != b[1] for a, b in zip(base, other, strict=True))
    probs = [
        abs(x - y)
        for a, b in zip(base, other, strict=True)
        if a[:2] == b[:2]
        for x, y in zip(a[2], b[2], strict=True)
    ]
    return f"{words} words, {choices} choices, probs within {max(probs, default=0):.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--lengths", default="10,20,30")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--device", default="cuda", help="cuda (the point), or cpu (a check)")
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("gpu_steps.py needs a CUDA GPU (or --device cpu, a check of the script)")
    name = torch.cuda.get_device_name(device) if cuda else "CPU"
    print(f"device: {name}; torch {torch.__version__}")

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    print(
        f"{'dtype':>8} {'l':>3} {'way':>6} {'items/s':>8} {'tok/s':>8} {'replays':>7} "
        f"{'syncs':>5} {'reads':>5}  against eager"
    )
    for dtype in args.dtypes.split(","):
        base_lm = build_model(device, 8.0, getattr(torch, dtype), 0.9)
        ways = {
            "eager": HFCausalLM(base_lm.model, base_lm.tokenizer, static_steps=False),
            "fixed": HFCausalLM(base_lm.model, base_lm.tokenizer, static_steps=True, graphs=False),
            "graphs": HFCausalLM(base_lm.model, base_lm.tokenizer, static_steps=True),
        }
        for length in [int(x) for x in args.lengths.split(",")]:
            spec = PrefixSpec(batch_size=args.rows, max_word_tokens=16)
            eager_key = None
            for name, lm in ways.items():
                make_items(lm, None, spec, length, "model", 0, 16, seed=9)  # warm up
                replays = [0, 0]
                real_run = lm._graphs.run

                def run(state, inputs, real_run=real_run, replays=replays, steps=lm._graphs):
                    replays[1] += 1
                    shape = (tuple(inputs[0].shape), inputs[2].shape[-1])
                    current = steps.version == (id(state), state.version)
                    replays[0] += current and shape in steps.graphs and not steps.failed
                    return real_run(state, inputs)

                lm._graphs.run = run
                synchronize()
                with Syncs(cuda) as syncs:
                    t = time.perf_counter()
                    items = make_items(lm, None, spec, length, "model", 0, args.items, seed=1)
                    synchronize()
                    wall = time.perf_counter() - t
                del lm._graphs.run
                k = key(items)
                eager_key = eager_key or k
                share = replays[0] / replays[1] if replays[1] else 0.0
                print(
                    f"{dtype:>8} {length:>3} {name:>6} {len(items) / wall:>8.1f} "
                    f"{needed_tokens(items) / wall:>8.0f} {share:>7.2f} {syncs.count:>5} "
                    f"{syncs.reads:>5}  {compare(eager_key, k)}",
                    flush=True,
                )
                if syncs.count:
                    print("   syncs:", "; ".join(syncs.where[:5]))
                if lm._graphs.failed:
                    print("   capture failed:", lm._graphs.failed[:300])


if __name__ == "__main__":
    main()
