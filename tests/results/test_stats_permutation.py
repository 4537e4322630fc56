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
