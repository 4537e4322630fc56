"""The stand-in P_D's exact truth and the behaviours' answers (pure, no database)."""

from __future__ import annotations

import numpy as np
import pytest

from app.simulate.crowd import (
    Crowd,
    CrowdSpecError,
    Heterogeneity,
    StandIn,
    answer,
    expected_with_random_clicks,
)

pytestmark = pytest.mark.sqlite  # pure: one run is enough


@pytest.mark.parametrize("base", ["sampler", "oracle"])
def test_calibrated_truth_is_the_population_average(base):
    """The exact CGD equals a brute-force average over a large drawn population."""
    hetero = Heterogeneity(sd_annotator=0.6, sd_annotator_kind=0.4, sd_item=0.9)
    s = StandIn.calibrated([10], 2, cgd_data=0.7, ebc=1.1, base=base, hetero=hetero)
    assert s.cgd(10, 0, base) == pytest.approx(0.7, abs=1e-10)
    assert s.true_ebc(10, base) == pytest.approx(1.1, abs=1e-10)
    rng = np.random.default_rng(1)
    n = 2_000_000
    eta = s.mu[(10, 1)] + rng.normal(0, 0.6, n) + rng.normal(0, 0.4, n) + rng.normal(0, 0.9, n)
    crowd = Crowd(base=base, hetero=hetero, attention_accuracy=1.0)
    ranks = np.tile(np.arange(1, 6), (n, 1))
    got = answer(
        rng,
        crowd,
        s,
        eta=eta,
        attention=np.zeros(n, bool),
        spammer=np.zeros(n, bool),
        rank_at_slot=ranks,
    )
    assert np.mean(got.choice != 1) == pytest.approx(0.77, abs=4 * np.sqrt(0.77 * 0.23 / n))


def test_screen_slots_and_ranks_agree():
    rng = np.random.default_rng(2)
    n, k = 20_000, 5
    s = StandIn.calibrated([10], 2, hetero=Heterogeneity())
    order = np.argsort(rng.random((n, k)), axis=1) + 1
    crowd = Crowd.parse("sampler,noisy:0.3,position:0.2")
    got = answer(
        rng,
        crowd,
        s,
        eta=rng.normal(0, 1, n),
        attention=np.zeros(n, bool),
        spammer=np.zeros(n, bool),
        rank_at_slot=order,
    )
    words = got.option < k
    assert np.all(order[np.arange(n)[words], got.option[words]] == got.choice[words])
    assert np.all(got.choice[~words] == 0)
    # Slot 0 takes the position-biased clicks on top of its share of the rest.
    assert np.mean(got.option == 0) > 0.2


def test_pure_random_clicks_give_five_sixths():
    """docs/design.md: with shuffled choices a random answer has d = 5/6 whatever the prefix."""
    rng = np.random.default_rng(3)
    n = 200_000
    s = StandIn.calibrated([10], 2, cgd_data=0.3, hetero=Heterogeneity())
    got = answer(
        rng,
        Crowd.parse("oracle,noisy:1"),
        s,
        eta=np.full(n, 5.0),  # an oracle that would always pick the top-1
        attention=np.zeros(n, bool),
        spammer=np.zeros(n, bool),
        rank_at_slot=np.argsort(rng.random((n, 5)), axis=1) + 1,
    )
    assert np.mean(got.choice != 1) == pytest.approx(5 / 6, abs=4 * np.sqrt(5 / 36 / n))
    assert expected_with_random_clicks(0.3, 1.0) == pytest.approx(5 / 6)


def test_crowd_specs():
    c = Crowd.parse("oracle, noisy:0.2,fast:0.1")
    assert (c.base, c.noisy, c.fast, c.position) == ("oracle", 0.2, 0.1, 0.0)
    assert c.describe() == "oracle,noisy:0.2,fast:0.1"
    assert Crowd.parse("noisy:0.2").base == "sampler"
    for bad, why in [
        ("lazy", "unknown crowd behaviour"),
        ("noisy", "needs a share"),
        ("noisy:1.5", "must lie in [0, 1]"),
        ("oracle,sampler", "one base"),
        ("oracle:0.1", "takes no share"),
    ]:
        with pytest.raises(CrowdSpecError, match=why.replace("[", r"\[").replace("]", r"\]")):
            Crowd.parse(bad)


def test_an_impossible_truth_is_refused():
    with pytest.raises(ValueError, match="a CGD is a share"):
        StandIn.calibrated([10], 2, cgd_data=0.8, ebc=1.3)
