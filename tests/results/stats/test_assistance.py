"""The LLM-assistance signal (app.results.stats.assistance) on simulated crowds.

Honest annotators sample their choice from a per-item distribution over the five shown
words and "none", tilted towards the model's top-1 word by a per-annotator skill and a
per-annotator x kind effect; their activity is heavy-tailed under a cap. Each item is
judged once. An assisted annotator always picks the reference argmax (rank 1).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import integrate, special, stats

from app.results.stats.assistance import (
    assistance_signal,
    benjamini_hochberg,
    null_tail_probabilities,
)

LENGTHS = (10, 20)
KINDS = (0, 1)  # data, model


def simulate_crowd(
    rng: np.random.Generator,
    n_honest: int,
    *,
    assisted_hits: tuple[int, ...] = (),
    skill_sd: float = 0.4,
    kind_sd: float = 0.3,
    cap: int = 60,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(annotator, cell, agrees)`` per judgment; the assisted annotators come last, one
    per entry of `assisted_hits` (their number of HITs)."""
    honest_hits = np.minimum(cap, 1 + np.floor(rng.pareto(1.1, n_honest))).astype(int)
    hits = np.r_[honest_hits, assisted_hits].astype(int)
    n_total = hits.size
    skill = rng.normal(0, skill_sd, n_total)
    by_kind = rng.normal(0, kind_sd, (n_total, len(KINDS)))
    # A HIT: one length, 5 data and 5 model items.
    hit_owner = np.repeat(np.arange(n_total), hits)
    hit_length = rng.integers(0, len(LENGTHS), hit_owner.size)
    annotator = np.repeat(hit_owner, 10)
    length = np.repeat(hit_length, 10)
    kind = np.tile(np.r_[[0] * 5, [1] * 5], hit_owner.size)
    n = annotator.size
    # Per item: a distribution over 5 words + none; the model's top-1 word (index 0)
    # is people's choice about a quarter of the time, less on model prefixes.
    alpha = np.array([1.6, 1.2, 1.0, 0.8, 0.6, 1.0])
    q = rng.gamma(np.broadcast_to(alpha, (n, 6)))
    q[:, 0] *= np.where(kind == 0, 1.0, 0.85)
    logits = np.log(q / q.sum(axis=1, keepdims=True))
    logits[:, 0] += skill[annotator] + by_kind[annotator, kind]
    choice = np.argmax(logits + rng.gumbel(size=(n, 6)), axis=1)
    agrees = choice == 0
    assisted = annotator >= n_honest
    agrees[assisted] = True
    return annotator, length * len(KINDS) + kind, agrees


def test_benjamini_hochberg_by_hand():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.5])
    # Sorted 0.01, 0.03, 0.04, 0.5 (m = 4): 0.04, 0.06, 0.0533 -> 0.0533, 0.5.
    q = benjamini_hochberg(p)
    assert q[0] == pytest.approx(0.04) and q[4] == pytest.approx(0.5)
    assert q[1] == pytest.approx(0.04 * 4 / 3) and q[2] == pytest.approx(0.04 * 4 / 3)
    assert np.isnan(q[3])


def test_the_annotator_who_always_picks_the_argmax_is_flagged():
    rng = np.random.default_rng(1)
    annotator, cell, agrees = simulate_crowd(rng, 60, assisted_hits=(8,))
    res = assistance_signal(annotator, cell, agrees)
    assert res.annotator.size == 61
    assert res.flagged[-1] and res.rate[-1] == 1.0
    assert res.p_value[-1] < 1e-4 and res.q_value[-1] <= 0.05
    assert not res.flagged[:-1].any()
    # The crowd agrees with the top-1 at about a third; the spread is real but modest.
    assert 0.2 < res.expected[-1] < 0.45 and 0.15 < res.tau < 0.9
    assert res.expected[0] == pytest.approx(res.expected[0])
    # Computed, not drawn: the same data, the same p-values.
    again = assistance_signal(annotator, cell, agrees)
    np.testing.assert_array_equal(again.p_value, res.p_value)


def test_honest_crowds_are_flagged_at_most_at_the_chosen_rate():
    """Over many crowds of honest, heterogeneous annotators only, the share of crowds
    with any flag (with no true signal, BH's FDR is this family-wise rate) stays at
    0.05 within Monte Carlo tolerance. A binomial test against the pooled rate would
    flag the skilled annotators who did much work in most crowds."""
    rng = np.random.default_rng(7)
    crowds = 120
    any_flag = 0
    for _ in range(crowds):
        annotator, cell, agrees = simulate_crowd(rng, 40)
        any_flag += bool(assistance_signal(annotator, cell, agrees).flagged.any())
    rate = any_flag / crowds
    assert rate <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / crowds), rate


