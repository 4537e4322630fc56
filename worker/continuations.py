"""Continuations of ratings studies (the later paper's second protocol, docs/design.md).

A ratings item is a prompt C (data words), a prefix W of l words, and a continuation of l_gen
words sampled from P_M given (C, W), which people rate for quality and then for consistency with
the revealed context.  `worker.prefixes.make_items` makes them when its spec has
``continuation_words`` (l_gen); such items have no next-word choices.

- A ``model`` prefix is sampled from P_M given C as for a next-word study (the study's
  ``decoding`` settings; the same prefix as a next-word study's item with the same seed), and
  its row of the sampling batch goes on, on its own KV cache, to sample the continuation
  (`worker.sampling.Continuation`).
- Every other kind (``data``, ``data_shuffled``, ``random``, ``data_corrupted@c``,
  ``model_corrupted@c``: the prefix-switching samples the papers show) is text: C + W is
  encoded and the continuation is sampled from there, in continuous batches.
- Sampling: ancestral (temperature 1, the full vocabulary) by default, top-k with
  ``continuation_top_k``; recorded in each item's ``provenance["continuation"]``.  The first
  token must start a new word.  Each attempt draws from its own seed
  (`continuation_seed`), never from the prefix's stream, so an item is the same whatever the
  batch or shard.
- An end of text before l_gen words follows the study's end-of-text policy: ``resample`` draws
  the continuation again from the same context (up to ``max_attempts``; the prefix is kept, so
  model prefixes are not selected for continuations that run long), ``skip`` marks the item
  ``eos_before_l_gen``.  More than ``prefix_tokens_per_word * (l_gen + 1)`` tokens: skipped as
  ``continuation_too_long``.
- Data prefixes record the l_gen words that follow them on their dataset line
  (``provenance["data_continuation"]``: the references of EB-M, and the attention pairs' words).

Attention pairs (`attention_pairs`): a data prefix whose continuation is its line's real
continuation with the words shuffled (never left in order): grammatical nonsense that an
attentive rater scores at most 1.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from worker.sampler import ContinuousSampler
from worker.sampling import Continuation
from worker.seeds import stable_seed

# What an attention pair's quality rating should be at most (on the 0-5 scale).
ATTENTION_QUALITY_MAX = 1
# Permutations drawn before an attention pair whose words cannot be put out of order (one word,
# or every word the same) is given up as skipped.
SHUFFLE_TRIES = 20


def continuation_spec(spec):
    """``spec`` with the continuation's sampling: temperature 1, top-k
    ``spec.continuation_top_k`` (None: the full vocabulary), no top-p."""
    return replace(spec, temperature=1.0, sample_top_k=spec.continuation_top_k, sample_top_p=None)


def continuation_seed(study_seed: int, length: int, kind: str, index: int, attempt: int) -> int:
    """Seed of one attempt at an item's continuation."""
    return stable_seed("continuation", study_seed, length, kind, index, attempt)


def continuation(spec, study_seed: int, length: int, kind: str) -> Continuation:
    """The continuation phase of cell (``length``, ``kind``)'s items."""

    def reseed(draft, attempt: int) -> np.random.Generator:
        return np.random.default_rng(
            continuation_seed(study_seed, length, kind, draft.index, attempt)
        )

    return Continuation(spec.continuation_words, continuation_spec(spec), reseed)


def continue_texts(
    model, classes, drafts, spec, study_seed, length, kind, batch, memory=None
) -> None:
    """Continuations of text prefixes: each draft's prompt + words, encoded after the start
    token, continued by ``spec.continuation_words`` words (sets ``continuation``, ``skip`` and
    ``info``).  Drafts already skipped are left alone.  ``memory``: the slots' budget
    (`ContinuousSampler`)."""
    todo = [d for d in drafts if d.skip is None]
    for d in todo:
        d.ids = [model.start_token_id, *model.encode(" ".join([*d.prompt, *d.words]))]
        d.info["context_tokens"] = len(d.ids)
    phase = continuation(spec, study_seed, length, kind)
    sampler = ContinuousSampler(
        model, classes, spec, length, batch, phase.reseed, None, continuation=phase, memory=memory
    )
    sampler.run(todo, from_context=True)


def attention_pairs(items, study_seed: int) -> list:
    """Ratings attention items from data items made without continuations
    (``make_items(..., prefixes_only=True)``): each gets its line's real continuation with the
    words shuffled, and ``provenance["attention"]`` says how.  Deterministic per item."""
    for item in items:
        real = item.provenance.get("data_continuation", "").split()
        rng = np.random.default_rng(stable_seed("attention", study_seed, item.length, item.index))
        words, tries = list(real), 0
        while tries < SHUFFLE_TRIES and (words == real or not words):
            tries += 1
            words = [real[i] for i in rng.permutation(len(real))]
        item.continuation = words
        item.provenance["attention"] = {
            "method": "the real continuation's words shuffled",
            "expected_quality_max": ATTENTION_QUALITY_MAX,
            "permutations_drawn": tries,
        }
        if words == real and not item.skipped:
            item.skipped, item.skip_reason = True, "attention_unshuffled"
    return items
