"""Next words: token classes, the best-first search against brute force, special tokens."""

from __future__ import annotations

import random

import pytest
import torch

from tests.worker.conftest import bpe_tokenizer, sp_tokenizer, tiny_gpt2, word_tokenizer
from worker.hf import HFCausalLM
from worker.tokens import WordTexts, decode_word, segment_words, token_classes, word_texts
from worker.words import top_words


def classes_of(tokenizer, **kwargs) -> dict[str, tuple[bool, bool, bool]]:
    cl = token_classes(tokenizer, **kwargs)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return {
        t: (bool(cl.starts[i]), bool(cl.blank[i]), bool(cl.special[i]))
        for i, t in enumerate(tokens)
    }


def test_byte_bpe_boundaries_and_punctuation_rule():
    tok = bpe_tokenizer()
    assert token_classes(tok).convention == "byte_bpe"
    c = classes_of(tok)
    assert c["Ġthe"] == (True, False, False)
    assert c["at"] == (False, False, False)  # continues a word
    assert c["Ġ"] == (True, True, False)  # whitespace only: a separator
    assert c[","][0] and c["."][0] and c["Ġ,"][0]  # punctuation starts a word
    assert c["<|endoftext|>"][2]
    no_punct = classes_of(tok, punctuation_splits=False)
    assert not no_punct[","][0] and no_punct["Ġ,"][0]


def test_metaspace_boundaries_and_punctuation_rule():
    tok = sp_tokenizer()
    assert token_classes(tok).convention == "metaspace"
    c = classes_of(tok)
    assert c["▁cat"] == (True, False, False)
    assert c["og"] == (False, False, False)
    assert c["▁"] == (True, True, False)
    assert c[","][0] and c["'"][0]
    assert c["<unk>"][2] and c["</s>"][2] and c["<pad>"][2]
    assert not classes_of(tok, punctuation_splits=False)["'"][0]


def test_word_level_vocabulary_every_token_is_a_word():
    cl = token_classes(word_tokenizer())
    assert cl.convention == "word" and bool(cl.starts.all())
    assert cl.special.nonzero().flatten().tolist() == [0, 1]  # <unk>, <eos>


def test_ids_beyond_the_tokenizer_are_special():
    tok = bpe_tokenizer()
    cl = token_classes(tok, vocab_size=len(tok) + 3)
    assert cl.special[-3:].all()


def test_segment_words_byte_bpe():
    tok = bpe_tokenizer()
    cl = token_classes(tok)
    ids = tok("the cat, the dog.")["input_ids"]
    words = [decode_word(tok, g) for g in segment_words(ids, cl)]
    assert words == ["the", "cat", ",", "the", "dog", "."]


@pytest.mark.parametrize("make", [bpe_tokenizer, sp_tokenizer, word_tokenizer])
def test_word_texts_are_the_tokenizers_decoded_once_each(monkeypatch, make):
    """`WordTexts` gives what ``tokenizer.decode`` gives (stripped), decodes each sequence of
    ids once, and on a fast tokenizer calls its ``tokenizers`` backend, not the Python
    wrapper (the wrapper is made to fail here)."""
    tok = make()
    rng = random.Random(0)
    seqs = [[rng.randrange(len(tok)) for _ in range(rng.randint(0, 4))] for _ in range(200)]
    expected = [
        tok.decode(s, skip_special_tokens=False, clean_up_tokenization_spaces=False).strip()
        for s in seqs
    ]
    texts = WordTexts(tok)
    real = texts._decode
    decoded = []

    def counted(ids):
        decoded.append(tuple(ids))
        return real(ids)

    texts._decode = counted
    monkeypatch.setattr(type(tok), "decode", lambda *a, **k: pytest.fail("the wrapper ran"))
    assert [texts(s) for s in seqs] == expected
    assert [texts(tuple(s)) for s in seqs] == expected  # tuples or lists: one memo
    assert sorted(decoded) == sorted({tuple(s) for s in seqs})


