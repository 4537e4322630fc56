"""EB-C_gap against a known truth (issue 34): pairs of fake bigram models (`worker.fake`, a table
previous word -> next word) built so that the truth is computable exactly, the items made by the
worker (`data_corrupted@1+gap@g`: l random words, then g words sampled from P_M), their exact
d_JS computed by `worker.synthetic`, and EB-C_gap estimated by the results' own code
(`app.results.stats.synthetic_table` with the gap kind's pair over data at l + g).

The words are split into clean ones C (every long dataset line is clean) and bad ones B (only
in two-word lines, so they are in the vocabulary that corruption draws from but never in a data
prefix).  P_D writes uniformly over C after every word.  For a bigram pair d_JS after a context
depends on its last word x only: D(x).  The last corrupted word X_0 is uniform over the
vocabulary, the gap's last word X_g ~ X_0 M^g (M: P_M's word-to-word transitions), and a data
prefix's last word is clean, so

    EB-C_gap(g) = E[D(X_g)] / D(clean),

computed here from the tables alone.

- P_M = P_D: every D is 0 and EB-C_gap = 1 exactly, for every g.
- Forgetting: P_M writes clean words after clean ones and, after a bad word, a bad one with
  probability 1/2: the damage is forgotten geometrically and EB-C_gap falls to 1.
- Compounding: P_M slips into bad words with probability 0.15 after a clean word and never
  leaves them: EB-C_gap rises with g.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.precompute.datasets import load_dataset
from app.results.stats import synthetic_table
from worker.fake import WORDS, FakeCausalLM
from worker.prefixes import PrefixSpec, make_items
from worker.synthetic import reference_records

CLEAN, BAD = WORDS[:8], WORDS[8:]
LENGTH, N_ITEMS, GAPS = 2, 400, (1, 2, 4, 8)
SPEC = PrefixSpec(batch_size=64)


def table(after_clean: dict[str, float], after_bad: dict[str, float]):
    """A bigram table over the fake model's pieces: after a clean word (and at the start, and
    after any other piece) ``after_clean``, after a bad word ``after_bad``."""
    ids = FakeCausalLM().tokenizer.ids
    row_clean = {ids["Ġ" + w]: p for w, p in after_clean.items()}
    row_bad = {ids["Ġ" + w]: p for w, p in after_bad.items()}
    bad_ids = {ids["Ġ" + w] for w in BAD}
    return {i: (row_bad if i in bad_ids else row_clean) for i in range(len(ids))}


def mix(*parts: tuple[float, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for weight, dist in parts:
        for w, p in dist.items():
            out[w] = out.get(w, 0.0) + weight * p
    return out


UNIFORM_CLEAN = {w: 1 / len(CLEAN) for w in CLEAN}
UNIFORM_BAD = {w: 1 / len(BAD) for w in BAD}
SKEWED_CLEAN = {w: (i + 1) / 36 for i, w in enumerate(CLEAN)}  # 1..8 over 36
P_D = table(UNIFORM_CLEAN, UNIFORM_CLEAN)
FORGETS = table(SKEWED_CLEAN, mix((0.5, UNIFORM_BAD), (0.5, SKEWED_CLEAN)))
COMPOUNDS = table(mix((0.85, SKEWED_CLEAN), (0.15, UNIFORM_BAD)), UNIFORM_BAD)


def js_bits(p: dict[str, float], q: dict[str, float]) -> float:
    words = sorted(set(p) | set(q))
    a = np.array([p.get(w, 0.0) for w in words])
    b = np.array([q.get(w, 0.0) for w in words])
    m = (a + b) / 2

    def kl(x):
        keep = x > 0
        return float(np.sum(x[keep] * np.log2(x[keep] / m[keep])))

    return (kl(a) + kl(b)) / 2


def truth(pm_rows: tuple[dict, dict], g: int) -> tuple[float, float]:
    """E[D(X_g)] / D(clean) from the tables (module docstring), and the standard deviation of
    its estimate from ``N_ITEMS`` prefixes (the sd of D(X_g) / sqrt(N) / D(clean))."""
    after_clean, after_bad = pm_rows
    d = {w: js_bits(after_bad if w in BAD else after_clean, UNIFORM_CLEAN) for w in WORDS}
    x = {w: 1 / len(WORDS) for w in WORDS}  # X_0: uniform over the vocabulary
    for _ in range(g):
        nxt = dict.fromkeys(WORDS, 0.0)
        for w, p in x.items():
            for v, q in (after_bad if w in BAD else after_clean).items():
                nxt[v] += p * q
        x = nxt
    mean = sum(p * d[w] for w, p in x.items())
    var = sum(p * d[w] ** 2 for w, p in x.items()) - mean**2
    return mean / d[CLEAN[0]], float(np.sqrt(max(var, 0.0) / N_ITEMS)) / d[CLEAN[0]]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(CLEAN, size=14)) for _ in range(N_ITEMS)]
    lines += [f"{BAD[i]} {BAD[i + 1]}" for i in range(0, len(BAD), 2)]  # too short for a prefix
    path = tmp_path_factory.mktemp("gap") / "lines.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = load_dataset(path)
    assert set(data.vocabulary()) == set(WORDS)
    return data


def ebc_gap_curve(pm_table, dataset) -> dict[int, object]:
    """EB-C_gap (d_JS) per g: the worker's items and exact divergences, the results' estimate."""
    pm, pd = FakeCausalLM(table=pm_table, name="pm"), FakeCausalLM(table=P_D, name="pd")
    out = {}
    for g in GAPS:
        kinds = ["data", f"data_corrupted@1+gap@{g}"]
        cells = [(LENGTH + g, 0), (LENGTH, 1)]  # data at l + g, the gap kind at l
        length, kind, js = [], [], []
        for ln, code in cells:
            items = make_items(pm, dataset, SPEC, ln, kinds[code], 0, N_ITEMS, seed=3)
            records = reference_records(pm, pd, items, SPEC)
            for item, rec in zip(items, records, strict=True):
                assert not item.skipped and rec is not None
                length.append(ln)
                kind.append(code)
                js.append(rec["token"]["js"])
        t = synthetic_table(
            np.array(length),
            np.array(kind),
            np.array(js)[:, None],
            metrics=("js",),
            pairs=[(1, 0, g)],
            b=400,
            seed=1,
        )
        (fig,) = [f for f in t.ratios if f.name == "ebc_gap"]
        assert (fig.length, fig.reference_length) == (LENGTH, LENGTH + g)
        out[g] = fig
    return out


def test_equal_models_give_ebc_gap_one_for_every_gap(dataset):
    curve = ebc_gap_curve(P_D, dataset)
    assert all((f.estimate, f.low, f.high) == (1, 1, 1) for f in curve.values())


@pytest.mark.parametrize(
    ("name", "pm_table", "rows"),
    [
        ("forgets", FORGETS, (SKEWED_CLEAN, mix((0.5, UNIFORM_BAD), (0.5, SKEWED_CLEAN)))),
        ("compounds", COMPOUNDS, (mix((0.85, SKEWED_CLEAN), (0.15, UNIFORM_BAD)), UNIFORM_BAD)),
    ],
)
def test_ebc_gap_follows_the_known_curve(dataset, name, pm_table, rows):
    curve = ebc_gap_curve(pm_table, dataset)
    want = {g: truth(rows, g) for g in GAPS}
    for g, fig in curve.items():
        # A mean over N_ITEMS prefixes: within 4 of its true standard deviations of the truth
        # (the data cell's CGD is exact: every clean word has the same D).
        mean, sd = want[g]
        assert abs(fig.estimate - mean) < 4 * sd + 1e-9, (name, g, fig.estimate, mean)
        if sd > 0.05:  # enough bad words among the prefixes for an SE
            assert 0.5 < fig.se / sd < 2  # the item bootstrap's SE is of the right size
    est = [curve[g].estimate for g in GAPS]
    truths = [want[g][0] for g in GAPS]
    if name == "forgets":
        assert truths == sorted(truths, reverse=True) and truths[-1] < 1.05 < truths[0]
        assert est[0] > est[-1] and abs(est[-1] - 1) < 0.1  # falls to 1: the model recovers
    else:
        assert truths == sorted(truths) and truths[-1] > 1.3 * truths[0]
        assert est == sorted(est)  # rises: the errors compound


def test_the_gap_is_sampled_from_the_model(dataset):
    """The first gap word after a bad last word is bad half the time under `FORGETS`."""
    pm = FakeCausalLM(table=FORGETS, name="pm")
    items = make_items(pm, dataset, SPEC, LENGTH, "data_corrupted@1+gap@1", 0, N_ITEMS, seed=5)
    after_bad = [i.words[LENGTH] in BAD for i in items if i.words[LENGTH - 1] in BAD]
    assert len(after_bad) > 120
    share = float(np.mean(after_bad))
    assert abs(share - 0.5) < 4 * np.sqrt(0.25 / len(after_bad))
    assert not any(i.words[LENGTH] in BAD for i in items if i.words[LENGTH - 1] in CLEAN)
