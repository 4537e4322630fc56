"""Benchmark: continuations of ratings studies (`worker.continuations`) against a forward-pass
bound.

Builds the model of ``benchmarks/precompute.py`` (GPT-2 small's shape, ``GPT2Config()``
defaults: 12 layers, 768 wide, 50,257 tokens; random weights made peaked: final layer-norm gain
times ``--logit-scale``, continuation pieces' embedding rows times ``--cont-scale``) over its
synthetic byte-level vocabulary, plus merges for the dataset's words so that each data word is
one token (without merges that vocabulary spells text one byte per token).  A synthetic dataset
of such words gives the prompts (``--prompt`` words, default 20) and data prefixes.  Then, for
each prefix length l and l_gen = ``--l-gen`` (20):

- **ours**: `make_items` of ``--items`` items per kind with a ratings spec: ``model`` (the
  prefix sampled after the prompt, its rows then going on, on their own KV cache, to sample
  the continuation) and ``data`` (prompt + data prefix encoded, the continuation sampled from
  there), ancestral sampling, continuous batching (batch ``--batch-size``, default: one batch);
- **bound**: the same total tokens -- every item's prompt, prefix and continuation, as the
  items hold them (start token included) -- in one plain batched forward ``model(ids)`` of
  random ids [items, mean tokens per item] (no cache, every position's logits, best of two),
  measured in the same run right after.  No method that runs the model over those tokens can
  beat it by much; sampling token by token cannot reach it.

Ratios are bound / ours (1.0 = as fast as the one forward), wall clock and CPU time of this
process (all threads).  The bound computes the logits of every position, the worker only
where it samples, so a data item (whose context is read in one forward) can come close to it
or pass it.  Run: ``python benchmarks/continuations.py`` (32 items per kind and length: about
1.5 minutes on a quiet 2-core CPU).  On a shared machine two threads stall each other behind
the other processes (the same run swung from 0.12 to 0.85 of the bound at a load of 3-5);
``--threads 1`` keeps wall and CPU time together.  The load average is printed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
from pathlib import Path

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import numpy as np
import torch
from precompute import (
    VOCAB,
    Clock,
    build_model,
    forward_tokens_per_second,
    mean_entropy,
    peak_memory,
    sync,
    synthetic_bpe_tokenizer,
)
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from app.precompute.datasets import load_dataset
from worker.hf import HFCausalLM
from worker.prefixes import PrefixSpec, make_items


def word_tokenizer(base: PreTrainedTokenizerFast) -> tuple[PreTrainedTokenizerFast, list[str]]:
    """``base``'s vocabulary (the same ids) with merges that make each word of one or two
    letters whose pieces exist ("Ġa", "Ġab") one token; returns the tokenizer and those words."""
    vocab = base.get_vocab()
    letters = "abcdefghijklmnopqrstuvwxyz"
    merges, words = [], []
    for a in letters:
        if "Ġ" + a in vocab:
            merges.append(("Ġ", a))
            words.append(a)
    for a in letters:
        for b in letters:
            if "Ġ" + a in vocab and "Ġ" + a + b in vocab:
                merges.append(("Ġ" + a, b))
                words.append(a + b)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    return fast, words


def write_dataset(path: Path, words: list[str], lines: int, length: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    text = [" ".join(words[i] for i in rng.integers(len(words), size=length)) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def sequence_tokens(item) -> int:
    """Tokens of the item's whole text as the model read it: start token, prompt, prefix and
    continuation (0 for an item skipped before its continuation began)."""
    record = item.provenance.get("continuation")
    return record["context_tokens"] + record["tokens"] if record else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=32, help="items per kind and length")
    parser.add_argument("--lengths", default="20,40,60")
    parser.add_argument("--l-gen", type=int, default=20)
    parser.add_argument("--prompt", type=int, default=20)
    parser.add_argument("--kinds", default="model,data")
    parser.add_argument("--batch-size", type=int, default=None, help="default: --items")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--logit-scale", type=float, default=8.0)
    parser.add_argument("--cont-scale", type=float, default=0.9)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    lengths = [int(x) for x in args.lengths.split(",")]
    kinds = args.kinds.split(",")
    batch = args.batch_size or args.items
    print(
        f"{datetime.datetime.now().isoformat(timespec='seconds')}, {platform.node()}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average at start {os.getloadavg()}"
    )
    built = build_model(device, args.logit_scale, getattr(torch, args.dtype), args.cont_scale)
    tok, words = word_tokenizer(synthetic_bpe_tokenizer())
    lm = HFCausalLM(built.model, tok, name=built.name)
    print(
        f"device {device} ({torch.get_num_threads()} threads), dtype {args.dtype}, "
        f"batch {batch}; GPT-2 small shape (GPT2Config defaults, {VOCAB} tokens), random "
        f"weights, mean next-token entropy {mean_entropy(lm):.2f} nats"
    )
    print(
        f"{args.items} items per kind and length, prompt {args.prompt} words, l_gen "
        f"{args.l_gen}, ancestral sampling; data words of one token ({len(words)} words)"
    )
    print(
        "bound: one forward over the same total tokens, best of 2; ratios bound / ours, wall / CPU"
    )
    with tempfile.TemporaryDirectory() as tmp:
        need = args.prompt + max(lengths) + args.l_gen
        path = write_dataset(Path(tmp) / "lines.txt", words, 4 * args.items, need, seed=0)
        dataset = load_dataset(path)
        spec = PrefixSpec(batch_size=batch, prompt_words=args.prompt, continuation_words=args.l_gen)
        make_items(lm, dataset, spec, 5, "model", 0, min(batch, 8), seed=99)  # warm-up
        make_items(lm, dataset, spec, 5, "data", 0, min(batch, 8), seed=99)
        header = (
            f"{'l':>3} {'kind':>5} {'items':>5} {'cont/s':>7} {'tok/item':>8} {'ours s':>7} "
            f"{'bound s':>7} {'bound/ours':>11} {'skipped':>7} {'resampled':>9}  "
            f"{'peak memory':>14}  load"
        )
        print(header)
        for length in lengths:
            for kind in kinds:
                sync(device)
                with Clock() as ours:
                    items = make_items(lm, dataset, spec, length, kind, 0, args.items, seed=1)
                    sync(device)
                total = sum(sequence_tokens(i) for i in items)
                per_item = max(1, round(total / len(items)))
                tps_w, tps_c = forward_tokens_per_second(lm, per_item, len(items), repeats=2)
                bound_w, bound_c = total / tps_w, total / tps_c
                skipped = sum(i.skipped for i in items)
                resampled = sum(
                    i.provenance.get("continuation", {}).get("attempts", 1) > 1 for i in items
                )
                print(
                    f"{length:>3} {kind:>5} {len(items):>5} {len(items) / ours.wall:>7.2f} "
                    f"{total / len(items):>8.1f} {ours.wall:>7.2f} {bound_w:>7.2f} "
                    f"{bound_w / ours.wall:>5.2f}/{bound_c / ours.cpu:<5.2f} {skipped:>7} "
                    f"{resampled:>9}  {peak_memory(device):>14}  {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