def test_word_texts_start_afresh_when_the_vocabulary_grows():
    tok = bpe_tokenizer()
    before = word_texts(tok)
    assert word_texts(tok) is before
    tok.add_tokens(["zzqx"])
    after = word_texts(tok)
    assert after is not before
    assert decode_word(tok, [len(tok) - 1]) == "zzqx"


def brute_force(model, tokenizer, context, depth):
    """All words of at most ``depth`` tokens with their probabilities (merged by string), by
    plain full forwards of the Hugging Face model, and a bound on any longer word."""
    cl = token_classes(tokenizer)
    root_ok = cl.starts & ~cl.blank & ~cl.special
    cont = ~cl.starts & ~cl.special
    boundary = cl.starts | cl.ends
    with torch.no_grad():
        root = torch.log_softmax(model(torch.tensor([context])).logits[0, -1], -1)
    level = [((t,), float(root[t].exp())) for t in root_ok.nonzero().flatten().tolist()]
    words: dict[str, float] = {}
    bound = 0.0
    for d in range(1, depth + 1):
        with torch.no_grad():
            out = model(torch.tensor([list(context) + list(s) for s, _ in level])).logits
        lps = torch.log_softmax(out[:, -1], -1)
        b = lps.masked_fill(~boundary, -1e9).logsumexp(-1).exp().tolist()
        more = lps.masked_fill(~cont, -1e9).logsumexp(-1).exp().tolist()
        nxt = []
        for (seq, p), pb, row, pm in zip(level, b, lps, more, strict=True):
            w = decode_word(tokenizer, seq)
            if w:
                words[w] = words.get(w, 0.0) + p * pb
            if d < depth:
                nxt += [((*seq, int(t)), p * float(row[t].exp())) for t in cont.nonzero().flatten()]
            else:
                bound = max(bound, p * pm)
        level = nxt
    return sorted(words.items(), key=lambda kv: -kv[1]), bound


def check_against_brute_force(lm, texts):
    contexts = [[lm.start_token_id, *lm.encode(t)] for t in texts]
    root, state = lm.start(contexts)
    cl = token_classes(lm.tokenizer)
    results = top_words(
        root,
        lambda rows, conts: lm.extend(state, rows, conts),
        cl,
        lm.tokenizer,
        k=5,
        special_policy="skip",
    )
    multi_token = 0
    for context, res in zip(contexts, results, strict=True):
        expected, bound = brute_force(lm.model, lm.tokenizer, context, depth=3)
        assert bound < expected[4][1]  # words of 4+ tokens cannot enter the top 5
        assert res.exact and res.method.startswith("best-first")
        assert res.words == [w for w, _ in expected[:5]]
        # Tokenisations below merge_tail (0.05) x the 5th word's probability may stay unseen:
        # the search's sums are lower bounds, close to the full sums.
        for p, (_, q) in zip(res.probs, expected[:5], strict=True):
            assert q - 0.1 * expected[4][1] < p < q + 1e-6
        multi_token += sum(len(lm.encode(w)) > 1 for w in res.words)
    assert multi_token > 0  # the test exercised multi-token words


def test_best_first_matches_brute_force_byte_bpe(bpe_lm):
    check_against_brute_force(bpe_lm, ["the cat", "the dog at", "a", "the cat, the"])


def test_best_first_matches_brute_force_metaspace(sp_lm):
    check_against_brute_force(sp_lm, ["the cat", "the dog at", "a", "the cat, the"])


def test_word_level_top_k_is_token_top_k_without_specials(word_lm):
    contexts = [[word_lm.start_token_id, *word_lm.encode(t)] for t in ["the cat", "a big red"]]
    root, _ = word_lm.start(contexts)
    cl = token_classes(word_lm.tokenizer)
    results = top_words(root, None, cl, word_lm.tokenizer, k=5, special_policy="skip")
    for b, res in enumerate(results):
        assert res.method == "word-level-topk"
        masked = root[b].masked_fill(cl.special, float("-inf"))
        ids = masked.topk(5).indices.tolist()
        assert res.words == word_lm.tokenizer.convert_ids_to_tokens(ids)
        assert "<unk>" not in res.words and "<eos>" not in res.words


