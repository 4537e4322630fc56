"""The headline test and interval under annotator heterogeneity, by simulation (issue 11).

Studies come from ``benchmarks/stats_calibration.py`` (its generator, truth and design:
annotator skill, annotator x kind effect, item difficulty, Pareto activity under the
cap), in its hardest corner: 12 annotators of which a few do most HITs (effective
number ~4) and an annotator x kind SD of 0.4 on the log-odds, 300 HITs per study. The
full table over G, activity and effect sizes is the benchmark's (docs/statistics.md,
"Calibration").

Each check allows ``3 sqrt(p (1 - p) / R)`` around its target ``p`` (5% or 95%), so a
correct method fails it with probability ~0.3%, and the seed is fixed. The old figures
must fail the same check: the within-HIT permutation test (exact only under the sharp
null) rejects the true population null far too often, and the percentile annotator
bootstrap under-covers.
"""

import numpy as np

from app.results.stats import estimate_ebc, permutation_test
from benchmarks.stats_calibration import Scenario, parameters, study

REPS = 300
B = 199
SCENARIO = Scenario(g=12, activity="pareto", sd_kind=0.4, hits=300)


def _tolerance(p: float) -> float:
    return 3 * np.sqrt(p * (1 - p) / REPS)


def test_wild_test_holds_its_level_where_the_permutation_test_does_not():
    beta, mu = parameters(1.0, SCENARIO.sd_kind)  # population EB-C exactly 1
    rng = np.random.default_rng(11)
    new, old = [], []
    for r in range(REPS):
        s = study(rng, SCENARIO, beta, mu)
        new.append(estimate_ebc(**s, b=B, seed=r).ebc(10).p_value <= 0.05)
        perm = permutation_test(s["d"], s["length"], s["kind"], s["hit"], s["item"], b=B, seed=r)
        old.append(perm[0].p_value <= 0.05)
    fpr_new, fpr_old = np.mean(new), np.mean(old)
    print(f"false-positive rate: wild {fpr_new:.3f}, within-HIT permutation {fpr_old:.3f}")
    assert abs(fpr_new - 0.05) <= _tolerance(0.05)
    assert fpr_old > 0.05 + _tolerance(0.05)


def test_wild_interval_covers_where_the_percentile_interval_does_not():
    truth = 1.05
    beta, mu = parameters(truth, SCENARIO.sd_kind)
    rng = np.random.default_rng(12)
    new, old, flagged = [], [], []
    for r in range(REPS):
        s = study(rng, SCENARIO, beta, mu)
        res = estimate_ebc(**s, b=B, seed=r)
        q = res.ebc(10)
        o = estimate_ebc(**s, b=B, seed=r, ci="percentile").ebc(10)
        new.append(q.low <= truth <= q.high)
        old.append(o.low <= truth <= o.high)
        flagged.append(q.few_annotators and res.few_annotators)
    cov_new, cov_old = np.mean(new), np.mean(old)
    print(f"coverage of EB-C = {truth}: wild {cov_new:.3f}, percentile {cov_old:.3f}")
    assert abs(cov_new - 0.95) <= _tolerance(0.95)
    assert cov_old < 0.95 - _tolerance(0.95)
    assert all(flagged)  # ~4 effective annotators: every study carries the warning
