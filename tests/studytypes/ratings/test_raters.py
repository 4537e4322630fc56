"""The rater model of app/studytypes/ratings/raters.py (pure): what it refuses to calibrate or
simulate, rather than answering with a wrong truth."""

from __future__ import annotations

import numpy as np
import pytest

from app.results.stats import DATA_KIND, MODEL_KIND
from app.simulate.design import Design
from app.studytypes.ratings.raters import RaterHeterogeneity, Raters, simulate_ratings

ATT = "attention"


@pytest.mark.parametrize(
    ("hetero", "message"),
    [
        (
            RaterHeterogeneity(sd_rater=0.0, sd_rater_kind=0.0, sd_pair=0.0, sd_noise=0.0),
            "total sd of the raters' ratings is 0",
        ),
        (RaterHeterogeneity(sd_pair=-0.6), r"sd_pair must be finite and not negative \(got -0.6\)"),
        (
            RaterHeterogeneity(sd_noise=float("nan")),
            r"sd_noise must be finite and not negative \(got nan\)",
        ),
    ],
)
def test_calibration_refuses_sds_it_cannot_solve_for(hetero, message):
    with pytest.raises(ValueError, match=message):
        Raters.paper_like((10,), hetero=hetero)


def test_one_sd_alone_calibrates_to_the_true_means():
    # Only the pair effect varies: still a normal latent rating, so the truth is exact.
    raters = Raters.paper_like(
        (10,), hetero=RaterHeterogeneity(sd_rater=0.0, sd_rater_kind=0.0, sd_noise=0.0)
    )
    assert raters.truth(10, DATA_KIND, "quality") == pytest.approx(3.4)
    assert raters.truth(10, MODEL_KIND, "consistency") == pytest.approx(2.9)


def test_simulating_a_pair_without_a_true_mean_is_refused():
    rng = np.random.default_rng(0)
    # A diagnostic kind in the HITs that the raters were not calibrated for.
    shuffled = Design(
        lengths=(10,),
        kinds=["data", "model", "data_shuffled", ATT],
        mix={0: 4, 1: 4, 2: 2},
        items_per_cell=20,
        replicas=2,
    )
    with pytest.raises(ValueError, match=r"\(l=10, data_shuffled, quality\)"):
        simulate_ratings(shuffled, Raters.paper_like((10,)), rng)
    # A length the raters were not calibrated for.
    longer = Design.simple(lengths=(10, 20), items_per_cell=20, replicas=2)
    with pytest.raises(ValueError, match=r"\(l=20, data, quality\).*\(l=20, model, consistency\)"):
        simulate_ratings(longer, Raters.paper_like((10,)), rng)
    # Only one step calibrated.
    mu = {k: m for k, m in Raters.paper_like((10,)).mu.items() if k[2] == "quality"}
    with pytest.raises(ValueError, match=r"no true mean rating for \(l=10, data, consistency\)"):
        simulate_ratings(Design.simple(lengths=(10,), items_per_cell=20), Raters(mu=mu), rng)
    # Calibrated for every pair (attention pairs need none): simulated, the diagnostic
    # kind at the mean it was given.
    cols = simulate_ratings(longer, Raters.paper_like((10, 20)), rng)
    assert cols.n > 0 and set(np.unique(cols.length)) == {10, 20}
    targets = {(10, code, step): 3.0 for code in (0, 1, 2) for step in ("quality", "consistency")}
    cols = simulate_ratings(shuffled, Raters.calibrated(targets), rng)
    assert set(np.unique(cols.kind)) == {0, 1, 2, 3}