def test_assisted_annotators_among_honest_ones_keep_the_false_discovery_rate():
    """Three assisted annotators (a little, some and much work) in each crowd: the
    mean false discovery proportion stays under 0.05 and most of them are found."""
    rng = np.random.default_rng(11)
    crowds = 40
    fdp, found = [], 0
    for _ in range(crowds):
        annotator, cell, agrees = simulate_crowd(rng, 40, assisted_hits=(3, 10, 40))
        res = assistance_signal(annotator, cell, agrees)
        flagged = np.flatnonzero(res.flagged)
        false = np.sum(flagged < 40)
        fdp.append(false / max(flagged.size, 1))
        found += int(np.sum(flagged >= 40))
    assert np.mean(fdp) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / crowds)
    assert found >= 0.9 * 3 * crowds


def test_a_crowd_too_small_to_compare_with_flags_nobody():
    annotator = np.repeat(np.arange(3), 10)
    res = assistance_signal(annotator, np.zeros(30, int), np.ones(30, bool))
    assert not res.flagged.any() and np.isnan(res.p_value).all()


@pytest.mark.parametrize(
    ("n", "tau", "rate", "observed"),
    [
        (10, 0.3, 0.3, 10),
        (50, 1.0, 0.05, 50),
        (300, 0.3, 0.3, 120),
        (2000, 0.3, 0.3, 700),
        (2000, 2.5, 0.8, 2000),
        (20000, 0.05, 0.05, 1283),
    ],
)
def test_the_null_tail_of_one_cell_matches_numerical_integration(n, tau, rate, observed):
    """One cell: the null is exactly a binomial-logit-normal mixture; its tail by
    scipy.integrate.quad (split at the nodes, tight tolerance) against the computed one,
    from p ~ 1e-12 to 0.1."""
    logit = special.logit(rate)

    def integrand(z):
        return stats.binom.sf(observed - 1, n, special.expit(logit + tau * z)) * stats.norm.pdf(z)

    edges = np.r_[-12, np.linspace(-8, 8, 65), 12]
    ref = sum(integrate.quad(integrand, a, b, epsabs=0, epsrel=1e-10, limit=200)[0]
              for a, b in itertools.pairwise(edges))  # fmt: skip
    got = null_tail_probabilities(
        np.array([0]), np.array([n]), np.array([logit]), 1, np.array([observed]), tau
    )[0]
    assert got == pytest.approx(ref, rel=0.01)


def test_the_null_tail_of_several_cells_is_the_simulated_one_or_a_little_above():
    """Several cells of different rates: against brute-force draws of the null (u, then
    a binomial per cell), the computed tail is within Monte Carlo error or above it
    (the binomial bound is conservative), never below."""
    rng = np.random.default_rng(5)
    owner = np.repeat(np.arange(6), 3)
    n_pair = np.array([40, 60, 20] * 2 + [300, 500, 200] * 2 + [3, 4, 5] * 2)
    logit = np.tile([-1.2, -0.6, 0.1], 6)
    tau = 0.4
    mean = np.bincount(owner, weights=n_pair * special.expit(logit))
    sd = np.sqrt(np.bincount(owner, weights=n_pair)) * 0.5
    observed = np.rint(mean + np.array([1.5, 3, 1.5, 3, 1, 2.5]) * sd).astype(int)
    observed = np.minimum(observed, np.bincount(owner, weights=n_pair).astype(int))
    got = null_tail_probabilities(owner, n_pair, logit, 6, observed, tau)
    draws = 400_000
    u = rng.normal(0.0, tau, (draws, 6))
    counts = rng.binomial(n_pair, special.expit(logit + u[:, owner]))
    total = np.add.reduceat(counts, np.arange(0, 18, 3), axis=1)
    sim = (total >= observed).mean(axis=0)
    se = np.sqrt(sim * (1 - sim) / draws)
    assert np.all(sim > 1e-4)  # the comparison means something
    assert np.all(got >= sim - 4 * se), (got, sim)
    assert np.all(got <= 1.3 * sim + 4 * se), (got, sim)
