"""The gap kinds' model-written words (the later paper's self-recovery with a gap; docs/design.md,
"Prefix kinds": ``data_shuffled+gap@g``, ``data_corrupted@c+gap@g``).

After its distorted prefix of l words (shuffled or corrupted by `worker.prefixes`) an item's row
samples g more words from P_M, with the study's prefix sampling (temperature, top-k, top-p,
end-of-text policy), and then searches its next words after all l + g words in the same slot of
the KV cache (`worker.sampler.ContinuousSampler`: the prompt and the distorted words are the
row's context, the g words its "prefix").  The first gap token must start a new word, so the
distorted prefix's last word is never extended.

Determinism: attempt 0 draws from the item's own generator after its distortion (the one its
shuffle or corruption drew from); a re-sampled attempt (an end of text before g words) from
`gap_seed`.  An item therefore does not depend on its shard or batch, as every sampled kind.

Ratings studies (EB-M_gap, the later paper's eq. 5): with a ``continuation`` phase the row
goes on after its g words, in the same slot, to sample the continuation of l_gen words
(`worker.continuations`), as a model prefix's row does; no next words are searched.

Each item records ``provenance["gap"]``: ``words`` (g), ``distorted_words`` (l) and the gap's
words (``gap_words``); the item's ``words`` are the l distorted words followed by the g.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from worker.sampler import TOKENS_PER_WORD, ContinuousSampler
from worker.seeds import stable_seed
from worker.words import NextWords, search_settings


def gap_seed(study_seed: int, length: int, kind: str, index: int, attempt: int) -> int:
    """Seed of a re-sampled attempt (``attempt`` >= 1) at an item's gap."""
    return stable_seed("gap", study_seed, length, kind, index, attempt)


def sample_gaps(
    model,
    classes,
    drafts: list,
    spec,
    study_seed: int,
    length: int,
    kind: str,
    gap: int,
    batch: int,
    *,
    keep_roots: bool = False,
    memory: int | None = None,
    continuation=None,
) -> list[NextWords | None]:
    """Sample each draft's ``gap`` words after its prompt and distorted ``words`` and search its
    next words there; returns them per draft (None for a draft skipped before or during its
    gap).  Sets ``words`` (distorted + gap), ``ids``, ``info`` and ``skip`` as a model prefix
    does (``"eos_before_l"``: an end of text before the g words; ``"too_long"``).

    ``continuation`` (a `worker.sampling.Continuation`, ratings studies): the rows sample it
    after their g words instead of searching next words (sets ``continuation``; returns None
    per draft)."""
    todo = [d for d in drafts if d.skip is None]
    kept = {d.index: (d.prompt, d.words) for d in todo}
    for d in todo:
        # The distorted prefix is the row's context, as a prompt is: the g words follow it.
        d.prompt = [*d.prompt, *d.words]

    def reseed(d, attempt: int) -> np.random.Generator:
        return np.random.default_rng(gap_seed(study_seed, length, kind, d.index, attempt))

    # The slots' expected width (`worker.sampler.expected_columns`) counts the context as prompt
    # words, as many as its median encoded length makes at TOKENS_PER_WORD tokens a word.
    tokens = sorted(len(model.encode(" ".join(d.prompt))) for d in todo) or [0]
    context_words = math.ceil(tokens[len(tokens) // 2] / TOKENS_PER_WORD)
    wide = replace(spec, prompt_words=max(spec.prompt_words + length, context_words))
    sampler = ContinuousSampler(
        model,
        classes,
        wide,
        gap,
        batch,
        reseed,
        None if continuation is not None else search_settings(model, classes, spec),
        keep_roots=keep_roots,
        continuation=continuation,
        memory=memory,
    )
    found = dict(zip([d.index for d in todo], sampler.run(todo), strict=True))
    for d in todo:
        prompt, words = kept[d.index]
        written = list(d.words)
        d.prompt, d.words = prompt, [*words, *written]
        d.info["gap"] = {"words": gap, "distorted_words": len(words), "gap_words": written}
    return [found.get(d.index) for d in drafts]
