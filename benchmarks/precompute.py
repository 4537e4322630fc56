"""Benchmark: precompute of `model` items against the forward-pass bound and the peer.

Builds a model with GPT-2 small's shape (12 layers, 768 wide, 50,257 tokens) with random weights
and a synthetic byte-level-BPE-style vocabulary (80% of the tokens start a word, so that a
random model writes about 1.25 tokens per word, as GPT-2 does on English), then measures for
each prefix length l, side by side in one run:

- **ours**: `worker.prefixes.make_items(kind="model")` -- every row of the batch samples its
  prefix and then searches its exact top-5 words in its own slot of the KV cache, one token per
  row and step, a finished row's slot taken by the next prefix (`worker.sampler`);
- **peer**: what a researcher would write with ``transformers`` alone: batched
  ``model.generate(do_sample=True, output_scores=True, return_dict_in_generate=True)`` at the
  same batch size and the same number of tokens per item (full vocabulary, temperature 1), then
  the top-5 *tokens* of one more forward on the returned cache.  It does less than we do (no word
  search, a fixed number of tokens instead of l words).  Timed on ``--peer-batches`` full
  batches; items per second is batch size / seconds per batch;
- **naive** (secondary): per item one ``model.generate()`` plus one forward for the top-5 tokens,
  timed on ``--naive-sample`` items and extrapolated;
- **forward bound**: the tokens the items need (every sampled token plus one per expansion of
  the word search, speculative ones left out) at the tokens per second of one plain batched
  forward ``model(ids)`` of the same model on random ids [rows, tokens per item] (about
  ``--bound-tokens`` tokens, no cache, the logits of every position): the median of
  ``--bound-forwards`` such forwards, half just before ours and half just after, so that the
  bound and ours meet the machine in the same minutes (on this shared 2-core machine one
  forward's CPU rate varies by a third from one to the next: a best-of-two bound compared a
  fast moment with ours' average).
- **cached step** (reference, "of step"): the same needed tokens at the tokens per second of a
  plain decoding step of the model with a KV cache written in place (one token per row, as
  many rows as ours' batch, the cache as wide as ours' average fed row; `cached_step_rates`),
  the median of ``--bound-forwards`` steps after ours and the bound's second half.  A sampler
  that keeps a KV cache reads it at every step; the forward bound reads none.

Every part runs the same model object, as the worker wraps it: `HFCausalLM` runs GPT-2's
written-out ``gelu_new`` as one fused kernel (`worker.hf_common.fuse_gelu`), and so do the
bound, the cached step, the peer and the naive loop.  That makes the peer and the naive loop a
little faster than a researcher's plain ``from_pretrained`` model (our ratio to them is
understated, not flattered) and the bound tighter: with the written-out GELU a forward of
~4,096 tokens spent about 11 % of its CPU in it (2026-11-26).

- **operations** (``--count-operations``, on by default): the ATen operations our run and the
  peer dispatch (`worker.opcount.OpCounter`), per needed token and per token sampled, at the
  same rows, and ours per forward at the batch's rows over those at 32 rows.  Counted on a
  64-wide twin of the model (GPT-2 small's layers and vocabulary: the count does not depend on
  the width, and the twin is quick), one batch of as many items as rows.  On a GPU every
  operation is at least one kernel launch: a step whose operations grow with its rows is
  host-bound there whatever the CPU's speed.  The count is deterministic, so it can be read on
  a noisy machine.

Ratios are printed as wall clock / CPU time of this process (all threads): on a shared machine
the wall time of each part depends on what else runs at that moment, the CPU time much less.  On
a GPU the CPU time says little; read the wall-clock figures there.  "tok/s" is the needed tokens
per second of ours (CPU time on a CPU, wall clock on a GPU): constant when the cost is linear in
l.  Peak memory is measured per part (the process's peak resident set since the part began, or
the GPU's peak allocation).  Also counted: items whose search was flagged inexact, items whose
words merged several tokenisations of one string (DESIGN.md: identical strings are one word),
skipped items.  ``--demo-model DIR`` (a built demo model, ``python -m worker.demo.build``) counts
the merges on it too.

Random GPT-2 weights give a nearly uniform next-token distribution, which no trained model has
and which makes any exact word search expand thousands of candidates.  ``--logit-scale`` (default
8) multiplies the final layer norm's gain so that the distribution is peaked like a trained
model's; the mean entropy it gives is printed.  ``--cont-scale`` (default 0.9) shortens the
(tied) embedding rows of continuation pieces: at 1.0 the peaked random model repeats a
continuation piece into words of dozens of tokens, at 0.9 it writes about 1.1 tokens per word
with some multi-token words.  Compute per token is unchanged.

- **by kind** (``--kind-items``, default 256 at ``--kind-length`` 20): needed tokens per second of
  a ``data_shuffled`` prefix and of its gap kind ``data_shuffled+gap@G`` (``--gap``, default 5: G
  words sampled from P_M after the shuffled prefix, then the search; `worker.gaps`), on lines of
  random words of the model's vocabulary, in the order A B B A, and the ratio of their means (issue
  34: the gap kind within 10 % of ``data_shuffled``). ``--kinds-only`` runs this table alone.

Run: ``python benchmarks/precompute.py`` (1,000 items, l = 10, 20, 30, 60, 100; peak memory of a
batch of 256 at l = 100 with ``--memory-items 256``) or a reduced scale on a CPU, e.g.
``--items 300 --lengths 10,20 --naive-sample 2``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import random
import re
import resource
import statistics
import tempfile
import time
from collections import Counter

import worker as _worker_env  # noqa: F401  (first: the OpenMP wait policy it sets, before torch loads)

# isort: split

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from app.precompute.datasets import load_dataset
from worker.hf import HFCausalLM
from worker.hf_cache import make_cache
from worker.models import auto_batch_size, load_model, memory_budget
from worker.opcount import OpCounter
from worker.prefixes import PrefixSpec, make_items
from worker.sampler import expected_columns
from worker.tokens import token_classes

VOCAB = 50257


def synthetic_bpe_tokenizer() -> PreTrainedTokenizerFast:
    """50,257 byte-level tokens: the 256 byte symbols, synthetic pieces, end of text last."""
    from worker.tokens import byte_decoder

    symbols = sorted(byte_decoder(), key=byte_decoder().__getitem__)
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
    device: torch.device,
    logit_scale: float,
    dtype: torch.dtype,
    cont_scale: float = 0.5,
    width: int | None = None,
) -> HFCausalLM:
    """GPT-2 small's shape with random weights (``width``: a narrower twin with GPT-2 small's
    layers and vocabulary, for counting operations, which do not depend on the width)."""
    torch.manual_seed(0)
    tok = synthetic_bpe_tokenizer()
    narrow = {"n_embd": width, "n_head": 4} if width else {}
    config = GPT2Config(vocab_size=VOCAB, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, **narrow)
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


class Peak:
    """Peak memory of a block: the process's peak resident set (VmHWM, reset at the start
    through /proc/self/clear_refs) on a CPU, the peak allocation on a GPU.  On a CPU the heap
    is trimmed first (``malloc_trim``): the worker keeps freed memory on glibc's heap
    (`worker.models.keep_buffers_on_heap`), which would otherwise count the earlier parts'
    peaks in this one's."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).malloc_trim(0)
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.gib = torch.cuda.max_memory_allocated(self.device) / 2**30
            self.label = "GiB GPU"
        else:
            with open("/proc/self/status") as f:
                self.gib = int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) / 2**20
            self.label = "GiB RSS"


