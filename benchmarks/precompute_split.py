"""Benchmark: where one `make_items` run's CPU goes, and in-process A/Bs of its batch size.

On `benchmarks/precompute.py`'s model (GPT-2 small's shape, random peaked weights), for one
prefix length:

- **split** (default): one run of ``--items`` `model` items, each forward timed (CPU), split
  into the *full* forwards (at least three quarters of the largest row count any forward
  had), the *tail* (fewer) and the rest of the run outside the model's ``feed`` (sampling,
  the word search, slot moves); then ``--bound-forwards`` forwards of a forward-pass bound in
  the same process, all after ours: random ids, no cache, about 4,096 tokens in rows as long
  as the run's needed tokens per item.  `benchmarks/precompute.py` shapes its bound after the
  sampled tokens alone and measures half of it before ours, so the two ratios are not
  comparable.  Prints each
  part's share of the CPU, its fed tokens per CPU second and, for the whole run and the full
  forwards, the ratio to the bound's median.
- **A/B** (``--ab A,B``): ``--pairs`` pairs of runs at batch sizes A and B, alternating (A B,
  B A, A B, ...) in one process, so that both meet this shared machine in the same minutes;
  prints each run's needed tokens per CPU second (sampled tokens plus word-search
  expansions, as the main benchmark counts them) and the ratio of the medians.  Alternating
  only lets both sizes share the machine's minutes: identical runs in one process still moved
  by up to 16 % on the 2-core CPU (2026-11-26), so read the medians of several pairs.

Run: ``python benchmarks/precompute_split.py --length 20 --items 1024`` or
``python benchmarks/precompute_split.py --length 20 --items 1024 --ab 256,512 --pairs 4``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from precompute import build_model, forward_rates, needed_tokens

from worker.prefixes import PrefixSpec, make_items


def run(lm, length: int, n_items: int, batch: int | None, seed: int = 1):
    """(items, CPU seconds) of one `make_items` run."""
    start = time.process_time()
    spec = PrefixSpec(batch_size=batch)
    items = make_items(lm, None, spec, length, "model", 0, n_items, seed=seed)
    return items, time.process_time() - start


def split(lm, length: int, n_items: int, bound_forwards: int) -> None:
    real = lm.feed
    log: list[tuple[int, int, float]] = []  # (rows covered, tokens fed, CPU s) per forward

    def feed(state, slots, tokens, parents, want):
        start = time.process_time()
        out = real(state, slots, tokens, parents, want)
        log.append((max(slots) + 1, len(slots), time.process_time() - start))
        return out

    lm.feed = feed
    try:
        items, total = run(lm, length, n_items, None)
    finally:
        lm.feed = real
    seq_len = max(2, round(needed_tokens(items) / len(items)))
    rates = [cpu for _, cpu in forward_rates(lm, seq_len, max(1, 4096 // seq_len), bound_forwards)]
    bound = statistics.median(rates)
    rows = max(r for r, _, _ in log)
    full = [x for x in log if x[0] >= 0.75 * rows]
    tail = [x for x in log if x[0] < 0.75 * rows]
    fed_all = sum(x[1] for x in log)
    need = needed_tokens(items)
    print(
        f"l = {length}, {len(items)} items, batch {rows}: {need} needed tokens "
        f"({fed_all} fed) in {total:.1f} CPU s = {need / total:.1f} per CPU s; bound "
        f"{bound:.1f} (median of {[round(r) for r in rates]}): {need / total / bound:.3f} of it"
    )
    for name, part in (("full", full), ("tail", tail)):
        cpu = sum(x[2] for x in part)
        fed = sum(x[1] for x in part)
        rate = fed / cpu if cpu else 0.0
        print(
            f"  {name}: {len(part)} forwards, {cpu / total:.0%} of the CPU, {fed / fed_all:.0%} "
            f"of the fed tokens, {rate:.1f} fed tokens per CPU s ({rate / bound:.2f} of the bound)"
        )
    outside = total - sum(x[2] for x in log)
    print(f"  outside the feed (sampling, search, slot moves): {outside / total:.0%} of the CPU")


def ab(lm, length: int, n_items: int, sizes: tuple[int, int], pairs: int) -> None:
    rates: dict[int, list[float]] = {b: [] for b in sizes}
    for pair in range(pairs):
        for batch in sizes if pair % 2 == 0 else sizes[::-1]:
            items, cpu = run(lm, length, n_items, batch)
            rates[batch].append(needed_tokens(items) / cpu)
            print(f"  batch {batch}: {rates[batch][-1]:.1f} needed tokens per CPU s", flush=True)
    a, b = (statistics.median(rates[s]) for s in sizes)
    print(f"l = {length}, {n_items} items: medians {a:.1f} (batch {sizes[0]}), {b:.1f} "
          f"(batch {sizes[1]}); B / A = {b / a:.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--items", type=int, default=1024)
    parser.add_argument("--bound-forwards", type=int, default=3)
    parser.add_argument("--ab", help="two batch sizes, A,B: alternate runs at each")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--logit-scale", type=float, default=8.0)
    parser.add_argument("--cont-scale", type=float, default=0.9)
    args = parser.parse_args()
    lm = build_model(torch.device("cpu"), args.logit_scale, torch.float32, args.cont_scale)
    make_items(lm, None, PrefixSpec(), args.length, "model", 0, 8, seed=99)  # warm-up
    if args.ab:
        first, second = (int(x) for x in args.ab.split(","))
        ab(lm, args.length, args.items, (first, second), args.pairs)
    else:
        split(lm, args.length, args.items, args.bound_forwards)


if __name__ == "__main__":
    main()
