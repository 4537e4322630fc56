"""The demo model's build recipe: a small word-level GPT-2 trained on the demo corpus, cached
by the hash of its recipe (see `worker.demo`, step 3)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from worker.demo.corpus import DEB_PACKAGE, TEXT_FORMAT, CorpusError, fetch_austen
from worker.demo.tokenizer import EOS, WORD_PATTERN, tokenize_words, train_tokenizer

CONTEXT = 64
MODEL = {"n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": CONTEXT}
OPTIM = {
    "optimizer": "AdamW",
    "lr": 3e-3,
    "betas": [0.9, 0.98],
    "weight_decay": 0.1,
    "warmup_fraction": 0.05,
    "min_lr_fraction": 0.05,
    "batch_size": 16,
    "dropout": 0.0,
    "grad_clip": 1.0,
}
HELDOUT_FRACTION = 0.05
VAL_MAX_TOKENS = 30_000
TRIGRAM_DISCOUNT = 0.75


@dataclass
class DemoModel:
    """Where a built demo lives and how it did (``metrics`` is ``ebc_demo.json``)."""

    model_dir: Path
    heldout_path: Path
    train_path: Path
    metrics: dict = field(default_factory=dict)
    reused: bool = False


def _corpus_id(corpus: Sequence[str] | None) -> str:
    if corpus is None:
        return f"{DEB_PACKAGE}/text-v{TEXT_FORMAT}"
    digest = hashlib.sha256("\n".join(corpus).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"


def demo_recipe(
    *, steps: int = 1800, vocab_size: int = 8000, seed: int = 0, corpus: Sequence[str] | None = None
) -> dict:
    """The recipe that identifies a build (the wall-clock cap is kept apart)."""
    return {
        "format": TEXT_FORMAT,
        "corpus": _corpus_id(corpus),
        "word_pattern": WORD_PATTERN,
        "vocab_size": vocab_size,
        "heldout_fraction": HELDOUT_FRACTION,
        "model": {"type": "gpt2", **MODEL},
        "optim": OPTIM,
        "steps": steps,
        "seed": seed,
    }


def recipe_hash(recipe: dict) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _cached(out_dir: Path, digest: str, max_seconds: float) -> dict | None:
    model_dir = out_dir / "model"
    meta_path = model_dir / "ebc_demo.json"
    needed = [
        out_dir / "heldout.txt",
        out_dir / "train.txt",
        model_dir / "config.json",
        model_dir / "tokenizer.json",
    ]
    if not meta_path.exists() or not all(p.exists() for p in needed):
        return None
    if not list(model_dir.glob("*.safetensors")) and not list(model_dir.glob("*.bin")):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError:
        return None
    if meta.get("recipe_hash") != digest:
        return None
    # A run cut short by its wall-clock cap is only the same build under the same cap.
    if not meta.get("completed") and meta.get("max_seconds") != max_seconds:
        return None
    return meta


def split_heldout(lines: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, heldout): a seeded random ``fraction`` of the *distinct* lines is held out (in
    corpus order, each once), so no held-out line also occurs in the training lines."""
    distinct = sorted(set(lines))
    rng = random.Random(seed)
    rng.shuffle(distinct)
    n_held = max(1, round(len(distinct) * fraction))
    held = set(distinct[:n_held])
    heldout, seen = [], set()
    for line in lines:
        if line in held and line not in seen:
            heldout.append(line)
            seen.add(line)
    train = [line for line in lines if line not in held]
    return train, heldout


def _stream(tokenizer, lines: Sequence[str], eos: int) -> list[int]:
    ids = [eos]
    for enc in tokenizer(list(lines), add_special_tokens=False)["input_ids"]:
        ids.extend(enc)
        ids.append(eos)
    return ids


def idle_threads() -> int:
    """Torch's intra-op thread count, or 1 when the machine has no idle core for a second
    (the load average of the last minute above the cores less one; see `PROBE`)."""
    import torch

    cores = os.cpu_count() or 1
    return 1 if os.getloadavg()[0] > cores - 1 else torch.get_num_threads()