def test_special_top1_policies(word_lm):
    tok = word_lm.tokenizer
    cl = token_classes(tok)
    logits = torch.full((1, len(tok)), -5.0)
    logits[0, tok.convert_tokens_to_ids("<eos>")] = 3.0
    logits[0, tok.convert_tokens_to_ids("cat")] = 1.0
    root = torch.log_softmax(logits, -1)
    skip = top_words(root, None, cl, tok, k=3, special_policy="skip")[0]
    renorm = top_words(root, None, cl, tok, k=3, special_policy="renormalise")[0]
    for res in (skip, renorm):
        assert res.special_top1 and res.special_token == "<eos>"
        assert res.words[0] == "cat" and "<eos>" not in res.words
    assert skip.skipped and not skip.renormalised
    assert not renorm.skipped and renorm.renormalised
    p_eos = float(root[0, tok.convert_tokens_to_ids("<eos>")].exp())
    assert abs(renorm.probs[0] - skip.probs[0] / (1 - renorm.special_mass)) < 1e-9
    assert renorm.special_mass >= p_eos


def test_special_tokens_never_returned_by_search(bpe_lm, sp_lm):
    for lm in (bpe_lm, sp_lm):
        cl = token_classes(lm.tokenizer)
        names = set(lm.tokenizer.convert_ids_to_tokens(cl.special.nonzero().flatten().tolist()))
        contexts = [[lm.start_token_id, *lm.encode(t)] for t in ["the", "cat dog", "a a a"]]
        root, state = lm.start(contexts)
        root = root.clone()
        # Make the end of text the most likely token: it must still never be a word.
        root[:, lm.tokenizer.eos_token_id] = 0.0
        extend = lm.extend
        res = top_words(root, lambda r, c, s=state, f=extend: f(s, r, c), cl, lm.tokenizer, k=5)
        for r in res:
            assert not names & set(r.words)
            assert r.special_top1


def test_budget_exhaustion_is_reported(bpe_lm):
    contexts = [[bpe_lm.start_token_id, *bpe_lm.encode("the cat")]]
    root, state = bpe_lm.start(contexts)
    cl = token_classes(bpe_lm.tokenizer)
    res = top_words(
        root, lambda r, c: bpe_lm.extend(state, r, c), cl, bpe_lm.tokenizer, k=5, max_expansions=2
    )[0]
    assert not res.exact and res.expansions == 2


def test_a_word_that_never_ends_is_cut_at_max_word_tokens_and_flagged():
    """A model that keeps a partial word probable token after token ("cat", "cats", "catss",
    ...): the exact search follows the chain one forward per token; ``max_word_tokens`` stops
    it there and flags the result inexact, since a longer word beats the k-th one kept."""
    tok = bpe_tokenizer()
    model = tiny_gpt2(tok, seed=5)
    with torch.no_grad():
        # Every position's hidden state becomes e0, so the logits are lm_head's column 0 for
        # any context: "s" (a continuation piece) 10, "Ġcat" 9, every other token 0.
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0
        model.lm_head.weight = torch.nn.Parameter(torch.zeros_like(model.lm_head.weight))
        model.lm_head.weight[tok.convert_tokens_to_ids("s"), 0] = 10.0
        model.lm_head.weight[tok.convert_tokens_to_ids("Ġcat"), 0] = 9.0
    lm = HFCausalLM(model, tok, name="chain")
    cl = token_classes(tok)

    def search(limit):
        root, state = lm.start([[lm.start_token_id, *lm.encode("the")]])
        return top_words(
            root, lambda r, c: lm.extend(state, r, c), cl, tok, k=5, max_word_tokens=limit
        )[0]

    exact = search(None)
    assert exact.exact and exact.words == ["cat", "cats", "catss", "catsss", "catssss"]
    cut = search(3)
    assert cut.words[:3] == ["cat", "cats", "catss"]
    assert all(not w.startswith("catsss") for w in cut.words)
    assert not cut.exact and "max_word_tokens=3" in cut.method
    assert cut.probs[:3] == pytest.approx(exact.probs[:3], rel=1e-5)
    # A limit the chain's words never reach changes nothing and stays exact.
    roomy = search(16)
    assert roomy.exact and roomy.words == exact.words
    assert roomy.probs == pytest.approx(exact.probs, rel=1e-5)


