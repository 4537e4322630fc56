"""EB-M from continuations: the ratios, EB-bleu, the bootstrap over prompts (paired when the
kinds share prompts), and EB-M = 1 when both kinds' continuations are the same."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import sacrebleu
from nltk.translate.nist_score import corpus_nist

from app.results.stats.ebm import (
    ENTROPY_AT_BOUND,
    NO_SPREAD,
    SCORES,
    EBMScores,
    KindTexts,
    degenerate_reason,
    ebm_scores,
)

VOCAB = [
    "the", "a", "of", "to", "and", "in", "that", "was", "he", "she", "it", "said", "mr",
    "darcy", "elizabeth", "not", "be", "had", "her", "his", "with", "as", "for", "on", "at",
    "by",
]  # fmt: skip


def _text(rng: random.Random, n: int = 10) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def _noisy(text: str, rng: random.Random, rate: float) -> str:
    return " ".join(rng.choice(VOCAB) if rng.random() < rate else w for w in text.split())


def _cells(n: int = 40, seed: int = 0, shared_prompts: bool = False) -> dict:
    """Data continuations close to their references, model ones further: EB-M > 1."""
    rng = random.Random(seed)
    refs = {k: [_text(rng) for _ in range(n)] for k in ("data", "model")}
    if shared_prompts:
        refs["model"] = refs["data"]
    data = KindTexts(
        [_noisy(r, rng, 0.3) for r in refs["data"]], refs["data"], [f"p{i}" for i in range(n)]
    )
    pre = "p" if shared_prompts else "q"
    model = KindTexts(
        [_noisy(r, rng, 0.8) for r in refs["model"]],
        refs["model"],
        [f"{pre}{i}" for i in range(n)],
    )
    return {10: {"data": data, "model": model}}


def _get(res: EBMScores, kind: str, score: str, length: int = 10):
    return next(t for t in res.scores if (t.length, t.kind, t.score) == (length, kind, score))


def _ratio(res: EBMScores, score: str, kind: str = "model", length: int = 10):
    return next(r for r in res.ratios if (r.length, r.kind, r.score) == (length, kind, score))


def test_ebm_is_the_ratio_of_the_libraries_scores():
    cells = _cells()
    res = ebm_scores(cells, b=200, seed=1)
    bleu = {
        k: sacrebleu.corpus_bleu(list(t.continuations), [list(t.references)], tokenize="none").score
        for k, t in cells[10].items()
    }
    nist = {
        k: corpus_nist([[r.split()] for r in t.references], [c.split() for c in t.continuations])
        for k, t in cells[10].items()
    }
    assert _get(res, "data", "bleu").value == pytest.approx(bleu["data"], rel=1e-12)
    assert _ratio(res, "bleu").value == pytest.approx(bleu["data"] / bleu["model"], rel=1e-12)
    assert _ratio(res, "nist").value == pytest.approx(nist["data"] / nist["model"], rel=1e-12)
    # Backward-BLEU: the data continuations against the kind's continuations as one set.
    for kind, t in cells[10].items():
        streams = [[c] * len(t.references) for c in t.continuations]
        want = sacrebleu.corpus_bleu(list(t.references), streams, tokenize="none").score
        assert _get(res, kind, "backward_bleu").value == pytest.approx(want, rel=1e-12)
    # EB-bleu: model continuations against the data-prefix continuations as one set.
    data, model = cells[10]["data"], cells[10]["model"]
    streams = [[c] * len(model.continuations) for c in data.continuations]
    want = sacrebleu.corpus_bleu(list(model.continuations), streams, tokenize="none").score
    assert res.eb_bleu[0].value == pytest.approx(want, rel=1e-12)
    assert res.eb_bleu[0].low <= res.eb_bleu[0].value <= res.eb_bleu[0].high
    # The construction makes data continuations closer to the data: EB-M > 1 for references.
    for score in ("bleu", "nist", "meteor"):
        r = _ratio(res, score)
        assert r.low > 1.0, (score, r)
        assert r.low <= r.value <= r.high


def test_ebm_is_one_when_both_kinds_continue_alike():
    cells = _cells(shared_prompts=True)
    same = cells[10]["data"]
    cells[10]["model"] = KindTexts(same.continuations, same.references, same.prompts)
    res = ebm_scores(cells, b=300, seed=2)
    assert res.paired_lengths == [10]
    for score in SCORES:
        r = _ratio(res, score)
        # Paired: every resample draws the same prompts for both kinds, so the ratio is 1 in
        # each: no spread, and (issue 32) a flag with its reason instead of [1, 1].
        assert r.value == pytest.approx(1.0), score
        # (40 ten-word texts: every 4-gram is distinct, so the entropy is also at its bound)
        why = (NO_SPREAD, ENTROPY_AT_BOUND) if score == "entropy" else (NO_SPREAD,)
        assert r.degenerate and r.degenerate_reason in why, score
        assert math.isnan(r.low) and math.isnan(r.high) and math.isnan(r.se), score
    # The kinds' own reference scores vary over the resamples: not flagged.
    assert not any(t.degenerate for t in res.scores if t.score != "entropy")


def test_an_entropy_at_its_bound_is_flagged_not_printed_as_an_interval():
    # A small study: every 4-gram of the continuations occurs once, in both kinds.
    rng = random.Random(5)
    words = [f"w{i}" for i in range(400)]
    cells = {
        10: {
            kind: KindTexts(
                [" ".join(rng.sample(words, 8)) for _ in range(6)],
                [" ".join(rng.sample(words, 8)) for _ in range(6)],
                [f"p{i}" for i in range(6)],
            )
            for kind in ("data", "model")
        }
    }
    res = ebm_scores(cells, b=200, seed=0)
    for kind in ("data", "model"):
        t = _get(res, kind, "entropy")
        assert t.value == pytest.approx(math.log(6 * 5))  # 6 texts x 5 4-grams, all distinct
        assert t.degenerate and t.degenerate_reason == ENTROPY_AT_BOUND
        assert math.isnan(t.low) and math.isnan(t.high)
    r = _ratio(res, "entropy")
    assert r.value == pytest.approx(1.0) and r.degenerate and math.isnan(r.low)
    assert any("entropy" in w and "bound" in w for w in res.warnings)
    # A text with a repeated 4-gram is below the bound: the rule is exact, not a threshold.
    assert degenerate_reason("entropy", math.log(30) - 1e-3, 0.1, math.log(30)) == ""
    assert degenerate_reason("bleu", 0.3, 0.0) == NO_SPREAD


def test_kinds_from_different_prompts_are_resampled_on_their_own():
    cells = _cells(shared_prompts=False)
    same = cells[10]["data"]
    other_prompts = [f"other{i}" for i in range(len(same.prompts))]
    cells[10]["model"] = KindTexts(same.continuations, same.references, other_prompts)
    res = ebm_scores(cells, b=300, seed=2)
    assert res.paired_lengths == []
    r = _ratio(res, "bleu")
    assert r.value == pytest.approx(1.0)
    assert r.low < 1.0 < r.high  # two independent resamples: the ratio varies around 1


def test_a_seed_gives_the_same_intervals_and_another_seed_others():
    cells = _cells()
    a, b = ebm_scores(cells, b=200, seed=5), ebm_scores(cells, b=200, seed=5)
    c = ebm_scores(cells, b=200, seed=6)
    assert a == b
    assert _ratio(a, "nist").low != _ratio(c, "nist").low
    assert _ratio(a, "nist").value == _ratio(c, "nist").value


def test_interval_width_shrinks_with_more_prompts():
    small = _ratio(ebm_scores(_cells(n=20), b=400, seed=1), "meteor")
    large = _ratio(ebm_scores(_cells(n=160), b=400, seed=1), "meteor")
    assert (large.high - large.low) < (small.high - small.low)


def test_continuations_without_a_data_continuation_count_only_in_the_entropy():
    cells = _cells()
    model = cells[10]["model"]
    refs = [None if i % 4 == 0 else r for i, r in enumerate(model.references)]
    cells[10]["model"] = KindTexts(model.continuations, refs, model.prompts)
    res = ebm_scores(cells, b=100, seed=0)
    assert _get(res, "model", "bleu").n == 30
    assert _get(res, "model", "entropy").n == 40
    kept = [i for i in range(40) if i % 4]
    want = sacrebleu.corpus_bleu(
        [model.continuations[i] for i in kept], [[model.references[i] for i in kept]],
        tokenize="none",
    ).score  # fmt: skip
    assert _get(res, "model", "bleu").value == pytest.approx(want, rel=1e-12)
    assert any("10 of 40 continuations have no data continuation" in w for w in res.warnings)


def test_other_kinds_get_a_ratio_over_data_and_no_eb_bleu_without_model():
    cells = _cells()
    cells[10]["random"] = cells[10].pop("model")
    res = ebm_scores(cells, b=100, seed=0)
    assert {r.kind for r in res.ratios} == {"random"}
    assert res.eb_bleu == []


def test_a_kind_without_references_has_no_reference_scores_but_an_entropy():
    cells = _cells()
    model = cells[10]["model"]
    cells[10]["model"] = KindTexts(model.continuations, [None] * 40, model.prompts)
    res = ebm_scores(cells, b=100, seed=0)
    assert math.isnan(_get(res, "model", "bleu").value)
    assert math.isnan(_ratio(res, "bleu").value)
    assert np.isfinite(_ratio(res, "entropy").value)


def test_few_prompts_are_warned_and_b_must_resample():
    res = ebm_scores(_cells(n=8), b=50, seed=0)
    assert any("8 prompts" in w for w in res.warnings)
    with pytest.raises(ValueError):
        ebm_scores(_cells(n=8), b=1, seed=0)
    with pytest.raises(ValueError, match="one reference and one prompt"):
        KindTexts(["a"], [], ["p"])


def test_the_entropys_jackknife_se_matches_its_spread_over_independent_samples():
    """A known truth: 40 independent samples of 60 continuations from one Zipf source over 12
    words (so 4-grams repeat). The entropy is not a sum over continuations (a bootstrap with
    replacement lowers it), so its SE comes from the delete-d jackknife; it must match the
    spread of the estimates."""
    gen = np.random.default_rng(11)
    p = 1.0 / np.arange(1, 13) ** 1.1
    p /= p.sum()

    def sample() -> dict:
        texts = [" ".join(f"w{i}" for i in gen.choice(12, size=12, p=p)) for _ in range(60)]
        keys = [f"k{i}" for i in range(60)]
        return {10: {"data": KindTexts(texts, [None] * 60, keys)}}

    values, ses = [], []
    for rep in range(40):
        e = _get(ebm_scores(sample(), b=300, seed=rep), "data", "entropy")
        assert e.low < e.value < e.high and "jackknife" in e.method
        values.append(e.value)
        ses.append(e.se)
    truth = np.std(values, ddof=1)
    # Monte Carlo: the sd of 40 estimates is within about +-25% of its own truth.
    assert 0.65 * truth < np.mean(ses) < 1.5 * truth


def test_a_kind_scoring_zero_gives_a_flagged_ratio_not_an_error():
    """A translation after random words can share no n-gram with its reference: BLEU and chrF
    are 0 there, and f(data) / f(kind) is flagged rather than divided by zero."""
    refs = [f"w{i} x{i} y{i} z{i} q{i}" for i in range(6)]
    prompts = [f"p{i}" for i in range(6)]
    cells = {
        3: {
            "data": KindTexts(continuations=refs, references=refs, prompts=prompts),
            "random": KindTexts(
                continuations=["aa bb cc dd"] * 6, references=refs, prompts=prompts
            ),
        }
    }
    res = ebm_scores(cells, b=50, seed=0, names=("bleu", "chrf"))
    scores = {(t.kind, t.score): t.value for t in res.scores}
    assert scores[("random", "bleu")] == 0 and scores[("random", "chrf")] == 0
    assert scores[("data", "bleu")] == pytest.approx(100)
    for ratio in res.ratios:
        assert ratio.kind == "random" and ratio.degenerate and math.isnan(ratio.low)
        assert "after random prefixes is 0" in ratio.degenerate_reason
