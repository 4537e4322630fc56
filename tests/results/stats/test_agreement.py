"""Agreement on the model rank of the chosen word (app/results/stats/agreement.py)."""

import krippendorff
import numpy as np
import pytest
from statsmodels.stats import inter_rater

from app.results.stats import (
    agreement,
    category_counts,
    fleiss_kappa,
    gwet_ac1,
    krippendorff_alpha_nominal,
    percent_agreement,
)

RANKS = np.array([1, 2, 3, 4, 5, 0])  # top-1..top-5, none


def _overlap(seed, n_items=200, n_annot=12, per_item=3, ragged=False):
    """Items judged by `per_item` of `n_annot` annotators; a skewed rank distribution."""
    rng = np.random.default_rng(seed)
    item, ann, choice = [], [], []
    for i in range(n_items):
        m = rng.integers(2, per_item + 2) if ragged else per_item
        who = rng.choice(n_annot, m, replace=False)
        easy = rng.random() < 0.5
        for a in who:
            hard = rng.choice(RANKS, p=[0.3, 0.2, 0.15, 0.1, 0.1, 0.15])
            c = 1 if easy and rng.random() < 0.8 else hard
            item.append(i)
            ann.append(a)
            choice.append(c)
    return np.array(item), np.array(ann), np.array(choice)


def _reliability(item, ann, choice):
    data = np.full((ann.max() + 1, item.max() + 1), np.nan)
    data[ann, item] = choice
    return data


@pytest.mark.parametrize("ragged", [False, True])
def test_alpha_matches_krippendorff_package(ragged):
    item, ann, choice = _overlap(1, ragged=ragged)
    counts, _ = category_counts(item, choice)
    ref = krippendorff.alpha(
        reliability_data=_reliability(item, ann, choice), level_of_measurement="nominal"
    )
    assert krippendorff_alpha_nominal(counts) == pytest.approx(ref, rel=1e-9)
    # The interval default of the package is a different number here: nominal matters.
    interval = krippendorff.alpha(reliability_data=_reliability(item, ann, choice))
    assert abs(interval - ref) > 0.01


def test_fleiss_matches_statsmodels_and_refuses_ragged_items():
    item, _, choice = _overlap(2)
    counts, _ = category_counts(item, choice, RANKS)
    assert fleiss_kappa(counts) == pytest.approx(inter_rater.fleiss_kappa(counts), rel=1e-9)
    item, _, choice = _overlap(2, ragged=True)
    with pytest.raises(ValueError):
        fleiss_kappa(category_counts(item, choice)[0])
    assert agreement(item, choice, b=200).fleiss_kappa is None


def test_percent_agreement_and_ac1_by_hand():
    # Items: AAA, AAA, AAB, ABB (A = top-1, B = top-2).
    counts = np.array([[3, 0], [3, 0], [2, 1], [1, 2]])
    assert percent_agreement(counts) == pytest.approx(2 / 3)
    # pi = (0.75, 0.25); p_e = 2 * 0.75 * 0.25 / (2 - 1) = 0.375
    assert gwet_ac1(counts) == pytest.approx((2 / 3 - 0.375) / 0.625)
    # With the six possible codes: p_e = 0.375 / 5
    assert gwet_ac1(counts, 6) == pytest.approx((2 / 3 - 0.075) / 0.925)
    # Kappa is much lower at this prevalence: the reason AC1 is reported beside it.
    assert fleiss_kappa(counts) == pytest.approx(1 / 9)


def test_ac1_matches_a_direct_loop():
    item, _, choice = _overlap(3, ragged=True)
    counts, cats = category_counts(item, choice, RANKS)
    pa, pi = [], np.zeros(len(cats))
    for row in counts:
        m = row.sum()
        pa.append(sum(r * (r - 1) for r in row) / (m * (m - 1)))
        pi += row / m
    pi /= len(counts)
    pe = sum(p * (1 - p) for p in pi) / (len(cats) - 1)
    assert gwet_ac1(counts, 6) == pytest.approx((np.mean(pa) - pe) / (1 - pe))


def test_agreement_item_bootstrap():
    item, _, choice = _overlap(4, n_items=300)
    res = agreement(item, choice, categories=RANKS, b=3000, seed=1)
    assert res.n_items == 300 and res.n_judgments == 900 and res.n_categories == 6
    for s in (res.krippendorff_alpha, res.fleiss_kappa, res.percent_agreement, res.gwet_ac1):
        assert s.low < s.estimate < s.high
    # The bootstrap SE of percent agreement matches the iid formula sd(P_u)/sqrt(n).
    counts, _ = category_counts(item, choice, RANKS)
    p_u = (counts * (counts - 1)).sum(axis=1) / 6
    assert res.percent_agreement.se == pytest.approx(p_u.std(ddof=1) / np.sqrt(300), rel=0.1)
    assert agreement(item, choice, categories=RANKS, b=3000, seed=1) == res
    # Judgments of items judged once do not enter.
    more = agreement(np.r_[item, 1000, 1001], np.r_[choice, 1, 2], categories=RANKS, b=3000, seed=1)
    assert more.krippendorff_alpha.estimate == res.krippendorff_alpha.estimate
