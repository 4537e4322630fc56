"""The causal LM's cache machinery: cached word expansion, select/concat, growing buffers."""

from __future__ import annotations

import random

import torch

from worker.hf import HFCausalLM


def full_logprobs(lm, seqs):
    """Reference: one plain forward per sequence, no cache, no padding."""
    out = []
    with torch.no_grad():
        for s in seqs:
            out.append(torch.log_softmax(lm.model(torch.tensor([s])).logits[0, -1].float(), -1))
    return torch.stack(out)


def contexts_of(lm):
    return [[lm.start_token_id, *lm.encode(t)] for t in ["the cat", "a", "the dog at the", "th"]]


def test_cached_extend_equals_uncached_and_plain_forwards(bpe_lm):
    contexts = contexts_of(bpe_lm)
    rng = random.Random(0)
    vocab = bpe_lm.vocab_size
    cached = HFCausalLM(bpe_lm.model, bpe_lm.tokenizer, cached_extend=True)
    uncached = HFCausalLM(bpe_lm.model, bpe_lm.tokenizer, cached_extend=False)
    _, s_cached = cached.start(contexts)
    _, s_plain = uncached.start(contexts)
    known: list[tuple[int, tuple[int, ...]]] = [(r, ()) for r in range(len(contexts))]
    for round_ in range(6):
        # Grow some known continuations by one token (as the word search does), re-score an
        # old one, and add one whose prefixes were never scored (the tree must fill them in).
        jobs = []
        for r, cont in rng.sample(known, min(len(known), 5)):
            jobs.append((r, (*cont, rng.randrange(1, vocab))))
        jobs.append(jobs[0])
        fresh = tuple(rng.randrange(1, vocab) for _ in range(3))
        jobs.append((rng.randrange(len(contexts)), fresh))
        if round_ == 3:
            jobs = [j for j in jobs if j[0] == 1]  # one row left: the tree drops the others
        rows, conts = [j[0] for j in jobs], [list(j[1]) for j in jobs]
        a = cached.extend(s_cached, rows, conts)
        b = uncached.extend(s_plain, rows, conts)
        ref = full_logprobs(bpe_lm, [contexts[r] + c for r, c in zip(rows, conts, strict=True)])
        torch.testing.assert_close(a, ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(b, ref, atol=1e-4, rtol=1e-4)
        known += [(r, tuple(c)) for r, c in zip(rows, conts, strict=True)]
    assert s_cached.tree is not None and s_plain.tree is None
    # The state itself is unchanged by the memo: it still steps and scores like a fresh one.
    assert s_cached.cache.get_seq_length() == s_cached.mask.shape[1]


def test_select_concat_and_step_keep_the_cache_right(bpe_lm):
    contexts = contexts_of(bpe_lm)
    _, state = bpe_lm.start(contexts)
    # Step many times so that the growing buffers reallocate, with some rows paused.
    seqs = [list(c) for c in contexts]
    gen = torch.Generator().manual_seed(1)
    for step in range(40):
        toks = torch.randint(1, bpe_lm.vocab_size, (len(contexts),), generator=gen)
        active = torch.tensor([step % (r + 1) == 0 for r in range(len(contexts))])
        out = bpe_lm.step(state, toks, active)
        for r in range(len(contexts)):
            if active[r]:
                seqs[r].append(int(toks[r]))
        ref = full_logprobs(bpe_lm, seqs)
        rows = active.nonzero().flatten()
        torch.testing.assert_close(out[rows], ref[rows], atol=1e-4, rtol=1e-4)
    a = bpe_lm.select(state, [2, 0])
    b = bpe_lm.select(state, [3])
    both = bpe_lm.concat([a, b])
    order = [2, 0, 3]
    out = bpe_lm.extend(both, [0, 1, 2], [[5], [6, 7], [8]])
    ref = full_logprobs(
        bpe_lm, [seqs[order[0]] + [5], seqs[order[1]] + [6, 7], seqs[order[2]] + [8]]
    )
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
