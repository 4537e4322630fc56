"""Benchmark: batched precompute of `model` items against a naive loop and a forward-pass bound.

Builds a model with GPT-2 small's shape (12 layers, 768 wide, 50,257 tokens) with random weights
and a synthetic byte-level-BPE-style vocabulary (80% of the tokens start a word, so that a
random model writes about 1.25 tokens per word, as GPT-2 does on English), then measures for
each prefix length l:

- **batched**: `worker.prefixes.make_items(kind="model")` -- batched ancestral sampling with the
  KV cache and per-row stopping, then the top-5 word search on the same cache;
- **naive**: per item one ``model.generate()`` of the same number of tokens plus one forward
  for the top-5 tokens (no word search at all).  Timed on ``--naive-sample`` items and
  extrapolated to ``--items`` (the output says so);
- **forward bound**: tokens per second of one large batched forward (all positions' logits) of
  the same model over as many tokens as the batched run processed, timed on a slice and
  extrapolated.

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

from worker.models import HFCausalLM, default_batch_size
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
        return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB GPU (allocated)"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB RSS (process)"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def naive_item_seconds(lm: HFCausalLM, new_tokens: int, sample: int) -> float:
    """Seconds per item of generate() + one forward, averaged over ``sample`` items."""
    start = torch.tensor([[lm.start_token_id]], device=lm.device)
    lm.model.generate(start, do_sample=True, max_new_tokens=2, min_new_tokens=2, top_k=0)
    sync(lm.device)
    t0 = time.perf_counter()
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
    return (time.perf_counter() - t0) / sample


@torch.inference_mode()
def forward_tokens_per_second(lm: HFCausalLM, seq_len: int, rows: int) -> float:
    ids = torch.randint(0, VOCAB - 1, (rows, seq_len), device=lm.device)
    lm.model(ids[:1])
    sync(lm.device)
    t0 = time.perf_counter()
    lm.model(ids)
    sync(lm.device)
    return rows * seq_len / (time.perf_counter() - t0)


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
    parser.add_argument(
        "--max-word-tokens", type=int, default=None,
        help="PrefixSpec.max_word_tokens (default: none, the exact word search)",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    print(f"load average at start: {os.getloadavg()} ({os.cpu_count()} CPUs)")
    lm = build_model(device, args.logit_scale, getattr(torch, args.dtype), args.cont_scale)
    batch = args.batch_size or default_batch_size(device)
    lengths = [int(x) for x in args.lengths.split(",")]
    print(f"device {device} ({torch.get_num_threads()} threads), dtype {args.dtype}, batch {batch}")
    print(f"model: GPT-2 small shape, random weights, logit scale {args.logit_scale}, "
          f"continuation scale {args.cont_scale}, "
          f"mean next-token entropy {mean_entropy(lm):.2f} nats")
    print(f"{args.items} `model` items per length, top-5 words; naive loop timed on "
          f"{args.naive_sample} items and extrapolated to {args.items}")
    header = (
        f"{'l':>4} {'items/s':>8} {'ms/item':>8} {'tok/item':>8} {'exp/item':>8} "
        f"{'naive s (extrap.)':>17} {'x naive':>8} {'bound s':>8} {'of bound':>8}  peak memory"
    )
    print(header)
    for length in lengths:
        spec = PrefixSpec(batch_size=batch, max_word_tokens=args.max_word_tokens)
        make_items(lm, None, spec, length, "model", 0, min(batch, 8), seed=99)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        items = make_items(lm, None, spec, length, "model", 0, args.items, seed=1)
        sync(device)
        ours = time.perf_counter() - t0
        sampled = sum(i.provenance.get("context_tokens", 0) for i in items)
        expansions = sum(i.provenance.get("choices", {}).get("expansions", 0) for i in items)
        per_item_tokens = sampled / len(items)
        naive = naive_item_seconds(lm, max(1, round(per_item_tokens)), args.naive_sample)
        naive_total = naive * args.items
        # The bound: the batched run's tokens (sampled ones plus one per expansion, a lower
        # count) through one large forward.
        total_tokens = sampled + expansions
        rows = max(1, min(batch, 4096 // max(1, round(per_item_tokens))))
        tps = forward_tokens_per_second(lm, max(1, round(per_item_tokens)), rows)
        bound = total_tokens / tps
        print(
            f"{length:>4} {len(items) / ours:>8.2f} {1000 * ours / len(items):>8.1f} "
            f"{per_item_tokens:>8.1f} {expansions / len(items):>8.1f} {naive_total:>17.1f} "
            f"{naive_total / ours:>8.1f} {bound:>8.1f} {bound / ours:>8.2f}  {peak_memory(device)}"
        )
    skipped = sum(i.skipped for i in items)
    inexact = sum(not i.provenance.get("choices", {}).get("exact", True) for i in items)
    print(f"last length: {skipped} items skipped, {inexact} word searches inexact")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
