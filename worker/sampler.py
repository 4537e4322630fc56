"""Model prefixes of a causal LM by continuous batching, with their next words.

`ContinuousSampler` samples up to ``batch`` prefixes together, one token per step with the KV
cache.  A prefix is done at the token that would start word l + 1 (its distribution is the one
the next words are read from), at an end of text, or after ``prefix_tokens_per_word * (l + 1)``
tokens; it then stops (a masked placeholder) and, once an eighth of the batch has stopped,
the batch is compacted and waiting prefixes take the free places, so the batch stays full until
the queue is empty.  Finished prefixes keep their cache and root distribution; the word search
runs on them once ``batch`` have gathered (and on the rest at the end).  Each prefix draws its
uniforms from its own generator, only while it is sampling, so an item does not depend on the
batch size or on which prefixes share its batch.

Continuations (ratings studies, `worker.continuations`): with a `Continuation` a row that has
its l words goes on in the same batch, on its own KV cache, to sample l_gen more words with the
continuation's settings; ``run(drafts, from_context=True)`` starts rows at their context's end
(data prefixes: prompt + prefix encoded) and samples the continuation only.  The first token of
a continuation must start a new word (as after a prompt), so the prefix's last word is never
extended.  An end of text before l_gen words re-samples the continuation alone from its
context (the prefix stays as it was) or skips the item, by the continuation's ``eos_policy``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from worker.models import RowReset
from worker.words import NextWords, TokenClasses, decode_word


def sample_tokens(logprobs: torch.Tensor, u: torch.Tensor, spec, allowed: torch.Tensor | None):
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


def _filtered_scores(logprobs: torch.Tensor, spec, allowed: torch.Tensor | None) -> torch.Tensor:
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


def width_bands(model, groups: list[tuple[list, Any, torch.Tensor]]) -> list[list]:
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
    widths = sorted(w for group, st, _ in groups for w in [model.width(st)] * len(group))
    limit = 2 * widths[len(widths) // 2]
    short = [g for g in groups if model.width(g[1]) <= limit]
    long = [g for g in groups if model.width(g[1]) > limit]
    return [band for band in (short, long) if band]


@dataclass(frozen=True)
class Continuation:
    """What a row samples after its prefix: ``words`` more words (l_gen) with ``spec``'s
    sampling (``temperature``, ``sample_top_k``, ``sample_top_p``), end-of-text policy
    (``eos_policy``, ``max_attempts``) and token budget (``prefix_tokens_per_word`` per word,
    plus one); ``reseed(draft, attempt)`` gives each attempt's generator (attempt 0 included:
    a continuation never draws from its prefix's stream)."""

    words: int
    spec: Any
    reseed: Callable[[Any, int], np.random.Generator]


def sampling_record(spec) -> dict:
    """The sampling settings of ``spec`` as recorded in an item's provenance."""
    return {
        "temperature": spec.temperature,
        "top_k": spec.sample_top_k,
        "top_p": spec.sample_top_p,
        "eos_policy": spec.eos_policy,
    }


@dataclass
class _Row:
    """One text being sampled: its draft, phase (0: the prefix, 1: the continuation), attempt
    at that phase, random stream and tokens so far (``start`` of them, and ``split`` of their
    word groups, before the phase began)."""

    draft: Any
    attempt: int
    rng: np.random.Generator
    context: list[int]
    cap: int  # most tokens it may have sampled when its phase ends
    tokens: list[int] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)
    phase: int = 0
    start: int = 0
    split: int = 0


Search = Callable[[Any, torch.Tensor], list[NextWords]]
"""``search(state, root)``: the next words of every row of a state (root log-probs [B, V])."""


