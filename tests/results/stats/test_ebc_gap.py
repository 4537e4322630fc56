"""EB-C_gap from people's judgments (`estimate_ebc(gaps=...)`, issue 34): a gap kind at length l
over the data cell at l + g, with the intervals and the test of every ratio (the wild cluster
bootstrap by annotator), the estimator EB-C uses, not a copy of it."""

from __future__ import annotations

import math

import numpy as np

from app.results.stats import estimate_ebc

DATA, MODEL, GAP = 0, 1, 2
G = 3


def judgments(rng, p: dict[tuple[int, int], float], n_annot: int = 60, per_cell: int = 4):
    """Every annotator judges ``per_cell`` items of every cell (length, kind) in one HIT, each
    deviating with the cell's probability ``p``."""
    rows = []
    item = 0
    for a in range(n_annot):
        for (length, kind), q in p.items():
            for _ in range(per_cell):
                rows.append((float(rng.random() < q), length, kind, a, a, item))
                item += 1
    cols = np.array(rows)
    return {
        "d": cols[:, 0],
        "length": cols[:, 1].astype(int),
        "kind": cols[:, 2].astype(int),
        "annotator": cols[:, 3].astype(int),
        "hit": cols[:, 4].astype(int),
        "item": cols[:, 5].astype(int),
    }


CELLS = {
    (5, DATA): 0.3,
    (5, MODEL): 0.4,
    (5 + G, DATA): 0.25,
    (5 + G, MODEL): 0.35,
    (5, GAP): 0.45,
    (5 + G, GAP): 0.4,  # no data cell at 5 + 2G: no EB-C_gap there
}


def test_ebc_gap_is_the_gap_cell_over_data_at_l_plus_g():
    j = judgments(np.random.default_rng(0), CELLS)
    res = estimate_ebc(**j, b=199, seed=1, gaps={GAP: G})
    mean = {(ln, k): j["d"][(j["length"] == ln) & (j["kind"] == k)].mean() for (ln, k) in CELLS}
    gaps = [q for q in res.ratios if q.name == "ebc_gap"]
    assert [(q.length, q.kind, q.reference_kind, q.reference_length) for q in gaps] == [
        (5, GAP, DATA, 5 + G)
    ]
    (q,) = gaps
    assert math.isclose(q.estimate, mean[(5, GAP)] / mean[(5 + G, DATA)], rel_tol=1e-12)
    assert q.method == "wild" and q.low < q.estimate < q.high and 0 <= q.p_value <= 1
    assert q.n_annotators == 60 and q.n_judgments == 2 * 60 * 4
    # The gap kind has no ratio over data at its own length; EB-C is untouched.
    assert not [r for r in res.ratios if r.name == "ratio" and r.kind == GAP]
    plain = estimate_ebc(**j, b=199, seed=1)
    assert [r.estimate for r in res.ratios if r.name == "ebc"] == [
        r.estimate for r in plain.ratios if r.name == "ebc"
    ]
    for ci in ("percentile", "bca"):
        other = estimate_ebc(**j, b=199, seed=1, ci=ci, gaps={GAP: G})
        (o,) = [r for r in other.ratios if r.name == "ebc_gap"]
        assert o.estimate == q.estimate and o.low < o.estimate < o.high
    twoway = estimate_ebc(**j, unit="twoway", gaps={GAP: G})
    (t,) = [r for r in twoway.ratios if r.name == "ebc_gap"]
    assert t.estimate == q.estimate and t.low < t.estimate < t.high


def test_ebc_gap_interval_covers_the_truth_by_simulation():
    """Annotator intercepts make the judgments clustered; the truth is the ratio of the cells'
    population deviation rates, computed by quadrature over the intercepts."""
    from scipy import special

    beta = {(5, GAP): -0.2, (5 + G, DATA): -0.9}
    sd = 0.8
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    pop = {c: float(w @ special.expit(b + sd * x)) for c, b in beta.items()}
    truth = pop[(5, GAP)] / pop[(5 + G, DATA)]
    rng = np.random.default_rng(3)
    covered = []
    for _ in range(150):
        n_annot, per_cell = 40, 5
        u = rng.normal(0, sd, n_annot)
        rows = []
        for a in range(n_annot):
            for (length, kind), b in beta.items():
                p = special.expit(b + u[a])
                rows += [(float(rng.random() < p), length, kind, a) for _ in range(per_cell)]
        c = np.array(rows)
        n = len(c)
        res = estimate_ebc(
            c[:, 0],
            c[:, 1].astype(int),
            c[:, 2].astype(int),
            c[:, 3].astype(int),
            c[:, 3].astype(int),
            np.arange(n),
            b=199,
            seed=int(rng.integers(1 << 30)),
            gaps={GAP: G},
        )
        (q,) = [r for r in res.ratios if r.name == "ebc_gap"]
        covered.append(q.low <= truth <= q.high)
    share = float(np.mean(covered))
    assert 0.88 <= share <= 0.995, share
