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
from typing import Any

import numpy as np
import torch

# One grammar of prefix kinds for the study file and the worker (c in (0, 1]).
from app.studies.schemas import parse_kind
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
    ``max_word_tokens``: longest choice word in tokens (default 16, as a study file's
    ``decoding.max_word_tokens``; None: no limit, the exact search).  The limit bounds the
    search's sequential forwards on a model that keeps a partial word probable token after token;
    an item where a longer word could have been among the choices is flagged inexact.
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
    max_word_tokens: int | None = 16

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
    """Inverse-CDF sampling, one uniform per row, after temperature / top-k / top-p.

    ``logprobs`` are normalised log-probabilities (``allowed``: None when every token is).  The
    CDF need not be normalised: the target is the uniform times its last value."""
    if spec.temperature == 1.0 and not spec.sample_top_k and spec.sample_top_p in (None, 1):
        # Plain ancestral sampling (the default): exp of the log-probabilities is already the
        # distribution, so no softmax (two fewer passes over [rows, vocabulary] per step).
        probs = logprobs.exp()
        if allowed is not None:
            probs = probs.masked_fill_(~allowed, 0.0)
        cdf = probs.cumsum_(-1)
    else:
        cdf = _filtered_scores(logprobs, spec, allowed).softmax(-1).cumsum(-1)
    target = u[:, None] * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=cdf.shape[-1] - 1)


def _filtered_scores(
    logprobs: torch.Tensor, spec: PrefixSpec, allowed: torch.Tensor | None
) -> torch.Tensor:
    """Logits after temperature, the allowed tokens, top-k and top-p (-inf where dropped)."""
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
    return scores


def _width_bands(groups: list[tuple[list, Any, torch.Tensor]]) -> list[list]:
    """Finished groups (rows, state, root log-probabilities) in at most two searches: those up to
    twice the rows' median cache width, and the longer ones.  One search pads every row's cache
    (memory, and attention in every search round) to its widest row, and a prefix of degenerate
    many-token words can be several times wider than the rest; a second search costs its own
    tail of small rounds, so there are never more than two.  A context's words do not depend on
    which contexts share its search, so the split changes no word (probabilities move in float32
    rounding, as with any other padding); the split is a function of the shard, so a retried
    shard still makes the same items."""
    if len(groups) < 2:
        return [groups]
    widths = sorted(w for group, st, _ in groups for w in [st.mask.shape[1]] * len(group))
    limit = 2 * widths[len(widths) // 2]
    short = [g for g in groups if g[1].mask.shape[1] <= limit]
    long = [g for g in groups if g[1].mask.shape[1] > limit]
    return [band for band in (short, long) if band]


@dataclass
class _Row:
    """One prefix being sampled: its draft, attempt, random stream and tokens so far."""

    draft: _Draft
    attempt: int
    rng: np.random.Generator
    context: list[int]
    cap: int  # most tokens it may sample
    tokens: list[int] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)


