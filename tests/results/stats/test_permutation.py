"""The within-HIT permutation test (app/results/stats/permutation.py)."""

import itertools
import math

import numpy as np
import pytest

from app.results.stats import permutation_test

# Two HITs of 4 items (2 data, 2 model); items 1 and 5 have two judgments each.
#            item: 0  1     2  3     4  5     6  7
# kind            D  D     M  M     D  D     M  M
JUDGMENTS = [  # (hit, item, kind, d)
    (0, 0, 0, 0),
    (0, 1, 0, 1),
    (0, 1, 0, 0),
    (0, 2, 1, 1),
    (0, 3, 1, 1),
    (1, 4, 0, 0),
    (1, 5, 0, 1),
    (1, 5, 0, 1),
    (1, 6, 1, 1),
    (1, 7, 1, 0),
]


def _columns(rows=JUDGMENTS, length=10):
    a = np.array(rows)
    return {
        "d": a[:, 3].astype(float),
        "length": np.full(len(a), length),
        "kind": a[:, 2],
        "hit": a[:, 0],
        "item": a[:, 1],
    }


def _stat(d, item, model_items):
    m = np.isin(item, list(model_items))
    return math.log(d[m].mean() / d[~m].mean())


def _exact_p(c):
    """Enumerate every relabelling: 2 model items among each HIT's 4."""
    hits = [[0, 1, 2, 3], [4, 5, 6, 7]]
    t_obs = _stat(c["d"], c["item"], {2, 3, 6, 7})
    ts = [
        _stat(c["d"], c["item"], set(a) | set(b))
        for a in itertools.combinations(hits[0], 2)
        for b in itertools.combinations(hits[1], 2)
    ]
    ts = np.array(ts)
    return t_obs, np.mean(np.abs(ts) >= abs(t_obs) - 1e-12), np.mean(ts >= t_obs - 1e-12)


@pytest.mark.parametrize("max_enumerate", [20_000, 1])  # grouped draws, and direct shuffles
def test_matches_exact_enumeration(max_enumerate):
    c = _columns()
    t_obs, p_two, p_greater = _exact_p(c)
    b = 40_000
    res = permutation_test(**c, b=b, seed=5, max_enumerate=max_enumerate)
    r = res[0]
    assert r.length == 10 and r.statistic == pytest.approx(t_obs)
    assert r.n_hits == 2 and r.n_items == 8
    tol = 4 * math.sqrt(0.25 / b) + 1 / b
    assert r.p_value == pytest.approx(p_two, abs=tol)
    assert r.p_greater == pytest.approx(p_greater, abs=tol)
    assert 0 < p_two < 1 and p_greater < 0.5  # the example is not degenerate


def test_lengths_are_tested_separately_and_pooled():
    c10, c20 = _columns(), _columns(length=20)
    c20["hit"] = c20["hit"] + 10
    c20["item"] = c20["item"] + 100
    c20["d"] = 1.0 - c20["d"]
    both = {k: np.concatenate([c10[k], c20[k]]) for k in c10}
    res = permutation_test(**both, b=2000, seed=0)
    assert [r.length for r in res] == [10, 20, None]
    assert res[0].statistic == pytest.approx(_exact_p(c10)[0])
    d, kind = both["d"], both["kind"]
    assert res[2].ebc == pytest.approx(d[kind == 1].mean() / d[kind == 0].mean())


def test_other_kinds_and_attention_items_are_left_out():
    c = _columns()
    extra = {
        "d": np.array([0.0, 0.0]),
        "length": np.array([10, 10]),
        "kind": np.array([2, 0]),
        "hit": np.array([0, 1]),
        "item": np.array([50, 51]),
    }
    both = {k: np.concatenate([c[k], extra[k]]) for k in c}
    att = np.r_[np.zeros(len(c["d"]), bool), False, True]
    a = permutation_test(**both, attention=att, b=5000, seed=1)[0]
    b = permutation_test(**c, b=5000, seed=1)[0]
    assert a.statistic == pytest.approx(b.statistic) and a.n_items == 8


def test_is_seeded():
    c = _columns()
    assert permutation_test(**c, b=999, seed=2) == permutation_test(**c, b=999, seed=2)