def _eval_loss(
    model, ids, context: int, batch: int = 64, threads: int | None = None
) -> tuple[float, int]:
    """Mean next-token loss over ``ids[1:]`` with sliding windows (stride context/2; every
    token is scored once, with at least context/2 tokens of history after the first window),
    on ``threads`` intra-op threads (None: torch's)."""
    import torch

    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads or default_threads)
    try:
        return _windows_loss(model, ids, context, batch)
    finally:
        torch.set_num_threads(default_threads)


def _windows_loss(model, ids, context: int, batch: int) -> tuple[float, int]:
    import torch

    stride = context // 2
    windows: list[tuple[int, int]] = []  # (start, first scored position within the window)
    start = 0
    while True:
        end = min(start + context, len(ids))
        windows.append((start, 1 if start == 0 else context - stride))
        if end >= len(ids):
            break
        start += stride
    total, count = 0.0, 0
    model.eval()
    with torch.inference_mode():
        for lo in range(0, len(windows), batch):
            chunk = windows[lo : lo + batch]
            width = max(min(s + context, len(ids)) - s for s, _ in chunk)
            x = torch.zeros((len(chunk), width), dtype=torch.long)
            score = torch.zeros((len(chunk), width), dtype=torch.bool)
            for i, (s, first) in enumerate(chunk):
                seg = ids[s : s + context]
                x[i, : len(seg)] = torch.tensor(seg)
                score[i, first : len(seg)] = True
            # The head (8,000 words wide: most of the work) on the scored positions only.
            mask = score[:, 1:]
            hidden = model.transformer(input_ids=x).last_hidden_state[:, :-1][mask]
            logits = model.lm_head(hidden).float()
            target = x[:, 1:][mask]
            total += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
            count += int(mask.sum())
    model.train()
    return total / max(count, 1), count


