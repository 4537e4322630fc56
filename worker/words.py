"""Top-k next *words* (not subword pieces) for a batch of contexts.

Definitions (DESIGN.md §1, "Next words from subword models"):

- Every token of the vocabulary is classified once per tokenizer (`TokenClasses`):
  ``starts`` -- the token begins a new word, i.e. a word boundary lies before it;
  ``blank`` -- the token is whitespace only (a separator, never part of a word);
  ``special`` -- end of text, unknown, padding and other special/added tokens, and ids the
  tokenizer does not know (embedding padding rows); ``ends`` -- end-of-text tokens.
- Boundary rule: a token starts a new word when its text begins with whitespace (the GPT-2
  ``Ġ``/``Ċ`` byte convention, the SentencePiece ``▁`` convention, or a WordPiece token without
  ``##``).  **Punctuation rule** (``punctuation_splits=True``, the default): a token whose text
  begins with a punctuation or symbol character (Unicode categories P* and S*) also starts a
  new word, as wiki-103 tokenisation separates punctuation ("said ," and "do n't" are two
  words each).  With ``punctuation_splits=False`` only whitespace separates words.
- A next word after a context is a token sequence t1..tn where t1 starts a new word (and is not
  blank or special) and t2..tn do not.  Its probability is
  ``P(t1..tn | context) * P(boundary | context, t1..tn)`` where the boundary probability is the
  total probability of the tokens that start a new word plus the end-of-text tokens.  Token
  sequences that decode to the same string are merged by summing their probabilities (the
  probability of a string is the sum over its tokenisations); strings that are empty or not
  valid UTF-8 are dropped.
- Word-level vocabularies (every token starts a word): the words are the top-k tokens with the
  special tokens removed (method ``"word-level-topk"``), as DESIGN.md says.
- Subword vocabularies: exact best-first search (method ``"best-first"``).  Partial words and
  completed words share one max-heap per context; a partial word is expanded (one batched
  forward for all contexts and partial words of a round, on top of the KV cache of the
  contexts) when it reaches the top, a completed word is accepted when it reaches the top.  The
  probability of a word never exceeds that of any of its prefixes, so the accepted words come
  out in exact order of their best tokenisation.  After the k-th distinct word the search goes
  on while the best open entry is at least ``merge_tail`` (default 0.05) times the k-th word's
  probability, expanding only partial words whose text begins one of the k words, so that
  other tokenisations of the same strings are added and the k words are re-ranked by their
  summed probability; a tokenisation it leaves unseen is below that threshold.  Siblings are
  pushed lazily from each expanded node's top ``children_per_node`` continuations; the search
  reports ``exact=False`` when it ran out of its expansion budget or when a word it could not
  see might have beaten the k-th word.

Special tokens are never returned.  If a special token is more probable than the best word
(``special_top1``), the caller's policy applies: ``"skip"`` marks the result skipped,
``"renormalise"`` divides the word probabilities by ``1 - P(special tokens | context)``; both
record the special token and its probability.
"""

from __future__ import annotations

import heapq
import json
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch

SPECIAL_POLICIES = ("skip", "renormalise")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of the byte-level BPE alphabet: printable latin-1 bytes stand for themselves,
    the other bytes are shifted to code points 256 and up, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return {ch: b for b, ch in mapping.items()}


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """Per-token masks of one tokenizer (boolean tensors of length ``vocab_size``)."""

    convention: str  # "word", "byte_bpe", "metaspace", "wordpiece"
    punctuation_splits: bool
    starts: torch.Tensor
    blank: torch.Tensor
    special: torch.Tensor
    ends: torch.Tensor
    special_names: dict[int, str] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.starts.numel())

    @property
    def word_level(self) -> bool:
        return self.convention == "word"

    def to(self, device: torch.device | str) -> TokenClasses:
        return TokenClasses(
            self.convention,
            self.punctuation_splits,
            self.starts.to(device),
            self.blank.to(device),
            self.special.to(device),
            self.ends.to(device),
            self.special_names,
        )