# Lattice HITs (every item judged the same number of times, d in {0, 1}): the total over
# such HITs is drawn from its exact distribution instead of shuffling each HIT.
# Ones per item (2 data items, then 2 model items) in each of 3 HITs, for 1 and 3
# judgments per item.
ONES = {
    1: [[0, 1, 1, 1], [0, 0, 1, 0], [1, 0, 1, 1]],
    3: [[0, 2, 3, 1], [1, 0, 2, 2], [3, 1, 2, 3]],
}


def _lattice_columns(judgments_per_item: int):
    rows = []
    for h, ones in enumerate(ONES[judgments_per_item]):
        for i, k in enumerate(ones):
            for r in range(judgments_per_item):
                rows.append((h, 4 * h + i, int(i >= 2), int(r < k)))
    return _columns(rows)


def _exact_p_enumerated(c):
    hits = [sorted(set(c["item"][c["hit"] == h])) for h in np.unique(c["hit"])]
    model = set(c["item"][c["kind"] == 1])
    t_obs = _stat(c["d"], c["item"], model)
    ts = np.array(
        [
            _stat(c["d"], c["item"], set().union(*pick))
            for pick in itertools.product(*(itertools.combinations(h, 2) for h in hits))
        ]
    )
    ts = ts[np.isfinite(ts)]
    return t_obs, np.mean(np.abs(ts) >= abs(t_obs) - 1e-12), np.mean(ts >= t_obs - 1e-12)


@pytest.mark.parametrize("judgments_per_item", [1, 3])
@pytest.mark.parametrize("max_enumerate", [20_000, 1])  # enumerated subsets, and the DP
def test_lattice_hits_match_exact_enumeration(judgments_per_item, max_enumerate):
    c = _lattice_columns(judgments_per_item)
    t_obs, p_two, p_greater = _exact_p_enumerated(c)
    b = 40_000
    r = permutation_test(**c, b=b, seed=7, max_enumerate=max_enumerate)[0]
    assert r.statistic == pytest.approx(t_obs)
    tol = 4 * math.sqrt(0.25 / b) + 1 / b
    assert r.p_value == pytest.approx(p_two, abs=tol)
    assert r.p_greater == pytest.approx(p_greater, abs=tol)
    assert 0 < p_two < 1


def test_exact_null_of_many_hits_is_the_convolution():
    """`_draw_sums` on thousands of identical HITs (the windowed transform) against the
    distribution known in closed form: 3,000 HITs whose model-labelled sum is
    Bernoulli(0.3) give Binomial(3000, 0.3); plus one 3-point HIT, convolved by hand."""
    from scipy import stats

    from app.results.stats.permutation import _draw_sums

    pmf = np.array([[0.7, 0.3, 0.0], [0.2, 0.5, 0.3]])
    draws = _draw_sums(pmf, np.array([3000, 1]), 200_000, np.random.default_rng(0))
    exact = np.convolve(stats.binom.pmf(np.arange(3001), 3000, 0.3), pmf[1])
    support = np.arange(exact.size)
    assert draws.mean() == pytest.approx(support @ exact, abs=0.25)  # 4.5 SE
    assert draws.var() == pytest.approx(support**2 @ exact - (support @ exact) ** 2, rel=0.02)
    ks = np.abs(
        np.searchsorted(np.sort(draws), support, side="right") / draws.size - np.cumsum(exact)
    ).max()
    assert ks < 0.006  # Kolmogorov-Smirnov, n = 200,000: 5% critical value 0.003


def test_mixed_lattice_and_shuffled_hits():
    """A study with lattice HITs and HITs with uneven judgments per item (shuffled
    directly) still matches the enumeration."""
    c = _lattice_columns(1)
    extra = _columns()  # two HITs whose items have one or two judgments
    extra["hit"] = extra["hit"] + 10
    extra["item"] = extra["item"] + 100
    both = {k: np.concatenate([c[k], extra[k]]) for k in c}
    t_obs, p_two, _ = _exact_p_enumerated(both)
    b = 40_000
    r = permutation_test(**both, b=b, seed=1)[0]
    assert r.statistic == pytest.approx(t_obs)
    assert r.p_value == pytest.approx(p_two, abs=4 * math.sqrt(0.25 / b) + 1 / b)
