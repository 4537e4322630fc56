"""Drawing a token from a distribution, and what a continuation samples with.

`sample_tokens` is inverse-CDF sampling, one uniform per row (each row's own stream, drawn by
its caller), after temperature, top-k and top-p; `Continuation` says what a row samples after
its prefix (ratings studies); `sampling_record` is what an item records of the settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


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
    total = cdf[:, -1:]
    # Strictly below the total: a uniform that rounds to 1.0 in float32 (about 3e-8 a draw)
    # would otherwise land past the last allowed token, on the vocabulary's last id.  The
    # first CDF value above the target is then always a token of positive probability.
    target = torch.minimum(u[:, None] * total, torch.nextafter(total, torch.zeros_like(total)))
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
