"""Prefixes of every kind (DESIGN.md §1) and their top-k next words, one shard at a time.

Determinism: item ``index`` of cell (length, kind) draws all its randomness from
``item_seed(study_seed, length, kind, index, attempt)`` (sha256, not Python's ``hash``), and the
dataset lines of a cell come from a permutation seeded by (study seed, length, kind).  An item
therefore does not depend on how the cell is cut into shards; a re-run shard with the same batch
size on the same device makes exactly the same items (different batch sizes may change float
rounding and, rarely, a sampled token).

Kinds: ``data``, ``model``, ``data_shuffled``, ``data_corrupted@c``, ``model_corrupted@c``,
``random``.  Corrupted and random kinds draw words uniformly from the dataset's vocabulary (its
distinct words); a replacement may by chance equal the original word.  With ``prompt_words`` C
(language modelling only) the first C words of a dataset line precede every prefix and a data
prefix is the next l words of the same line.

Language modelling: every text starts after the model's start token.  A model prefix is sampled
token by token (temperature, top-k, top-p as configured) until the token that would start word
l+1; that step's distribution is the one the next words are read from, and the KV cache of the
sampling batch is reused by the word search.  After a prompt the first sampled token must start
a new word (so the prompt's last word is not extended).  Special tokens other than the end of
text are never sampled (except ``<unk>`` of a word-level vocabulary, a word of wiki-103 text).
An end of text before l words
re-samples the prefix (``eos_policy="resample"``, up to ``max_attempts``) or marks it skipped.

Translation: a data prefix is the first l words of the reference, a model prefix the first l
words of a beam search of the source (``num_beams``, default 10); the source is kept.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from worker.datasets import Dataset, DatasetError
from worker.models import default_batch_size
from worker.words import (
    NextWords,
    TokenClasses,
    decode_word,
    segment_words,
    token_classes,
    top_words,
)

BASE_KINDS = ("data", "model", "data_shuffled", "data_corrupted", "model_corrupted", "random")


def parse_kind(kind: str) -> tuple[str, float | None]:
    """``"data_corrupted@0.3"`` -> ``("data_corrupted", 0.3)``, ``"model"`` -> ``("model", None)``.
    """
    base, _, rate = kind.partition("@")
    if base not in BASE_KINDS:
        raise ValueError(f"unknown prefix kind {kind!r}")
    corrupted = base.endswith("_corrupted")
    if corrupted != bool(rate):
        raise ValueError(f"{kind!r}: corrupted kinds need a rate (kind@c), other kinds none")
    if not rate:
        return base, None
    c = float(rate)
    if not 0.0 <= c <= 1.0:
        raise ValueError(f"{kind!r}: corruption rate must lie in [0, 1]")
    return base, c


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text, stable across processes and machines."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def shard_seed(study_seed: int, length: int, kind: str, shard_index: int) -> int:
    """Seed of one shard of a cell."""
    return stable_seed("shard", study_seed, length, kind, shard_index)


def item_seed(study_seed: int, length: int, kind: str, index: int, attempt: int = 0) -> int:
    """Seed of one item (and one attempt at it) of a cell; shards use these."""
    return stable_seed("item", study_seed, length, kind, index, attempt)


@dataclass(frozen=True)
class PrefixSpec:
    """The study settings the worker needs (recorded in every item's provenance).

    ``top_k``: next words per item.  ``prompt_words``: data prompt before every prefix (LM).
    ``temperature``/``sample_top_k``/``sample_top_p``: model prefix sampling (defaults: plain
    ancestral sampling).  ``eos_policy``: ``"resample"`` or ``"skip"`` an end of text before l
    words; ``max_attempts`` bounds re-sampling.  ``num_beams``: seq2seq model prefixes.
    ``special_policy``: ``"renormalise"`` or ``"skip"`` when a special token is the top-1.
    ``batch_size``: rows per batch (None: per-device default).  ``max_expansions``: word-search
    budget per context.  ``punctuation_splits``: the punctuation rule of `worker.words`.
    ``max_word_tokens``: longest choice word in tokens (None: no limit, the exact search; a limit
    bounds the search's sequential forwards on a degenerate model, flagged inexact when a longer
    word could have been among the choices).
    """

    top_k: int = 5
    prompt_words: int = 0
    temperature: float = 1.0
    sample_top_k: int | None = None
    sample_top_p: float | None = None
    eos_policy: str = "resample"
    max_attempts: int = 10
    num_beams: int = 10
    special_policy: str = "renormalise"
    batch_size: int | None = None
    max_expansions: int = 256
    punctuation_splits: bool = True
    max_tokens_per_word: int = 8
    max_word_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError("temperature must be positive")
        if self.eos_policy not in ("resample", "skip"):
            raise ValueError("eos_policy must be 'resample' or 'skip'")
        if self.special_policy not in ("renormalise", "skip"):
            raise ValueError("special_policy must be 'renormalise' or 'skip'")
        if self.sample_top_p is not None and not 0 < self.sample_top_p <= 1:
            raise ValueError("sample_top_p must lie in (0, 1]")


@dataclass
class PrefixItem:
    """One prefix with its next-word choices, ready for the database.

    ``choices``: (word, probability) ordered by model rank, at most ``top_k``.  ``skipped`` with
    ``skip_reason`` (``"special_top1"``, ``"eos_before_l"``, ``"too_long"``, ``"beam_too_short"``)
    marks an item the study should not show; it is still returned so the caller can record it.
    """

    length: int
    kind: str
    index: int
    words: list[str]
    prompt_words: list[str] = field(default_factory=list)
    source: str | None = None
    true_next_word: str | None = None
    choices: list[tuple[str, float]] = field(default_factory=list)
    skipped: bool = False
    skip_reason: str | None = None
    provenance: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(self.words)


def get_token_classes(model, punctuation_splits: bool = True) -> TokenClasses:
    """The model's token classes, computed once and kept on the model object."""
    cache = getattr(model, "_ebc_token_classes", None)
    if cache is None:
        cache = {}
        model._ebc_token_classes = cache
    if punctuation_splits not in cache:
        eos: list[int] = []
        gen = getattr(getattr(model, "model", None), "generation_config", None)
        gen_eos = getattr(gen, "eos_token_id", None)
        if isinstance(gen_eos, int):
            eos.append(gen_eos)
        elif gen_eos:
            eos.extend(int(t) for t in gen_eos)
        classes = token_classes(
            model.tokenizer,
            model.vocab_size,
            punctuation_splits=punctuation_splits,
            eos_token_ids=eos,
        )
        cache[punctuation_splits] = classes.to(model.device)
    return cache[punctuation_splits]


@dataclass
class _Draft:
    index: int
    rng: np.random.Generator
    line: int | None = None
    words: list[str] = field(default_factory=list)
    prompt: list[str] = field(default_factory=list)
    source: str | None = None
    true_next: str | None = None
    info: dict = field(default_factory=dict)
    context: list[int] | None = None  # target/context token ids, when not re-encoded
    skip: str | None = None


def _line_order(dataset: Dataset, seed: int, length: int, kind: str, min_words: int) -> list[int]:
    eligible = dataset.eligible(min_words)
    rng = np.random.default_rng(stable_seed("lines", seed, length, kind))
    return [eligible[i] for i in rng.permutation(len(eligible))]


def _corrupt(words: list[str], rate: float, vocab: list[str], rng) -> tuple[list[str], list[int]]:
    out, where = [], []
    for i, w in enumerate(words):
        if rng.random() < rate:
            out.append(vocab[int(rng.integers(len(vocab)))])
            where.append(i)
        else:
            out.append(w)
    return out, where


def make_items(
    model,
    dataset: Dataset | None,
    spec: PrefixSpec,
    length: int,
    kind: str,
    start: int,
    stop: int,
    seed: int,
) -> list[PrefixItem]:
    """Items ``start``..``stop - 1`` of cell (``length``, ``kind``) with their top-k words.

    ``model`` is a `worker.models.CausalLM` or `Seq2SeqLM`; ``dataset`` may be None only for
    language-model ``model``/``random`` kinds without a prompt... except ``random`` still needs
    a vocabulary, so only ``model`` may go without.  ``seed`` is the study seed.  Raises
    `DatasetError` when the dataset has too few long-enough lines for index ``stop - 1``.
    """
    base, rate = parse_kind(kind)
    if length < 1:
        raise ValueError("prefix length must be at least 1")
    seq2seq = model.task == "seq2seq"
    if seq2seq and spec.prompt_words:
        raise ValueError("a prompt applies to language modelling only")
    if dataset is not None and dataset.task != model.task:
        raise DatasetError(f"{dataset.path}: a {model.task} model needs a {model.task} dataset")
    classes = get_token_classes(model, spec.punctuation_splits)
    kind_key = kind

    # Which dataset line each item uses, if any.
    if seq2seq or base.startswith("data"):
        min_words = spec.prompt_words + length + 1
    elif spec.prompt_words:
        min_words = spec.prompt_words
    else:
        min_words = 0
    order: list[int] = []
    if min_words:
        if dataset is None:
            raise DatasetError(f"kind {kind!r} needs a dataset")
        order = _line_order(dataset, seed, length, kind_key, min_words)
        if stop > len(order):
            raise DatasetError(
                f"{dataset.path}: item {stop - 1} of length {length} ({kind}) needs {stop} lines "
                f"with at least {min_words} words; only {len(order)} are long enough"
            )
    vocab: list[str] = []
    if base in ("random", "data_corrupted", "model_corrupted"):
        if dataset is None:
            raise DatasetError(f"kind {kind!r} draws words from the dataset's vocabulary")
        vocab = dataset.vocabulary()

    drafts = []
    for index in range(start, stop):
        d = _Draft(index, np.random.default_rng(item_seed(seed, length, kind_key, index)))
        d.info["seed"] = item_seed(seed, length, kind_key, index)
        if order:
            row = dataset.rows[order[index]]
            d.line = row.line
            d.source = row.source
            d.prompt = list(row.words[: spec.prompt_words])
            if base.startswith("data"):
                d.words = list(row.words[spec.prompt_words : spec.prompt_words + length])
                d.true_next = row.words[spec.prompt_words + length]
        drafts.append(d)

    if base == "data_shuffled":
        for d in drafts:
            d.words = [d.words[i] for i in d.rng.permutation(len(d.words))]
    elif base == "random":
        for d in drafts:
            d.words = [vocab[int(i)] for i in d.rng.integers(len(vocab), size=length)]

    batch = spec.batch_size or default_batch_size(model.device)
    results: list[NextWords | None]
    if seq2seq:
        if base.startswith("model"):
            _beam_prefixes(model, classes, drafts, length, spec, batch)
        if base == "model_corrupted":
            for d in drafts:
                if d.skip is None:
                    d.words, d.info["corrupted_positions"] = _corrupt(d.words, rate, vocab, d.rng)
                    d.context = None
        elif base == "data_corrupted":
            for d in drafts:
                d.words, d.info["corrupted_positions"] = _corrupt(d.words, rate, vocab, d.rng)
        results = _choices_seq2seq(model, classes, drafts, spec, batch)
    else:
        if base == "model":
            results = _sample_lm(model, classes, drafts, length, spec, seed, kind_key, batch)
        else:
            if base == "model_corrupted":
                _sample_lm(
                    model, classes, drafts, length, spec, seed, kind_key, batch, search=False
                )
                for d in drafts:
                    if d.skip is None:
                        d.words, d.info["corrupted_positions"] = _corrupt(
                            d.words, rate, vocab, d.rng
                        )
            elif base == "data_corrupted":
                for d in drafts:
                    d.words, d.info["corrupted_positions"] = _corrupt(d.words, rate, vocab, d.rng)
            results = _choices_lm_text(model, classes, drafts, spec, batch)

    common = {
        "model": model.name,
        "task": model.task,
        "kind": kind,
        "spec": asdict(spec),
        "token_convention": classes.convention,
    }
    if dataset is not None:
        common["dataset"] = dataset.provenance()
    if vocab:
        common["vocabulary"] = f"dataset words ({len(vocab)})"
    items = []
    for d, res in zip(drafts, results, strict=True):
        prov = {**common, **d.info, "line": d.line}
        item = PrefixItem(
            length=length,
            kind=kind,
            index=d.index,
            words=d.words,
            prompt_words=d.prompt,
            source=d.source,
            true_next_word=d.true_next,
        )
        if res is not None:
            prov["choices"] = res.info()
            item.choices = list(zip(res.words, res.probs, strict=True))
            if res.skipped:
                item.skipped, item.skip_reason = True, "special_top1"
        if d.skip is not None:
            item.skipped, item.skip_reason = True, d.skip
        item.provenance = prov
        items.append(item)
    return items


def _search(model, state, root, classes, spec) -> list[NextWords]:
    return top_words(
        root,
        lambda rows, conts: model.extend(state, rows, conts),
        classes,
        model.tokenizer,
        k=spec.top_k,
        special_policy=spec.special_policy,
        max_expansions=spec.max_expansions,
        max_word_tokens=spec.max_word_tokens,
    )


def _chunks(seq: Sequence, size: int):
    for lo in range(0, len(seq), size):
        yield seq[lo : lo + size]


def _choices_lm_text(model, classes, drafts, spec, batch) -> list[NextWords | None]:
    """Next words after text prefixes (data, shuffled, corrupted, random)."""
    results: dict[int, NextWords] = {}
    todo = [d for d in drafts if d.skip is None]
    for chunk in _chunks(todo, batch):
        contexts = []
        for d in chunk:
            ids = [model.start_token_id, *model.encode(" ".join([*d.prompt, *d.words]))]
            if model.max_positions and len(ids) >= model.max_positions:
                raise ValueError(
                    f"item {d.index}: {len(ids)} tokens exceed the model's "
                    f"{model.max_positions} positions"
                )
            d.info["context_tokens"] = len(ids)
            contexts.append(ids)
        root, state = model.start(contexts)
        for d, res in zip(chunk, _search(model, state, root, classes, spec), strict=True):
            results[d.index] = res
    return [results.get(d.index) for d in drafts]


def _choices_seq2seq(model, classes, drafts, spec, batch) -> list[NextWords | None]:
    results: dict[int, NextWords] = {}
    todo = [d for d in drafts if d.skip is None]
    for chunk in _chunks(todo, batch):
        sources = [model.encode_source(d.source) for d in chunk]
        prefixes = [
            d.context if d.context is not None else model.encode_target(" ".join(d.words))
            for d in chunk
        ]
        root, state = model.start(sources, prefixes)
        for d, res in zip(chunk, _search(model, state, root, classes, spec), strict=True):
            results[d.index] = res
    return [results.get(d.index) for d in drafts]


def _beam_prefixes(model, classes, drafts, length, spec, batch) -> None:
    """Seq2seq model prefixes: the first ``length`` words of a beam search of the source."""
    max_new = spec.max_tokens_per_word * (length + 1)
    for chunk in _chunks(drafts, batch):
        outs = model.beam_search(
            [model.encode_source(d.source) for d in chunk],
            num_beams=spec.num_beams,
            max_new_tokens=max_new,
        )
        for d, ids in zip(chunk, outs, strict=True):
            d.info["beam"] = {"num_beams": spec.num_beams, "max_new_tokens": max_new}
            groups = segment_words(ids, classes)
            if len(groups) < length:
                d.skip = "beam_too_short"
                d.words = [decode_word(model.tokenizer, g) for g in groups]
                continue
            cut = _cut_after_words(ids, classes, length)
            d.context = ids[:cut]
            d.words = [decode_word(model.tokenizer, g) for g in groups[:length]]


def _cut_after_words(ids: Sequence[int], classes: TokenClasses, length: int) -> int:
    """Index of the token that starts word ``length + 1`` (or ``len(ids)``)."""
    starts, blank = classes.starts.tolist(), classes.blank.tolist()
    in_word, count = False, 0
    for pos, t in enumerate(ids):
        if blank[t]:
            in_word = False
            continue
        if starts[t] or not in_word:
            count += 1
            if count > length:
                return pos
        in_word = True
    return len(ids)


def _sample_tokens(
    logprobs: torch.Tensor, u: torch.Tensor, spec: PrefixSpec, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Inverse-CDF sampling, one uniform per row, after temperature / top-k / top-p."""
    scores = logprobs if spec.temperature == 1.0 else logprobs / spec.temperature
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if spec.sample_top_k:
        kth = scores.topk(min(spec.sample_top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if spec.sample_top_p is not None and spec.sample_top_p < 1:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        cum = sorted_scores.softmax(-1).cumsum(-1)
        drop_sorted = (cum - sorted_scores.softmax(-1)) >= spec.sample_top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    cdf = scores.softmax(-1).cumsum(-1)
    target = u[:, None] * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)


def _sample_lm(
    model, classes, drafts, length, spec, seed, kind, batch, *, search: bool = True
) -> list[NextWords | None]:
    """Model prefixes for a causal LM, with their next words when ``search``."""
    results: dict[int, NextWords] = {}
    queue = deque((d, 0) for d in drafts)
    sampling = {
        "temperature": spec.temperature,
        "top_k": spec.sample_top_k,
        "top_p": spec.sample_top_p,
        "eos_policy": spec.eos_policy,
    }
    while queue:
        chunk = [queue.popleft() for _ in range(min(batch, len(queue)))]
        rngs = [
            d.rng if attempt == 0 else np.random.default_rng(
                item_seed(seed, length, kind, d.index, attempt)
            )
            for d, attempt in chunk
        ]
        contexts = [
            [model.start_token_id, *model.encode(" ".join(d.prompt))] if d.prompt
            else [model.start_token_id]
            for d, _ in chunk
        ]
        after_prompt = bool(chunk[0][0].prompt)
        outcome = _sample_batch(model, classes, contexts, rngs, length, spec, after_prompt)
        ok_rows = []
        for row, ((d, attempt), (status, tokens, groups)) in enumerate(
            zip(chunk, outcome.rows, strict=True)
        ):
            d.info["attempts"] = attempt + 1
            d.info["sampling"] = sampling
            if status == "ok":
                d.words = [decode_word(model.tokenizer, g) for g in groups]
                d.info["context_tokens"] = len(contexts[row]) + len(tokens)
                d.skip = None
                ok_rows.append((row, d))
            elif (
                status == "eos"
                and spec.eos_policy == "resample"
                and attempt + 1 < spec.max_attempts
            ):
                queue.append((d, attempt + 1))
            else:
                d.skip = "eos_before_l" if status == "eos" else "too_long"
                d.words = [decode_word(model.tokenizer, g) for g in groups]
        if search and ok_rows:
            state, root, order = outcome.finished([r for r, _ in ok_rows])
            found = _search(model, state, root, classes, spec)
            by_row = dict(ok_rows)
            for row, res in zip(order, found, strict=True):
                results[by_row[row].index] = res
    return [results.get(d.index) for d in drafts]


@dataclass
class _Outcome:
    rows: list[tuple[str, list[int], list[list[int]]]]
    saved: list[tuple[list[int], object, torch.Tensor]]  # (original rows, state, root logprobs)
    model: object

    def finished(self, wanted: list[int]) -> tuple[object, torch.Tensor, list[int]]:
        """One state and root log-probs [len(wanted), V] for the wanted rows, and the rows in
        the state's order (the order in which they finished: reordering would copy the cache)."""
        order = [r for rows, _, _ in self.saved for r in rows]
        if len(self.saved) == 1:
            state = self.saved[0][1]
        else:
            state = self.model.concat([s for _, s, _ in self.saved])
        root = torch.cat([x for _, _, x in self.saved])
        if sorted(order) != sorted(wanted):
            position = {r: i for i, r in enumerate(order)}
            perm = [position[r] for r in wanted]
            state = self.model.select(state, perm)
            root, order = root[perm], list(wanted)
        return state, root, order


def _sample_batch(model, classes, contexts, rngs, length, spec, after_prompt) -> _Outcome:
    """Sample until every row has ``length`` words (or ended early), with per-row stopping.

    Finished rows stay in the batch as masked placeholders until at most half of the batch is
    still sampling; then the finished rows' cache is set aside and the batch is compacted.
    """
    device = model.device
    logprobs, state = model.start(contexts)
    n = len(contexts)
    longest = max(len(c) for c in contexts)
    max_new = spec.max_tokens_per_word * (length + 1)
    if model.max_positions:
        max_new = min(max_new, model.max_positions - longest)
        if max_new <= 0:
            raise ValueError(f"prompts of {longest} tokens leave no room in the model's context")
    starts, blank, ends = classes.starts, classes.blank, classes.ends
    blank_l = blank.tolist()
    # Special tokens other than the end of text are not text and are never sampled, except
    # the unknown word of a word-level vocabulary (wiki-103 text contains "<unk>").
    allowed = ~classes.special | ends
    unk = model.tokenizer.unk_token_id
    if classes.word_level and unk is not None and unk < allowed.numel():
        allowed[unk] = True
    first_allowed = allowed & (starts | ends) if after_prompt else allowed

    live = torch.arange(n, device=device)  # original row of each state row
    count = torch.zeros(n, dtype=torch.long, device=device)
    in_word = torch.zeros(n, dtype=torch.bool, device=device)
    active = torch.ones(n, dtype=torch.bool, device=device)
    ok = torch.zeros(n, dtype=torch.bool, device=device)  # finished well, not yet set aside
    roots = torch.zeros((n, logprobs.shape[-1]), device=device)
    tokens: list[list[int]] = [[] for _ in range(n)]
    groups: list[list[list[int]]] = [[] for _ in range(n)]
    status = ["too_long"] * n
    saved: list[tuple[list[int], object, torch.Tensor]] = []

    for step_i in range(max_new):
        live_l = live.tolist()
        act_l = active.tolist()
        u = torch.tensor(
            [rngs[r].random() if a else 0.0 for r, a in zip(live_l, act_l, strict=True)],
            dtype=torch.float32,
        ).to(device)
        tok = _sample_tokens(logprobs, u, spec, first_allowed if step_i == 0 else allowed)
        new_word = ~blank[tok] & (starts[tok] | ~in_word)
        full = count == length
        stop_ok = active & full & (new_word | ends[tok])
        fail = active & ends[tok] & ~full
        cont = active & ~stop_ok & ~fail
        if bool(stop_ok.any()):
            roots[stop_ok] = logprobs[stop_ok]
        ok |= stop_ok
        count += (new_word & cont).long()
        in_word = torch.where(cont, ~blank[tok], in_word)
        flags = zip(
            live_l,
            stop_ok.tolist(),
            fail.tolist(),
            cont.tolist(),
            tok.tolist(),
            new_word.tolist(),
            strict=True,
        )
        for r, s, f, c, t, nw in flags:
            if s:
                status[r] = "ok"
            elif f:
                status[r] = "eos"
            elif c:
                tokens[r].append(t)
                if blank_l[t]:
                    continue
                if nw or not groups[r]:
                    groups[r].append([t])
                else:
                    groups[r][-1].append(t)
        active = cont
        n_active = int(active.sum())
        if n_active == 0:
            break
        if n_active * 2 <= len(live_l) and len(live_l) >= 8:
            keep_ok = ok.nonzero().squeeze(-1).tolist()
            if keep_ok:
                saved.append(
                    ([live_l[i] for i in keep_ok], model.select(state, keep_ok), roots[keep_ok])
                )
            keep = active.nonzero().squeeze(-1)
            keep_l = keep.tolist()
            state = model.select(state, keep_l)
            live, count, in_word = live[keep], count[keep], in_word[keep]
            roots, tok, logprobs = roots[keep], tok[keep], logprobs[keep]
            active = torch.ones(len(keep_l), dtype=torch.bool, device=device)
            ok = torch.zeros(len(keep_l), dtype=torch.bool, device=device)
        logprobs = model.step(state, tok, active)
    keep_ok = ok.nonzero().squeeze(-1).tolist()
    if keep_ok:
        live_l = live.tolist()
        saved.append(([live_l[i] for i in keep_ok], model.select(state, keep_ok), roots[keep_ok]))
    rows = [(status[r], tokens[r], groups[r]) for r in range(n)]
    return _Outcome(rows, saved, model)
