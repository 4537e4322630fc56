"""The attention threshold of a ratings study relative to its scale, and the agreement's
pair bootstrap capped at AGREEMENT_B resamples (pure statistics, no database)."""

from __future__ import annotations

import numpy as np
import pytest

from app.results.stats.agreement import AGREEMENT_B
from app.results.stats.ratings_agreement import rating_agreement
from app.results.stats.ratings_columns import RatingColumns
from app.results.stats.ratings_figures import attention_max, rater_figures


@pytest.mark.parametrize(("scale_max", "expected"), [(5, 1.0), (10, 2.0), (1, 0.2), (4, 0.8)])
def test_attention_max_is_a_fifth_of_the_scale(scale_max, expected):
    assert attention_max(scale_max) == pytest.approx(expected)


def test_the_attention_pass_share_reads_the_scale():
    """Two raters, two attention pairs each, on 0-10: rater 1 gives 2 and 1.5 (both at
    most 2: pass), rater 2 gives 2.5 and 0 (one of two)."""
    quality = np.array([2.0, 1.5, 6.0, 2.5, 0.0, 7.0])

    def cols(scale_max: int) -> RatingColumns:
        return RatingColumns(
            kinds=["data", "model"],
            annotator=np.array([1, 1, 1, 2, 2, 2]),
            hit=np.ones(6, np.int64),
            item=np.array([10, 11, 12, 10, 11, 12]),
            length=np.full(6, 10),
            kind=np.array([0, 0, 1, 0, 0, 1]),
            quality=quality,
            consistency=quality,
            attention=np.array([True, True, False, True, True, False]),
            scale_max=scale_max,
        )

    assert rater_figures(cols(10)).attention_pass.tolist() == [1.0, 0.5]
    assert rater_figures(cols(5)).attention_pass.tolist() == [0.0, 0.5]  # at most 1


def test_the_pair_bootstrap_takes_at_most_agreement_b_resamples():
    rng = np.random.default_rng(4)
    pair = np.repeat(np.arange(60), 3)
    value = np.clip(np.repeat(rng.integers(0, 11, 60), 3) + rng.integers(-1, 2, 180), 0, 10) / 2
    capped = rating_agreement(pair, value, step=0.5, b=AGREEMENT_B, seed=7)
    assert rating_agreement(pair, value, step=0.5, b=AGREEMENT_B * 3, seed=7) == capped
    fewer = rating_agreement(pair, value, step=0.5, b=500, seed=7)
    assert fewer.alpha_interval == capped.alpha_interval
    assert fewer.alpha_interval_low != capped.alpha_interval_low  # b below the cap is kept