def peak_memory(device: torch.device) -> str:
    """The peak since the process began (the scripts that measure one part a process,
    `benchmarks/continuations.py` and `benchmarks/synthetic.py`; `Peak` measures a block)."""
    if device.type == "cuda":
        return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB GPU"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB RSS"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Wall seconds and this process's CPU seconds (all threads) of a block."""

    def __init__(self, device: torch.device | None = None):
        self.device = device

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        if self.device is not None:
            sync(self.device)
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c


@torch.inference_mode()
def peer_batch(lm: HFCausalLM, rows: int, new_tokens: int) -> torch.Tensor:
    """The peer on one batch: ``rows`` texts of ``new_tokens`` sampled tokens after the start
    token by batched ``generate`` (scores kept), then the top-5 tokens of one more forward on
    the returned cache."""
    start = torch.full((rows, 1), lm.start_token_id, device=lm.device)
    out = lm.model.generate(
        start,
        attention_mask=torch.ones_like(start),
        do_sample=True,
        top_k=0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=lm.start_token_id,
    )
    last = out.sequences[:, -1:]
    mask = torch.ones_like(out.sequences)
    logits = lm.model(
        input_ids=last, attention_mask=mask, use_cache=True, **{lm._cache_kw: out.past_key_values}
    ).logits
    return logits[:, -1].topk(5).indices


