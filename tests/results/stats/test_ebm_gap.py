"""EB-M_gap (the later paper's eq. 5) and the translation scores of EB-M, on texts with a known
truth: a model equal to the data process gives EB-M_gap = 1 within its interval; a model that a
distortion confuses for its first tau words recovers, EB-M_gap falling to 1 as l_gap grows; the
translation scores are sacrebleu's own corpus BLEU, sentence BLEU and chrF."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

from app.results.stats.ebm import (
    SCORES,
    TRANSLATION_SCORES,
    KindTexts,
    ebm_scores,
)
from app.results.stats.textscores import PairedChrf, SentenceBleu

# The data process: words drawn independently from a skewed distribution (so that n-grams
# of two independent texts match often enough for BLEU to vary smoothly).
WORDS = ["the", "of", "a", "and", "to", "in", "was", "he"]
P_WORDS = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.07, 0.05, 0.03])
NOISE = [f"zz{i}" for i in range(40)]  # what a confused model writes: never in the data
L_GEN = 10


def _words(rng: np.random.Generator, n: int) -> list[str]:
    return [WORDS[i] for i in rng.choice(len(WORDS), size=n, p=P_WORDS)]


def _model_text(rng, start: int, tau: float) -> str:
    """A continuation of L_GEN words whose first word is the model's word ``start`` after a
    distortion: word t is noise with probability max(0, 1 - t / tau) (tau = 0: never; the
    model has forgotten the distortion after tau words), else a word of the data process."""
    out = []
    for t in range(start, start + L_GEN):
        confused = tau > 0 and rng.random() < max(0.0, 1.0 - t / tau)
        out.append(str(rng.choice(NOISE)) if confused else _words(rng, 1)[0])
    return " ".join(out)


def _study(n: int, gaps: list[int], tau: float, seed: int, length: int = 5) -> dict:
    """Cells of a ratings study with data at l + g and a gap kind at l per g: one prompt (a
    data line) per item index, shared by the data item at l + g and the gap item at l, whose
    reference is the line's L_GEN words after l + g."""
    rng = np.random.default_rng(seed)
    cells: dict[int, dict[str, KindTexts]] = {}
    for g in gaps:
        refs = [" ".join(_words(rng, L_GEN)) for _ in range(n)]
        prompts = [f"line:{g}:{i}" for i in range(n)]
        data = [_model_text(rng, 0, 0) for _ in range(n)]  # no distortion: P_M = P_D
        after_gap = [_model_text(rng, g, tau) for _ in range(n)]
        cells.setdefault(length + g, {})["data"] = KindTexts(data, refs, prompts)
        cells.setdefault(length, {})[f"data_shuffled+gap@{g}"] = KindTexts(after_gap, refs, prompts)
    return cells


def _gap_ratio(res, g: int, score: str, length: int = 5):
    return next(r for r in res.gap_ratios if (r.length, r.l_gap, r.score) == (length, g, score))


def test_ebm_gap_is_the_ratio_of_the_libraries_bleu_over_the_same_references():
    cells = _study(40, [3], tau=6, seed=1)
    res = ebm_scores(cells, b=100, seed=0, gaps={"data_shuffled+gap@3": 3})
    data, gap = cells[8]["data"], cells[5]["data_shuffled+gap@3"]

    def bleu(t):
        hyps, refs = list(t.continuations), [list(t.references)]
        return sacrebleu.corpus_bleu(hyps, refs, tokenize="none").score

    r = _gap_ratio(res, 3, "bleu")
    assert r.value == pytest.approx(bleu(data) / bleu(gap), rel=1e-9)
    assert r.kind == "data_shuffled+gap@3" and r.reference_length == 8 and r.paired
    assert r.low < r.value < r.high
    # The gap kind's own scores are reported at its length l, its EB-M ratio at l is not.
    (score,) = [t for t in res.scores if t.kind == r.kind and t.score == "bleu"]
    assert score.length == 5 and score.value == pytest.approx(bleu(gap), rel=1e-9)
    assert not [x for x in res.ratios if x.kind == r.kind]
    assert {x.score for x in res.gap_ratios} == set(SCORES)


def test_a_model_equal_to_the_data_gives_ebm_gap_one_within_its_interval():
    """P_M = P_D, and the distortion changes nothing the model writes: over 20 simulated
    studies every score's EB-M_gap interval covers 1 in at least 80% of them (nominal 95%;
    measured with 40 studies: 0.93 to 1.0), and the estimates average to 1."""
    reps, covered, values = 20, {}, {}
    for rep in range(reps):
        cells = _study(80, [2], tau=0, seed=100 + rep)
        res = ebm_scores(cells, b=200, seed=rep, gaps={"data_shuffled+gap@2": 2})
        for r in res.gap_ratios:
            covered[r.score] = covered.get(r.score, 0) + (r.low <= 1.0 <= r.high)
            values.setdefault(r.score, []).append(r.value)
    assert set(covered) == set(SCORES)
    for score in SCORES:
        assert covered[score] / reps >= 0.8, (score, covered[score])
        v = np.array(values[score])
        assert abs(v.mean() - 1.0) < 3 * v.std(ddof=1) / np.sqrt(reps) + 0.01, score