def detect_convention(tokenizer, tokens: Sequence[str | None]) -> str:
    """Guess the word-boundary convention of a tokenizer from its model type or its tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        try:
            model_type = json.loads(backend.to_str())["model"]["type"]
        except (ValueError, KeyError, TypeError):
            model_type = None
        if model_type == "WordLevel":
            return "word"
        if model_type == "WordPiece":
            return "wordpiece"
    present = [t for t in tokens if t]
    counts = {
        "byte_bpe": sum(t.startswith("Ġ") for t in present),
        "metaspace": sum(t.startswith("▁") for t in present),
        "wordpiece": sum(t.startswith("##") for t in present),
    }
    best = max(counts, key=counts.__getitem__)
    if counts[best] >= max(1, len(present) // 20):
        return best
    if any(t.endswith("</w>") for t in present):
        raise NotImplementedError("end-of-word (</w>) BPE vocabularies are not supported")
    return "word"


def _classify(token: str, convention: str, punctuation_splits: bool) -> tuple[bool, bool]:
    """(starts, blank) for one token string."""
    if convention == "word":
        return True, token.strip() == ""
    if convention == "byte_bpe":
        decoder = _byte_decoder()
        raw = bytes(decoder.get(ch, 0x3F) for ch in token)
        text = raw.decode("utf-8", errors="replace")
        if not text:
            return False, False
        first = text[0]
        blank = text.strip() == ""
        if first.isspace():
            return True, blank
        return punctuation_splits and first != "\ufffd" and _is_punct(first), False
    if convention == "metaspace":
        if token.startswith("<0x") and token.endswith(">") and len(token) == 6:
            ch = chr(int(token[3:5], 16))  # SentencePiece byte fallback
            return ch.isspace(), ch.isspace()
        if token.startswith("▁"):
            return True, token.replace("▁", "").strip() == ""
        return bool(token) and punctuation_splits and _is_punct(token[0]), False
    if convention == "wordpiece":
        if token.startswith("##"):
            return False, False
        return True, token.strip() == ""
    raise ValueError(f"unknown convention {convention!r}")


def token_classes(
    tokenizer,
    vocab_size: int | None = None,
    *,
    punctuation_splits: bool = True,
    convention: str | None = None,
    eos_token_ids: Sequence[int] = (),
) -> TokenClasses:
    """Classify every token of ``tokenizer`` once (see the module docstring for the rules).

    ``vocab_size`` is the model's output size; ids the tokenizer does not know count as special.
    ``eos_token_ids`` adds end-of-text ids (e.g. from a generation config) to the tokenizer's.
    """
    known = len(tokenizer)
    size = vocab_size if vocab_size is not None else known
    ids = list(range(min(known, size)))
    tokens = tokenizer.convert_ids_to_tokens(ids)
    conv = convention or detect_convention(tokenizer, tokens)
    starts = torch.zeros(size, dtype=torch.bool)
    blank = torch.zeros(size, dtype=torch.bool)
    special = torch.zeros(size, dtype=torch.bool)
    ends = torch.zeros(size, dtype=torch.bool)
    for i, tok in enumerate(tokens):
        if tok is None:
            special[i] = True
            continue
        s, b = _classify(tok, conv, punctuation_splits)
        starts[i] = s
        blank[i] = b
    special[len(ids) :] = True
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for idx, added in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(added, "special", False):
            special_ids.add(int(idx))
    for idx in special_ids:
        if 0 <= idx < size:
            special[idx] = True
    end_ids = set(eos_token_ids)
    if tokenizer.eos_token_id is not None:
        end_ids.add(int(tokenizer.eos_token_id))
    for idx in end_ids:
        if 0 <= idx < size:
            ends[idx] = True
            special[idx] = True
    names = {i: tokens[i] if i < len(tokens) and tokens[i] else f"<{i}>" for i in special_ids}
    names.update({i: tokens[i] if i < len(tokens) and tokens[i] else f"<{i}>" for i in end_ids})
    return TokenClasses(conv, punctuation_splits, starts, blank, special, ends, names)


def decode_word(tokenizer, ids: Sequence[int]) -> str:
    """The text of one word's tokens, without surrounding whitespace."""
    return tokenizer.decode(
        list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
    ).strip()


def segment_words(
    ids: Sequence[int], classes: TokenClasses, *, in_word: bool = False
) -> list[list[int]]:
    """Split a token sequence into words (lists of token ids) with the boundary rule.

    ``in_word``: the sequence continues a word already begun (tokens before the first word start
    are then dropped).  Blank tokens separate words and belong to none.
    """
    starts = classes.starts.tolist()
    blank = classes.blank.tolist()
    words: list[list[int]] = []
    current: list[int] | None = None
    open_word = in_word
    for t in ids:
        if blank[t]:
            open_word = False
            current = None
            continue
        if starts[t] or not open_word:
            current = [t]
            words.append(current)
        elif current is not None:
            current.append(t)
        open_word = True
    return words