def peer_seconds(lm, rows, new_tokens, batches) -> tuple[float, float]:
    """(wall, CPU) seconds per batch of the peer, the mean of ``batches`` batches."""
    peer_batch(lm, min(rows, 8), 2)
    sync(lm.device)
    with Clock(lm.device) as clock:
        for _ in range(batches):
            peer_batch(lm, rows, new_tokens)
    return clock.wall / batches, clock.cpu / batches


@torch.inference_mode()
def naive_item_seconds(lm: HFCausalLM, new_tokens: int, sample: int) -> tuple[float, float]:
    """(wall, CPU) seconds per item of generate() + one forward, averaged over ``sample``."""
    start = torch.tensor([[lm.start_token_id]], device=lm.device)
    lm.model.generate(start, do_sample=True, max_new_tokens=2, min_new_tokens=2, top_k=0)
    sync(lm.device)
    with Clock(lm.device) as clock:
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
    return clock.wall / sample, clock.cpu / sample


@torch.inference_mode()
def forward_rates(
    lm: HFCausalLM, seq_len: int, rows: int, repeats: int
) -> list[tuple[float, float]]:
    """(wall, CPU) tokens per second of each of ``repeats`` forwards ``lm.model(ids)`` on random
    ids [rows, seq_len]: one plain batched forward, no cache, the logits of every position (as
    a training-style forward computes them), after one full-size warm-up forward."""
    ids = torch.randint(0, VOCAB - 1, (rows, seq_len), device=lm.device)
    lm.model(ids)
    sync(lm.device)
    rates = []
    for _ in range(repeats):
        with Clock(lm.device) as clock:
            lm.model(ids)
        rates.append((rows * seq_len / clock.wall, rows * seq_len / clock.cpu))
    return rates


@torch.inference_mode()
def cached_step_rates(
    lm: HFCausalLM, width: int, rows: int, repeats: int
) -> list[tuple[float, float]]:
    """(wall, CPU) tokens per second of each of ``repeats`` plain cached decoding steps: one new
    token per row of ``rows`` through ``lm.model`` with a KV cache holding ``width`` columns
    already (random keys and values, no forward fills it) and spare columns that each step
    writes in place (`worker.hf_cache.make_cache`: a ``transformers`` ``DynamicCache`` whose
    layers write into preallocated buffers; the stock one copies the whole cache every step),
    then the logits of the new position and their log-softmax.  Unlike the forward bound, such
    a step reads every row's cached keys and values in every layer."""
    cfg = lm.model.config
    heads, dim = cfg.n_head, cfg.n_embd // cfg.n_head
    dtype = next(lm.model.parameters()).dtype
    layers = []
    for _ in range(cfg.n_layer):
        k = torch.randn((rows, heads, width, dim), device=lm.device, dtype=dtype)
        layers.append((k, torch.randn_like(k)))
    cache = make_cache(layers, spare=repeats + 1)
    del layers, k
    rates = []
    for step in range(repeats + 1):  # the first step warms up
        ids = torch.randint(0, VOCAB - 1, (rows, 1), device=lm.device)
        positions = torch.full((rows, 1), width + step, device=lm.device)
        with Clock(lm.device) as clock:
            out = lm.model(
                ids, position_ids=positions, use_cache=True, logits_to_keep=1,
                **{lm._cache_kw: cache},
            )  # fmt: skip
            torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        if step:
            rates.append((rows / clock.wall, rows / clock.cpu))
    return rates


