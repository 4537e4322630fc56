"""Benchmark: batched precompute of `model` items against a naive loop and a forward-pass bound.

Builds a model with GPT-2 small's shape (12 layers, 768 wide, 50,257 tokens) with random weights
and a synthetic byte-level-BPE-style vocabulary (80% of the tokens start a word, so that a
random model writes about 1.25 tokens per word, as GPT-2 does on English), then measures for
each prefix length l:

- **batched**: `worker.prefixes.make_items(kind="model")` -- continuous batching of ancestral
  sampling with the KV cache (finished prefixes leave, waiting ones take their places), then the
  exact top-5 word search on the finished prefixes' caches, each partial word kept in the cache
  (one token per expansion);
- **naive**: per item one ``model.generate()`` of the same number of tokens plus one forward
  for the top-5 tokens (no word search at all).  Timed on ``--naive-sample`` items and
  extrapolated to ``--items`` (the output says so);
- **forward bound**: the run's tokens (every sampled token plus one per word-search expansion)
  divided by the tokens per second of one plain batched forward ``model(ids)`` of the same model
  on random ids [rows, tokens per item] (about ``--bound-tokens`` tokens, no cache, the logits of
  every position, best of two).

Each ratio is printed twice: wall clock / CPU time of this process (all threads).  On a shared
machine the wall time of each part depends on what else runs at that moment; the CPU time much
less.  Inexact word searches and skipped items are counted per length.

Random GPT-2 weights give a nearly uniform next-token distribution, which no trained model has
and which makes any exact word search expand thousands of candidates.  ``--logit-scale`` (default
8) multiplies the final layer norm's gain so that the distribution is peaked like a trained
model's; the mean entropy it gives is printed.  ``--cont-scale`` (default 0.9) shortens the
(tied) embedding rows of continuation pieces: at 1.0 the peaked random model repeats a
continuation piece into words of dozens of tokens (about 1.65 tokens per word, long sequential
word searches and sampling tails), at 0.9 it writes about 1.1 tokens per word with some
multi-token words.  Compute per token is unchanged.

Run: ``python benchmarks/precompute.py`` (1,000 items, l = 10, 20, 30, 60, 100) or a reduced
scale on a CPU, e.g. ``--items 64 --lengths 10,20 --naive-sample 3``.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from worker.hf import HFCausalLM
from worker.models import DEFAULT_BATCH_SIZE
from worker.prefixes import PrefixSpec, make_items
from worker.words import token_classes

VOCAB = 50257


def synthetic_bpe_tokenizer() -> PreTrainedTokenizerFast:
    """50,257 byte-level tokens: the 256 byte symbols, synthetic pieces, end of text last."""
    from worker.words import _byte_decoder

    symbols = sorted(_byte_decoder(), key=_byte_decoder().__getitem__)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = list(symbols)
    seen = set(pieces)
    i = 0
    while len(pieces) < VOCAB - 1:
        n, s = i, ""
        while True:
            s = letters[n % 26] + s
            n = n // 26 - 1
            if n < 0:
                break
        piece = ("Ġ" + s) if i % 5 < 4 else s
        if piece not in seen:
            pieces.append(piece)
            seen.add(piece)
        i += 1
    pieces.append("<|endoftext|>")
    tok = Tokenizer(models.BPE(vocab={p: j for j, p in enumerate(pieces)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def build_model(
    device: torch.device, logit_scale: float, dtype: torch.dtype, cont_scale: float = 0.5
) -> HFCausalLM:
    torch.manual_seed(0)
    tok = synthetic_bpe_tokenizer()
    config = GPT2Config(vocab_size=VOCAB, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        model.transformer.ln_f.weight.mul_(logit_scale)
        # Continuation pieces get shorter (tied) embedding rows: a random model otherwise repeats
        # a continuation piece ("aovqaovqaovq...") into words of dozens of tokens, which no
        # trained model writes.  Compute per token is unchanged.
        classes = token_classes(tok, VOCAB)
        cont = (~classes.starts & ~classes.special).nonzero().squeeze(-1)
        model.transformer.wte.weight[cont] *= cont_scale
    model = model.to(device=device, dtype=dtype).eval()
    return HFCausalLM(model, tok, name="gpt2-small-shape-random")


def peak_memory(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB GPU"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB RSS"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Wall seconds and this process's CPU seconds (all threads) of a block.  On a shared
    machine the wall time of each measurement depends on what else runs at that moment; the
    CPU time much less, so both ratios are printed."""

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c


@torch.inference_mode()
def naive_item_seconds(lm: HFCausalLM, new_tokens: int, sample: int) -> tuple[float, float]:
    """(wall, CPU) seconds per item of generate() + one forward, averaged over ``sample``."""
    start = torch.tensor([[lm.start_token_id]], device=lm.device)
    lm.model.generate(start, do_sample=True, max_new_tokens=2, min_new_tokens=2, top_k=0)
    sync(lm.device)
    with Clock() as clock:
        for _ in range(sample):
            out = lm.model.generate(
                start,
                attention_mask=torch.ones_like(start),
                do_sample=True,
                top_k=0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=lm.start_token_id,
            )
            lm.model(out).logits[0, -1].topk(5)
        sync(lm.device)
    return clock.wall / sample, clock.cpu / sample