@dataclass
class NextWords:
    """The top-k next words of one context, ordered by model rank (most probable first)."""

    words: list[str]
    probs: list[float]
    method: str
    exact: bool
    expansions: int
    special_top1: bool
    special_token: str | None
    special_prob: float
    special_mass: float
    policy: str
    renormalised: bool
    skipped: bool

    def info(self) -> dict:
        """Provenance of the choices, for the item record."""
        return {
            "method": self.method,
            "exact": self.exact,
            "expansions": self.expansions,
            "special_top1": self.special_top1,
            "special_token": self.special_token,
            "special_prob": self.special_prob,
            "special_mass": self.special_mass,
            "special_policy": self.policy,
            "renormalised": self.renormalised,
        }


Extend = Callable[[Sequence[int], Sequence[Sequence[int]]], torch.Tensor]
"""``extend(rows, continuations)``: next-token log-probabilities [N, V] after context
``rows[i]`` followed by the tokens ``continuations[i]``."""


def _finish(
    words: list[str],
    probs: list[float],
    root: torch.Tensor,
    classes: TokenClasses,
    *,
    method: str,
    exact: bool,
    expansions: int,
    policy: str,
) -> NextWords:
    special_lp = root.masked_fill(~classes.special, float("-inf"))
    sp_lp, sp_id = special_lp.max(dim=-1)
    special_prob = float(sp_lp.exp())
    special_mass = float(special_lp.exp().sum())
    top1 = special_prob > (probs[0] if probs else 0.0)
    name = classes.special_names.get(int(sp_id), f"<{int(sp_id)}>") if special_prob > 0 else None
    renormalised = policy == "renormalise" and special_mass < 1.0
    if renormalised:
        probs = [p / (1.0 - special_mass) for p in probs]
    return NextWords(
        words=words,
        probs=probs,
        method=method,
        exact=exact,
        expansions=expansions,
        special_top1=top1,
        special_token=name,
        special_prob=special_prob,
        special_mass=special_mass,
        policy=policy,
        renormalised=renormalised,
        skipped=policy == "skip" and top1,
    )


def top_words(
    root_logprobs: torch.Tensor,
    extend: Extend | None,
    classes: TokenClasses,
    tokenizer,
    *,
    k: int = 5,
    special_policy: str = "renormalise",
    max_expansions: int = 256,
    nodes_per_round: int | None = None,
    rows_per_round: int | None = None,
    children_per_node: int = 64,
    merge_tail: float = 0.05,
    max_word_tokens: int | None = None,
) -> list[NextWords]:
    """Top-k next words for a batch of contexts.

    ``root_logprobs`` [B, V]: next-token log-probabilities after each context.  ``extend`` (see
    `Extend`) scores continuations; it is not called for word-level vocabularies.  The search
    expands at most ``max_expansions`` partial words per context and, per round, up to
    ``nodes_per_round`` (default ``k``) per context in one batched call.  With ``rows_per_round``
    a context gets more when fewer than ``rows_per_round // nodes_per_round`` are still searching
    (an equal share of ``rows_per_round``); that shortens the tail of a batch but makes a
    context's words depend on which contexts share its search (its speculative expansions can
    find a tokenisation that a plain run leaves below ``merge_tail``), so the default (None)
    keeps the quota fixed and the words a function of the context alone.
    ``max_word_tokens`` (None: no limit) leaves out words of more
    tokens than that (a degenerate model can make a partial word that never ends, one forward per
    token); the result is flagged inexact when such a word could have beaten the k-th.  After the
    k-th distinct word it goes on while the best open entry is at least ``merge_tail`` times the
    k-th word's probability, to collect other tokenisations of the same strings.
    """
    if special_policy not in SPECIAL_POLICIES:
        raise ValueError(f"special_policy must be one of {SPECIAL_POLICIES}")
    classes = classes.to(root_logprobs.device)
    root_logprobs = root_logprobs.float()
    if classes.word_level:
        masked = root_logprobs.masked_fill(classes.special, float("-inf"))
        vals, idx = masked.topk(min(k, masked.shape[-1]), dim=-1)
        out = []
        for b in range(root_logprobs.shape[0]):
            pairs = [
                (decode_word(tokenizer, [i]), float(v))
                for v, i in zip(vals[b].exp().tolist(), idx[b].tolist(), strict=True)
                if v > 0
            ]
            out.append(
                _finish(
                    [w for w, _ in pairs],
                    [p for _, p in pairs],
                    root_logprobs[b],
                    classes,
                    method="word-level-topk",
                    exact=True,
                    expansions=0,
                    policy=special_policy,
                )
            )
        return out
    if extend is None:
        raise ValueError("a subword vocabulary needs an extend function")
    return _best_first(
        root_logprobs,
        extend,
        classes,
        tokenizer,
        k=k,
        policy=special_policy,
        max_expansions=max_expansions,
        nodes_per_round=nodes_per_round or k,
        rows_per_round=rows_per_round,
        children_per_node=children_per_node,
        merge_tail=merge_tail,
        max_word_tokens=max_word_tokens,
    )


