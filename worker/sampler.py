"""Prefixes, continuations and next words of a causal LM in one continuously batched loop.

`ContinuousSampler` keeps up to ``batch`` texts in the model's slots (`CausalLM.open_slots`: a
KV cache whose rows each hold one text, from column 0, with no padding) and runs one forward
per step in which every slot takes one token:

- a context token (the start token, the prompt, or a text prefix's tokens), fed one per step;
- a sampled token (ancestral sampling with temperature, top-k, top-p as configured);
- the word search's next partial word (`worker.words.WordSearch`), scored on the slot's own
  cache as a tree node after the context.

A prefix is done at the token that would start word l + 1 (its distribution is the one the
next words are read from), at an end of text, or after ``prefix_tokens_per_word * (l + 1)``
tokens.  With a word search the row then searches in place, one partial word per step, and its
slot is taken by the next waiting text as soon as its search is over; nothing is copied
between caches.  The batch stays full until the queue is empty; in its tail the live slots are
packed to the front (a forward covers only those), the buffers shrink when half are free, and
searches that have the forward to themselves send up to ``max_speculative`` speculative partial
words each (their own next-best ones, `WordSearch.speculate`).  Each prefix draws its uniforms
from its own generator, only while it is sampling, and each search is sequential and memoises
speculative results, so an item does not depend on the batch size or on which texts share its
batch (float rounding of a different batch aside).

Continuations (ratings studies, `worker.continuations`): with a `Continuation` a row that has
its l words goes on in the same slot to sample l_gen more words with the continuation's
settings; ``run(drafts, from_context=True)`` starts rows at their context's end (data prefixes:
prompt + prefix encoded) and samples the continuation only.  The first token of a continuation
must start a new word (as after a prompt), so the prefix's last word is never extended.  An end
of text before l_gen words re-samples the continuation alone from its context (the prefix stays
as it was) or skips the item, by the continuation's ``eos_policy``.  Without sampling (a search
and ``from_context``) the rows are text prefixes whose next words are searched after their
context.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from worker.models import (
    APPEND,
    CONTEXT,
    HOST_READ_EXACT,
    host_read,
    release_heap,
    upload,
)
from worker.sampling import Continuation, sample_tokens, sampling_record
from worker.slot_layout import SlotLayout
from worker.tokens import TokenClasses, decode_word
from worker.words import NextWords, SearchSettings, WordSearch

# Tokens a row is expected to hold per word of its prompt, prefix and continuation, plus the
# word search's partial words (`expected_columns`, for the batch size).
TOKENS_PER_WORD = 1.5
SEARCH_COLUMNS = 16


def expected_columns(spec, length: int) -> int:
    """Cached tokens a row of cell (``length``, kind) is expected to hold: the start token,
    ``TOKENS_PER_WORD`` per word of its prompt, prefix, next word and continuation, and
    ``SEARCH_COLUMNS`` for the word search."""
    words = spec.prompt_words + length + 1 + spec.continuation_words
    return 1 + math.ceil(TOKENS_PER_WORD * words) + SEARCH_COLUMNS


@dataclass(eq=False)
class _Row:
    """One text in a slot: its draft, phase (0: the prefix, 1: the continuation, 2: a text
    prefix's word search only), attempt at that phase, random stream, context (fed first) and
    tokens sampled so far (``start`` of them, and ``split`` of their word groups, before the
    phase began)."""

    draft: Any
    attempt: int
    rng: np.random.Generator | None
    context: list[int]
    cap: int  # most tokens it may have sampled when its phase ends
    slot: int = -1
    tokens: list[int] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)
    phase: int = 0
    start: int = 0
    split: int = 0
    count: int = 0  # words begun in this phase
    in_word: bool = False
    fed: int = 0  # context tokens fed so far
    token: int | None = None  # sampled, to be fed
    out: int | None = None  # where its next-token distribution is in the last output
    # What the last step read for the row (`ContinuousSampler._forward`): its sampled token;
    # its continuation's first token and generator, had its prefix ended there; where its
    # search's start is in the step's roots, had its search begun there.
    sampled: int | None = None
    switch: tuple[int, np.random.Generator] | None = None
    root: int | None = None
    search: WordSearch | None = None
    nodes: dict[tuple[int, ...], int] = field(default_factory=dict)  # partial word -> handle
    rng_state: dict | None = None  # the draft's generator when the row began (`_evict`)


class ContinuousSampler(SlotLayout):
    """Samples the prefixes of ``drafts`` and searches their next words (the module docstring).

    A draft (`worker.prefixes._Draft`) brings ``index``, ``rng``, ``prompt`` and ``info``; the
    sampler sets its ``words``, ``skip`` and ``info``.  ``reseed(draft, attempt)`` gives the
    generator of a re-sampled attempt; ``search`` (`worker.words.SearchSettings`; None: prefixes
    only) the next words.  A finished draft gets ``ids`` (its context tokens, without the token
    that starts word l + 1) and, with ``keep_roots`` and a search, ``root`` (the
    log-probabilities its words came from).  With a ``continuation`` (no search) a finished
    prefix goes on: the draft gets ``continuation`` (its words) and ``info["continuation"]``, and
    ``skip`` when the continuation fails (``"eos_before_l_gen"``, ``"continuation_too_long"``).
    ``memory`` (bytes; None: no limit) bounds the KV cache of the slots at every step, while
    a row widens it too (`_fit`: rows pause, or go back to the queue, rather than pass it);
    ``max_speculative`` the speculative partial words per search and step in the tail.
    """

    def __init__(
        self,
        model,
        classes: TokenClasses,
        spec,
        length: int,
        batch: int,
        reseed: Callable[[Any, int], np.random.Generator],
        search: SearchSettings | None,
        *,
        keep_roots: bool = False,
        continuation: Continuation | None = None,
        memory: int | None = None,
        max_speculative: int = 4,
    ):
        if continuation is not None and search is not None:
            raise ValueError("a continuation follows a prefix without a word search")
        self.model, self.classes, self.spec, self.batch = model, classes, spec, batch
        self.reseed, self.search, self.keep_roots = reseed, search, keep_roots
        self.continuation = continuation
        self.memory, self.max_speculative = memory, max_speculative
        self.sampling = sampling_record(spec)
        cont_spec = continuation.spec if continuation is not None else spec
        self.specs = (spec, cont_spec)
        self.cont_sampling = sampling_record(cont_spec)
        same = {k: v for k, v in self.sampling.items() if k != "eos_policy"}
        self.same_sampling = same == {
            k: v for k, v in self.cont_sampling.items() if k != "eos_policy"
        }
        # Special tokens other than the end of text are not text and are never sampled, except
        # the unknown word of a word-level vocabulary (wiki-103 text contains "<unk>").
        allowed = ~classes.special | classes.ends
        unk = model.tokenizer.unk_token_id
        if classes.word_level and unk is not None and unk < allowed.numel():
            allowed[unk] = True
        self.allowed = allowed
        self.starts_l, self.blank_l = classes.starts.tolist(), classes.blank.tolist()
        self.ends_l = classes.ends.tolist()
        self.every_allowed = bool(allowed.all())  # GPT-2: its one special token is end of text
        # After a prompt, and at a continuation's start, the first token must start a new word.
        self.first_allowed = allowed & (classes.starts | classes.ends)
        self.length = length
        self.goals = (length, continuation.words if continuation is not None else 0)
        self.max_new = spec.prefix_tokens_per_word * (length + 1)
        self.cont_max = (
            cont_spec.prefix_tokens_per_word * (continuation.words + 1) if continuation else 0
        )
        self.results: dict[int, NextWords] = {}
        self.queue: deque = deque()  # (draft, attempt, phase) waiting for a slot
        self.after_prompt = False
        self.rows: list[_Row | None] = []
        self.state: Any = None
        self.out: torch.Tensor | None = None
        # The word searches' starts read in the last step (`SearchSettings.start_from`'s or
        # `word_level_from`'s arguments, in host memory), indexed by `_Row.root`.
        self.started: list | None = None
        self.kept: torch.Tensor | None = None  # their next-token log-probabilities (keep_roots)
        if model.vocab_size >= HOST_READ_EXACT:
            raise ValueError(f"a vocabulary of {model.vocab_size} tokens: ids travel as float32")

    # -- the loop ---------------------------------------------------------------------------

    def run(self, drafts: list, *, from_context: bool = False) -> list[NextWords | None]:
        """Sample the drafts' prefixes (and continuations, or search their next words); with
        ``from_context`` the drafts bring their context as ``ids``: only continuations are
        sampled, or (with a search) only the next words searched."""
        if from_context and self.continuation is None and self.search is None:
            raise ValueError("starting from a context needs a continuation or a word search")
        phase = (1 if self.continuation is not None else 2) if from_context else 0
        self.queue.extend((d, 0, phase) for d in drafts)
        self.after_prompt = bool(not from_context and drafts and drafts[0].prompt)
        if not drafts:
            return []
        n_slots = min(self.batch, len(drafts))
        opened = self._columns(drafts, from_context)
        self.narrow = self._narrow(drafts, from_context)
        if self.memory is not None:
            kv = self.model.kv_bytes_per_token
            n_slots = max(1, min(n_slots, int(self.memory // (self.narrow * kv))))
            opened = max(1, min(opened, int(self.memory // (n_slots * kv))))
        self.state = self.model.open_slots(n_slots, opened)
        self.paused: set[_Row] = set()
        self.extra = 0
        self.rows = [None] * n_slots
        # Bands of slots by width (`_place`): their first slots, and the width each band's
        # rows leave it at.
        self.band_limits = sorted({max(1, self.narrow // 4), max(2, self.narrow // 2), self.narrow})
        self.starts = [0] + [n_slots] * len(self.band_limits)
        while True:
            self._advance()
            feeds = self._feeds()
            if not feeds[0]:
                break
            self._forward(*feeds)
        self.state = self.out = self.started = self.kept = None
        release_heap(self.model.device)  # the step buffers are free now (the slots' are unmapped)
        return [self.results.get(d.index) for d in drafts]

    def _columns(self, drafts: list, from_context: bool) -> int:
        """Columns the slots open with: the longest context and some room; the cache grows by a
        quarter when a row needs more, so its width follows the widest row."""
        context = max(len(d.ids) for d in drafts) if from_context else 1
        return context + SEARCH_COLUMNS

    def _narrow(self, drafts: list, from_context: bool) -> int:
        """Columns beyond which a row is in the widest band (`_place`): what a row is expected
        to hold (`expected_columns`; a context's median length when starting from contexts)."""
        if not from_context:
            return expected_columns(self.spec, self.length)
        lengths = sorted(len(d.ids) for d in drafts)
        words = self.goals[1] + 1
        return lengths[len(lengths) // 2] + math.ceil(TOKENS_PER_WORD * words) + SEARCH_COLUMNS

    def _advance(self) -> None:
        """Rows with a new distribution sample their next token (or begin their search); rows
        that are over leave their slots to waiting ones."""
        ready = [r for r in self.rows if r is not None and r.out is not None]
        searching = [r for r in ready if r.phase == 2]
        sampling = [r for r in ready if r.phase != 2]
        if sampling:
            searching += self._settle_rows(sampling)
        if searching:
            self._begin_searches(searching)
        for r in ready:
            r.out = r.sampled = r.switch = r.root = None
        self._refill()
        self._place()
        if None in self.rows:
            # After `_place`, which may move a row out of a band above a free slot.  Slots stay
            # free in the tail, and while a memory budget holds rows back.
            self._pack()
        if self.paused:
            self._paused_last()

    def _feeds(self):
        """Each live row's token(s) for the next forward: slots, tokens, parents, which outputs
        are read, and for each token (row, partial word) or None."""
        slots: list[int] = []
        tokens: list[int] = []
        parents: list[int] = []
        want: list[bool] = []
        owners: list[tuple[_Row, tuple[int, ...] | None] | None] = []
        extra = self.extra
        for r in self.rows:
            if r is None or r in self.paused:
                continue
            if r.fed < len(r.context):
                r.fed += 1
                last = r.fed == len(r.context)
                slots.append(r.slot)
                tokens.append(r.context[r.fed - 1])
                parents.append(APPEND)
                want.append(last)
                owners.append((r, None) if last else None)
            elif r.token is not None:
                slots.append(r.slot)
                tokens.append(r.token)
                parents.append(APPEND)
                want.append(True)
                owners.append((r, None))
                r.token = None
            else:
                s = r.search
                # Speculative words first: their results are memoised before the search's own
                # word is expanded.
                for node in [*s.speculate(extra), s.next()]:
                    slots.append(r.slot)
                    tokens.append(node[-1])
                    parents.append(CONTEXT if len(node) == 1 else r.nodes[node[:-1]])
                    want.append(True)
                    owners.append((r, node))
        return slots, tokens, parents, want, owners

    def _extra(self) -> int:
        """Speculative partial words per search this step: in the batch's tail, when only
        searches are left and the forward has room."""
        live = [r for r in self.rows if r is not None]
        if live and not self.queue and all(r.search is not None for r in live):
            return max(0, min(self.max_speculative, self.batch // len(live) - 1))
        return 0

    def _forward(self, slots, tokens, parents, want, owners) -> None:
        """One step: the forward, then on the device everything the host needs from it (the
        sampled tokens, the roots of the searches that begin or may begin, the expansions of
        those under way), read in host memory at once (`worker.models.host_read`: on a GPU the
        step's one synchronisation); then the searches take their expansions.  What the device
        needs from the host for that (the rows' places in the forward's output, the uniforms
        they draw with) is sent before, at once (`worker.models.upload`: on a GPU one copy,
        after the forward's own, that does not wait for the GPU)."""
        out, handles = self.model.feed(self.state, slots, tokens, parents, want)
        self.out = out
        jobs: list[tuple[_Row, tuple[int, ...], int]] = []
        i = 0
        for owner, handle, w in zip(owners, handles, want, strict=True):
            if owner is not None:
                r, node = owner
                if node is None:
                    r.out = i
                else:
                    r.nodes[node] = handle
                    jobs.append((r, node, i))
            i += w
        ready = [r for r in self.rows if r is not None and r.out is not None]
        sampling = [r for r in ready if r.phase != 2]
        # The host knows before the token is drawn which rows it may end: a row whose last
        # word has begun ends at a token that starts a new word (or ends the text).
        ending = [r for r in sampling if r.phase == 0 and self._full(r)]
        rooted = [r for r in ready if r.phase == 2]
        if self.search is not None:
            rooted += ending
        switching = ending if self.continuation is not None else []
        send: dict[str, Any] = {}  # the step's host data for the device, by name
        if sampling:
            self._send_rows(send, "sampling", out, sampling)
            self._send_draws(send, "sampling", sampling)
        if switching:
            # The continuation's first token, drawn as if the prefix ended here (from the
            # continuation's own stream, `Continuation.reseed`); kept only where it did.
            streams = [self.continuation.reseed(r.draft, 0) for r in switching]
            self._send_rows(send, "switching", out, switching)
            self._send_draws(send, "switching", switching, streams=streams, phase=1)
        if rooted:
            self._send_rows(send, "rooted", out, rooted)
        if jobs:
            send["jobs"] = [j[2] for j in jobs]
        got = dict(zip(send, upload(*send.values(), device=out.device), strict=True))
        parts: list[torch.Tensor] = []
        if sampling:
            logprobs = self._rows_of(out, got, "sampling")
            parts.append(self._sample(logprobs, sampling, got=got, name="sampling"))
        if switching:
            logprobs = self._rows_of(out, got, "switching")
            parts.append(self._sample(logprobs, switching, got=got, name="switching", phase=1))
        n_start = 0
        if rooted:
            roots = self._rows_of(out, got, "rooted")
            if self.search.classes.word_level:
                start = self.search.word_level_parts(roots)
            else:
                start = self.search.start_parts(roots)
            n_start = len(start)
            parts += start
            if self.keep_roots:
                parts.append(roots)
        if jobs:
            parts += self.search.expand_parts(out[got["jobs"]])
        if not parts:
            return
        host = host_read(parts)
        at = 0
        if sampling:
            for r, t in zip(sampling, host[at].tolist(), strict=True):
                r.sampled = t
            at += 1
        if switching:
            for r, t, g in zip(switching, host[at].tolist(), streams, strict=True):
                r.switch = (t, g)
            at += 1
        if rooted:
            self.started = host[at : at + n_start]
            at += n_start
            self.kept = host[at] if self.keep_roots else None
            at += self.keep_roots
            for j, r in enumerate(rooted):
                r.root = j
        if not jobs:
            return
        for (r, node, _), expansion in zip(jobs, self.search.expand_from(*host[at:]), strict=True):
            r.search.feed(node, *expansion)
        for r in dict.fromkeys(j[0] for j in jobs):
            if r.search.next() is None:
                self._finish_search(r)

    def _send_rows(self, send: dict, name: str, out: torch.Tensor, rows: list[_Row]) -> None:
        """The rows' places in ``out`` (`_rows_of`), as ``send[name]``: none when they are all
        its rows in order (most steps before the tail: a copy of [rows, vocabulary] saved)."""
        at = [r.out for r in rows]
        if not (len(at) == out.shape[0] and at == list(range(len(at)))):
            send[name] = at

    def _rows_of(self, out: torch.Tensor, got: dict, name: str) -> torch.Tensor:
        """The distributions in ``out`` of the rows that `_send_rows` sent as ``name``."""
        index = got.get(name)
        return out if index is None else out.index_select(0, index)

    def _full(self, r: _Row) -> bool:
        """Whether the row's phase has all its words begun (the next new word ends it)."""
        return r.count == self.goals[1 if r.phase == 1 else 0]

    # -- sampling -----------------------------------------------------------------------------

    def _fresh(self, r: _Row) -> bool:
        """Whether the row's next token must start a new word (its phase's first token, after
        a prompt or a prefix)."""
        return len(r.tokens) == r.start and (r.phase == 1 or self.after_prompt)

    def _send_draws(
        self,
        send: dict,
        name: str,
        rows: list[_Row],
        *,
        streams: list[np.random.Generator] | None = None,
        phase: int | None = None,
    ) -> None:
        """The host half of `_sample`, as ``send[name + ...]``: one uniform per row from its own
        stream (``streams``: these instead of the rows'), the rows that must begin a word (if
        any), the rows of each phase (``phase``: all rows in that one) if they differ."""
        streams = streams if streams is not None else [r.rng for r in rows]
        send[f"{name}.u"] = np.array([g.random() for g in streams], dtype=np.float32)
        fresh = [phase == 1 or self._fresh(r) for r in rows]
        if any(fresh):
            send[f"{name}.fresh"] = np.array(fresh, dtype=np.bool_)
        phases = [r.phase if phase is None else phase for r in rows]
        if not self.same_sampling and len(set(phases)) > 1:
            for p in (0, 1):
                send[f"{name}.phase{p}"] = [i for i, q in enumerate(phases) if q == p]

    def _sample(
        self,
        logprobs: torch.Tensor,
        rows: list[_Row],
        *,
        got: dict,
        name: str,
        phase: int | None = None,
    ) -> torch.Tensor:
        """One token per row (on the device), each by its phase's settings (``phase``: all
        rows in that one), from what `_send_draws` sent as ``name`` (``got``: on the device)."""
        phases = [r.phase if phase is None else phase for r in rows]
        u = got[f"{name}.u"]
        fresh = got.get(f"{name}.fresh")
        if fresh is not None:
            mask = torch.where(fresh[:, None], self.first_allowed, self.allowed)
        else:
            mask = None if self.every_allowed else self.allowed[None, :]
        if f"{name}.phase0" not in got:
            return sample_tokens(logprobs, u, self.specs[phases[0]], mask)
        tok = torch.empty(len(rows), dtype=torch.long, device=logprobs.device)
        for p in (0, 1):
            index = got[f"{name}.phase{p}"]
            part = mask if mask is None or mask.shape[0] == 1 else mask[index]
            tok[index] = sample_tokens(logprobs[index], u[index], self.specs[p], part)
        return tok

    def _settle_rows(self, rows: list[_Row]) -> list[_Row]:
        """Settle each row's sampled token; returns the rows whose prefix is done and whose
        search begins."""
        done: list[_Row] = []
        for r in rows:
            outcome = self._settle(r, r.sampled)
            if outcome == "search":
                done.append(r)
            elif outcome == "switch":
                # The prefix ended: the row's token is the continuation's first, drawn from the
                # continuation's settings and stream in the same step (`_forward`).
                t, r.rng = r.switch
                self._settle(r, t)
        return done

    def _settle(self, r: _Row, t: int) -> str:
        """Apply sampled token ``t`` to row ``r``: extend it, end it, re-queue it, begin its
        search (``"search"``) or its continuation (``"switch"``)."""
        blank, starts, ends = self.blank_l[t], self.starts_l[t], self.ends_l[t]
        new_word = not blank and (starts or not r.in_word)
        full = r.count == self.goals[1 if r.phase == 1 else 0]
        if full and (new_word or ends):
            if self.continuation is not None and r.phase == 0:
                self._begin_continuation(r)
                return "switch"
            self._end(r, None)
            if self.search is not None:
                return "search"
            self._free(r)
            return "end"
        if ends:
            spec = self.specs[1 if r.phase == 1 else 0]
            if spec.eos_policy == "resample" and r.attempt + 1 < spec.max_attempts:
                self.queue.append((r.draft, r.attempt + 1, r.phase))
            else:
                self._end(r, "eos_before_l_gen" if r.phase else "eos_before_l")
            self._free(r)
            return "end"
        r.count += new_word
        r.in_word = not blank
        r.tokens.append(t)
        if not blank:
            if new_word or len(r.groups) == r.split:
                r.groups.append([t])
            else:
                r.groups[-1].append(t)
        if len(r.tokens) >= r.cap:
            self._end(r, "continuation_too_long" if r.phase else "too_long")
            self._free(r)
            return "end"
        r.token = t
        return "go"

    def _begin_continuation(self, r: _Row) -> None:
        """The row's prefix is done (recorded as such); it goes on as its continuation's first
        attempt, in the same slot."""
        self._end(r, None)
        r.phase, r.attempt = 1, 0
        # Its stream (`Continuation.reseed`, attempt 0) is the one the step drew its first
        # token from (`_settle_rows`).
        r.rng, r.rng_state = None, None
        r.start, r.split = len(r.tokens), len(r.groups)
        r.count, r.in_word = 0, False
        room = self.cont_max
        if self.model.max_positions:
            room = min(room, self.model.max_positions - len(r.context) - len(r.tokens))
        r.cap = len(r.tokens) + max(room, 1)

    def _end(self, r: _Row, skip: str | None) -> None:
        d = r.draft
        if r.phase == 2:
            return
        words = [decode_word(self.model.tokenizer, g) for g in r.groups[r.split :]]
        if r.phase == 1:
            d.continuation = words
            d.info["continuation"] = {
                "words": self.continuation.words,
                "attempts": r.attempt + 1,
                "sampling": self.cont_sampling,
                "context_tokens": len(r.context) + r.start,
                "tokens": len(r.tokens) - r.start,
            }
            if skip is not None:
                d.skip = skip
            return
        d.info["attempts"] = r.attempt + 1
        d.info["sampling"] = self.sampling
        d.words = words
        d.skip = skip
        if skip is None:
            d.info["context_tokens"] = len(r.context) + len(r.tokens)
            d.ids = [*r.context, *r.tokens]

    # -- the word search ----------------------------------------------------------------------

    def _begin_searches(self, rows: list[_Row]) -> None:
        """The rows' searches begin, from the roots the last step read (`_forward`)."""
        index = [r.root for r in rows]
        if self.keep_roots:
            for r in rows:
                r.draft.root = self.kept[r.root].clone()
        if self.search.classes.word_level:
            results = self.search.word_level_from(*self.started, rows=index)
            for r, res in zip(rows, results, strict=True):
                self.results[r.draft.index] = res
                self._free(r)
            return
        for r, s in zip(rows, self.search.start_from(*self.started, rows=index), strict=True):
            r.search, r.nodes = s, {}
            if self.model.max_positions:
                # A partial word of d tokens sits at position context + d - 1: longer words than
                # the context leaves room for are left out (flagged as the word limit is).
                s.depth = self.model.max_positions - self._used(r)
                if s.depth < 1:  # the prefix caps leave one position at least
                    raise ValueError(f"item {r.draft.index}: no position left for its next word")
            if s.next() is None:
                self._finish_search(r)

    def _finish_search(self, r: _Row) -> None:
        self.results[r.draft.index] = r.search.result()
        r.search = None
        self._free(r)

    # -- slots --------------------------------------------------------------------------------

    def _free(self, r: _Row) -> None:
        self.rows[r.slot] = None
        self.model.clear_slots(self.state, [r.slot])  # its columns no longer count

    def _next_row(self, d, attempt: int, phase: int) -> _Row:
        """A row for attempt ``attempt`` at the draft's prefix (phase 0: from the start token
        and its prompt), continuation (phase 1: from its context ``ids``) or next words (phase
        2: after its context ``ids``)."""
        state = None
        if phase == 0:
            rng = d.rng if attempt == 0 else self.reseed(d, attempt)
            state = rng.bit_generator.state if attempt == 0 else None
            ctx = [self.model.start_token_id]
            if d.prompt:
                ctx += self.model.encode(" ".join(d.prompt))
            cap, what = self.max_new, "prompts"
        elif phase == 1:
            rng = self.continuation.reseed(d, attempt)
            ctx, cap, what = list(d.ids), self.cont_max, "contexts"
        else:
            return _Row(d, attempt, None, list(d.ids), 0, phase=2)
        if self.model.max_positions:
            cap = min(cap, self.model.max_positions - len(ctx))
            if cap <= 0:
                raise ValueError(
                    f"{what} of {len(ctx)} tokens leave no room in the model's context"
                )
        return _Row(d, attempt, rng, ctx, cap, phase=phase, rng_state=state)

    def _used(self, r: _Row) -> int:
        """Columns the row's slot holds: its context, its sampled tokens (but the one waiting to
        be fed), its partial words."""
        return r.fed + len(r.tokens) - (r.token is not None) + len(r.nodes)
