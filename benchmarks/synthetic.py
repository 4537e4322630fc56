"""Benchmark: synthetic EB-C (`worker.synthetic`) of a GPT-2-small-shaped pair against the
forward-pass bound of the two models.

Builds two models of GPT-2 small's shape (``GPT2Config()`` defaults: 12 layers, 768 wide,
50,257 tokens) with random weights from two seeds, over the synthetic byte-level BPE vocabulary
of ``benchmarks/precompute.py`` and with its two adjustments (final layer-norm gain times
``--logit-scale``, continuation pieces' embedding rows times ``--cont-scale``) so that the
next-token distributions are peaked like a trained model's (a uniform one makes any exact word
search expand thousands of candidates).  Then, for ``--items`` `model` items of length
``--length``:

- **make_items**: P_M's items with their top-5 words (`make_items(keep_roots=True)`);
- **synthetic**: `reference_records` on them -- one forward of P_D over the items' contexts,
  the exact token-level divergences over the full vocabulary (float64), P_D's word search and
  P_D's probability of each choice outside its own top 5; P_M's distributions are the ones
  `make_items` kept;
- **synthetic, P_M re-run**: the same without the kept distributions (one more forward of P_M),
  to show what keeping them saves;
- **make_items + synthetic**: the two together, what a shard of a study with a reference costs;
- **bound**: one forward of each model over the same contexts (``start``: the batched, padded
  forward the worker itself uses, last position's logits only), best of two, measured in the
  same run.  The synthetic pass cannot be faster than P_D's part of it.

Each time is wall clock / CPU time of this process (all threads); on a shared machine the wall
time depends on what else runs, the CPU time much less.  Ratios are bound / time (1.0 = the
bound).  Run: ``python benchmarks/synthetic.py`` (256 items, l = 20: about 2 minutes on a
2-core CPU) or e.g. ``--items 64`` for a quick look.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import time

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from precompute import VOCAB, Clock, peak_memory, sync, synthetic_bpe_tokenizer
from transformers import GPT2Config, GPT2LMHeadModel

from worker.hf import HFCausalLM
from worker.models import DEFAULT_BATCH_SIZE
from worker.prefixes import PrefixSpec, make_items
from worker.synthetic import reference_records
from worker.tokens import token_classes


def build(seed: int, device, logit_scale: float, cont_scale: float, tok) -> HFCausalLM:
    """GPT2Config() defaults with random weights from ``seed``, peaked as in precompute.py."""
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1))
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(logit_scale)
        classes = token_classes(tok, VOCAB)
        cont = (~classes.starts & ~classes.special).nonzero().squeeze(-1)
        model.transformer.wte.weight[cont] *= cont_scale
    return HFCausalLM(model.to(device).eval(), tok, name=f"gpt2-small-shape-seed{seed}")


@torch.inference_mode()
def forward_seconds(lm: HFCausalLM, contexts: list[list[int]], batch: int) -> tuple[float, float]:
    """(wall, CPU) seconds of ``lm.start`` over ``contexts`` in batches, best of two."""
    best_w = best_c = float("inf")
    for _ in range(2):
        with Clock() as clock:
            for lo in range(0, len(contexts), batch):
                lm.start(contexts[lo : lo + batch])
            sync(lm.device)
        best_w, best_c = min(best_w, clock.wall), min(best_c, clock.cpu)
    return best_w, best_c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=256)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--logit-scale", type=float, default=8.0)
    parser.add_argument("--cont-scale", type=float, default=0.9)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    batch = args.batch_size or DEFAULT_BATCH_SIZE
    tok = synthetic_bpe_tokenizer()
    p_m = build(0, device, args.logit_scale, args.cont_scale, tok)
    p_d = build(1, device, args.logit_scale, args.cont_scale, tok)
    spec = PrefixSpec(batch_size=batch)
    print(
        f"{datetime.date.today()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, device {device} ({torch.get_num_threads()} threads), "
        f"batch {batch}; load average at start {os.getloadavg()[0]:.1f}"
    )
    print(f"P_M {p_m.name}, P_D {p_d.name}: GPT2Config() defaults, random weights")

    warm = make_items(p_m, None, spec, args.length, "model", 0, 8, seed=99, keep_roots=True)
    reference_records(p_m, p_d, warm, spec)
    rows: list[tuple[str, float, float]] = []
    with Clock() as made:
        items = make_items(
            p_m, None, spec, args.length, "model", 0, args.items, seed=1, keep_roots=True
        )
        sync(device)
    rows.append(("make_items (P_M)", made.wall, made.cpu))
    with Clock() as synth:
        records = reference_records(p_m, p_d, items, spec)
        sync(device)
    rows.append(("synthetic", synth.wall, synth.cpu))
    plain = [*items]
    for item in plain:
        item.root = None
    with Clock() as rerun:
        reference_records(p_m, p_d, plain, spec)
        sync(device)
    rows.append(("synthetic, P_M re-run", rerun.wall, rerun.cpu))
    rows.append(("make_items + synthetic", made.wall + synth.wall, made.cpu + synth.cpu))

    contexts = [i.context_ids for i in items if not i.skipped]
    fm_w, fm_c = forward_seconds(p_m, contexts, batch)
    fd_w, fd_c = forward_seconds(p_d, contexts, batch)
    bound_w, bound_c = fm_w + fd_w, fm_c + fd_c
    n = len(contexts)
    tokens = sum(len(c) for c in contexts) / max(1, n)
    made_records = [r for r in records if r is not None]
    inexact = sum(not r["exact"] for r in made_records)
    print(
        f"{len(items)} `model` items of l = {args.length} ({n} not skipped, {tokens:.1f} context "
        f"tokens each); {inexact} records flagged inexact; mean token d_GD "
        f"{sum(r['token']['gd'] for r in made_records) / max(1, n):.3f}, word d_GD "
        f"{sum(r['word_gd'] for r in made_records) / max(1, n):.3f}"
    )
    print(
        f"bound: one forward of P_M {fm_w:.2f} s + one of P_D {fd_w:.2f} s = {bound_w:.2f} s "
        f"wall ({bound_c:.2f} s CPU)"
    )
    print(f"{'':<24} {'seconds':>16} {'items/s':>8} {'bound / time':>14}")
    print(f"{'bound (both forwards)':<24} {bound_w:>7.2f} / {bound_c:<7.2f} {n / bound_w:>8.1f}")
    for name, wall, cpu in rows:
        ratio = f"{bound_w / wall:.2f} / {bound_c / cpu:.2f}"
        print(f"{name:<24} {wall:>7.2f} / {cpu:<7.2f} {n / wall:>8.1f} {ratio:>14}")
    print(f"peak memory {peak_memory(device)}; load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"run time {time.perf_counter() - start:.0f} s")
