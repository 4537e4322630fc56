"""EB-M's text scores against the libraries' own values (sacrebleu, NLTK, scipy) on small
fixed texts, and on resampled corpora (a multiset of the texts = the corpus with the texts
repeated), which is what the bootstrap relies on."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import sacrebleu
from nltk.translate.meteor_score import meteor_score, single_meteor_score
from nltk.translate.nist_score import corpus_nist, sentence_nist

from app.results.stats.textscores import (
    NO_SYNONYMS,
    Meteor,
    NgramEntropy,
    PairedBleu,
    PairedNist,
    SharedBleu,
)

# NLTK's own NIST doctest (Doddington's example sentences), and its reference values.
HYP1 = (
    "It is a guide to action which ensures that the military always obeys the commands of the party"
)
HYP2 = "It is to insure the troops forever hearing the activity guidebook that party direct"
REF1 = "It is a guide to action that ensures that the military will forever heed Party commands"

VOCAB = [
    "the", "a", "of", "to", "and", "in", "that", "was", "he", "she", "it", "said", "mr",
    "darcy", "elizabeth", "not", "be", "had", "her", "his", "with", "as", "for", "on", "at",
    "by",
]  # fmt: skip


def _texts(n: int, seed: int, lengths=(18, 20, 20, 22)) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(VOCAB) for _ in range(rng.choice(lengths))) for _ in range(n)]


def _expand(texts: list[str], m: np.ndarray) -> list[str]:
    return [t for t, k in zip(texts, m, strict=True) for _ in range(int(k))]


HYPS, REFS = _texts(40, seed=1), _texts(40, seed=2)
ONES = np.ones((1, 40))
DRAWS = np.random.default_rng(3).multinomial(40, np.full(40, 1 / 40), size=3)


def test_paired_bleu_is_sacrebleus_corpus_bleu():
    bleu = PairedBleu(HYPS, REFS)
    expected = sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="none").score
    assert bleu.scores(ONES)[0] == pytest.approx(expected, rel=1e-12)
    for m, got in zip(DRAWS, bleu.scores(DRAWS), strict=True):
        want = sacrebleu.corpus_bleu(_expand(HYPS, m), [_expand(REFS, m)], tokenize="none")
        assert got == pytest.approx(want.score, rel=1e-12)


def test_paired_bleu_of_a_text_against_itself_is_100_and_of_nothing_shared_0():
    assert PairedBleu([HYP1], [HYP1]).scores(np.ones((1, 1)))[0] == pytest.approx(100.0)
    assert PairedBleu(["x y z w"], ["a b c d"]).scores(np.ones((1, 1)))[0] == 0.0


def test_shared_bleu_is_sacrebleus_multi_reference_bleu():
    refs = REFS[:12]
    bleu = SharedBleu(HYPS, refs)
    every = [[r] * len(HYPS) for r in refs]  # sacrebleu: one stream per reference
    expected = sacrebleu.corpus_bleu(HYPS, every, tokenize="none").score
    assert bleu.scores(ONES, np.ones((1, 12)))[0] == pytest.approx(expected, rel=1e-12)
    # A resample: hypotheses repeated, references present or not (their repeats change nothing).
    mr = np.random.default_rng(4).multinomial(12, np.full(12, 1 / 12), size=3)
    for mh, r, got in zip(DRAWS, mr, bleu.scores(DRAWS, mr), strict=True):
        streams = [[ref] * int(mh.sum()) for ref, k in zip(refs, r, strict=True) if k]
        want = sacrebleu.corpus_bleu(_expand(HYPS, mh), streams, tokenize="none").score
        assert got == pytest.approx(want, rel=1e-12)


def test_shared_bleu_picks_the_closest_reference_length_as_sacrebleu():
    hyps = ["a b c d e f", "a b c", "a b c d e f g h i j"]
    refs = ["a b c d", "a b c d e f g h", "x y"]
    expected = sacrebleu.corpus_bleu(hyps, [[r] * 3 for r in refs], tokenize="none")
    got = SharedBleu(hyps, refs).scores(np.ones((1, 3)), np.ones((1, 3)))[0]
    assert got == pytest.approx(expected.score, rel=1e-12)


def test_paired_nist_is_nltks_corpus_nist():
    nist = PairedNist([HYP1, HYP2], [REF1, REF1])
    expected = corpus_nist([[REF1.split()], [REF1.split()]], [HYP1.split(), HYP2.split()])
    assert nist.scores(np.ones((1, 2)))[0] == pytest.approx(expected, rel=1e-12)
    assert PairedNist([HYP1], [REF1]).scores(np.ones((1, 1)))[0] == pytest.approx(
        sentence_nist([REF1.split()], HYP1.split()), rel=1e-12
    )


def test_paired_nist_recomputes_the_information_weights_in_a_resample():
    nist = PairedNist(HYPS, REFS)
    expected = corpus_nist([[r.split()] for r in REFS], [h.split() for h in HYPS])
    assert nist.scores(ONES)[0] == pytest.approx(expected, rel=1e-12)
    for m, got in zip(DRAWS, nist.scores(DRAWS), strict=True):
        hyps, refs = _expand(HYPS, m), _expand(REFS, m)
        want = corpus_nist([[r.split()] for r in refs], [h.split() for h in hyps])
        assert got == pytest.approx(want, rel=1e-12)


def test_meteor_is_nltks_sentence_meteor_averaged_without_synonyms():
    meteor = Meteor(HYPS, REFS)
    each = [
        meteor_score([r.split()], h.split(), wordnet=NO_SYNONYMS)
        for h, r in zip(HYPS, REFS, strict=True)
    ]
    assert meteor.scores(ONES)[0] == pytest.approx(np.mean(each), rel=1e-12)
    m = DRAWS[0]
    assert meteor.scores(m[None, :])[0] == pytest.approx(np.average(each, weights=m), rel=1e-12)
    # Stems match without WordNet ("commands" ~ "command"), synonyms do not ("guide" ~ "guidebook"
    # is no stem pair either): only exact and stem alignments count.
    stem = single_meteor_score(["commands"], ["command"], wordnet=NO_SYNONYMS)
    assert stem == pytest.approx(single_meteor_score(["command"], ["command"], wordnet=NO_SYNONYMS))
    assert single_meteor_score(["big"], ["large"], wordnet=NO_SYNONYMS) == 0.0


def test_ngram_entropy_is_the_entropy_of_the_pooled_ngram_counts():
    texts = ["a b a b", "a b c"]
    # bigrams: (a,b) x3, (b,a) x1, (b,c) x1 -> p = 3/5, 1/5, 1/5
    expected = -(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2))
    assert NgramEntropy(texts, n=2).scores(np.ones((1, 2)))[0] == pytest.approx(expected)
    ent = NgramEntropy(HYPS, n=4)
    for m, got in zip(DRAWS, ent.scores(DRAWS), strict=True):
        counts = Counter(
            g
            for t in _expand(HYPS, m)
            for g in zip(*(t.split()[i:] for i in range(4)), strict=False)
        )
        p = np.array(list(counts.values()), dtype=float) / sum(counts.values())
        assert got == pytest.approx(-(p * np.log(p)).sum(), rel=1e-12)


def test_an_empty_resample_has_no_score():
    none = np.zeros((1, 40))
    assert np.isnan(Meteor(HYPS, REFS).scores(none)[0])
    assert np.isnan(NgramEntropy(HYPS).scores(none)[0])
    assert np.isnan(SharedBleu(HYPS, REFS).scores(ONES, none)[0])


def test_multiplicities_must_match_the_texts():
    with pytest.raises(ValueError, match="multiplicities"):
        PairedBleu(HYPS, REFS).scores(np.ones((1, 3)))
    with pytest.raises(ValueError, match="references"):
        PairedNist(HYPS, REFS[:3])


def test_every_bleu_is_built_with_the_shared_settings():
    """EB-M's sentence BLEU and the samples page's are one metric (`bleu_metric`), with
    `BLEU_SETTINGS` (no tokenisation: "mat." is one word), not sacrebleu's defaults."""
    from app.results.samples import sentence_bleu
    from app.results.stats.textscores import BLEU_SETTINGS, SentenceBleu, bleu_metric

    for effective_order in (False, True):
        bleu = bleu_metric(effective_order=effective_order)
        assert (bleu.tokenizer.signature(), bleu.smooth_method, bleu.max_ngram_order) == (
            BLEU_SETTINGS["tokenize"],
            BLEU_SETTINGS["smooth_method"],
            BLEU_SETTINGS["max_ngram_order"],
        )
    hyps = ["the cat sat on the mat.", "a dog ran off", "the cat sat on the mat ."]
    refs = ["the cat sat on the mat .", "the dog ran away", "the cat sat on the mat ."]
    ours = SentenceBleu(hyps, refs).sentence.tolist()
    assert ours == [sentence_bleu(h, r) for h, r in zip(hyps, refs, strict=True)]
    assert ours[0] < ours[2] == pytest.approx(100.0)
