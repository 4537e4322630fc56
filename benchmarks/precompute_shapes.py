"""Benchmark: what a forward of each shape costs against `benchmarks/precompute.py`'s bound.

On that script's model (GPT-2 small's shape, random peaked weights), the CPU tokens per second
of plain forwards of several shapes, each as a ratio to the forward bound (``--bound-rows`` rows
of ``--bound-tokens`` tokens, no cache, the logits of every position: the bound's shape at
l = 20).  Each shape is measured ``--rounds`` times, the shapes alternating, so that all meet
this shared machine in the same minutes; the medians are printed.

- ``forward R x 1``: R rows of one token, no cache: what a decoding step of R rows would cost
  if it read no cache (GEMMs of R rows instead of the bound's ~4,096, the LM head of each);
- ``cached step R, W columns``: `precompute.cached_step_rates`, one token per row over a KV
  cache of W columns, then the log-softmax: a plain decoding step, which reads every row's
  cached keys and values in every layer.

A sampler that decodes with a KV cache cannot run faster than its cached step, so the cached
step's ratio is the most such a sampler at that batch size can reach against the bound.

Run: ``python benchmarks/precompute_shapes.py`` (about 3 minutes on the 2-core CPU).
"""

from __future__ import annotations

import argparse
import os
import statistics

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from precompute import build_model, cached_step_rates, forward_rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound-rows", type=int, default=141)
    parser.add_argument("--bound-tokens", type=int, default=29)
    parser.add_argument("--rows", default="256,512,1024", help="rows of the one-token forwards")
    parser.add_argument("--steps", default="256:40,512:40,256:130", help="cached steps, R:W")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--logit-scale", type=float, default=8.0)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    print(f"load average at start: {os.getloadavg()} ({os.cpu_count()} CPUs)")
    lm = build_model(torch.device("cpu"), args.logit_scale, torch.float32, 0.9)
    shapes = {f"bound {args.bound_rows} x {args.bound_tokens}": (
        lambda: forward_rates(lm, args.bound_tokens, args.bound_rows, 3)
    )}  # fmt: skip
    for r in (int(x) for x in args.rows.split(",")):
        shapes[f"forward {r} x 1"] = lambda r=r: forward_rates(lm, 1, r, 5)
    for step in args.steps.split(","):
        r, w = (int(x) for x in step.split(":"))
        shapes[f"cached step {r}, {w} columns"] = lambda r=r, w=w: cached_step_rates(lm, w, r, 5)
    rates: dict[str, list[float]] = {name: [] for name in shapes}
    for _ in range(args.rounds):
        for name, measure in shapes.items():
            with torch.inference_mode():
                rates[name] += [cpu for _, cpu in measure()]
    bound = statistics.median(rates[next(iter(shapes))])
    print(f"{'shape':<28} {'tok/CPU s':>9} {'of bound':>8}")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"{name:<28} {rate:>9.1f} {rate / bound:>8.3f}")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
