"""Top-k next *words* (not subword pieces) for a batch of contexts.

Definitions (docs/design.md §1, "Next words from subword models"; the token classes and the
boundary rule are `worker.tokens`'):

- A next word after a context is a token sequence t1..tn where t1 starts a new word (and is not
  blank or special) and t2..tn do not.  Its probability is
  ``P(t1..tn | context) * P(boundary | context, t1..tn)`` where the boundary probability is the
  total probability of the tokens that start a new word plus the end-of-text tokens.  Token
  sequences that decode to the same string are merged by summing their probabilities (the
  probability of a string is the sum over its tokenisations); strings that are empty or not
  valid UTF-8 are dropped.
- Word-level vocabularies (every token starts a word): the words are the top-k tokens with the
  special tokens removed (method ``"word-level-topk"``), as docs/design.md says.
- Subword vocabularies: exact best-first search (method ``"best-first"``, `WordSearch`).
  Partial words and completed words share one max-heap per context; the search is sequential:
  the most probable open entry is taken, a partial word is expanded (its next-token
  distribution, scored on top of the context's KV cache) and a completed word is accepted.  The
  probability of a word never exceeds that of any of its prefixes, so the accepted words come
  out in exact order of their best tokenisation.  After the k-th distinct word the search goes
  on while the best open entry is at least ``merge_tail`` (default 0.05) times the k-th word's
  probability, expanding only partial words whose text begins one of the k words, so that
  other tokenisations of the same strings are added and the k words are re-ranked by their
  summed probability; a tokenisation it leaves unseen is below that threshold.  How many
  tokenisations were summed into the k words beyond each word's first is recorded
  (``merged_tokenisations``).  Siblings are pushed lazily from each expanded node's top
  ``children_per_node`` continuations; the search reports ``exact=False`` when it ran out of its
  expansion budget or when a word it could not see might have beaten the k-th word.
- Batching: the searches of many contexts run side by side, one partial word each per forward
  (`top_words` over ``extend``, or `worker.sampler` in the slots of a sampling batch).  When a
  forward has room to spare (a batch's tail), a search also sends its next-best open partial
  words (`WordSearch.speculate`); their distributions wait in a memo until the sequential search
  asks for them, so the outcome of a context's search is a function of the context alone,
  whatever its batch-mates and whatever was speculated.

Special tokens are never returned.  If a special token is more probable than the best word
(``special_top1``), the caller's policy applies: ``"skip"`` marks the result skipped,
``"renormalise"`` divides the word probabilities by ``1 - P(special tokens | context)``; both
record the special token and its probability.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from worker.models import host_read
from worker.tokens import TokenClasses, word_texts

SPECIAL_POLICIES = ("skip", "renormalise")


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
    merged: int = 0  # tokenisations summed into the words beyond each word's first

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
            "merged_tokenisations": self.merged,
        }


Extend = Callable[[Sequence[int], Sequence[Sequence[int]]], torch.Tensor]
"""``extend(rows, continuations)``: next-token log-probabilities [N, V] after context
``rows[i]`` followed by the tokens ``continuations[i]``."""


@dataclass(frozen=True)
class _Special:
    """The most probable special token after a context (its name and probability) and the
    total probability of the special tokens there."""

    prob: float
    token: str | None
    mass: float


def special_parts(roots: torch.Tensor, classes: TokenClasses) -> list[torch.Tensor]:
    """On the device: the most probable special token's probability and id, and the special
    tokens' total probability, per root [B, V] (`specials_from` reads them on the host)."""
    special_lp = roots.masked_fill(~classes.special, float("-inf"))
    sp_lp, sp_id = special_lp.max(dim=-1)
    return [sp_lp.exp(), sp_id, special_lp.exp().sum(-1)]


