"""Prefixes of every kind (docs/design.md §1) and their top-k next words, one shard at a time.

Determinism: item ``index`` of cell (length, kind) draws all its randomness from
``item_seed(study_seed, length, kind, index, attempt)`` (sha256, not Python's ``hash``), and the
dataset lines of a cell come from a permutation seeded by (study seed, length, kind).  An item
therefore does not depend on how the cell is cut into shards; a re-run shard with the same batch
size on the same device makes exactly the same items (different batch sizes may change float
rounding and, rarely, a sampled token).

Kinds (`app.studies.kinds`): ``data``, ``model``, ``data_shuffled``, ``data_corrupted@c``,
``model_corrupted@c``, ``random``, the gap kinds ``data_shuffled+gap@g`` and
``data_corrupted@c+gap@g`` (g words of P_M after the distorted prefix: `worker.gaps`) and, for
translation, ``unrelated`` (the first l words of another row's reference, the item keeping its own
source: the first paper's UNREL). Corrupted and random kinds draw words uniformly from the
dataset's vocabulary; a replacement may by chance equal the original word, and corruption at c = 1
draws its words exactly as ``random`` does (the same generator, the same words). With ``data_from``
(synthetic EB-C with ``reference.data_prefixes = "reference"``, language modelling only) the data
kinds start from a prefix sampled from that model (P_D) as model prefixes are from P_M, without a
true next word. With ``prompt_words`` C (language modelling only) the first C words of a dataset
line precede every prefix and a data prefix is the next l words of the same line.

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

Ratings studies (``spec.continuation_words`` = l_gen): every item gets a continuation of l_gen
words sampled from the model after its prompt and prefix instead of next-word choices;
`worker.continuations` says how.  Their data-line kinds need l_gen words after the prefix (the
real continuation, recorded).  A gap kind's continuation follows its g model words; its item i
of length l reads the line of the data item i of length l + g, and records the l_gen words after
that line's l + g words (EB-M_gap's reference).  A translation model's ratings items have no
next-word choices either: each is the translation after its forced target prefix, the source
intact (`worker.forced.translate_after`, as the forced-prefix samples), and its data
continuation is the reference's rest after the prefix.

Every made item keeps the token ids its choices were computed from (``context_ids``, and
``source_ids`` for translation) and, with ``keep_roots``, the model's next-token log-probabilities
there (``root``), so that `worker.synthetic` compares P_D with P_M without a second forward of P_M.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.precompute.datasets import Dataset, DatasetError

# One grammar of prefix kinds for the study file and the worker (c in (0, 1]), and one
# place for the study settings' defaults.
from app.studies.kinds import kind_parts
from app.studies.schemas import WORKER_DEFAULTS as _STUDY
from worker.continuations import continuation, continue_texts
from worker.forced import translate_after
from worker.gaps import sample_gaps
from worker.models import LOGIT_BUFFERS, auto_batch_size, memory_budget
from worker.sampler import ContinuousSampler, expected_columns
from worker.seeds import item_seed, stable_seed
from worker.tokens import TokenClasses, get_token_classes
from worker.translation import beam_prefixes, encode_prefixes, seq2seq_choices
from worker.words import NextWords, search_settings


@dataclass(frozen=True)
class PrefixSpec:
    """The study settings the worker needs (recorded in every item's provenance).

    ``top_k``: next words per item.  ``prompt_words``: data prompt before every prefix (LM).
    ``temperature``/``sample_top_k``/``sample_top_p``: model prefix sampling (defaults: plain
    ancestral sampling).  ``eos_policy``: ``"resample"`` or ``"skip"`` an end of text before l
    words; ``max_attempts`` bounds re-sampling.  ``num_beams``: seq2seq model prefixes.
    ``special_policy``: ``"renormalise"`` or ``"skip"`` when a special token is the top-1.
    ``batch_size``: rows per batch (None: `worker.models.auto_batch_size`).  ``max_expansions``:
    word-search budget per context.  ``punctuation_splits``: the punctuation rule of `worker.words`.
    ``max_word_tokens``: longest choice word in tokens (default: a study file's
    ``decoding.max_word_tokens``; None: no limit, the exact search).  The limit bounds the
    search's sequential forwards on a model that keeps a partial word probable token after token;
    an item where a longer word could have been among the choices is flagged inexact.
    ``prefix_tokens_per_word``: a model prefix of l words may take at most this many tokens per
    word, ``prefix_tokens_per_word * (l + 1)`` in all (longer: skipped as ``too_long``).
    ``continuation_words``: ratings studies' l_gen, the words of the model's continuation after
    every prefix (0: none, a next-word study's items); ``continuation_top_k``: its sampling's
    top-k (None: ancestral over the full vocabulary).
    """

    # The study settings among these (`app.studies.schemas.worker_settings`) default to a
    # study file's, but `special_policy`: used on its own (tests, benchmarks) the search keeps
    # every prefix, where a study file's default skips some; a study's items get its own.
    top_k: int = _STUDY["top_k"]
    prompt_words: int = _STUDY["prompt_words"]
    temperature: float = _STUDY["temperature"]
    sample_top_k: int | None = _STUDY["sample_top_k"]
    sample_top_p: float | None = _STUDY["sample_top_p"]
    eos_policy: str = _STUDY["eos_policy"]
    max_attempts: int = 10
    num_beams: int = _STUDY["num_beams"]
    special_policy: str = "renormalise"
    batch_size: int | None = None
    max_expansions: int = 256
    punctuation_splits: bool = True
    prefix_tokens_per_word: int = 8
    max_word_tokens: int | None = _STUDY["max_word_tokens"]
    # Ratings studies only (`app.studies.schemas.WORKER_SETTINGS` reads them for those).
    continuation_words: int = 0
    continuation_top_k: int | None = None

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError("temperature must be positive")
        if self.eos_policy not in ("resample", "skip"):
            raise ValueError("eos_policy must be 'resample' or 'skip'")
        if self.special_policy not in ("renormalise", "skip"):
            raise ValueError("special_policy must be 'renormalise' or 'skip'")
        if self.sample_top_p is not None and not 0 < self.sample_top_p <= 1:
            raise ValueError("sample_top_p must lie in (0, 1]")
        if self.continuation_words < 0:
            raise ValueError("continuation_words must be 0 (none) or positive")
        if self.continuation_top_k is not None and self.continuation_top_k < 1:
            raise ValueError("continuation_top_k must be positive (None: the full vocabulary)")


@dataclass
class PrefixItem:
    """One prefix with its next-word choices (or, for a ratings study, its continuation), ready
    for the database.

    ``choices``: (word, probability) ordered by model rank, at most ``top_k``.  ``continuation``:
    the model's l_gen words after prompt and prefix (ratings studies; None otherwise).
    ``skipped`` with ``skip_reason`` (``"special_top1"``, ``"eos_before_l"``, ``"too_long"``,
    ``"beam_too_short"``; ratings: ``"eos_before_l_gen"``, ``"continuation_too_long"``,
    ``"attention_unshuffled"``) marks an item the study should not show; it is still returned so
    the caller can record it.

    Not stored (the worker's own use, `worker.synthetic`): ``context_ids``, the model's token ids
    the choices were computed after (a language model's whole context with its start token and
    prompt; a translation model's target prefix), ``source_ids`` (translation: the encoded
    source) and ``root`` (with ``make_items(keep_roots=True)``: the model's next-token
    log-probabilities [V] there, on its device).
    """

    length: int
    kind: str
    index: int
    words: list[str]
    prompt_words: list[str] = field(default_factory=list)
    source: str | None = None
    true_next_word: str | None = None
    choices: list[tuple[str, float]] = field(default_factory=list)
    continuation: list[str] | None = None
    skipped: bool = False
    skip_reason: str | None = None
    provenance: dict = field(default_factory=dict)
    context_ids: list[int] | None = field(default=None, repr=False, compare=False)
    source_ids: list[int] | None = field(default=None, repr=False, compare=False)
    root: Any = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        return " ".join(self.words)


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
    continuation: list[str] | None = None  # ratings studies: set by the sampler
    # What the choices were computed from (set where they are): see `PrefixItem`.
    ids: list[int] | None = None
    source_ids: list[int] | None = None
    root: Any = None


def _line_order(dataset: Dataset, seed: int, length: int, kind: str, min_words: int) -> list[int]:
    eligible = dataset.eligible(min_words)
    rng = np.random.default_rng(stable_seed("lines", seed, length, kind))
    return [eligible[i] for i in rng.permutation(len(eligible))]


def _random_words(n: int, vocab: list[str], rng) -> list[str]:
    """``n`` words drawn uniformly from ``vocab`` (the ``random`` kind's draw)."""
    return [vocab[int(i)] for i in rng.integers(len(vocab), size=n)]


def _corrupt(words: list[str], rate: float, vocab: list[str], rng) -> tuple[list[str], list[int]]:
    if rate >= 1:
        # Every word is replaced: the draw of `random`, so that corruption at c = 1 *is* the
        # random kind (the same generator gives the same words), not merely distributed alike.
        return _random_words(len(words), vocab, rng), list(range(len(words)))
    out, where = [], []
    for i, w in enumerate(words):
        if rng.random() < rate:
            out.append(vocab[int(rng.integers(len(vocab)))])
            where.append(i)
        else:
            out.append(w)
    return out, where


@dataclass
class _Cell:
    """What the steps of `make_items` share about the cell being made."""

    model: Any
    dataset: Dataset | None
    spec: PrefixSpec
    length: int
    kind: str
    seed: int
    base: str
    rate: float | None
    classes: TokenClasses
    seq2seq: bool
    ratings: bool
    sampled_data: bool
    gap: int | None = None  # a gap kind's g (`worker.gaps`)
    order: list[int] = field(default_factory=list)  # the dataset line of each item index
    vocab: list[str] = field(default_factory=list)  # the words random ones are drawn from
    batch: int = 0
    memory: int | None = None


def make_items(
    model,
    dataset: Dataset | None,
    spec: PrefixSpec,
    length: int,
    kind: str,
    start: int,
    stop: int,
    seed: int,
    *,
    data_from=None,
    keep_roots: bool = False,
    prefixes_only: bool = False,
) -> list[PrefixItem]:
    """Items ``start``..``stop - 1`` of cell (``length``, ``kind``) with their top-k words.

    ``model`` is a `worker.models.CausalLM` or `Seq2SeqLM`; ``dataset`` may be None only for
    language-model ``model``/``random`` kinds without a prompt... except ``random`` still needs
    a vocabulary, so only ``model`` may go without.  ``seed`` is the study seed.  Raises
    `DatasetError` when the dataset has too few long-enough lines for index ``stop - 1``.
    ``data_from`` (a `CausalLM`, language modelling only): the data kinds sample their prefix
    from it instead of reading a dataset line.  ``keep_roots``: keep each item's next-token
    log-probabilities (`PrefixItem.root`).  With ``spec.continuation_words`` (ratings) the items
    get continuations instead of choices, unless ``prefixes_only`` (the prefixes alone: a ratings
    study's attention pairs, `worker.continuations.attention_pairs`).

    The steps: the cell checked (`_cell`), each item's dataset line and generator (`_drafts`),
    the batch (`_batch`), the data kinds' prefixes sampled from ``data_from``, the prefixes
    distorted (`_distort`: shuffled, random, unrelated), this model's prefixes and choices or
    continuations (`_model_side`), the items assembled (`_items`).
    """
    cell = _cell(model, dataset, spec, length, kind, seed, data_from)
    drafts = _drafts(cell, start, stop)
    cell.batch, cell.memory = _batch(model, spec, length)
    if cell.sampled_data:
        # P_D's samples take the dataset lines' place; shuffling and corruption apply to them.
        data_classes = get_token_classes(data_from, spec.punctuation_splits)
        _sample_lm(
            data_from,
            data_classes,
            drafts,
            length,
            spec,
            seed,
            kind,
            cell.batch,
            search=False,
            memory=cell.memory,
        )
        for d in drafts:
            d.info["data_prefix_model"] = data_from.name
    _distort(cell, drafts)
    results = _model_side(cell, drafts, keep_roots=keep_roots, prefixes_only=prefixes_only)
    items = _items(cell, drafts, results)
    if cell.ratings and cell.seq2seq and not prefixes_only:
        _translate_on(model, items, spec)
    return items


def _translate_on(model, items: list[PrefixItem], spec: PrefixSpec) -> None:
    """A translation ratings item's continuation: the translation after its forced target
    prefix, the source intact (`worker.forced.translate_after`, as the forced-prefix samples
    are made).  One that ends with the prefix leaves nothing to rate: skipped as
    ``"translation_ends_at_prefix"``."""
    translate_after(model, items, spec)
    for item in items:
        if not item.skipped and not item.continuation:
            item.skipped, item.skip_reason = True, "translation_ends_at_prefix"


def _cell(model, dataset, spec: PrefixSpec, length: int, kind: str, seed: int, data_from) -> _Cell:
    """The cell's record, after checking that the model, kind, dataset and options fit."""
    parts = kind_parts(kind)
    base, rate = parts.base, parts.rate
    if length < 1:
        raise ValueError("prefix length must be at least 1")
    seq2seq = model.task == "seq2seq"
    if seq2seq and spec.prompt_words:
        raise ValueError("a prompt applies to language modelling only")
    if base == "unrelated" and not seq2seq:
        raise ValueError("the 'unrelated' kind (another row's reference) is for translation")
    sampled_data = data_from is not None and base.startswith("data")
    if sampled_data and (seq2seq or data_from.task != "lm"):
        raise ValueError("data prefixes sampled from a reference model: language models only")
    if dataset is not None and dataset.task != model.task:
        raise DatasetError(f"{dataset.path}: a {model.task} model needs a {model.task} dataset")
    ratings = bool(spec.continuation_words)
    if ratings and data_from is not None:
        raise ValueError("continuations are for studies without a reference model")
    if parts.gap is not None and seq2seq:
        raise ValueError(f"{kind!r}: gap kinds are for language models")
    classes = get_token_classes(model, spec.punctuation_splits)
    cell = _Cell(
        model, dataset, spec, length, kind, seed, base, rate, classes, seq2seq, ratings,
        sampled_data, parts.gap,
    )  # fmt: skip
    if base in ("random", "data_corrupted", "model_corrupted"):
        if dataset is None:
            raise DatasetError(f"kind {kind!r} draws words from the dataset's vocabulary")
        cell.vocab = dataset.vocabulary()
    return cell


def _drafts(cell: _Cell, start: int, stop: int) -> list[_Draft]:
    """Items ``start``..``stop - 1`` as drafts: each one's generator, and its dataset line
    (prompt, data prefix, true next word or real continuation) where its kind reads one."""
    spec, length, kind, base, dataset = cell.spec, cell.length, cell.kind, cell.base, cell.dataset
    # Words a data prefix's line holds after it: the true next word, or the real continuation.
    # A translation runs to its end, so its data continuation (EB-M's reference) is the
    # reference's rest: one word of it is enough.
    following = 1 if cell.seq2seq else spec.continuation_words or 1
    # Which dataset line each item uses, if any.  In a ratings study every kind's item i of a
    # length takes the same line as the data item i (the paper's generation process: one
    # prompt C, a prefix from P_D or from P_M), a line long enough to hold the data
    # continuation that EB-M scores every kind's continuation against.
    # A gap kind's item i of length l takes the line of the data item i of length l + g: its
    # distorted prefix is made from the first l words of the line whose clean l + g words are
    # that data item's prefix, and EB-M_gap scores both continuations against the same
    # reference, the line's l_gen words after those l + g (the later paper's eq. 5).
    # (Without a dataset, model prefixes without a prompt still need none: tests, benchmarks.)
    paired = cell.ratings and dataset is not None
    gap = cell.gap if cell.ratings and cell.gap else 0
    line_key = "data" if paired else kind
    line_length = length + gap
    reads_line = base.startswith("data") and not cell.sampled_data
    if cell.seq2seq or paired or reads_line:
        min_words = spec.prompt_words + line_length + following
    elif spec.prompt_words:
        min_words = spec.prompt_words
    else:
        min_words = 0
    if min_words:
        if dataset is None:
            raise DatasetError(f"kind {kind!r} needs a dataset")
        cell.order = _line_order(dataset, cell.seed, line_length, line_key, min_words)
        if stop > len(cell.order):
            raise DatasetError(
                f"{dataset.path}: item {stop - 1} of length {length} ({kind}) needs {stop} lines "
                f"with at least {min_words} words; only {len(cell.order)} are long enough"
            )
    drafts = []
    for index in range(start, stop):
        d = _Draft(index, np.random.default_rng(item_seed(cell.seed, length, kind, index)))
        d.info["seed"] = item_seed(cell.seed, length, kind, index)
        if cell.order:
            row = dataset.rows[cell.order[index]]
            d.line = row.line
            d.source = row.source
            d.prompt = list(row.words[: spec.prompt_words])
            if reads_line:
                end = spec.prompt_words + length
                d.words = list(row.words[spec.prompt_words : end])
                # After a gap the next words follow the model's g words: no true next word.
                d.true_next = row.words[end] if cell.gap is None else None
                if cell.ratings:
                    ref = end + gap  # after the clean l + g words (a gap kind's reference)
                    rest = None if cell.seq2seq else ref + following
                    d.info["data_continuation"] = " ".join(row.words[ref:rest])
        drafts.append(d)
    return drafts


def _batch(model, spec: PrefixSpec, length: int) -> tuple[int, int | None]:
    """Rows per batch and the slots' memory budget (bytes; None: no limit).

    The spec's rows, else what the device's free memory holds (`auto_batch_size`); the slots'
    KV cache then keeps within the rest of the budget, whatever the prefixes' width.  A batch
    size given (``--batch-size``) is taken as is: the budget left after its logit buffers could
    be nothing, which would run the batch one row at a time."""
    if spec.batch_size:
        return spec.batch_size, None
    budget = memory_budget(model)
    batch = auto_batch_size(model, expected_columns(spec, length), budget=budget)
    return batch, max(0, budget - batch * LOGIT_BUFFERS * 4 * model.vocab_size)


def _distort(cell: _Cell, drafts: list[_Draft]) -> None:
    """The diagnostic kinds whose prefix is made from data before the model sees it: shuffled,
    random and unrelated (corruption comes after the model's own prefixes, `_model_side`)."""
    if cell.base == "data_shuffled":
        for d in drafts:
            d.words = [d.words[i] for i in d.rng.permutation(len(d.words))]
    elif cell.base == "random":
        for d in drafts:
            d.words = _random_words(cell.length, cell.vocab, d.rng)
    elif cell.base == "unrelated":
        _unrelated_prefixes(cell.dataset, cell.order, drafts, cell.length)


def _corrupt_drafts(cell: _Cell, drafts: list[_Draft]) -> None:
    for d in drafts:
        if d.skip is None:
            d.words, d.info["corrupted_positions"] = _corrupt(d.words, cell.rate, cell.vocab, d.rng)


def _model_side(
    cell: _Cell, drafts: list[_Draft], *, keep_roots: bool, prefixes_only: bool
) -> list[NextWords | None]:
    """This model's prefixes (the model kinds), the corruptions, and each item's next words
    (or a ratings item's continuation, or neither with ``prefixes_only``)."""
    model, classes, spec, base = cell.model, cell.classes, cell.spec, cell.base
    corrupted = base in ("model_corrupted", "data_corrupted")
    sample = functools.partial(
        _sample_lm,
        model,
        classes,
        drafts,
        cell.length,
        spec,
        cell.seed,
        cell.kind,
        cell.batch,
        memory=cell.memory,
    )
    if cell.seq2seq:
        if base.startswith("model"):
            beam_prefixes(model, classes, drafts, cell.length, spec, cell.batch)
        if corrupted:
            _corrupt_drafts(cell, drafts)
            for d in drafts:
                if d.skip is None:
                    d.context = None
        if cell.ratings:
            # No next words: the translation goes on from the prefix (`_translate_on`).
            encode_prefixes(model, drafts)
            return [None] * len(drafts)
        return seq2seq_choices(model, classes, drafts, spec, cell.batch, keep_roots)
    if base == "model" and cell.ratings:
        # The continuation goes on from the prefix's own row and cache.
        phase = None if prefixes_only else continuation(spec, cell.seed, cell.length, cell.kind)
        sample(search=False, continuation=phase)
        return [None] * len(drafts)
    if base == "model":
        return sample(keep_roots=keep_roots)
    if base == "model_corrupted":
        sample(search=False)
    if corrupted:
        _corrupt_drafts(cell, drafts)
    if cell.gap:
        # A ratings item's continuation follows its gap in the same row (`worker.gaps`).
        phase = None
        if cell.ratings and not prefixes_only:
            phase = continuation(spec, cell.seed, cell.length, cell.kind)
        found = sample_gaps(
            model, classes, drafts, spec, cell.seed, cell.length, cell.kind, cell.gap,
            cell.batch, keep_roots=keep_roots, memory=cell.memory, continuation=phase,
        )  # fmt: skip
        return [None] * len(drafts) if cell.ratings else found
    if not cell.ratings:
        return _choices_lm_text(model, classes, drafts, spec, cell.batch, keep_roots, cell.memory)
    if not prefixes_only:
        continue_texts(
            model, classes, drafts, spec, cell.seed, cell.length, cell.kind, cell.batch,
            cell.memory,
        )  # fmt: skip
    return [None] * len(drafts)


def _items(cell: _Cell, drafts: list[_Draft], results: list[NextWords | None]) -> list[PrefixItem]:
    """The drafts as items, with their choices and provenance."""
    model = cell.model
    common = {
        "model": model.name,
        "task": model.task,
        "kind": cell.kind,
        "spec": asdict(cell.spec),
        "token_convention": cell.classes.convention,
    }
    if cell.dataset is not None:
        common["dataset"] = cell.dataset.provenance()
    if cell.vocab:
        common["vocabulary"] = f"dataset words ({len(cell.vocab)})"
    items = []
    for d, res in zip(drafts, results, strict=True):
        prov = {**common, **d.info, "line": d.line}
        item = PrefixItem(
            length=cell.length,
            kind=cell.kind,
            index=d.index,
            words=d.words,
            prompt_words=d.prompt,
            source=d.source,
            true_next_word=d.true_next,
            context_ids=d.ids,
            source_ids=d.source_ids,
            root=d.root,
            continuation=d.continuation,
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


def _unrelated_prefixes(dataset: Dataset, order: list[int], drafts, length: int) -> None:
    """The first ``length`` words of another row's reference (never the item's own row), drawn
    from the item's generator among the rows with at least ``length`` words."""
    pool = dataset.eligible(length)
    if len(pool) < 2:
        raise DatasetError(f"{dataset.path}: 'unrelated' needs two rows of {length} words")
    for d in drafts:
        own = bisect.bisect_left(pool, order[d.index])  # the own row is in the pool
        pick = int(d.rng.integers(len(pool) - 1))
        row = dataset.rows[pool[pick + (pick >= own)]]
        d.words = list(row.words[:length])
        d.info["unrelated_line"] = row.line


def _sample_lm(
    model,
    classes,
    drafts,
    length,
    spec,
    seed,
    kind,
    batch,
    *,
    search: bool = True,
    keep_roots: bool = False,
    continuation=None,
    memory: int | None = None,
) -> list[NextWords | None]:
    """Model prefixes for a causal LM (`ContinuousSampler`), with their next words when
    ``search`` or their ``continuation`` (a `worker.sampling.Continuation`); a re-sampled attempt
    draws from its own item seed."""

    def reseed(d: _Draft, attempt: int) -> np.random.Generator:
        return np.random.default_rng(item_seed(seed, length, kind, d.index, attempt))

    sampler = ContinuousSampler(
        model,
        classes,
        spec,
        length,
        batch,
        reseed,
        search_settings(model, classes, spec) if search else None,
        keep_roots=keep_roots,
        continuation=continuation,
        memory=memory,
    )
    return sampler.run(drafts)


def _choices_lm_text(
    model, classes, drafts, spec, batch, keep_roots, memory=None
) -> list[NextWords | None]:
    """Next words after text prefixes (data, shuffled, corrupted, random): each context is fed
    to a slot and searched there (`ContinuousSampler`, ``from_context``)."""
    todo = [d for d in drafts if d.skip is None]
    for d in todo:
        ids = [model.start_token_id, *model.encode(" ".join([*d.prompt, *d.words]))]
        if model.max_positions and len(ids) >= model.max_positions:
            raise ValueError(
                f"item {d.index}: {len(ids)} tokens exceed the model's "
                f"{model.max_positions} positions"
            )
        d.info["context_tokens"] = len(ids)
        d.ids = ids
    sampler = ContinuousSampler(
        model,
        classes,
        spec,
        0,
        batch,
        None,
        search_settings(model, classes, spec),
        keep_roots=keep_roots,
        memory=memory,
    )
    found = dict(zip([d.index for d in todo], sampler.run(todo, from_context=True), strict=True))
    return [found.get(d.index) for d in drafts]
