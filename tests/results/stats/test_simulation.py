"""Simulated studies: do the error bars and the permutation test keep their promises?

Judgments come from a logistic model with an annotator intercept ``u_a``, an
annotator x kind slope ``v_a`` (the effect that does not cancel inside a HIT), an item
effect, and heavy-tailed annotator activity (Pareto HIT counts) under a cap. The true
EB-C is the ratio of the population means, computed by Gauss-Hermite quadrature.
"""

import numpy as np
import pytest
from scipy import special

from app.results.stats import estimate_ebc, permutation_test


def simulate(
    rng,
    *,
    n_annot=300,
    cap=20,
    tail=3.0,
    beta=1.0,
    shift=0.3,
    sd_u=0.5,
    sd_v=1.2,
    sd_item=1.0,
    per_kind=5,
):
    hits_a = np.minimum(cap, np.ceil(rng.pareto(tail, n_annot) * 2 + 1)).astype(int)
    hit_annot = np.repeat(np.arange(n_annot), hits_a)
    n_hits = hit_annot.size
    u, v = rng.normal(0, sd_u, n_annot), rng.normal(0, sd_v, n_annot)
    hit = np.repeat(np.arange(n_hits), 2 * per_kind)
    kind = np.tile(np.r_[np.zeros(per_kind, int), np.ones(per_kind, int)], n_hits)
    ann = hit_annot[hit]
    eta = beta + kind * shift + u[ann] + kind * v[ann] + rng.normal(0, sd_item, hit.size)
    d = (rng.random(hit.size) < special.expit(eta)).astype(float)
    return {
        "d": d,
        "length": np.full(hit.size, 10),
        "kind": kind,
        "annotator": ann,
        "hit": hit,
        "item": np.arange(hit.size),
    }


def true_ebc(*, beta=1.0, shift=0.3, sd_u=0.5, sd_v=1.2, sd_item=1.0):
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    p_d = w @ special.expit(beta + x * np.hypot(sd_u, sd_item))
    p_m = w @ special.expit(beta + shift + x * np.sqrt(sd_u**2 + sd_v**2 + sd_item**2))
    return p_m / p_d


def test_annotator_bootstrap_covers_and_item_bootstrap_undercovers():
    truth = true_ebc()
    rng = np.random.default_rng(1)
    cover_annot, cover_item = [], []
    for k in range(400):
        s = simulate(rng)
        q = estimate_ebc(**s, unit="annotator", b=400, seed=k).ebc(10)
        cover_annot.append(q.low <= truth <= q.high)
        if k < 100:
            qi = estimate_ebc(**s, unit="item", b=200, seed=k).ebc(10)
            cover_item.append(qi.low <= truth <= qi.high)
    cov_a, cov_i = np.mean(cover_annot), np.mean(cover_item)
    print(f"coverage: annotator {cov_a:.3f} (400 studies), item {cov_i:.3f} (100 studies)")
    assert 0.92 <= cov_a <= 0.98
    assert cov_i <= 0.88  # nominal 95%: resampling items ignores the annotator x kind effect


def test_item_bootstrap_se_matches_analytic_se_without_annotator_effects():
    rng = np.random.default_rng(2)
    est, boot_se, analytic = [], [], []
    for k in range(150):
        s = simulate(rng, n_annot=80, sd_u=0.0, sd_v=0.0, sd_item=0.0)
        q = estimate_ebc(**s, unit="item", b=300, seed=k).ebc(10)
        d, kind = s["d"], s["kind"]
        p_m, p_d = d[kind == 1].mean(), d[kind == 0].mean()
        n_m, n_d = (kind == 1).sum(), (kind == 0).sum()
        se = (p_m / p_d) * np.sqrt((1 - p_m) / (n_m * p_m) + (1 - p_d) / (n_d * p_d))
        assert q.iid_se == pytest.approx(se, rel=1e-9)
        est.append(q.estimate)
        boot_se.append(q.se)
        analytic.append(se)
    ratio = np.mean(boot_se) / np.mean(analytic)
    print(
        f"item-bootstrap SE / analytic SE = {ratio:.3f}; sd of estimates / analytic = "
        f"{np.std(est, ddof=1) / np.mean(analytic):.3f}"
    )
    assert ratio == pytest.approx(1.0, abs=0.03)
    # The analytic SE is itself right: it matches the spread over simulated studies.
    assert np.std(est, ddof=1) / np.mean(analytic) == pytest.approx(1.0, abs=0.12)


def test_permutation_test_false_positive_rate_and_power():
    rng = np.random.default_rng(3)
    p_null, p_alt = [], []
    for k in range(400):
        # Null: no kind effect at all (annotator intercepts and items still vary).
        s = simulate(rng, n_annot=80, shift=0.0, sd_v=0.0)
        p_null.append(
            permutation_test(s["d"], s["length"], s["kind"], s["hit"], s["item"], b=200, seed=k)[
                0
            ].p_value
        )
        if k < 50:
            s = simulate(rng, n_annot=80, shift=0.5, sd_v=0.0)
            p_alt.append(
                permutation_test(
                    s["d"], s["length"], s["kind"], s["hit"], s["item"], b=200, seed=k
                )[0].p_value
            )
    fpr = np.mean(np.array(p_null) <= 0.05)
    power = np.mean(np.array(p_alt) <= 0.05)
    print(f"permutation test: false-positive rate {fpr:.3f}, power {power:.2f}")
    assert 0.025 <= fpr <= 0.075
    assert np.mean(np.array(p_null) <= 0.2) == pytest.approx(0.2, abs=0.05)
    assert power >= 0.8