def specials_from(
    probs: torch.Tensor, ids: torch.Tensor, mass: torch.Tensor, classes: TokenClasses
) -> list[_Special]:
    """`special_parts` in host memory, as `_Special` records."""
    out = []
    for prob, i, m in zip(probs.tolist(), ids.tolist(), mass.tolist(), strict=True):
        name = classes.special_names.get(i, f"<{i}>") if prob > 0 else None
        out.append(_Special(prob, name, m))
    return out


def _finish(
    words: list[str],
    probs: list[float],
    special: _Special,
    *,
    method: str,
    exact: bool,
    expansions: int,
    policy: str,
    merged: int = 0,
) -> NextWords:
    top1 = special.prob > (probs[0] if probs else 0.0)
    renormalised = policy == "renormalise" and special.mass < 1.0
    if renormalised:
        probs = [p / (1.0 - special.mass) for p in probs]
    return NextWords(
        words=words,
        probs=probs,
        method=method,
        exact=exact,
        expansions=expansions,
        special_top1=top1,
        special_token=special.token,
        special_prob=special.prob,
        special_mass=special.mass,
        policy=policy,
        renormalised=renormalised,
        skipped=policy == "skip" and top1,
        merged=merged,
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
    children_per_node: int = 64,
    merge_tail: float = 0.05,
    max_word_tokens: int | None = None,
    round_tokens: int = 64,
    max_speculative: int = 4,
    depths: Sequence[int | None] | None = None,
) -> list[NextWords]:
    """Top-k next words for a batch of contexts.

    ``root_logprobs`` [B, V]: next-token log-probabilities after each context.  ``extend`` (see
    `Extend`) scores continuations; it is not called for word-level vocabularies.  Each
    context's search (`WordSearch`) is the sequential best-first search of the module
    docstring, at most ``max_expansions`` partial words; ``max_word_tokens`` (None: no limit)
    leaves out words of more tokens than that (a degenerate model can make a partial word that
    never ends, one forward per token), and the result is flagged inexact when such a word could
    have beaten the k-th.  After the k-th distinct word it goes on while the best open entry is
    at least ``merge_tail`` times the k-th word's probability, to collect other tokenisations of
    the same strings.

    The searches run in rounds, one batched ``extend`` per round with each open search's next
    partial word.  When fewer than ``round_tokens`` searches are open (the tail of a batch), each
    also sends up to ``max_speculative`` of its next-best partial words, so that the round's
    spare rows do work the search will probably need; a speculative result is only kept until
    the search asks for that word, so the words, probabilities and flags of a context do not
    depend on which contexts share its rounds or on the speculation.  ``depths`` (one per
    context, None: no limit) caps a word's tokens like ``max_word_tokens``, per context: the
    positions the model has left after it (`WordSearch.depth`).
    """
    settings = SearchSettings(
        classes.to(root_logprobs.device),
        tokenizer,
        k=k,
        policy=special_policy,
        max_expansions=max_expansions,
        children_per_node=children_per_node,
        merge_tail=merge_tail,
        max_word_tokens=max_word_tokens,
    )
    root_logprobs = root_logprobs.float()
    if settings.classes.word_level:
        return settings.word_level(root_logprobs)
    if extend is None:
        raise ValueError("a subword vocabulary needs an extend function")
    searches = settings.start(root_logprobs)
    for s, depth in zip(searches, depths or [None] * len(searches), strict=True):
        s.depth = depth
    while True:
        open_ = [(b, s) for b, s in enumerate(searches) if s.next() is not None]
        if not open_:
            break
        extra = 0
        if len(open_) < round_tokens:
            extra = max(0, min(max_speculative, round_tokens // len(open_) - 1))
        rows: list[int] = []
        jobs: list[tuple[WordSearch, tuple[int, ...]]] = []
        for b, s in open_:
            for node in s.speculate(extra):
                rows.append(b)
                jobs.append((s, node))
        # The searches' own next words last: a speculative result is memoised before the
        # search's expansion can ask for it.
        for b, s in open_:
            rows.append(b)
            jobs.append((s, s.next()))
        out = extend(rows, [list(node) for _, node in jobs])
        for (s, node), expansion in zip(jobs, settings.expand(out), strict=True):
            s.feed(node, *expansion)
    return [s.result() for s in searches]


@dataclass(frozen=True, eq=False)
class SearchSettings:
    """What the word searches over one vocabulary share: its token classes (on the device of
    the log-probabilities), the tokenizer and the limits of `top_words`.  ``start`` opens one
    `WordSearch` per context, ``expand`` turns the next-token log-probabilities after partial
    words into what `WordSearch.feed` takes; both work on whole batches."""

    classes: TokenClasses
    tokenizer: Any
    k: int = 5
    policy: str = "renormalise"
    max_expansions: int = 256
    children_per_node: int = 64
    merge_tail: float = 0.05
    max_word_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.policy not in SPECIAL_POLICIES:
            raise ValueError(f"special_policy must be one of {SPECIAL_POLICIES}")
        cl = self.classes
        vocab = cl.vocab_size
        set_ = object.__setattr__
        set_(self, "root_ok", cl.starts & ~cl.blank & ~cl.special)
        set_(self, "cont_ok", ~cl.starts & ~cl.special)
        set_(self, "boundary", cl.starts | cl.ends)
        set_(self, "m_root", min(vocab, max(self.children_per_node, 4 * self.k)))
        set_(self, "m_child", min(vocab, self.children_per_node))
        set_(self, "more_root", int(self.root_ok.sum()) > self.m_root)
        set_(self, "more_child", int(self.cont_ok.sum()) > self.m_child)
        # For `expand`: the continuation tokens' ids, and the boundary as a 0/1 vector.
        set_(self, "cont_ids", self.cont_ok.nonzero().flatten())
        set_(self, "boundary_f", self.boundary.float())
        method = f"best-first(merge_tail={self.merge_tail:g}"
        method += f", max_word_tokens={self.max_word_tokens})" if self.max_word_tokens else ")"
        set_(self, "method", method)
        # The searches' word texts, remembered (`worker.tokens.WordTexts`).
        set_(self, "word_text", word_texts(self.tokenizer))

    # Each batched step of the searches has a device half (``*_parts``: tensors, no read on the
    # host) and a host half (``*_from``: the parts in host memory), so that a caller reads a
    # whole step's parts at once (`worker.models.host_read`: one device-to-host copy, the
    # sampler's one synchronisation a step); ``word_level``, ``start`` and ``expand`` do both.

    def word_level_parts(self, roots: torch.Tensor) -> list[torch.Tensor]:
        """Word-level vocabularies, on the device: the top-k tokens without the special ones
        (probabilities and ids), and the special tokens' `special_parts`."""
        masked = roots.masked_fill(self.classes.special, float("-inf"))
        vals, idx = masked.topk(min(self.k, masked.shape[-1]), dim=-1)
        return [vals.exp(), idx, *special_parts(roots, self.classes)]

    def word_level_from(self, probs, ids, *specials, rows=None) -> list[NextWords]:
        """`word_level_parts` in host memory (``rows``: of these rows only) as results."""
        out = []
        for v_row, i_row, special in _pick(
            rows, probs.tolist(), ids.tolist(), specials_from(*specials, self.classes)
        ):
            pairs = [(self.word_text([i]), v) for v, i in zip(v_row, i_row, strict=True) if v > 0]
            out.append(
                _finish(
                    [w for w, _ in pairs],
                    [p for _, p in pairs],
                    special,
                    method="word-level-topk",
                    exact=True,
                    expansions=0,
                    policy=self.policy,
                )
            )
        return out

    def word_level(self, roots: torch.Tensor) -> list[NextWords]:
        """Word-level vocabularies: the top-k tokens without the special ones."""
        return self.word_level_from(*host_read(self.word_level_parts(roots)))

    def start_parts(self, roots: torch.Tensor) -> list[torch.Tensor]:
        """On the device, per root [B, V]: the best ``m_root`` tokens that begin a word
        (log-probabilities and ids) and the special tokens' `special_parts`."""
        roots = roots.float()
        lps, ids = roots.masked_fill(~self.root_ok, float("-inf")).topk(self.m_root, dim=-1)
        return [lps, ids, *special_parts(roots, self.classes)]

    def start_from(self, lps, ids, *specials, rows=None) -> list[WordSearch]:
        """One search per row of `start_parts` in host memory (``rows``: of these only)."""
        searches = []
        for lp_row, id_row, special in _pick(
            rows, lps.tolist(), ids.tolist(), specials_from(*specials, self.classes)
        ):
            pairs = [(lp, i) for lp, i in zip(lp_row, id_row, strict=True) if lp > float("-inf")]
            searches.append(WordSearch(self, pairs, special))
        return searches

    def start(self, roots: torch.Tensor) -> list[WordSearch]:
        """One search per root [B, V] (subword vocabularies)."""
        return self.start_from(*host_read(self.start_parts(roots)))

    def expand_parts(self, out: torch.Tensor) -> list[torch.Tensor]:
        """On the device, for each row of ``out`` [N, V] (the log-probabilities after a partial
        word): the probability that a word ends there, and the best continuation tokens'
        log-probabilities and ids (at most ``children_per_node``)."""
        out = out.float()
        bnd = (out.exp() * self.boundary_f).sum(-1)
        m = min(self.m_child, self.cont_ids.numel())
        if not m:
            return [bnd]
        c_lps, pos = out.index_select(1, self.cont_ids).topk(m, dim=-1)
        return [bnd, c_lps, self.cont_ids[pos]]

    def expand_from(
        self, bnd, c_lps=None, c_ids=None
    ) -> list[tuple[float, list[float], list[int]]]:
        """`expand_parts` in host memory: what `WordSearch.feed` takes, per row."""
        bnd = bnd.tolist()
        if c_lps is None:
            return [(b, [], []) for b in bnd]
        result = []
        for b, lp_row, id_row in zip(bnd, c_lps.tolist(), c_ids.tolist(), strict=True):
            keep = [j for j, lp in enumerate(lp_row) if lp > -1e30]
            result.append((b, [lp_row[j] for j in keep], [id_row[j] for j in keep]))
        return result

    def expand(self, out: torch.Tensor) -> list[tuple[float, list[float], list[int]]]:
        """For each row of ``out`` [N, V] (the log-probabilities after a partial word): the
        probability that a word ends there, and the best continuation tokens with their
        log-probabilities (at most ``children_per_node``)."""
        return self.expand_from(*host_read(self.expand_parts(out)))


def _pick(rows: Sequence[int] | None, *columns: list) -> list[tuple]:
    """The ``rows`` (None: all) of parallel lists, as tuples."""
    whole = list(zip(*columns, strict=True))
    return whole if rows is None else [whole[i] for i in rows]


class WordSearch:
    """The best-first search of one context's top-k words (the module docstring), driven from
    outside: `next` runs it until it needs the next-token distribution after a partial word and
    returns that word's tokens (None: the search is over), `feed` gives a distribution (as
    `SearchSettings.expand` makes it), `result` reads the words.

    The order of the search is sequential (one partial word at a time, always the most probable
    open one), so its outcome is a function of the context alone.  `speculate` names words the
    search will probably ask for next; their results, fed before they are asked for, wait in a
    memo, which saves rounds (a batch's tail) without changing the outcome.
    """

    __slots__ = (
        "asked", "best", "bound", "counter", "depth", "done", "emitted", "expansions", "heap",
        "lists", "memo", "order", "pending", "settings", "special", "ways",
    )  # fmt: skip

    def __init__(self, settings: SearchSettings, roots: list[tuple[float, int]], special):
        self.settings = settings
        self.special = special
        # heap entries: (-prob, tiebreak, kind, payload); kind 0 = partial word, 1 = word.
        self.heap: list[tuple] = []
        self.counter = 0
        self.lists: list[tuple[float, list[float], list[int], tuple[int, ...], int]] = []
        self.emitted: dict[str, float] = {}
        self.ways: dict[str, int] = {}
        self.order: list[str] = []
        self.best: list[str] | None = None  # `_best`, until the next accepted word
        self.expansions = 0
        self.bound = 0.0  # largest probability of a word the search could not see
        self.memo: dict[tuple[int, ...], tuple] = {}
        self.asked: set[tuple[int, ...]] = set()
        self.pending: tuple[tuple[int, ...], float] | None = None
        self.done = False
        # Tokens a word may have here (None: no limit but ``max_word_tokens``): the room left in
        # the model's context after this one (`worker.sampler`).
        self.depth: int | None = None
        self._add_children(
            1.0, [p[0] for p in roots], [p[1] for p in roots], (), settings.more_root
        )

    def _push(self, prob: float, kind: int, payload) -> None:
        self.counter += 1
        heapq.heappush(self.heap, (-prob, self.counter, kind, payload))

    def _add_children(self, parent_prob, lps, ids, prefix, more) -> None:
        """Register an expanded node's sorted continuations and push the first one."""
        list_id = len(self.lists)
        self.lists.append((parent_prob, lps, ids, prefix, int(more)))
        self._push_child(list_id, 0)

    def _push_child(self, list_id: int, j: int) -> None:
        parent_prob, lps, ids, prefix, more = self.lists[list_id]
        if j < len(ids):
            prob = parent_prob * math.exp(lps[j])
            if prob > 0:
                self._push(prob, 0, (list_id, j, (*prefix, ids[j])))
        elif more and lps:
            self.bound = max(self.bound, parent_prob * math.exp(lps[-1]))

    def _accept(self, word: str, prob: float) -> None:
        """A completed word reached the top: record it, merging identical strings."""
        if not word or "\ufffd" in word:
            return
        self.best = None
        if word in self.emitted:
            self.emitted[word] += prob
            self.ways[word] += 1
        else:
            self.emitted[word] = prob
            self.ways[word] = 1
            self.order.append(word)

    def _best(self) -> list[str]:
        """The k most probable words so far, sorted once per accepted word: every heap entry
        the search looks at after the k-th word asks for them (`_skippable`)."""
        if self.best is None:
            emitted = self.emitted
            self.best = sorted(emitted, key=emitted.__getitem__, reverse=True)[: self.settings.k]
        return self.best

    def _may_merge(self, text: str) -> bool:
        return any(w.startswith(text) for w in self._best())

    def _kth(self) -> float:
        return self.emitted[self._best()[-1]]

    def _skippable(self, prob: float, kind: int, payload) -> bool | None:
        """After the k-th word: None when the search is over (the best open entry is below the
        merge tail), True for a partial word that cannot spell one of the k words."""
        if len(self.order) < self.settings.k:
            return False
        if prob < self.settings.merge_tail * self._kth():
            return None
        return kind == 0 and not self._may_merge(self.settings.word_text(payload[2]))

    def next(self) -> tuple[int, ...] | None:
        """The partial word whose distribution the search needs next (None: it is over)."""
        if self.pending is not None:
            return self.pending[0]
        if self.done:
            return None
        st = self.settings
        while self.heap:
            neg, _, kind, payload = self.heap[0]
            skip = self._skippable(-neg, kind, payload)
            if skip is None or (kind == 0 and not skip and self.expansions >= st.max_expansions):
                break
            heapq.heappop(self.heap)
            if kind == 1:
                self._accept(st.word_text(payload), -neg)
                continue
            self._push_child(payload[0], payload[1] + 1)
            if skip:
                continue
            self.expansions += 1
            node = payload[2]
            known = self.memo.pop(node, None)
            if known is None:
                self.pending = (node, -neg)
                return node
            self._expand(node, -neg, *known)
        self.done = True
        return None

    def speculate(self, n: int) -> list[tuple[int, ...]]:
        """Up to ``n`` partial words besides the pending one that the search will probably ask
        for next (the best open ones), not asked for before."""
        if n <= 0 or self.done:
            return []
        st = self.settings
        room = st.max_expansions - self.expansions - len(self.memo) - len(self.asked)
        out: list[tuple[int, ...]] = []
        pending = self.pending[0] if self.pending else None
        for neg, _, kind, payload in heapq.nsmallest(4 * n + 8, self.heap):
            if len(out) >= min(n, room):
                break
            if kind == 1:
                continue
            node = payload[2]
            if node == pending or node in self.memo or node in self.asked:
                continue
            skip = self._skippable(-neg, kind, payload)
            if skip is None:
                break
            if not skip:
                out.append(node)
        self.asked.update(out)
        return out

    def feed(self, node: tuple[int, ...], bnd: float, lps: list[float], ids: list[int]) -> None:
        """The distribution after partial word ``node`` (see `SearchSettings.expand`)."""
        self.asked.discard(node)
        if self.pending is not None and node == self.pending[0]:
            prob = self.pending[1]
            self.pending = None
            self._expand(node, prob, bnd, lps, ids)
        else:
            self.memo[node] = (bnd, lps, ids)

    def _expand(self, node, prob, bnd, lps, ids) -> None:
        self._push(prob * bnd, 1, node)
        limit = self.settings.max_word_tokens
        if self.depth is not None and (limit is None or self.depth < limit):
            limit = self.depth
        if limit is not None and len(node) >= limit:
            # Longer words are left out; one of them may beat the k-th word.
            if lps:
                self.bound = max(self.bound, prob * math.exp(lps[0]))
            return
        self._add_children(prob, lps, ids, node, self.settings.more_child)

    def result(self) -> NextWords:
        """The words of a finished search (`next` returned None)."""
        st = self.settings
        budget_hit = self.expansions >= st.max_expansions and any(e[2] == 0 for e in self.heap)
        # Out of budget: fill up with the best completed words found, flagged inexact.
        while len(self.order) < st.k and self.heap:
            neg, _, kind, payload = heapq.heappop(self.heap)
            if kind == 1:
                self._accept(st.word_text(payload), -neg)
        ranked = sorted(self.order, key=lambda w: -self.emitted[w])[: st.k]
        probs = [self.emitted[w] for w in ranked]
        exact = not budget_hit and (len(probs) < st.k or probs[-1] >= self.bound)
        return _finish(
            ranked,
            probs,
            self.special,
            method=st.method,
            exact=exact,
            expansions=self.expansions,
            policy=st.policy,
            merged=sum(self.ways[w] - 1 for w in ranked),
        )


def search_settings(model, classes: TokenClasses, spec) -> SearchSettings:
    """The word search of ``spec`` (a `worker.prefixes.PrefixSpec`) over ``model``'s
    vocabulary."""
    return SearchSettings(
        classes,
        model.tokenizer,
        k=spec.top_k,
        policy=spec.special_policy,
        max_expansions=spec.max_expansions,
        max_word_tokens=spec.max_word_tokens,
    )


def search_words(model, state, root, classes, spec, depths=None) -> list[NextWords]:
    """The next words after the contexts of ``state`` (``model.start``'s), by rounds of
    ``model.extend`` (`worker.words.top_words`; ``depths`` as there)."""
    return top_words(
        root,
        lambda rows, conts: model.extend(state, rows, conts),
        classes,
        model.tokenizer,
        k=spec.top_k,
        special_policy=spec.special_policy,
        max_expansions=spec.max_expansions,
        max_word_tokens=spec.max_word_tokens,
        depths=depths,
    )