class _Search:
    """Best-first state of one context."""

    __slots__ = ("bound", "counter", "done", "emitted", "expansions", "heap", "lists", "order")

    def __init__(self) -> None:
        # heap entries: (-prob, tiebreak, kind, payload); kind 0 = partial word, 1 = word.
        self.heap: list[tuple] = []
        self.counter = 0
        self.lists: list[tuple[float, list[float], list[int], tuple[int, ...], int]] = []
        self.emitted: dict[str, float] = {}
        self.order: list[str] = []
        self.expansions = 0
        self.bound = 0.0  # largest probability of a word the search could not see
        self.done = False

    def push(self, prob: float, kind: int, payload) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (-prob, self.counter, kind, payload))

    def add_children(
        self, parent_prob: float, lps: list[float], ids: list[int], prefix: tuple, more: bool
    ) -> None:
        """Register an expanded node's sorted continuations and push the first one."""
        list_id = len(self.lists)
        self.lists.append((parent_prob, lps, ids, prefix, int(more)))
        self._push_child(list_id, 0)

    def _push_child(self, list_id: int, j: int) -> None:
        parent_prob, lps, ids, prefix, more = self.lists[list_id]
        if j < len(ids):
            prob = parent_prob * math.exp(lps[j])
            if prob > 0:
                self.push(prob, 0, (list_id, j, (*prefix, ids[j])))
        elif more and lps:
            self.bound = max(self.bound, parent_prob * math.exp(lps[-1]))

    def accept(self, word: str, prob: float) -> None:
        """A completed word reached the top: record it, merging identical strings."""
        if not word or "\ufffd" in word:
            return
        if word in self.emitted:
            self.emitted[word] += prob
        else:
            self.emitted[word] = prob
            self.order.append(word)

    def may_merge(self, text: str, k: int) -> bool:
        best = sorted(self.emitted, key=self.emitted.__getitem__, reverse=True)[:k]
        return any(w.startswith(text) for w in best)

    def kth(self, k: int) -> float:
        return sorted(self.emitted.values(), reverse=True)[k - 1]

    def next_sibling(self, payload) -> None:
        list_id, j, _ = payload
        self._push_child(list_id, j + 1)


def _below_kth(prob: float, s: _Search, waiting: list[tuple], k: int) -> bool:
    """Whether ``prob`` is below the k-th largest probability of the words seen so far."""
    seen = [*s.emitted.values(), *(-e[0] for e in waiting)]
    return len(seen) >= k and prob < heapq.nlargest(k, seen)[-1]