def test_a_model_that_forgets_the_distortion_recovers_as_l_gap_grows():
    """A distortion confuses the model for its next tau = 10 words (noise words, fewer and
    fewer): the continuation after g gap words holds a share 0.45 (g = 1), 0.28 (3), 0.10 (6)
    and 0 (12) of noise, so EB-M_gap falls towards 1 and reaches it."""
    gaps = [1, 3, 6, 12]
    cells = _study(80, gaps, tau=10, seed=3)
    res = ebm_scores(cells, b=300, seed=0, gaps={f"data_shuffled+gap@{g}": g for g in gaps})
    for score in ("meteor", "nist", "bleu"):
        values = [_gap_ratio(res, g, score).value for g in gaps[:3]]
        assert values[0] > values[1] > values[2], (score, values)
        first, last = _gap_ratio(res, 1, score), _gap_ratio(res, 12, score)
        assert first.low > 1.0, score  # still confused one word after the distortion
        assert last.low <= 1.0 <= last.high, score  # recovered: tau = 10 < 12
    entropy = [_gap_ratio(res, g, "entropy").value for g in gaps]
    assert entropy[0] < entropy[-1]  # the noise is diverse: the data's entropy is the lower


def test_a_gap_kind_never_enters_its_lengths_ebm_resamples():
    """data and model at l are paired by prompt; a gap kind at l (other prompts) must not
    unpair them, nor move their intervals."""
    rng = np.random.default_rng(0)
    n = 30
    refs = [" ".join(_words(rng, L_GEN)) for _ in range(n)]
    prompts = [f"p{i}" for i in range(n)]
    texts = {
        k: KindTexts([_model_text(rng, 0, 0) for _ in range(n)], refs, prompts)
        for k in ("data", "model")
    }
    gap = KindTexts([_model_text(rng, 3, 5) for _ in range(n)], refs, [f"q{i}" for i in range(n)])
    alone = ebm_scores({5: dict(texts)}, b=100, seed=1)
    with_gap = ebm_scores(
        {5: {**texts, "data_shuffled+gap@3": gap}}, b=100, seed=1,
        gaps={"data_shuffled+gap@3": 3},
    )  # fmt: skip
    assert with_gap.paired_lengths == alone.paired_lengths == [5]
    assert with_gap.ratios == alone.ratios
    assert with_gap.gap_ratios == []
    assert any("no EB-M_gap" in w and "l + g = 8" in w for w in with_gap.warnings)


HYPS = [
    "the cat sat on the mat .",
    "a dog ran across the road",
    "hello world , again and again",
    "we went home",
    "it is raining today in the city",
]
REFS = [
    "the cat sat on a mat .",
    "the dog ran over the road quickly",
    "hello there , world",
    "we went back home",
    "today it rains in town",
]


def _sentence(hyps: list[str], refs: list[str]) -> list[float]:
    return [
        sacrebleu.sentence_bleu(h, [r], tokenize="none").score
        for h, r in zip(hyps, refs, strict=True)
    ]


def test_sentence_bleu_and_chrf_are_sacrebleus_on_any_resample():
    s, c = SentenceBleu(HYPS, REFS), PairedChrf(HYPS, REFS)
    sentence = [
        sacrebleu.sentence_bleu(h, [r], tokenize="none").score
        for h, r in zip(HYPS, REFS, strict=True)
    ]
    assert s.scores(np.ones((1, 5)))[0] == pytest.approx(np.mean(sentence), rel=1e-12)
    assert c.scores(np.ones((1, 5)))[0] == pytest.approx(
        sacrebleu.corpus_chrf(HYPS, [REFS]).score, rel=1e-12
    )
    m = np.array([[2, 0, 1, 0, 3]])
    hyps = [h for h, k in zip(HYPS, m[0], strict=True) for _ in range(k)]
    refs = [r for r, k in zip(REFS, m[0], strict=True) for _ in range(k)]
    assert c.scores(m)[0] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, rel=1e-12)
    again = [
        sacrebleu.sentence_bleu(h, [r], tokenize="none").score
        for h, r in zip(hyps, refs, strict=True)
    ]
    assert s.scores(m)[0] == pytest.approx(np.mean(again), rel=1e-12)


def test_translation_continuations_get_bleu_sentence_bleu_and_chrf_with_intervals():
    rng = np.random.default_rng(4)
    n = 40
    refs = [" ".join(_words(rng, 8)) for _ in range(n)]
    prompts = [f"row:{i}" for i in range(n)]
    # After data prefixes (DATA) the translation follows its reference more closely.
    near = [" ".join(w if rng.random() < 0.7 else "zz0" for w in r.split()) for r in refs]
    far = [" ".join(w if rng.random() < 0.4 else "zz0" for w in r.split()) for r in refs]
    cells = {3: {"data": KindTexts(near, refs, prompts), "model": KindTexts(far, refs, prompts)}}
    res = ebm_scores(cells, b=200, seed=2, names=TRANSLATION_SCORES)
    assert res.names == list(TRANSLATION_SCORES)
    assert {t.score for t in res.scores} == set(TRANSLATION_SCORES)
    assert set(res.settings) == {*TRANSLATION_SCORES, "eb_bleu"}
    got = {(t.kind, t.score): t for t in res.scores}
    for kind, hyps in (("data", near), ("model", far)):
        assert got[(kind, "bleu")].value == pytest.approx(
            sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score, rel=1e-12
        )
        sentence = _sentence(hyps, refs)
        assert got[(kind, "sentence_bleu")].value == pytest.approx(np.mean(sentence), rel=1e-12)
        assert got[(kind, "chrf")].value == pytest.approx(
            sacrebleu.corpus_chrf(hyps, [refs]).score, rel=1e-12
        )
    for r in res.ratios:
        if r.score != "entropy":
            assert r.low > 1.0, (r.score, r.value, r.low)  # DATA continues better than NORMAL
    with pytest.raises(ValueError, match="unknown scores"):
        ebm_scores(cells, b=10, names=("bleu", "ter"))