def _sample_lm(
    model, classes, drafts, length, spec, seed, kind, batch, *, search: bool = True
) -> list[NextWords | None]:
    """Model prefixes for a causal LM, with their next words when ``search``.

    Continuous batching: up to ``batch`` prefixes are sampled together, one token per step with
    the KV cache.  A prefix is done at the token that would start word l + 1 (its distribution
    is the one the next words are read from), at an end of text, or after
    ``max_tokens_per_word * (l + 1)`` tokens; it then stops (a masked placeholder) and, once an
    eighth of the batch has stopped, the batch is compacted and waiting prefixes take the free
    places, so the batch stays full until the queue is empty.  Finished prefixes keep their cache
    and root distribution; the word search runs on them once ``batch`` have gathered (and on the
    rest at the end).  Each prefix draws its uniforms from its own generator, only while it is
    sampling, so an item does not depend on the batch size or on which prefixes share its batch.
    """
    results: dict[int, NextWords] = {}
    queue = deque((d, 0) for d in drafts)
    sampling = {
        "temperature": spec.temperature,
        "top_k": spec.sample_top_k,
        "top_p": spec.sample_top_p,
        "eos_policy": spec.eos_policy,
    }
    device = model.device
    starts, blank, ends = classes.starts, classes.blank, classes.ends
    blank_l = blank.tolist()
    # Special tokens other than the end of text are not text and are never sampled, except
    # the unknown word of a word-level vocabulary (wiki-103 text contains "<unk>").
    allowed = ~classes.special | ends
    unk = model.tokenizer.unk_token_id
    if classes.word_level and unk is not None and unk < allowed.numel():
        allowed[unk] = True
    every_allowed = bool(allowed.all())  # GPT-2: its one special token is the end of text
    after_prompt = bool(drafts and drafts[0].prompt)
    # After a prompt the first sampled token must start a new word.
    first_allowed = allowed & (starts | ends)
    max_new = spec.max_tokens_per_word * (length + 1)

    live: list[_Row] = []
    active: list[bool] = []
    state = logprobs = count = in_word = None
    finished: list[tuple[list[_Row], object, torch.Tensor]] = []  # (rows, state, root log-probs)
    n_finished = 0

    def run_search() -> None:
        nonlocal finished, n_finished
        bands = _width_bands(finished)
        finished, n_finished = [], 0
        for band in bands:
            rows = [r for group, _, _ in band for r in group]
            states = [st for _, st, _ in band]
            st = states[0] if len(states) == 1 else model.concat(states)
            root = torch.cat([x for _, _, x in band])
            # Let the groups' caches go before the search (they are copied into ``st``).
            band[:], states = [], None
            for r, res in zip(rows, _search(model, st, root, classes, spec), strict=True):
                results[r.draft.index] = res
            st = None

    def next_row() -> _Row:
        d, attempt = queue.popleft()
        rng = d.rng if attempt == 0 else np.random.default_rng(
            item_seed(seed, length, kind, d.index, attempt)
        )
        ctx = [model.start_token_id]
        if d.prompt:
            ctx += model.encode(" ".join(d.prompt))
        cap = max_new
        if model.max_positions:
            cap = min(cap, model.max_positions - len(ctx))
            if cap <= 0:
                raise ValueError(
                    f"prompts of {len(ctx)} tokens leave no room in the model's context"
                )
        return _Row(d, attempt, rng, ctx, cap)

    # Without a prompt a new prefix's context is the start token alone: it takes a free place
    # in the running batch and the start token goes through the next step with the others
    # (no forward of its own, no copy of the batch's cache).
    in_place = not after_prompt and hasattr(model, "reset_rows")

    def admit() -> None:
        nonlocal state, logprobs, count, in_word
        new: list[_Row] = []
        while queue and len(live) + len(new) < batch:
            new.append(next_row())
        if not new:
            return
        lp_new, st_new = model.start([r.context for r in new])
        zeros = torch.zeros(len(new), dtype=torch.long, device=device)
        if state is None:
            state, logprobs, count, in_word = st_new, lp_new, zeros, zeros.bool()
        else:
            state = model.concat([state, st_new])
            logprobs = torch.cat([logprobs, lp_new])
            count = torch.cat([count, zeros])
            in_word = torch.cat([in_word, zeros.bool()])
        live.extend(new)
        active.extend([True] * len(new))

    def end(r: _Row, skip: str | None) -> None:
        d = r.draft
        d.info["attempts"] = r.attempt + 1
        d.info["sampling"] = sampling
        d.words = [decode_word(model.tokenizer, g) for g in r.groups]
        d.skip = skip
        if skip is None:
            d.info["context_tokens"] = len(r.context) + len(r.tokens)

    admit()
    while live:
        u = torch.tensor(
            [r.rng.random() if a else 0.0 for r, a in zip(live, active, strict=True)],
            dtype=torch.float32,
        ).to(device)
        if after_prompt:
            fresh = torch.tensor([not r.tokens for r in live], device=device)[:, None]
            mask = torch.where(fresh, first_allowed, allowed)
        else:
            mask = None if every_allowed else allowed[None, :]
        tok = _sample_tokens(logprobs, u, spec, mask)
        act = torch.tensor(active, device=device)
        new_word = ~blank[tok] & (starts[tok] | ~in_word)
        full = count == length
        stop_ok = act & full & (new_word | ends[tok])
        fail = act & ends[tok] & ~full
        cont = act & ~stop_ok & ~fail
        count = count + (new_word & cont).long()
        in_word = torch.where(cont, ~blank[tok], in_word)
        flags = zip(stop_ok.tolist(), fail.tolist(), cont.tolist(), tok.tolist(),
                    new_word.tolist(), strict=True)
        ok_rows: list[int] = []
        for i, (s_ok, f, c, t, nw) in enumerate(flags):
            r = live[i]
            if s_ok:
                end(r, None)
                ok_rows.append(i)
            elif f:
                if spec.eos_policy == "resample" and r.attempt + 1 < spec.max_attempts:
                    queue.append((r.draft, r.attempt + 1))
                else:
                    end(r, "eos_before_l")
            elif c:
                r.tokens.append(t)
                if not blank_l[t]:
                    if nw or not r.groups:
                        r.groups.append([t])
                    else:
                        r.groups[-1].append(t)
                if len(r.tokens) >= r.cap:
                    end(r, "too_long")
                    c = False
            if active[i] and not c:
                active[i] = False
        if ok_rows and search:
            # Before the step: the search's context ends before the token that starts word l+1.
            finished.append(
                ([live[i] for i in ok_rows], model.select(state, ok_rows), logprobs[ok_rows])
            )
            n_finished += len(ok_rows)
        if in_place and queue and not all(active):
            fill = []
            for i, a in enumerate(active):
                if not a and queue:
                    live[i], active[i] = next_row(), True
                    fill.append(i)
            model.reset_rows(state, fill)
            index = torch.tensor(fill, dtype=torch.long, device=device)
            tok = tok.clone()
            tok[index] = model.start_token_id
            count = count.clone()
            count[index] = 0
            in_word = in_word.clone()
            in_word[index] = False
        n_active = sum(active)
        if n_active:
            logprobs = model.step(state, tok, torch.tensor(active, device=device))
        stopped = len(live) - n_active
        if stopped and (stopped >= max(1, batch // 8) or not n_active):
            keep = [i for i, a in enumerate(active) if a]
            live = [live[i] for i in keep]
            active = [True] * len(keep)
            if keep:
                state = model.select(state, keep)
                logprobs, count, in_word = logprobs[keep], count[keep], in_word[keep]
            else:
                state = logprobs = count = in_word = None
            admit()
        if n_finished >= batch:
            run_search()
    if finished:
        run_search()
    return [results.get(d.index) for d in drafts]