@torch.inference_mode()
def forward_tokens_per_second(
    lm: HFCausalLM, seq_len: int, rows: int, repeats: int
) -> tuple[float, float]:
    """(wall, CPU) tokens per second of ``lm.model(ids)`` on random ids [rows, seq_len]: one
    plain batched forward, no cache, the logits of every position (as a training-style forward
    computes them).  Best of ``repeats`` (each is one forward)."""
    ids = torch.randint(0, VOCAB - 1, (rows, seq_len), device=lm.device)
    lm.model(ids[: max(1, rows // 8)])
    sync(lm.device)
    best_w = best_c = float("inf")
    for _ in range(repeats):
        with Clock() as clock:
            lm.model(ids)
            sync(lm.device)
        best_w, best_c = min(best_w, clock.wall), min(best_c, clock.cpu)
    return rows * seq_len / best_w, rows * seq_len / best_c


@torch.inference_mode()
def mean_entropy(lm: HFCausalLM) -> float:
    ids = torch.randint(0, VOCAB - 1, (4, 16), device=lm.device)
    lp = torch.log_softmax(lm.model(ids).logits.float(), -1)
    return float(-(lp.exp() * lp).sum(-1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--lengths", default="10,20,30,60,100")
    parser.add_argument("--naive-sample", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--logit-scale", type=float, default=8.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cont-scale", type=float, default=0.9)
    parser.add_argument("--bound-tokens", type=int, default=4096,
                        help="tokens in the bound's forward (rows x tokens per item)")
    parser.add_argument(
        "--max-word-tokens",
        type=int,
        default=16,
        help="PrefixSpec.max_word_tokens (default 16, the study default; 0: no limit)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"load average at start: {os.getloadavg()} ({os.cpu_count()} CPUs)")
    lm = build_model(device, args.logit_scale, getattr(torch, args.dtype), args.cont_scale)
    batch = args.batch_size or DEFAULT_BATCH_SIZE
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"device {device} ({torch.get_num_threads()} threads), dtype {args.dtype}, batch {batch}")
    print(f"model: GPT-2 small shape, random weights, logit scale {args.logit_scale}, "
          f"continuation scale {args.cont_scale}, "
          f"mean next-token entropy {mean_entropy(lm):.2f} nats")
    print(f"{args.items} `model` items per length, top-5 words; naive loop timed on "
          f"{args.naive_sample} items and extrapolated to {args.items}; bound: best of 2 "
          f"forwards of about {args.bound_tokens} tokens, extrapolated to the run's tokens")
    print("ratios: wall-clock / CPU-time (this process, all threads)")
    header = (
        f"{'l':>4} {'items/s':>8} {'tok/item':>8} {'exp/item':>8} {'ours s':>7} "
        f"{'naive s':>8} {'x naive':>11} {'bound s':>8} {'of bound':>11} {'inexact':>7} "
        f"{'skipped':>7}  {'peak memory':>14}  load"
    )
    print(header)
    for length in lengths:
        spec = PrefixSpec(batch_size=batch, max_word_tokens=args.max_word_tokens or None)
        make_items(lm, None, spec, length, "model", 0, min(batch, 8), seed=99)  # warm-up
        sync(device)
        with Clock() as ours:
            items = make_items(lm, None, spec, length, "model", 0, args.items, seed=1)
            sync(device)
        sampled = sum(i.provenance.get("context_tokens", 0) for i in items)
        expansions = sum(i.provenance.get("choices", {}).get("expansions", 0) for i in items)
        per_item = sampled / len(items)
        n_tok = max(1, round(per_item))
        naive_w, naive_c = naive_item_seconds(lm, n_tok, args.naive_sample)
        naive_w, naive_c = naive_w * args.items, naive_c * args.items
        # The bound: the run's tokens (each sampled one, plus one per word-search expansion)
        # at the tokens per second of one large forward.
        total_tokens = sampled + expansions
        rows = max(1, min(batch, args.bound_tokens // n_tok))
        tps_w, tps_c = forward_tokens_per_second(lm, n_tok, rows, repeats=2)
        bound_w, bound_c = total_tokens / tps_w, total_tokens / tps_c
        skipped = sum(i.skipped for i in items)
        inexact = sum(not i.provenance.get("choices", {}).get("exact", True) for i in items)
        load = os.getloadavg()[0]
        print(
            f"{length:>4} {len(items) / ours.wall:>8.2f} {per_item:>8.1f} "
            f"{expansions / len(items):>8.1f} {ours.wall:>7.1f} {naive_w:>8.1f} "
            f"{naive_w / ours.wall:>5.1f}/{naive_c / ours.cpu:<5.1f} {bound_w:>8.1f} "
            f"{bound_w / ours.wall:>5.2f}/{bound_c / ours.cpu:<5.2f} {inexact:>7} {skipped:>7}  "
            f"{peak_memory(device):>14}  {load:.1f}",
            flush=True,
        )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
