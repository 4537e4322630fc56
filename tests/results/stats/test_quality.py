"""Quality and sanity figures (app/results/stats/quality.py)."""

import numpy as np
import pytest
from scipy import stats

from app.results.stats import (
    annotator_quality,
    none_share_by_cell,
    position_bias,
    position_chi2,
    robust_z,
    sanity,
)


def _hand():
    # annotator, hit, item, kind, choice, position, seconds, attention, attention_correct
    rows = [
        (1, 0, 0, 0, 1, 2, 4.0, 0, 0),
        (1, 0, 1, 1, 2, 0, 6.0, 0, 0),
        (1, 0, 2, 0, 0, 5, 5.0, 0, 0),
        (1, 0, 9, 0, 1, 3, 3.0, 1, 1),
        (2, 0, 0, 0, 1, 2, 1.0, 0, 0),
        (2, 0, 1, 1, 1, 4, 1.0, 0, 0),
        (2, 0, 2, 0, 3, 1, 2.0, 0, 0),
        (2, 1, 3, 1, 0, 5, 1.5, 0, 0),
        (2, 1, 9, 0, 4, 0, 1.0, 1, 0),
        (3, 1, 0, 0, 2, 1, 9.0, 0, 0),
        (3, 1, 1, 1, 2, 3, 8.0, 0, 0),
    ]
    a = np.array(rows, dtype=float)
    return {
        "annotator": a[:, 0].astype(int),
        "hit": a[:, 1].astype(int),
        "item": a[:, 2].astype(int),
        "kind": a[:, 3].astype(int),
        "choice": a[:, 4].astype(int),
        "position": a[:, 5].astype(int),
        "seconds": a[:, 6],
        "attention": a[:, 7].astype(bool),
        "attention_correct": a[:, 8].astype(bool),
    }


def test_annotator_figures_by_hand():
    q = annotator_quality(**_hand(), min_seconds=1.2)
    assert q.annotator.tolist() == [1, 2, 3]
    assert q.n_judgments.tolist() == [4, 5, 2]
    assert q.n_hits.tolist() == [1, 2, 1]
    assert q.median_seconds.tolist() == [4.5, 1.0, 8.5]
    # attention items excluded from the share of none and top-1 rates
    assert q.share_none == pytest.approx([1 / 3, 1 / 4, 0])
    assert q.top1_rate[0] == pytest.approx([1 / 2, 1 / 2, 0])
    assert q.top1_rate[1] == pytest.approx([0, 1 / 2, 0])
    assert q.attention_accuracy[:2] == pytest.approx([1, 0])
    assert np.isnan(q.attention_accuracy[2])
    # Plurality of the *other* judgments: item 0 others of ann 1 = {1: 1, 2: 1} -> agree;
    # item 1 others of ann 1 = {1, 2} -> agree; item 2 others = {3} -> no.
    assert q.plurality_agreement[0] == pytest.approx(2 / 3)
    assert q.flagged.tolist() == [False, True, False]
    assert any("time" in r for r in q.reasons[1]) and any("attention" in r for r in q.reasons[1])
    rows = q.rows()
    assert rows[1]["flagged"] and rows[0]["top1_rate"] == {0: 0.5, 1: 0.0}


def test_position_preference_is_flagged():
    rng = np.random.default_rng(0)
    n_a, per = 30, 60
    ann = np.repeat(np.arange(n_a), per)
    pos = rng.integers(0, 5, ann.size)
    pos[ann == 7] = 0  # always clicks the first choice
    choice = rng.integers(1, 6, ann.size)
    q = annotator_quality(
        ann, ann, np.arange(ann.size), np.zeros(ann.size, int), choice, pos, np.full(ann.size, 5.0)
    )
    assert q.flagged[7] and "prefers a screen position" in q.reasons[7]
    assert q.flagged.sum() <= 2
    x2, p = position_chi2(np.bincount(pos[ann == 3], minlength=5))
    ref = stats.chisquare(np.bincount(pos[ann == 3], minlength=5))
    assert (x2, p) == pytest.approx((ref.statistic, ref.pvalue))


def test_robust_z_and_out_of_line_share_of_none():
    x = np.array([0.1, 0.12, 0.09, 0.11, 0.1, 0.6])
    z = robust_z(x)
    assert z[-1] > 3.5 and np.all(np.abs(z[:-1]) < 3.5)
    assert np.all(np.isnan(robust_z(np.ones(5))))


def test_position_bias_and_none_share():
    pos = np.array([0, 0, 1, 2, 3, 4, 5, 5])
    choice = np.array([1, 2, 1, 3, 1, 5, 0, 6])  # last two are "none" (0 and k+1)
    pb = position_bias(pos, choice)
    assert pb.counts == [2, 1, 1, 1, 1]
    assert pb.rates == pytest.approx([2 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6])
    assert pb.share_none == pytest.approx(2 / 8)
    cells, share = none_share_by_cell(choice, np.array([10] * 4 + [20] * 4), np.array([0, 1] * 4))
    assert cells.tolist() == [[10, 0], [10, 1], [20, 0], [20, 1]]
    assert share == pytest.approx([0, 0, 0.5, 0.5])


def test_sanity_by_hand():
    # items 0, 1, 2 data (true word at model rank 1, 3, not shown); item 3 model (ignored)
    item = np.array([0, 0, 1, 1, 2, 3])
    kind = np.array([0, 0, 0, 0, 0, 1])
    choice = np.array([1, 2, 3, 1, 1, 1])
    true_rank = np.array([1, 1, 3, 3, 0, 1])
    s = sanity(item, kind, choice, true_rank)
    assert s.n_items == 3
    assert s.top1_is_true == pytest.approx(1 / 3)
    assert s.true_shown == pytest.approx(2 / 3)
    assert s.people_pick_true == pytest.approx(2 / 4)
    assert s.people_pick_top1_when_true == pytest.approx(1 / 2)
