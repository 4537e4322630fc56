"""The probability of *given* next words after a context, under `worker.words`' definition.

`worker.words.top_words` finds a model's most probable next words; synthetic EB-C also needs
the reference model's probability of the words the studied model chose, which need not be among
the reference's own top words.  The definition is `worker.words`' (its module docstring): a
word is a token sequence t1..tn where t1 starts a word and t2..tn do not, its probability is
``P(t1..tn | context) * P(boundary | context, t1..tn)``, and a string's probability sums over
its tokenisations (sequences that decode to it).

Word-level vocabularies: one token per word, read from the root distribution (`word_level`).

Subword vocabularies (`word_probabilities`): an exact best-first search per (context, word)
over the token sequences whose text is a prefix of the word: a partial sequence is expanded
(one batched ``extend`` for every context and word of a round) when it is the most probable
open entry, a completed tokenisation is accepted when it reaches the top, so the best
tokenisation comes first and exactly.  After it, the search goes on while the best open entry
is at least ``merge_tail`` times that best tokenisation, summing every tokenisation it accepts
(`top_words` sums the tokenisations of its words down to ``merge_tail`` times its k-th word,
never a tighter threshold than this one for a word it returns).  Candidates for the next token
come from the vocabulary's byte pieces (`PieceIndex`); a sequence counts only when the
tokenizer decodes it to the word exactly (the same string identity as `top_words`).
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from worker.tokens import TokenClasses, byte_decoder, decode_word
from worker.words import Extend


@dataclass(frozen=True)
class PieceIndex:
    """A tokenizer's tokens by the bytes they add to a word's text.

    ``first``: word-starting tokens (not blank, not special) by their bytes without leading
    whitespace; ``rest``: continuation tokens (not starting a word, not special) by their bytes.
    """

    first: dict[bytes, list[int]]
    rest: dict[bytes, list[int]]


def _piece_bytes(token: str, convention: str) -> bytes:
    """The text bytes one token adds (the conventions of `worker.tokens.detect_convention`)."""
    if convention == "byte_bpe":
        decoder = byte_decoder()
        return bytes(decoder.get(ch, 0x3F) for ch in token)
    if convention == "metaspace":
        if token.startswith("<0x") and token.endswith(">") and len(token) == 6:
            return bytes([int(token[3:5], 16)])  # SentencePiece byte fallback
        return token.replace("▁", " ").encode()
    if convention == "wordpiece":
        return token[2:].encode() if token.startswith("##") else b" " + token.encode()
    return b" " + token.encode()  # word level: every token is a word of its own


_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def piece_index(tokenizer, classes: TokenClasses) -> PieceIndex:
    """`PieceIndex` of ``tokenizer`` under ``classes`` (computed once per tokenizer)."""
    cache = _INDEXES.setdefault(tokenizer, {})
    key = (classes.convention, classes.punctuation_splits, classes.vocab_size)
    if key in cache:
        return cache[key]
    known = min(len(tokenizer), classes.vocab_size)
    tokens = tokenizer.convert_ids_to_tokens(list(range(known)))
    starts, blank = classes.starts.tolist(), classes.blank.tolist()
    special = classes.special.tolist()
    first: dict[bytes, list[int]] = {}
    rest: dict[bytes, list[int]] = {}
    for i, tok in enumerate(tokens):
        if tok is None or special[i]:
            continue
        raw = _piece_bytes(tok, classes.convention)
        if starts[i]:
            if not blank[i] and raw.lstrip():
                first.setdefault(raw.lstrip(), []).append(i)
        elif raw:
            rest.setdefault(raw, []).append(i)
    cache[key] = PieceIndex(first, rest)
    return cache[key]


def word_level(
    root: torch.Tensor, tokenizer, classes: TokenClasses, words: Sequence[Sequence[str]]
) -> list[list[float]]:
    """Word-level vocabularies: P(word) is its token's probability (0 for a word that is no
    token, or only a special one).  ``root`` [B, V] log-probs; ``words[b]`` the words of row b."""
    ids = _word_ids(tokenizer, classes)
    rows = [b for b, ws in enumerate(words) for _ in ws]
    cols = [ids.get(w, -1) for ws in words for w in ws]
    found = [c >= 0 for c in cols]
    values = [0.0] * len(cols)
    if any(found):
        pick_rows = torch.tensor([r for r, f in zip(rows, found, strict=True) if f])
        pick_cols = torch.tensor([c for c, f in zip(cols, found, strict=True) if f])
        got = root[pick_rows.to(root.device), pick_cols.to(root.device)].double().exp().tolist()
        it = iter(got)
        values = [next(it) if f else 0.0 for f in found]
    out, pos = [], 0
    for ws in words:
        out.append(values[pos : pos + len(ws)])
        pos += len(ws)
    return out


_WORD_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _word_ids(tokenizer, classes: TokenClasses) -> dict[str, int]:
    """Word -> token id of a word-level vocabulary, the words as `top_words` decodes them (the
    first id of a string wins, as no two tokens of a word-level vocabulary share one)."""
    cache = _WORD_IDS.setdefault(tokenizer, {})
    if classes.vocab_size not in cache:
        special = classes.special.tolist()
        known = min(len(tokenizer), classes.vocab_size)
        ids: dict[str, int] = {}
        for i in range(known):
            if not special[i]:
                ids.setdefault(decode_word(tokenizer, [i]), i)
        cache[classes.vocab_size] = ids
    return cache[classes.vocab_size]


@dataclass
class _Target:
    """The search for one word after one context."""

    row: int
    word: str
    raw: bytes
    heap: list = field(default_factory=list)  # (-prob, tiebreak, kind 0 partial / 1 done, seq)
    counter: int = 0
    total: float = 0.0
    best: float | None = None
    expansions: int = 0
    exact: bool = True
    done: bool = False

    def push(self, prob: float, kind: int, payload) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (-prob, self.counter, kind, payload))


def word_probabilities(
    root: torch.Tensor,
    extend: Extend,
    classes: TokenClasses,
    tokenizer,
    words: Sequence[Sequence[str]],
    *,
    merge_tail: float = 0.05,
    max_expansions: int = 256,
    max_word_tokens: int | None = None,
    nodes_per_round: int = 2,
    rows_per_round: int = 128,
    depths: Sequence[int | None] | None = None,
) -> list[list[tuple[float, bool]]]:
    """(probability, exact) of each word ``words[b][j]`` after context ``b`` (see the module
    docstring).  ``root`` [B, V]: next-token log-probs after each context; ``extend`` as in
    `worker.words.top_words` (over the same state).  A search that runs out of
    ``max_expansions`` while a tokenisation above its threshold may be open is flagged inexact;
    words of more than ``max_word_tokens`` tokens do not count, as in `top_words`, nor words of
    more than ``depths[b]`` tokens after context ``b`` (the positions the model has left).

    Each round expands ``nodes_per_round`` partial words per open search, more when few are
    open (an equal share of ``rows_per_round``): the tail of a batch is a few words with many
    tokenisations, one forward per round.  The value of a word does not depend on that (the
    tokenisations above the threshold are all accepted, in order), except for one flagged
    inexact, whose budget speculative expansions also spend."""
    index = piece_index(tokenizer, classes)
    boundary = classes.starts | classes.ends
    limits = [
        min((x for x in (max_word_tokens, depth) if x is not None), default=None)
        for depth in (depths or [None] * len(words))
    ]
    targets = [
        _Target(b, w, w.encode("utf-8")) for b, ws in enumerate(words) for w in ws if w.strip()
    ]
    # Roots: every word-starting token whose text begins the word.
    pairs = [
        (t, i, len(key)) for t in targets for key in _heads(t.raw) for i in index.first.get(key, ())
    ]
    lps = _gather(root, [(p[0].row, p[1]) for p in pairs])
    for (t, i, used), lp in zip(pairs, lps, strict=True):
        if lp > -math.inf:
            t.push(math.exp(lp), 0, ((i,), used))

    while True:
        jobs: dict[tuple[int, tuple[int, ...]], int] = {}
        work: list[tuple[_Target, int, tuple[int, ...], int, float]] = []
        n_open = sum(not t.done for t in targets)
        quota = max(nodes_per_round, rows_per_round // max(1, n_open))
        for t in targets:
            if not t.done:
                _pop_round(t, jobs, work, merge_tail, max_expansions, quota)
        if not jobs:
            break
        keys = list(jobs)
        out = extend([r for r, _ in keys], [list(seq) for _, seq in keys]).float()
        bnd = torch.logsumexp(out.masked_fill(~boundary, float("-inf")), dim=-1).exp().tolist()
        children = [
            (n, t, seq, used, prob, c, len(key))
            for t, n, seq, used, prob in work
            if limits[t.row] is None or len(seq) < limits[t.row]
            for key in _heads(t.raw[used:])
            for c in index.rest.get(key, ())
        ]
        child_lps = _gather(out, [(ch[0], ch[5]) for ch in children])
        for t, n, seq, _used, prob in work:
            if decode_word(tokenizer, seq) == t.word:
                t.push(prob * bnd[n], 1, seq)
        for (_n, t, seq, used, prob, c, extra), lp in zip(children, child_lps, strict=True):
            p = prob * math.exp(lp)
            if p > 0:
                t.push(p, 0, ((*seq, c), used + extra))

    out_rows: list[list[tuple[float, bool]]] = [[] for _ in words]
    by_key = {(t.row, t.word): t for t in targets}
    for b, ws in enumerate(words):
        for w in ws:
            t = by_key.get((b, w))
            out_rows[b].append((t.total, t.exact) if t is not None else (0.0, True))
    return out_rows


def _heads(raw: bytes) -> list[bytes]:
    """Every non-empty prefix of ``raw``."""
    return [raw[:j] for j in range(1, len(raw) + 1)]


def _gather(logprobs: torch.Tensor, at: list[tuple[int, int]]) -> list[float]:
    """``logprobs[row, id]`` for each pair, in one indexing and one transfer."""
    if not at:
        return []
    rows = torch.tensor([r for r, _ in at], device=logprobs.device)
    cols = torch.tensor([c for _, c in at], device=logprobs.device)
    return logprobs[rows, cols].double().tolist()


def _pop_round(t: _Target, jobs: dict, work: list, merge_tail, max_expansions, quota) -> None:
    """Accept completed tokenisations at the top and pick this round's expansions of ``t``."""
    popped = 0
    while t.heap:
        neg, _, kind, payload = t.heap[0]
        prob = -neg
        if t.best is not None and prob < merge_tail * t.best:
            # Every other tokenisation is below the threshold, unless a pending expansion of
            # this round adds one above it.
            t.done = not popped
            return
        if kind == 1:
            if popped:
                return  # a pending expansion may still complete above it: next round
            heapq.heappop(t.heap)
            t.total += prob
            t.best = prob if t.best is None else t.best
            continue
        if popped >= quota:
            return
        if t.expansions >= max_expansions:
            if not popped:  # out of budget with a partial word open above the threshold
                t.exact, t.done = False, True
            return
        heapq.heappop(t.heap)
        seq, used = payload
        key = (t.row, seq)
        n = jobs.setdefault(key, len(jobs))
        work.append((t, n, seq, used, prob))
        t.expansions += 1
        popped += 1
    if not popped:
        t.done = True