def forward_tokens_per_second(
    lm: HFCausalLM, seq_len: int, rows: int, repeats: int
) -> tuple[float, float]:
    """The best (wall, CPU) of `forward_rates` (as `benchmarks/continuations.py` measures its
    bound)."""
    rates = forward_rates(lm, seq_len, rows, repeats)
    return max(w for w, _ in rates), max(c for _, c in rates)


@torch.inference_mode()
def mean_entropy(lm: HFCausalLM) -> float:
    ids = torch.randint(0, VOCAB - 1, (4, 16), device=lm.device)
    lp = torch.log_softmax(lm.model(ids).logits.float(), -1)
    return float(-(lp.exp() * lp).sum(-1).mean())


class FeedCounter:
    """Counts what `HFCausalLM.feed` computes: forwards, tokens (speculative ones included),
    padding positions, and the columns each token's slot held before the forward."""

    def __init__(self, lm: HFCausalLM):
        self.counts: Counter = Counter()
        self.real = lm.feed

        def feed(state, slots, tokens, parents, want):
            q = max(Counter(slots).values())
            self.counts["forwards"] += 1
            self.counts["tokens"] += len(tokens)
            self.counts["padding"] += (max(slots) + 1) * q - len(tokens)
            self.counts["columns"] += sum(state.fills[s] for s in slots)
            return self.real(state, slots, tokens, parents, want)

        lm.feed = feed


def operation_counts(
    lm: HFCausalLM, length: int, rows: int, small: int = 32
) -> tuple[float, float, float]:
    """ATen operations (`worker.opcount.OpCounter`) per needed token of ours (one batch of
    ``rows`` items at ``rows`` rows) and per token of the peer at the same rows; and ours'
    operations per forward at ``rows`` rows over those at ``small`` rows (one batch of
    ``small`` items): how a step's cost grows with its rows.  Counted on ``lm``, the narrow
    twin (`build_model`'s ``width``): operations do not depend on the width."""

    def ours(n: int) -> tuple[int, int, int, list]:
        spec = PrefixSpec(batch_size=n, max_word_tokens=16)
        make_items(lm, None, spec, length, "model", 0, min(n, 8), seed=99)  # warm
        counter = FeedCounter(lm)
        try:
            with OpCounter() as ops:
                items = make_items(lm, None, spec, length, "model", 0, n, seed=1)
        finally:
            lm.feed = counter.real
        return ops.total, needed_tokens(items), counter.counts["forwards"], items

    total, needed, forwards, items = ours(rows)
    small_total, _, small_forwards, _ = ours(min(small, rows))
    n_tok = max(2, round(sum(i.provenance.get("context_tokens", 0) for i in items) / len(items)))
    peer_batch(lm, min(rows, 8), 2)
    with OpCounter() as peer:
        peer_batch(lm, rows, n_tok - 1)
    return (
        total / needed,
        peer.total / (rows * n_tok),
        (total / forwards) / (small_total / small_forwards),
    )


def needed_tokens(items) -> int:
    """The tokens items need: every sampled (context) token plus one per word-search
    expansion, speculative ones left out (what the forward bound is charged for)."""
    return sum(
        i.provenance.get("context_tokens", 0) + i.provenance.get("choices", {}).get("expansions", 0)
        for i in items
    )


def merged_items(items) -> int:
    return sum(i.provenance.get("choices", {}).get("merged_tokenisations", 0) > 0 for i in items)


def demo_merges(path: str, lengths: list[int], n: int) -> None:
    """Items of a built demo model whose words merged several tokenisations."""
    demo = load_model(path, device="cpu")
    for length in lengths:
        items = make_items(demo, None, PrefixSpec(), length, "model", 0, n, seed=1)
        method = items[0].provenance["choices"]["method"]
        print(
            f"demo model {path}, l = {length}: {merged_items(items)} of {n} items merged "
            f"tokenisations (method {method}, {items[0].provenance['token_convention']} vocabulary)"
        )