def _best_first(
    root: torch.Tensor,
    extend: Extend,
    classes: TokenClasses,
    tokenizer,
    *,
    k: int,
    policy: str,
    max_expansions: int,
    nodes_per_round: int,
    rows_per_round: int | None,
    children_per_node: int,
    merge_tail: float,
    max_word_tokens: int | None,
) -> list[NextWords]:
    batch, vocab = root.shape
    root_ok = classes.starts & ~classes.blank & ~classes.special
    cont_ok = ~classes.starts & ~classes.special
    boundary = classes.starts | classes.ends
    m_root = min(vocab, max(children_per_node, 4 * k))
    m_child = min(vocab, children_per_node)

    searches = [_Search() for _ in range(batch)]
    lps, ids = root.masked_fill(~root_ok, float("-inf")).topk(m_root, dim=-1)
    lps_l, ids_l = lps.tolist(), ids.tolist()
    more_root = int(root_ok.sum()) > m_root
    for b, s in enumerate(searches):
        pairs = [(lp, i) for lp, i in zip(lps_l[b], ids_l[b], strict=True) if lp > float("-inf")]
        s.add_children(1.0, [p[0] for p in pairs], [p[1] for p in pairs], (), more_root)

    while True:
        jobs: list[tuple[int, tuple[int, ...], float]] = []
        n_open = sum(not s.done for s in searches)
        # Rows per round: every open context gets ``nodes_per_round`` expansions (optionally a
        # larger share of ``rows_per_round`` when few contexts are left).  The extra nodes are
        # the next best partial words (popped past completed words, which wait for the next
        # round): they only add entries to the heap, and words are still accepted in exact order.
        quota = nodes_per_round
        if rows_per_round:
            quota = max(nodes_per_round, rows_per_round // max(1, n_open))
        for b, s in enumerate(searches):
            if s.done:
                continue
            popped = 0
            waiting: list[tuple] = []
            while s.heap:
                neg, _, kind, payload = s.heap[0]
                if len(s.order) >= k:
                    if -neg < merge_tail * s.kth(k):
                        break
                    if kind == 0 and not s.may_merge(decode_word(tokenizer, payload[2]), k):
                        # Only other tokenisations of the k words are sought now.
                        heapq.heappop(s.heap)
                        s.next_sibling(payload)
                        continue
                if kind == 1:
                    if popped:
                        # A pending expansion may still produce a better word: this one waits.
                        waiting.append(heapq.heappop(s.heap))
                        continue
                    heapq.heappop(s.heap)
                    s.accept(decode_word(tokenizer, payload), -neg)
                    continue
                if popped >= quota or s.expansions >= max_expansions:
                    break
                if popped and len(s.order) < k and _below_kth(-neg, s, waiting, k):
                    break  # no speculation below the k-th best word seen so far
                heapq.heappop(s.heap)
                s.next_sibling(payload)
                jobs.append((b, payload[2], -neg))
                s.expansions += 1
                popped += 1
            for entry in waiting:
                heapq.heappush(s.heap, entry)
            if not popped:
                s.done = True
        if not jobs:
            break
        out = extend([j[0] for j in jobs], [list(j[1]) for j in jobs]).float()
        bnd = torch.logsumexp(out.masked_fill(~boundary, float("-inf")), dim=-1).exp().tolist()
        c_lps, c_ids = out.masked_fill(~cont_ok, float("-inf")).topk(m_child, dim=-1)
        c_lps, c_ids = c_lps.tolist(), c_ids.tolist()
        more_child = int(cont_ok.sum()) > m_child
        for n, (b, seq, prob) in enumerate(jobs):
            s = searches[b]
            s.push(prob * bnd[n], 1, seq)
            if max_word_tokens is not None and len(seq) >= max_word_tokens:
                # Longer words are left out; one of them may beat the k-th word.
                if c_lps[n] and c_lps[n][0] > -1e30:
                    s.bound = max(s.bound, prob * math.exp(c_lps[n][0]))
                continue
            pairs = [(lp, i) for lp, i in zip(c_lps[n], c_ids[n], strict=True) if lp > -1e30]
            s.add_children(prob, [p[0] for p in pairs], [p[1] for p in pairs], seq, more_child)

    method = f"best-first(merge_tail={merge_tail:g}"
    method += f", max_word_tokens={max_word_tokens})" if max_word_tokens else ")"
    results = []
    for b, s in enumerate(searches):
        budget_hit = s.expansions >= max_expansions and any(e[2] == 0 for e in s.heap)
        # Out of budget: fill up with the best completed words found, flagged inexact.
        while len(s.order) < k and s.heap:
            neg, _, kind, payload = heapq.heappop(s.heap)
            if kind == 1:
                s.accept(decode_word(tokenizer, payload), -neg)
        ranked = sorted(s.order, key=lambda w: -s.emitted[w])[:k]
        probs = [s.emitted[w] for w in ranked]
        exact = not budget_hit and (len(probs) < k or probs[-1] >= s.bound)
        results.append(
            _finish(
                ranked,
                probs,
                root[b],
                classes,
                method=method,
                exact=exact,
                expansions=s.expansions,
                policy=policy,
            )
        )
    return results