def trigram_perplexity(train_ids: Sequence[int], eval_ids: Sequence[int], vocab: int) -> float:
    """Perplexity of an interpolated Kneser-Ney trigram (absolute discount 0.75, continuation
    unigram mixed with uniform) trained on ``train_ids``, on ``eval_ids[1:]``: a count baseline.

    The counts are numpy's over ``(a V + b) V + c`` keys (on the Austen build: 0.4 CPU s, where
    Python Counters of its 0.8M trigrams took 2.2 s, same value): ``c3`` the trigram counts,
    ``ctx2``/``types2`` the count and distinct followers of ``a b``, ``cont2[b, c]`` the
    distinct ``a`` before ``b c``, ``cont_ctx[b]`` the trigram types with ``b`` in the middle,
    ``types_after[b]`` the distinct ``c`` after ``b`` among those, ``cont1[c]`` the bigram
    types ending in ``c``."""
    import numpy as np

    d = TRIGRAM_DISCOUNT
    t = np.asarray(train_ids, np.int64)
    e = np.asarray(eval_ids, np.int64)
    if e.size < 2:
        return 1.0
    v = int(max(vocab, t.max(initial=0) + 1, e.max(initial=0) + 1))
    keys3, c3 = np.unique((t[:-2] * v + t[1:-1]) * v + t[2:], return_counts=True)
    ab, b3, c3_last = keys3 // v, (keys3 // v) % v, keys3 % v
    ab_keys, ab_of = np.unique(ab, return_inverse=True)
    ctx2 = np.bincount(ab_of, weights=c3)
    types2 = np.bincount(ab_of)
    bc_keys, cont2 = np.unique(b3 * v + c3_last, return_counts=True)
    cont_ctx = np.bincount(b3, minlength=v)
    types_after = np.bincount(bc_keys // v, minlength=v)
    bigrams = np.unique(t[:-1] * v + t[1:])
    cont1 = np.bincount(bigrams % v, minlength=v)

    def lookup(keys: np.ndarray, values: np.ndarray, want: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(keys, want), keys.size - 1)
        return np.where(keys[at] == want, values[at], 0)

    b, c = e[:-1], e[1:]
    p1 = 0.99 * cont1[c] / bigrams.size + 0.01 / vocab
    den2 = cont_ctx[b].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p2 = np.where(
            den2 > 0,
            np.maximum(lookup(bc_keys, cont2, b * v + c) - d, 0) / den2
            + d * types_after[b] / den2 * p1,
            p1,
        )
        a = np.r_[-1, e[:-2]]  # no a before the first scored word
        ab_want = np.where(a >= 0, a * v + b, -1)
        den3 = lookup(ab_keys, ctx2, ab_want).astype(float)
        n3 = lookup(keys3, c3, np.where(a >= 0, ab_want * v + c, -1))
        p = np.where(
            den3 > 0,
            np.maximum(n3 - d, 0) / den3 + d * lookup(ab_keys, types2, ab_want) / den3 * p2,
            p2,
        )
    return math.exp(-float(np.log(p).sum()) / (e.size - 1))


def build_demo_model(
    out_dir: Path,
    *,
    steps: int = 1800,
    max_seconds: float = 240,
    vocab_size: int = 8000,
    seed: int = 0,
    corpus: Sequence[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> DemoModel:
    """Build (or reuse) the demo model under ``out_dir`` and return its paths and metrics.

    ``corpus``: paragraphs to train on instead of the Austen novels (tests; any text).  Training
    runs ``steps`` optimiser steps or stops at ``max_seconds`` of wall-clock training time,
    whichever comes first (``steps_done`` and ``completed`` in the metrics say which).  A later
    call with the same recipe (`demo_recipe`) reuses the files unless ``force``; a run cut short
    by the cap is reused only under the same cap.
    """
    say = log or (lambda _msg: None)
    out_dir = Path(out_dir)
    recipe = demo_recipe(steps=steps, vocab_size=vocab_size, seed=seed, corpus=corpus)
    digest = recipe_hash(recipe)
    model_dir = out_dir / "model"
    heldout_path, train_path = out_dir / "heldout.txt", out_dir / "train.txt"
    if not force:
        meta = _cached(out_dir, digest, max_seconds)
        if meta is not None:
            say(f"reusing the demo model in {model_dir}")
            return DemoModel(model_dir, heldout_path, train_path, meta, reused=True)

    import torch

    t_start = time.monotonic()
    paragraphs = list(corpus) if corpus is not None else fetch_austen(out_dir / "austen")
    lines = [" ".join(w) for w in map(tokenize_words, paragraphs)]
    lines = [line for line in lines if line]
    if len(lines) < 2:
        raise ValueError("the demo corpus needs at least two non-empty paragraphs")
    train, heldout = split_heldout(lines, HELDOUT_FRACTION, seed)
    say(
        f"corpus: {len(paragraphs)} paragraphs, {sum(len(p.split()) for p in paragraphs)} words, "
        f"{sum(len(x.split()) for x in lines)} tokens; "
        f"{len(train)} train, {len(heldout)} held out"
    )

    tokenizer = train_tokenizer(train, vocab_size)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    train_ids = _stream(tokenizer, train, eos)
    val_ids = _stream(tokenizer, heldout, eos)[:VAL_MAX_TOKENS]
    if len(train_ids) <= CONTEXT:
        raise CorpusError(
            f"the demo corpus is too small: {len(train_ids)} tokens for a context of {CONTEXT}; "
            "give `ebc demo --corpus FILE` a text of at least a few thousand words"
        )
    model = _new_model(len(tokenizer), eos, seed)
    n_params = sum(p.numel() for p in model.parameters())
    val_loss_start, n_val = _eval_loss(model, val_ids, CONTEXT, threads=idle_threads())
    say(f"model: {n_params:,} parameters; step 0 validation loss {val_loss_start:.3f}")
    steps_done, last_loss, train_seconds, plan = _train(
        model, torch.tensor(train_ids, dtype=torch.long), steps, max_seconds, seed, say
    )
    val_loss, _ = _eval_loss(model, val_ids, CONTEXT, threads=plan.best)
    try:
        trigram = trigram_perplexity(train_ids, val_ids, len(tokenizer))
    except Exception:  # a baseline for comparison only
        trigram = None
    meta = {
        "recipe": recipe,
        "recipe_hash": digest,
        "max_seconds": max_seconds,
        "steps_done": steps_done,
        "completed": steps_done == steps,
        "train_seconds": round(train_seconds, 2),
        "total_seconds": round(time.monotonic() - t_start, 2),
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "corpus_words": sum(len(p.split()) for p in paragraphs),
        "corpus_tokens": sum(len(x.split()) for x in lines),
        "train_paragraphs": len(train),
        "heldout_paragraphs": len(heldout),
        "train_tokens": len(train_ids),
        "val_tokens": n_val,
        "val_loss_start": round(val_loss_start, 5),
        "val_loss": round(val_loss, 5),
        "val_perplexity": round(math.exp(val_loss), 3),
        "trigram_val_perplexity": round(trigram, 3) if trigram is not None else None,
        "last_train_loss": round(last_loss, 5),
        "torch_threads": torch.get_num_threads(),
        "training_steps_by_threads": {str(n): c for n, c in sorted(plan.used.items())},
    }
    say(
        f"{steps_done} steps in {train_seconds:.0f}s: validation perplexity "
        f"{meta['val_perplexity']} (step 0: {math.exp(val_loss_start):.0f}; count trigram: "
        f"{meta['trigram_val_perplexity']})"
    )
    _write(out_dir, model, tokenizer, meta, train, heldout)
    return DemoModel(model_dir, heldout_path, train_path, meta, reused=False)


def _new_model(vocab: int, eos: int, seed: int):
    """The demo's GPT-2 (`MODEL`), freshly initialised from ``seed``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab,
        bos_token_id=eos,
        eos_token_id=eos,
        resid_pdrop=OPTIM["dropout"],
        embd_pdrop=OPTIM["dropout"],
        attn_pdrop=OPTIM["dropout"],
        **MODEL,
    )
    return GPT2LMHeadModel(config)


# Threads for training. The model is small (a step is ~1,000 tokens through two 128-wide
# layers and an 8,000-word head), so a second intra-op thread brings little on a quiet
# machine and costs a lot on a busy one: OpenMP threads wait for a core that another process
# holds. On the 2-core development machine at load 11 a step took 0.8 s with one thread and
# 3.5-5.8 s with two (CPU 0.2 s against 1.0-1.6 s). So the count is measured, not guessed:
# every `REPROBE` steps each count trains `PROBE` steps, and the faster one (median wall
# time a step) trains until the next probe.
PROBE = 6
REPROBE = 200


class ThreadPlan:
    """Which intra-op thread count trains the next step (see `PROBE`)."""

    def __init__(self, counts: Sequence[int]):
        self.counts = sorted(set(counts))
        self.best = self.counts[-1]
        self.times: dict[int, list[float]] = {}
        self.used: Counter = Counter()

    def threads(self, step: int) -> int:
        at = step % REPROBE
        if len(self.counts) > 1 and at < PROBE * len(self.counts):
            return self.counts[at // PROBE]
        return self.best

    def took(self, step: int, threads: int, seconds: float) -> None:
        self.used[threads] += 1
        at = step % REPROBE
        if len(self.counts) < 2 or at >= PROBE * len(self.counts):
            return
        if at == 0:
            self.times = {}
        self.times.setdefault(threads, []).append(seconds)
        if at == PROBE * len(self.counts) - 1:
            medians = {n: sorted(t)[len(t) // 2] for n, t in self.times.items()}
            self.best = min(medians, key=medians.__getitem__)


def _train(
    model, data, steps: int, max_seconds: float, seed: int, say
) -> tuple[int, float, float, ThreadPlan]:
    """AdamW (`OPTIM`) on random windows of ``data`` for ``steps`` steps or ``max_seconds`` of
    training, whichever comes first, with a warm-up and a cosine decay, on the thread count
    that is fastest now (`ThreadPlan`); returns the steps done, the last training loss, the
    seconds and the thread plan."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": OPTIM["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=OPTIM["lr"],
        betas=tuple(OPTIM["betas"]),
    )
    warmup = max(1, round(steps * OPTIM["warmup_fraction"]))
    floor = OPTIM["min_lr_fraction"]

    def lr_factor(step: int, elapsed: float) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        # On a slow or busy machine the decay follows the clock instead, so that a run cut by
        # the cap still ends annealed (it then depends on the machine's speed; see `completed`).
        if max_seconds > 0:
            progress = max(progress, elapsed / max_seconds)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

    gen = torch.Generator().manual_seed(seed)
    batch = OPTIM["batch_size"]
    default_threads = torch.get_num_threads()
    plan = ThreadPlan([1, default_threads])
    t_train = time.monotonic()
    steps_done, last_loss = 0, float("nan")
    model.train()
    try:
        for step in range(steps):
            elapsed = time.monotonic() - t_train
            if elapsed > max_seconds:
                break
            threads = plan.threads(step)
            torch.set_num_threads(threads)
            for group in optimizer.param_groups:
                group["lr"] = OPTIM["lr"] * lr_factor(step, elapsed)
            starts = torch.randint(0, len(data) - CONTEXT, (batch,), generator=gen)
            x = torch.stack([data[s : s + CONTEXT] for s in starts.tolist()])
            # The model shifts the labels itself: pass the inputs, not inputs[1:].
            loss = model(input_ids=x, labels=x).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIM["grad_clip"])
            optimizer.step()
            steps_done, last_loss = step + 1, loss.item()
            plan.took(step, threads, time.monotonic() - t_train - elapsed)
            if steps_done % 200 == 0:
                say(
                    f"step {steps_done}/{steps}: train loss {last_loss:.3f} "
                    f"({time.monotonic() - t_train:.0f}s, {plan.best} thread(s))"
                )
    finally:
        torch.set_num_threads(default_threads)
    return steps_done, last_loss, time.monotonic() - t_train, plan


def _write(out_dir: Path, model, tokenizer, meta: dict, train: list, heldout: list) -> None:
    """Write into a scratch directory, then move into place; the model directory (with
    ebc_demo.json) goes last, so an interrupted build is never taken for a finished one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = out_dir / f".build-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "model").mkdir(parents=True)
    model.eval()
    model.save_pretrained(scratch / "model")
    tokenizer.save_pretrained(scratch / "model")
    (scratch / "model" / "ebc_demo.json").write_text(json.dumps(meta, indent=2) + "\n")
    (scratch / "train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    (scratch / "heldout.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
    shutil.rmtree(out_dir / "model", ignore_errors=True)
    (scratch / "train.txt").replace(out_dir / "train.txt")
    (scratch / "heldout.txt").replace(out_dir / "heldout.txt")
    (scratch / "model").replace(out_dir / "model")
    shutil.rmtree(scratch, ignore_errors=True)


def top_next_words(model_dir: Path, prefixes: Sequence[str], k: int = 5) -> list[list[str]]:
    """The ``k`` most probable next words (special tokens excluded) after each prefix, each
    prefix read after ``<eos>`` as in training: a quick look at what the model learnt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    special = set(tokenizer.all_special_ids)
    out = []
    with torch.inference_mode():
        for prefix in prefixes:
            ids = [
                tokenizer.eos_token_id,
                *tokenizer(prefix, add_special_tokens=False)["input_ids"],
            ]
            ids = ids[-CONTEXT:]
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            order = torch.argsort(logits, descending=True).tolist()
            out.append(tokenizer.convert_ids_to_tokens([i for i in order if i not in special][:k]))
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Build the demo model (Austen, word-level GPT-2).")
    parser.add_argument("out_dir", type=Path, nargs="?", default=Path("var/demo"))
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--max-seconds", type=float, default=240)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    built = build_demo_model(
        args.out_dir, steps=args.steps, max_seconds=args.max_seconds, force=args.force, log=print
    )
    print(json.dumps({k: v for k, v in built.metrics.items() if k != "recipe"}, indent=2))
    examples = [
        "it is a truth universally acknowledged , that a single man in possession of a good",
        "who for many",
    ]
    for prefix, words in zip(examples, top_next_words(built.model_dir, examples), strict=True):
        print(f"... {' '.join(prefix.split()[-6:])} -> {', '.join(words)}")
