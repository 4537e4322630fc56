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


@dataclass
class _Row:
    """One prefix being sampled: its draft, attempt, random stream and tokens so far."""

    draft: Any
    attempt: int
    rng: np.random.Generator
    context: list[int]
    cap: int  # most tokens it may sample
    tokens: list[int] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)


Search = Callable[[Any, torch.Tensor], list[NextWords]]
"""``search(state, root)``: the next words of every row of a state (root log-probs [B, V])."""


class ContinuousSampler:
    """Samples the prefixes of ``drafts`` (see the module docstring).

    A draft (`worker.prefixes._Draft`) brings ``index``, ``rng``, ``prompt`` and ``info``; the
    sampler sets its ``words``, ``skip`` and ``info``.  ``reseed(draft, attempt)`` gives the
    generator of a re-sampled attempt; ``search`` (None: prefixes only) the next words.  A
    finished draft gets ``ids`` (its context tokens, without the token that starts word l + 1)
    and, with ``keep_roots`` and a search, ``root`` (the log-probabilities its words came from).
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
    ):
        self.model, self.classes, self.spec, self.batch = model, classes, spec, batch
        self.reseed, self.search, self.keep_roots = reseed, search, keep_roots
        self.sampling = {
            "temperature": spec.temperature,
            "top_k": spec.sample_top_k,
            "top_p": spec.sample_top_p,
            "eos_policy": spec.eos_policy,
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
        # After a prompt the first sampled token must start a new word.
        self.first_allowed = allowed & (classes.starts | classes.ends)
        self.length = length
        self.max_new = spec.prefix_tokens_per_word * (length + 1)
        self.results: dict[int, NextWords] = {}
        self.queue: deque = deque()
        self.live: list[_Row] = []
        self.active: list[bool] = []
        self.state = self.logprobs = self.count = self.in_word = None
        self.finished: list[tuple[list[_Row], Any, torch.Tensor]] = []  # (rows, state, root)
        self.n_finished = 0

    def run(self, drafts: list) -> list[NextWords | None]:
        self.queue.extend((d, 0) for d in drafts)
        after_prompt = bool(drafts and drafts[0].prompt)
        # Without a prompt a new prefix's context is the start token alone: it takes a free
        # place in the running batch and the start token goes through the next step with the
        # others (no forward of its own, no copy of the batch's cache).
        in_place = not after_prompt and isinstance(self.model, RowReset)
        self._admit()
        while self.live:
            tok = self._step_tokens(after_prompt)
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

    def _step_tokens(self, after_prompt: bool) -> torch.Tensor:
        """Sample every live row's next token and settle the rows it ends; returns the tokens."""
        spec, device, cl = self.spec, self.model.device, self.classes
        live, active = self.live, self.active
        u = torch.tensor(
            [r.rng.random() if a else 0.0 for r, a in zip(live, active, strict=True)],
            dtype=torch.float32,
        ).to(device)
        if after_prompt:
            fresh = torch.tensor([not r.tokens for r in live], device=device)[:, None]
            mask = torch.where(fresh, self.first_allowed, self.allowed)
        else:
            mask = None if self.every_allowed else self.allowed[None, :]
        tok = sample_tokens(self.logprobs, u, spec, mask)
        act = torch.tensor(active, device=device)
        starts, blank, ends = cl.starts, cl.blank, cl.ends
        new_word = ~blank[tok] & (starts[tok] | ~self.in_word)
        full = self.count == self.length
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
        for i, (s_ok, f, c, t, nw) in enumerate(flags):
            r = live[i]
            if s_ok:
                self._end(r, None)
                ok_rows.append(i)
            elif f:
                if spec.eos_policy == "resample" and r.attempt + 1 < spec.max_attempts:
                    self.queue.append((r.draft, r.attempt + 1))
                else:
                    self._end(r, "eos_before_l")
            elif c:
                r.tokens.append(t)
                if not blank_l[t]:
                    if nw or not r.groups:
                        r.groups.append([t])
                    else:
                        r.groups[-1].append(t)
                if len(r.tokens) >= r.cap:
                    self._end(r, "too_long")
                    c = False
            if active[i] and not c:
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
        return tok

    def _refill(self, tok: torch.Tensor) -> torch.Tensor:
        """Waiting prefixes take the stopped rows' places in the running batch."""
        fill = []
        for i, a in enumerate(self.active):
            if not a and self.queue:
                self.live[i], self.active[i] = self._next_row(), True
                fill.append(i)
        self.model.reset_rows(self.state, fill)
        index = torch.tensor(fill, dtype=torch.long, device=self.model.device)
        tok = tok.clone()
        tok[index] = self.model.start_token_id
        self.count = self.count.clone()
        self.count[index] = 0
        self.in_word = self.in_word.clone()
        self.in_word[index] = False
        return tok

    def _compact(self) -> None:
        keep = [i for i, a in enumerate(self.active) if a]
        self.live = [self.live[i] for i in keep]
        self.active = [True] * len(keep)
        if keep:
            self.state = self.model.select(self.state, keep)
            self.logprobs = self.logprobs[keep]
            self.count, self.in_word = self.count[keep], self.in_word[keep]
        else:
            self.state = self.logprobs = self.count = self.in_word = None

    def _next_row(self) -> _Row:
        d, attempt = self.queue.popleft()
        rng = d.rng if attempt == 0 else self.reseed(d, attempt)
        ctx = [self.model.start_token_id]
        if d.prompt:
            ctx += self.model.encode(" ".join(d.prompt))
        cap = self.max_new
        if self.model.max_positions:
            cap = min(cap, self.model.max_positions - len(ctx))
            if cap <= 0:
                raise ValueError(
                    f"prompts of {len(ctx)} tokens leave no room in the model's context"
                )
        return _Row(d, attempt, rng, ctx, cap)

    def _admit(self) -> None:
        new: list[_Row] = []
        while self.queue and len(self.live) + len(new) < self.batch:
            new.append(self._next_row())
        if not new:
            return
        lp_new, st_new = self.model.start([r.context for r in new])
        zeros = torch.zeros(len(new), dtype=torch.long, device=self.model.device)
        if self.state is None:
            self.state, self.logprobs = st_new, lp_new
            self.count, self.in_word = zeros, zeros.bool()
        else:
            self.state = self.model.concat([self.state, st_new])
            self.logprobs = torch.cat([self.logprobs, lp_new])
            self.count = torch.cat([self.count, zeros])
            self.in_word = torch.cat([self.in_word, zeros.bool()])
        self.live.extend(new)
        self.active.extend([True] * len(new))

    def _end(self, r: _Row, skip: str | None) -> None:
        d = r.draft
        d.info["attempts"] = r.attempt + 1
        d.info["sampling"] = self.sampling
        d.words = [decode_word(self.model.tokenizer, g) for g in r.groups]
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