def constant_lm(logits: dict[str, float]) -> HFCausalLM:
    """A tiny GPT-2 over the test BPE whose next-token distribution is the same after any
    context: every position's hidden state becomes e0, so the logits are lm_head's column 0
    (``logits`` for the named tokens, 0 for the others)."""
    tok = bpe_tokenizer()
    model = tiny_gpt2(tok, seed=5)
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0
        model.lm_head.weight = torch.nn.Parameter(torch.zeros_like(model.lm_head.weight))
        for name, value in logits.items():
            model.lm_head.weight[tok.convert_tokens_to_ids(name), 0] = value
    return HFCausalLM(model, tok, name="constant")


def test_tokenisations_of_one_word_are_merged_and_counted():
    """ "the" is spelt by "Ġthe" and by "Ġth" + "e" (and "Ġt" + "h" + "e"): one word whose
    probability sums its tokenisations, as brute-force enumeration sums them, and the number of
    tokenisations merged is recorded."""
    lm = constant_lm({"Ġthe": 5.0, "Ġth": 5.0, "e": 6.0, "Ġcat": 4.0, "Ġdog": 3.5, "Ġa": 3.0})
    context = [lm.start_token_id, *lm.encode("a cat")]
    root, state = lm.start([context])
    cl = token_classes(lm.tokenizer)
    (res,) = top_words(root, lambda r, c: lm.extend(state, r, c), cl, lm.tokenizer, k=5)
    expected, _ = brute_force(lm.model, lm.tokenizer, context, depth=4)
    assert res.exact and res.words == [w for w, _ in expected[:5]]
    assert res.words.count("the") == 1 and "thee" in res.words
    the = res.probs[res.words.index("the")]
    p = root[0].exp()
    # The same distribution after any context: "Ġthe" then a word boundary, the one-token path.
    one_token = float(p[lm.tokenizer.convert_tokens_to_ids("Ġthe")] * p[cl.starts | cl.ends].sum())
    assert the > 1.3 * one_token
    assert the == pytest.approx(dict(expected)["the"], rel=0.02)
    assert res.merged >= 2 and res.info()["merged_tokenisations"] == res.merged


def test_speculation_changes_no_result(bpe_lm, sp_lm):
    """A search's speculative words (the tail of a batch of searches) are memoised until the
    search asks for them: the words, probabilities, flags and expansion counts are those of a
    search that never speculates, in fewer rounds."""
    for lm in (bpe_lm, sp_lm):
        contexts = [[lm.start_token_id, *lm.encode(t)] for t in ["the cat", "a", "the dog at"]]
        root, state = lm.start(contexts)
        cl = token_classes(lm.tokenizer)
        runs = []
        for round_tokens, most in ((1, 0), (64, 4), (64, 16)):
            rounds = []

            def extend(r, c, lm=lm, state=state, rounds=rounds):
                rounds.append(len(r))
                return lm.extend(state, r, c)

            found = top_words(
                root, extend, cl, lm.tokenizer, k=5, round_tokens=round_tokens,
                max_speculative=most,
            )  # fmt: skip
            runs.append((found, rounds))
        plain, plain_rounds = runs[0]
        assert max(plain_rounds) <= len(contexts)  # one word per search and round
        for found, rounds in runs[1:]:
            assert len(rounds) < len(plain_rounds) and sum(rounds) > sum(plain_rounds)
            for a, b in zip(found, plain, strict=True):
                assert (a.words, a.exact, a.expansions, a.merged) == (
                    b.words, b.exact, b.expansions, b.merged,
                )  # fmt: skip
                # float32 GEMMs of other row counts round differently (seen: 1.5e-5 relative
                # on a word of several tokens); words, flags and expansions are exact above.
                assert a.probs == pytest.approx(b.probs, rel=1e-4)