class ContinuousSampler:
    """Samples the prefixes of ``drafts`` (see the module docstring).

    A draft (`worker.prefixes._Draft`) brings ``index``, ``rng``, ``prompt`` and ``info``; the
    sampler sets its ``words``, ``skip`` and ``info``.  ``reseed(draft, attempt)`` gives the
    generator of a re-sampled attempt; ``search`` (None: prefixes only) the next words.  A
    finished draft gets ``ids`` (its context tokens, without the token that starts word l + 1)
    and, with ``keep_roots`` and a search, ``root`` (the log-probabilities its words came from).
    With a ``continuation`` (no search) a finished prefix goes on: the draft gets
    ``continuation`` (its words) and ``info["continuation"]``, and ``skip`` when the
    continuation fails (``"eos_before_l_gen"``, ``"continuation_too_long"``).
    """

    def __init__(
        self,
        model,
        classes: TokenClasses,
        spec,
        length: int,
        batch: int,
        reseed: Callable[[Any, int], np.random.Generator],
        search: Search | None,
        *,
        keep_roots: bool = False,
        continuation: Continuation | None = None,
    ):
        if continuation is not None and search is not None:
            raise ValueError("a continuation follows a prefix without a word search")
        self.model, self.classes, self.spec, self.batch = model, classes, spec, batch
        self.reseed, self.search, self.keep_roots = reseed, search, keep_roots
        self.continuation = continuation
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
        self.blank_l = classes.blank.tolist()
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
        self.queue: deque = deque()  # (draft, attempt) of prefixes to sample
        self.cont_queue: deque = deque()  # (draft, attempt) of continuations from a context
        self.after_prompt = False
        self.live: list[_Row] = []
        self.active: list[bool] = []
        self.state = self.logprobs = self.count = self.in_word = self.goal = None
        self.finished: list[tuple[list[_Row], Any, torch.Tensor]] = []  # (rows, state, root)
        self.n_finished = 0

    def run(self, drafts: list, *, from_context: bool = False) -> list[NextWords | None]:
        """Sample the drafts' prefixes (and continuations); with ``from_context`` the drafts
        bring their context as ``ids`` and only continuations are sampled."""
        if from_context:
            if self.continuation is None:
                raise ValueError("sampling from a context needs a continuation")
            self.cont_queue.extend((d, 0) for d in drafts)
        else:
            self.queue.extend((d, 0) for d in drafts)
        self.after_prompt = bool(not from_context and drafts and drafts[0].prompt)
        # Without a prompt a new prefix's context is the start token alone: it takes a free
        # place in the running batch and the start token goes through the next step with the
        # others (no forward of its own, no copy of the batch's cache).
        in_place = not from_context and not self.after_prompt
        in_place = in_place and isinstance(self.model, RowReset)
        self._admit()
        while self.live:
            tok = self._step_tokens()
            if in_place and self.queue and not all(self.active):
                tok = self._refill(tok)
            n_active = sum(self.active)
            if n_active:
                self.logprobs = self.model.step(
                    self.state, tok, torch.tensor(self.active, device=self.model.device)
                )
            stopped = len(self.live) - n_active
            if stopped and (stopped >= max(1, self.batch // 8) or not n_active):
                self._compact()
                self._admit()
            if self.n_finished >= self.batch:
                self._run_search()
        if self.finished:
            self._run_search()
        return [self.results.get(d.index) for d in drafts]

    def _fresh(self, r: _Row) -> bool:
        """Whether the row's next token must start a new word (its phase's first token, after
        a prompt or a prefix)."""
        return len(r.tokens) == r.start and (r.phase == 1 or self.after_prompt)

    def _sample(self, logprobs: torch.Tensor, u: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
        """One token per row, each by its phase's settings."""
        fresh = [self._fresh(r) for r in rows]
        if any(fresh):
            where = torch.tensor(fresh, device=self.model.device)[:, None]
            mask = torch.where(where, self.first_allowed, self.allowed)
        else:
            mask = None if self.every_allowed else self.allowed[None, :]
        phases = [r.phase for r in rows]
        if self.same_sampling or len(set(phases)) == 1:
            return sample_tokens(logprobs, u, self.specs[phases[0]], mask)
        tok = torch.empty(len(rows), dtype=torch.long, device=self.model.device)
        for phase in (0, 1):
            index = torch.tensor(
                [i for i, p in enumerate(phases) if p == phase],
                dtype=torch.long,
                device=self.model.device,
            )
            part = mask if mask is None or mask.shape[0] == 1 else mask[index]
            tok[index] = sample_tokens(logprobs[index], u[index], self.specs[phase], part)
        return tok

    def _uniforms(self, rows: list[_Row], draw: list[bool]) -> torch.Tensor:
        return torch.tensor(
            [r.rng.random() if d else 0.0 for r, d in zip(rows, draw, strict=True)],
            dtype=torch.float32,
        ).to(self.model.device)

    def _step_tokens(self) -> torch.Tensor:
        """Sample every live row's next token and settle the rows it ends; returns the tokens."""
        live, device = self.live, self.model.device
        tok = self._sample(self.logprobs, self._uniforms(live, self.active), live)
        switched = self._settle(tok, list(self.active))
        if switched:
            # Rows whose prefix just ended: their token is drawn again, from the continuation's
            # settings and stream, as the continuation's first token (a new word).
            index = torch.tensor(switched, dtype=torch.long, device=device)
            self.count, self.in_word = self.count.clone(), self.in_word.clone()
            self.goal = self.goal.clone()
            self.count[index], self.in_word[index] = 0, False
            self.goal[index] = self.goals[1]
            rows = [live[i] for i in switched]
            u = self._uniforms(rows, [True] * len(rows))
            tok = tok.clone()
            tok[index] = self._sample(self.logprobs[index], u, rows)
            chosen = set(switched)
            self._settle(tok, [i in chosen for i in range(len(live))])
        return tok

    def _settle(self, tok: torch.Tensor, act_l: list[bool]) -> list[int]:
        """Apply ``tok`` to the rows of ``act_l``: extend, end or re-queue each.  Returns the
        rows whose prefix ended and whose continuation begins (they stay active)."""
        live, active, cl = self.live, self.active, self.classes
        act = torch.tensor(act_l, device=self.model.device)
        starts, blank, ends = cl.starts, cl.blank, cl.ends
        new_word = ~blank[tok] & (starts[tok] | ~self.in_word)
        full = self.count == self.goal
        stop_ok = act & full & (new_word | ends[tok])
        fail = act & ends[tok] & ~full
        cont = act & ~stop_ok & ~fail
        self.count = self.count + (new_word & cont).long()
        self.in_word = torch.where(cont, ~blank[tok], self.in_word)
        flags = zip(
            stop_ok.tolist(),
            fail.tolist(),
            cont.tolist(),
            tok.tolist(),
            new_word.tolist(),
            strict=True,
        )
        blank_l = self.blank_l
        ok_rows: list[int] = []
        switched: list[int] = []
        for i, (s_ok, f, c, t, nw) in enumerate(flags):
            if not act_l[i]:
                continue
            r = live[i]
            if s_ok:
                if self.continuation is not None and r.phase == 0:
                    self._begin_continuation(r)
                    switched.append(i)
                    continue
                self._end(r, None)
                ok_rows.append(i)
            elif f:
                spec = self.specs[r.phase]
                if spec.eos_policy == "resample" and r.attempt + 1 < spec.max_attempts:
                    (self.cont_queue if r.phase else self.queue).append((r.draft, r.attempt + 1))
                else:
                    self._end(r, "eos_before_l_gen" if r.phase else "eos_before_l")
            elif c:
                r.tokens.append(t)
                if not blank_l[t]:
                    if nw or len(r.groups) == r.split:
                        r.groups.append([t])
                    else:
                        r.groups[-1].append(t)
                if len(r.tokens) >= r.cap:
                    self._end(r, "continuation_too_long" if r.phase else "too_long")
                    c = False
            if not c:
                active[i] = False
        if ok_rows and self.search is not None:
            # Before the step: the search's context ends before the token that starts word l+1.
            self.finished.append(
                (
                    [live[i] for i in ok_rows],
                    self.model.select(self.state, ok_rows),
                    self.logprobs[ok_rows],
                )
            )
            self.n_finished += len(ok_rows)
        return switched

    def _refill(self, tok: torch.Tensor) -> torch.Tensor:
        """Waiting prefixes take the stopped rows' places in the running batch."""
        fill = []
        for i, a in enumerate(self.active):
            if not a and self.queue:
                self.live[i], self.active[i] = self._next_row(*self.queue.popleft(), 0), True
                fill.append(i)
        self.model.reset_rows(self.state, fill)
        index = torch.tensor(fill, dtype=torch.long, device=self.model.device)
        tok = tok.clone()
        tok[index] = self.model.start_token_id
        self.count, self.in_word, self.goal = (
            self.count.clone(),
            self.in_word.clone(),
            self.goal.clone(),
        )
        self.count[index], self.in_word[index], self.goal[index] = 0, False, self.goals[0]
        return tok

    def _compact(self) -> None:
        keep = [i for i, a in enumerate(self.active) if a]
        self.live = [self.live[i] for i in keep]
        self.active = [True] * len(keep)
        if keep:
            self.state = self.model.select(self.state, keep)
            self.logprobs = self.logprobs[keep]
            self.count, self.in_word = self.count[keep], self.in_word[keep]
            self.goal = self.goal[keep]
        else:
            self.state = self.logprobs = self.count = self.in_word = self.goal = None

    def _next_row(self, d, attempt: int, phase: int) -> _Row:
        """A row for attempt ``attempt`` at the draft's prefix (phase 0: from the start token
        and its prompt) or continuation (phase 1: from its context ``ids``)."""
        if phase == 0:
            rng = d.rng if attempt == 0 else self.reseed(d, attempt)
            ctx = [self.model.start_token_id]
            if d.prompt:
                ctx += self.model.encode(" ".join(d.prompt))
            cap, what = self.max_new, "prompts"
        else:
            rng = self.continuation.reseed(d, attempt)
            ctx, cap, what = list(d.ids), self.cont_max, "contexts"
        if self.model.max_positions:
            cap = min(cap, self.model.max_positions - len(ctx))
            if cap <= 0:
                raise ValueError(
                    f"{what} of {len(ctx)} tokens leave no room in the model's context"
                )
        return _Row(d, attempt, rng, ctx, cap, phase=phase)

    def _admit(self) -> None:
        new: list[_Row] = []
        while (self.cont_queue or self.queue) and len(self.live) + len(new) < self.batch:
            if self.cont_queue:
                new.append(self._next_row(*self.cont_queue.popleft(), 1))
            else:
                new.append(self._next_row(*self.queue.popleft(), 0))
        if not new:
            return
        lp_new, st_new = self.model.start([r.context for r in new])
        device = self.model.device
        zeros = torch.zeros(len(new), dtype=torch.long, device=device)
        goal = torch.tensor([self.goals[r.phase] for r in new], dtype=torch.long, device=device)
        if self.state is None:
            self.state, self.logprobs = st_new, lp_new
            self.count, self.in_word, self.goal = zeros, zeros.bool(), goal
        else:
            self.state = self.model.concat([self.state, st_new])
            self.logprobs = torch.cat([self.logprobs, lp_new])
            self.count = torch.cat([self.count, zeros])
            self.in_word = torch.cat([self.in_word, zeros.bool()])
            self.goal = torch.cat([self.goal, goal])
        self.live.extend(new)
        self.active.extend([True] * len(new))

    def _begin_continuation(self, r: _Row) -> None:
        """The row's prefix is done (recorded as such); it goes on as its continuation's first
        attempt, on the same cache."""
        self._end(r, None)
        r.phase, r.attempt = 1, 0
        r.rng = self.continuation.reseed(r.draft, 0)
        r.start, r.split = len(r.tokens), len(r.groups)
        room = self.cont_max
        if self.model.max_positions:
            room = min(room, self.model.max_positions - len(r.context) - len(r.tokens))
        r.cap = len(r.tokens) + max(room, 1)

    def _end(self, r: _Row, skip: str | None) -> None:
        d = r.draft
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

    def _run_search(self) -> None:
        bands = width_bands(self.model, self.finished)
        self.finished, self.n_finished = [], 0
        for band in bands:
            rows = [r for group, _, _ in band for r in group]
            states = [st for _, st, _ in band]
            st = states[0] if len(states) == 1 else self.model.concat(states)
            root = torch.cat([x for _, _, x in band])
            # Let the groups' caches go before the search (they are copied into ``st``).
            band[:], states = [], None
            for i, (r, res) in enumerate(zip(rows, self.search(st, root), strict=True)):
                self.results[r.draft.index] = res
                if self.keep_roots:
                    r.draft.root = root[i]
            st = None