def word_lines(lm: HFCausalLM, words: int, n: int) -> list[str]:
    """``n`` lines of ``words`` random words of the model's vocabulary (its word-starting pieces
    of 3 to 6 letters), seeded."""
    pieces = lm.tokenizer.convert_ids_to_tokens(list(range(lm.vocab_size)))
    vocab = [p[1:] for p in pieces if p.startswith("Ġ") and 3 <= len(p) - 1 <= 6]
    rng = random.Random(0)
    return [" ".join(rng.choices(vocab, k=words)) for _ in range(n)]


def kind_table(lm: HFCausalLM, args, device: torch.device) -> None:
    """Needed tokens per second of ``data_shuffled`` and ``data_shuffled+gap@G`` (module
    docstring, "by kind")."""
    length, n = args.kind_length, args.kind_items
    kinds = ("data_shuffled", f"data_shuffled+gap@{args.gap}")
    where = "GPU" if device.type == "cuda" else "CPU"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "lines.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(word_lines(lm, length + 2, n)) + "\n")
        dataset = load_dataset(path, "text")
    spec = PrefixSpec(batch_size=args.batch_size, max_word_tokens=args.max_word_tokens or None)
    print(f"by kind: l = {length}, {n} items each, on lines of random vocabulary words")
    print(f"{'kind':<24} {'items/s':>8} {'tok/item':>8} {'exp/item':>8} {'s':>13} {'tok/s':>7}")
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    for kind in (*kinds, *reversed(kinds)):  # A B B A: a drift in the machine's speed cancels
        make_items(lm, dataset, spec, length, kind, 0, 8, seed=99)  # warm-up
        with Clock(device) as t:
            items = make_items(lm, dataset, spec, length, kind, 0, n, seed=1)
        needed = needed_tokens(items)
        tokens = sum(i.provenance.get("context_tokens", 0) for i in items)
        expansions = sum(i.provenance.get("choices", {}).get("expansions", 0) for i in items)
        rates[kind].append(needed / (t.wall if device.type == "cuda" else t.cpu))
        print(
            f"{kind:<24} {n / t.wall:>8.2f} {tokens / n:>8.1f} {expansions / n:>8.1f} "
            f"{t.wall:>6.1f}/{t.cpu:<6.1f} {rates[kind][-1]:>7.0f}",
            flush=True,
        )
    mean = {k: statistics.fmean(v) for k, v in rates.items()}
    print(
        f"{kinds[1]} over {kinds[0]}: {mean[kinds[1]] / mean[kinds[0]]:.3f} of the needed "
        f"tokens per {where} second (means of two runs each)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--lengths", default="10,20,30,60,100")
    parser.add_argument(
        "--memory-items",
        type=int,
        default=256,
        help="items of one extra run at the longest length for its peak memory "
        "(one batch; 0: none)",
    )
    parser.add_argument("--naive-sample", type=int, default=3)
    parser.add_argument("--peer-batches", type=int, default=1)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="rows per batch (default: worker.models.auto_batch_size)",
    )
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--logit-scale", type=float, default=8.0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--cont-scale", type=float, default=0.9)
    parser.add_argument(
        "--bound-tokens",
        type=int,
        default=4096,
        help="tokens in the bound's forward (rows x tokens per item)",
    )
    parser.add_argument(
        "--bound-forwards",
        type=int,
        default=6,
        help="forwards the bound is the median of (half before ours, half after; at least 2)",
    )
    parser.add_argument(
        "--max-word-tokens",
        type=int,
        default=16,
        help="PrefixSpec.max_word_tokens (default 16, the study default; 0: none)",
    )
    parser.add_argument("--demo-model", default=None, help="a built demo model's directory")
    parser.add_argument(
        "--kind-items", type=int, default=256, help="items per kind of the by-kind table (0: none)"
    )
    parser.add_argument("--kind-length", type=int, default=20)
    parser.add_argument("--gap", type=int, default=5, help="the gap kind's g")
    parser.add_argument(
        "--kinds-only", action="store_true", help="the by-kind table alone (no other part)"
    )
    parser.add_argument(
        "--count-operations",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="count the ATen operations per needed token of ours and the peer (on a narrow "
        "twin of the model)",
    )
    args = parser.parse_args()
    if args.bound_forwards < 2:
        parser.error("--bound-forwards: at least 2 (one before ours, one after)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    where = "GPU" if device.type == "cuda" else "CPU"
    print(f"load average at start: {os.getloadavg()} ({os.cpu_count()} CPUs)")
    lm = build_model(device, args.logit_scale, getattr(torch, args.dtype), args.cont_scale)
    lengths = [int(x) for x in args.lengths.split(",")]
    budget = memory_budget(lm)
    print(f"device {device} ({where}; {torch.get_num_threads()} CPU threads), dtype {args.dtype}")
    if device.type == "cuda":
        print(f"GPU: {torch.cuda.get_device_name(device)}")
    print(
        f"model: GPT-2 small shape, random weights, logit scale {args.logit_scale}, "
        f"continuation scale {args.cont_scale}, "
        f"mean next-token entropy {mean_entropy(lm):.2f} nats; "
        f"{lm.kv_bytes_per_token / 1024:.1f} KiB of KV cache per token"
    )
    print(
        f"{args.items} `model` items per length, top-5 words; peer timed on "
        f"{args.peer_batches} batch(es); naive loop on {args.naive_sample} items, extrapolated; "
        f"bound: median of {args.bound_forwards} forwards of about {args.bound_tokens} tokens, "
        "half just before ours, half just after"
    )
    print(f"memory budget {budget / 2**30:.1f} GiB ({where} free memory x share)")
    if args.kinds_only:
        kind_table(lm, args, device)
        return
    print("ratios and seconds: wall clock / CPU time (this process, all threads)")
    header = (
        f"{'l':>4} {'batch':>5} {'items/s':>8} {'tok/item':>8} {'exp/item':>8} {'ours s':>7} "
        f"{'peer s':>8} {'x peer':>11} {'naive s':>8} {'x naive':>11} {'of bound':>11} "
        f"{'of step':>11} "
        f"{'tok/s':>6} {'pad%':>5} {'spec%':>5} {'inexact':>7} {'merged':>6} {'skip':>4} "
        f"{'peak ours':>9} {'peak peer':>9}  load  bound tok/CPU s (min-max)"
    )
    print(header)
    rates, batches = {}, {}
    runs = [(length, args.items) for length in lengths]
    if args.memory_items:
        runs.append((max(lengths), args.memory_items))
    for length, n_items in runs:
        spec_auto = PrefixSpec(max_word_tokens=args.max_word_tokens or None)
        batch = args.batch_size or auto_batch_size(
            lm, expected_columns(spec_auto, length), budget=budget
        )
        batches.setdefault(length, batch)
        # As the worker runs: a size given is taken as is; else the automatic size, with the
        # slots' cache kept within the memory budget.
        spec = PrefixSpec(batch_size=args.batch_size, max_word_tokens=args.max_word_tokens or None)
        warm = make_items(lm, None, spec, length, "model", 0, min(batch, 8), seed=99)
        # The bound's shape from the warm-up's items (tokens per item), measured around ours.
        warm_tok = sum(i.provenance.get("context_tokens", 0) for i in warm) / len(warm)
        bound_tok = max(2, round(warm_tok))
        bound_rows = max(1, min(batch, args.bound_tokens // bound_tok))
        half = max(1, args.bound_forwards // 2)
        bound_rates = forward_rates(lm, bound_tok, bound_rows, half)
        counter = FeedCounter(lm)
        with Peak(device) as ours_peak, Clock(device) as ours:
            items = make_items(lm, None, spec, length, "model", 0, n_items, seed=1)
        lm.feed = counter.real
        rest = max(1, args.bound_forwards - half)
        bound_rates += forward_rates(lm, bound_tok, bound_rows, rest)
        # The step's cache as wide as the average fed row's (columns it held before its token).
        columns = round(counter.counts["columns"] / max(1, counter.counts["tokens"]))
        step_rows = min(batch, n_items)
        step_rates = cached_step_rates(lm, max(1, columns), step_rows, args.bound_forwards)
        sampled = sum(i.provenance.get("context_tokens", 0) for i in items)
        expansions = sum(i.provenance.get("choices", {}).get("expansions", 0) for i in items)
        needed = needed_tokens(items)
        per_item = sampled / len(items)
        n_tok = max(2, round(per_item))
        rows = batch
        with Peak(device) as peer_peak:
            peer_w, peer_c = peer_seconds(lm, rows, n_tok - 1, args.peer_batches)
        peer_w, peer_c = peer_w / rows * len(items), peer_c / rows * len(items)
        naive_w, naive_c = naive_item_seconds(lm, n_tok - 1, args.naive_sample)
        naive_w, naive_c = naive_w * len(items), naive_c * len(items)
        tps_w = statistics.median(w for w, _ in bound_rates)
        tps_c = statistics.median(c for _, c in bound_rates)
        bound_w, bound_c = needed / tps_w, needed / tps_c
        spread_c = min(c for _, c in bound_rates), max(c for _, c in bound_rates)
        step_w = needed / statistics.median(w for w, _ in step_rates)
        step_c = needed / statistics.median(c for _, c in step_rates)
        rate = needed / (ours.wall if device.type == "cuda" else ours.cpu)
        if n_items == args.items:
            rates[length] = rate
        fed = counter.counts
        pad = fed["padding"] / max(1, fed["tokens"] + fed["padding"])
        spec_share = (fed["tokens"] - needed) / max(1, fed["tokens"])
        skipped = sum(i.skipped for i in items)
        inexact = sum(not i.provenance.get("choices", {}).get("exact", True) for i in items)
        print(
            f"{length:>4} {batch:>5} {len(items) / ours.wall:>8.2f} {per_item:>8.1f} "
            f"{expansions / len(items):>8.1f} {ours.wall:>7.1f} {peer_w:>8.1f} "
            f"{peer_w / ours.wall:>5.2f}/{peer_c / ours.cpu:<5.2f} {naive_w:>8.1f} "
            f"{naive_w / ours.wall:>5.1f}/{naive_c / ours.cpu:<5.1f} "
            f"{bound_w / ours.wall:>5.2f}/{bound_c / ours.cpu:<5.2f} "
            f"{step_w / ours.wall:>5.2f}/{step_c / ours.cpu:<5.2f} {rate:>6.0f} "
            f"{100 * pad:>5.1f} {100 * spec_share:>5.1f} {inexact:>7} {merged_items(items):>6} "
            f"{skipped:>4} {ours_peak.gib:>9.2f} {peer_peak.gib:>9.2f}  "
            f"{os.getloadavg()[0]:>4.1f}  {tps_c:.0f} ({spread_c[0]:.0f}-{spread_c[1]:.0f})"
            + ("" if n_items == args.items else f"  ({n_items} items: one batch)"),
            flush=True,
        )
    if args.count_operations:
        twin = build_model(
            device, args.logit_scale, getattr(torch, args.dtype), args.cont_scale, width=64
        )
        print(
            "ATen operations (worker.opcount, deterministic), counted on a 64-wide twin of the "
            "model (GPT-2 small's layers and vocabulary), one batch of as many items as rows:"
        )
        print(
            f"{'l':>4} {'rows':>5} {'ours/tok':>8} {'peer/tok':>8} {'x peer':>6} {'fwd vs 32':>9}"
        )
        for length in lengths:
            batch = batches[length]
            mine, peer, growth = operation_counts(twin, length, batch)
            print(
                f"{length:>4} {batch:>5} {mine:>8.2f} {peer:>8.2f} {mine / peer:>6.2f} "
                f"{growth:>9.2f}",
                flush=True,
            )
        print(
            "ours/tok: our operations per needed token; peer/tok: the peer's per token it "
            "samples; fwd vs 32: our operations per forward at these rows over those at 32 rows"
        )
    if len(rates) > 1:
        base = rates[min(rates)]
        spread = ", ".join(f"l={k}: {v / base:.2f}" for k, v in sorted(rates.items()))
        print(f"tokens per second relative to l = {min(rates)} ({where}): {spread}")
    unit = "GiB of GPU allocation" if where == "GPU" else "GiB of peak resident set (whole process)"
    print(f"peak memory in {unit}; tok/s: needed tokens per {where} second of ours")
    if args.kind_items:
        kind_table(lm, args, device)
    if args.demo_model:
        demo_merges(args.demo_model, lengths[:2], 256)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
