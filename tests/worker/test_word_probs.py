"""`worker.word_probs`: the probability of given next words, against brute force.

The brute force enumerates every token sequence of a tiny vocabulary that decodes to the word
under the boundary rule and runs the plain Hugging Face model on each (no cache, no batching).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from worker.fake import FakeCausalLM
from worker.prefixes import get_token_classes
from worker.tokens import decode_word
from worker.word_probs import word_level, word_probabilities
from worker.words import top_words


def _plain_logprobs(lm, ids: list[int]) -> torch.Tensor:
    """Next-token log-probs after ``ids``: the HF model directly, or the fake's table."""
    if isinstance(lm, FakeCausalLM):
        return lm._logprobs[ids[-1]].double()
    with torch.inference_mode():
        logits = lm.model(torch.tensor([ids])).logits[0, -1].double()
    return torch.log_softmax(logits, -1)


def brute_tokenisations(lm, context: list[int], word: str, max_tokens: int) -> list[float]:
    """P(t1..tn | context) * P(boundary | context, t1..tn) of every tokenisation of ``word``."""
    cl = get_token_classes(lm)
    starts, blank, special = cl.starts.tolist(), cl.blank.tolist(), cl.special.tolist()
    first = [i for i in range(len(starts)) if starts[i] and not blank[i] and not special[i]]
    rest = [i for i in range(len(starts)) if not starts[i] and not special[i]]
    boundary = (cl.starts | cl.ends).double()
    found = []
    for n in range(1, max_tokens + 1):
        for seq in itertools.product(first, *([rest] * (n - 1))):
            if decode_word(lm.tokenizer, list(seq)) != word:
                continue
            prob, ids = 1.0, list(context)
            for t in seq:
                prob *= float(_plain_logprobs(lm, ids)[t].exp())
                ids.append(t)
            found.append(prob * float((_plain_logprobs(lm, ids).exp() * boundary).sum()))
    return found


def _root_and_extend(lm, contexts):
    root, state = lm.start(contexts)
    return root, (lambda rows, conts: lm.extend(state, rows, conts))


@pytest.mark.parametrize("lm_name", ["bpe_lm", "sp_lm"])
def test_every_tokenisation_summed_against_brute_force(lm_name, request):
    """With no threshold (merge_tail 0) the search sums every tokenisation of the word."""
    lm = request.getfixturevalue(lm_name)
    contexts = [[lm.start_token_id, *lm.encode("the cat")], [lm.start_token_id, *lm.encode("a")]]
    words = [["the", "cat", "thet", "sat", "cogs"], ["dog", "at", "zzz", "sog"]]
    root, extend = _root_and_extend(lm, contexts)
    got = word_probabilities(
        root, extend, get_token_classes(lm), lm.tokenizer, words, merge_tail=0.0
    )
    multi = 0
    for ctx, ws, row in zip(contexts, words, got, strict=True):
        for w, (p, exact) in zip(ws, row, strict=True):
            brute = brute_tokenisations(lm, ctx, w, max_tokens=4)
            multi += len(brute) > 1
            assert exact
            assert p == pytest.approx(sum(brute), rel=1e-4, abs=1e-12)
    assert multi >= 2  # words with several tokenisations were summed


def test_threshold_keeps_the_tokenisations_near_the_best(bpe_lm):
    """The default merge tail: the best tokenisation and those within 0.05 of it, no others."""
    lm = bpe_lm
    ctx = [lm.start_token_id, *lm.encode("the dog")]
    root, extend = _root_and_extend(lm, [ctx])
    words = ["the", "cat", "dog", "thet", "that"]
    (got,) = word_probabilities(root, extend, get_token_classes(lm), lm.tokenizer, [words])
    for w, (p, _) in zip(words, got, strict=True):
        brute = brute_tokenisations(lm, ctx, w, max_tokens=4)
        best = max(brute, default=0.0)
        near = sum(b for b in brute if b >= 0.05 * best)
        assert p == pytest.approx(near, rel=1e-4, abs=1e-12)


def test_a_top_word_gets_the_search_value(bpe_lm):
    """For a word among the top-k the value agrees with `top_words` (which sums at least the
    same tokenisations): equal wherever no other tokenisation is close."""
    lm = bpe_lm
    ctx = [lm.start_token_id, *lm.encode("a cat")]
    root, extend = _root_and_extend(lm, [ctx])
    cl = get_token_classes(lm)
    (best,) = top_words(root, extend, cl, lm.tokenizer, k=5, special_policy="skip")
    root2, extend2 = _root_and_extend(lm, [ctx])
    (got,) = word_probabilities(root2, extend2, cl, lm.tokenizer, [best.words], merge_tail=0.0)
    for w, p_search, (p, _) in zip(best.words, best.probs, got, strict=True):
        assert p_search <= p * (1 + 1e-4)  # the search never sums more than every tokenisation
        assert p_search >= max(brute_tokenisations(lm, ctx, w, 4)) * (1 - 1e-4)


def test_fake_model_words_with_suffix_pieces():
    """The fake LM's words "cats" = "Ġcat" + "s": the Markov table gives the exact value."""
    lm = FakeCausalLM(3)
    ctx = [lm.start_token_id, *lm.encode("the")]
    root, extend = _root_and_extend(lm, [ctx])
    words = ["cat", "cats", "dog", "xyz"]
    (got,) = word_probabilities(
        root, extend, get_token_classes(lm), lm.tokenizer, [words], merge_tail=0.0
    )
    for w, (p, _) in zip(words, got, strict=True):
        assert p == pytest.approx(sum(brute_tokenisations(lm, ctx, w, 3)), rel=1e-5, abs=1e-12)
    assert got[3][0] == 0.0  # no tokenisation


def test_budget_and_word_length_limits(bpe_lm):
    lm = bpe_lm
    ctx = [lm.start_token_id, *lm.encode("the")]
    root, extend = _root_and_extend(lm, [ctx])
    cl = get_token_classes(lm)
    (short,) = word_probabilities(
        root, extend, cl, lm.tokenizer, [["that"]], merge_tail=0.0, max_word_tokens=1
    )
    # "that" has no one-token spelling in this vocabulary.
    assert short == [(0.0, True)]
    (tight,) = word_probabilities(
        root, extend, cl, lm.tokenizer, [["that"]], merge_tail=0.0, max_expansions=1
    )
    assert tight[0][1] is False


def test_word_level_reads_the_token(word_lm):
    lm = word_lm
    root, _ = lm.start([[lm.start_token_id, *lm.encode("the cat sat")]])
    (got,) = word_level(root, lm.tokenizer, get_token_classes(lm), [["on", "mat", "<unk>", "xy"]])
    ids = lm.tokenizer.convert_tokens_to_ids(["on", "mat"])
    assert got[:2] == pytest.approx([math.exp(float(root[0, i])) for i in ids], rel=1e-6)
    assert got[2:] == [0.0, 0.0]  # a special token and an unknown string are no words
