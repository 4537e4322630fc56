"""Benchmark: does the headline test of EB-C = 1 hold its level, and do the intervals
cover, when annotators differ (issue 11, DESIGN.md §1)?

Simulated studies, each run through the service's own statistics
(``app.results.stats.estimate_ebc`` and ``permutation_test``), never a re-implementation.

Design of one simulated study (nested: every item judged once):

- one prefix length, 600 HITs of 5 ``data`` + 5 ``model`` items: 3,000 judgments per
  cell, the paper's size;
- ``G`` annotators (30, 60, 150), each doing at least one HIT; the other ``600 - G``
  HITs go to them in proportion to an **activity** weight, water-filled under the
  per-annotator cap of 200 HITs:
  ``equal`` (the same weight: 600 / G HITs each),
  ``lognormal`` (weights ``exp(N(0, 1))``: the busiest tenth do ~35-40% of the HITs),
  ``pareto`` (weights ``Pareto(shape 1.1) + 0.05``: a few annotators do most HITs,
  the busiest tenth ~55-65%, often up against the cap; effective number of annotators
  ~7-15 whatever G);
- judgment ``d ~ Bernoulli(expit(beta + u_g + kind (mu + v_g) + e_i))`` with annotator
  **skill** ``u_g ~ N(0, 0.75^2)`` (baseline log-odds of *not* choosing the top-1),
  **annotator x kind effect** ``v_g ~ N(0, s^2)``, ``s`` in {0, 0.2, 0.4} (how much
  harder annotator g finds model prefixes; it does not cancel inside a HIT), and item
  **difficulty** ``e_i ~ N(0, 1)``, all independent (so activity is independent of
  how an annotator judges).

Truth, from the generating parameters, not from the data: the population CGD of a kind
is ``E[expit(beta + [mu] + Z sigma)]`` with ``sigma^2 = 0.75^2 + [s^2] + 1``, computed by
80-point Gauss-Hermite quadrature (checked against 4 million Monte Carlo draws at
start-up); ``beta`` sets the population CGD(data) to 0.73 and ``mu`` the population
EB-C = CGD(model) / CGD(data) to exactly 1 (null studies) or 1.05 (coverage studies).
Under the null with ``s > 0`` annotators *do* treat the kinds differently: only the
population ratio is 1 (the sharp null of the permutation test is false).

Per scenario, ``--reps`` null studies and as many at EB-C = 1.05 (fresh draws each):

- false-positive rate at the 5% level of the headline test (wild cluster bootstrap by
  annotator, ``p_value``), of the within-HIT permutation test, and of the old default
  read as a test (1 outside the percentile annotator-bootstrap interval);
- coverage of the true EB-C = 1.05 by the new default interval (inverted wild test) and
  by the old percentile interval; coverage of the true CGD(data) = 0.73 by the new
  jackknife t interval; power of the headline test at EB-C = 1.05;
- the median effective number of annotators ``(sum n_g)^2 / sum n_g^2`` and the share
  of studies flagged "few annotators" (< 30 effective).

Monte Carlo SE of a rate near 5% with R studies: ``sqrt(.05 .95 / R)`` (0.7 pp at
R = 1,000), near 95% the same. The target is 5 ± 1.5% and 95 ± 1.5%.

Run: ``python benchmarks/stats_calibration.py`` (R = 1,000, B = 999: about 9 ms of CPU
per study, ~8 minutes on one free core; docs/statistics.md's table is ``--reps 2000``, 2,130 s
on a shared machine; ``--jobs 2`` for two processes, ``--reps 200`` for a quick look).
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from app.results.stats import estimate_ebc, permutation_test

HITS = 600
PER_KIND = 5
CAP = 200
LENGTH = 10
SD_SKILL = 0.75
SD_ITEM = 1.0
CGD_DATA = 0.73
EBC_ALT = 1.05
ALPHA = 0.05
_X, _W = np.polynomial.hermite_e.hermegauss(80)
_W = _W / _W.sum()


@dataclass(frozen=True)
class Scenario:
    g: int
    activity: str
    sd_kind: float
    hits: int = HITS


def population_cgd(mean: float, sd: float) -> float:
    """``E[expit(mean + sd Z)]``, Z standard normal (Gauss-Hermite)."""
    return float(_W @ special.expit(mean + sd * _X))


def parameters(ebc: float, sd_kind: float) -> tuple[float, float]:
    """``(beta, mu)`` giving population CGD(data) = 0.73 and EB-C = ``ebc`` exactly."""
    sd_d = np.hypot(SD_SKILL, SD_ITEM)
    sd_m = np.sqrt(SD_SKILL**2 + sd_kind**2 + SD_ITEM**2)
    beta = optimize.brentq(lambda b: population_cgd(b, sd_d) - CGD_DATA, -10, 10, xtol=1e-14)
    mu = optimize.brentq(
        lambda m: population_cgd(beta + m, sd_m) - ebc * CGD_DATA, -10, 10, xtol=1e-14
    )
    return beta, mu


def monte_carlo_ebc(beta: float, mu: float, sd_kind: float, n: int, seed: int) -> float:
    """The same population EB-C by brute force: annotators, items, judgments drawn."""
    rng = np.random.default_rng(seed)
    u, e = rng.normal(0, SD_SKILL, n), rng.normal(0, SD_ITEM, n)
    v = rng.normal(mu, sd_kind, n)
    return float(special.expit(beta + u + v + e).mean() / special.expit(beta + u + e).mean())


def activity(rng: np.random.Generator, kind: str, g: int, hits: int = HITS) -> np.ndarray:
    """HITs per annotator: one each, the rest by weight, water-filled under the cap."""
    if kind == "equal":
        w = np.ones(g)
    elif kind == "lognormal":
        w = rng.lognormal(0.0, 1.0, g)
    elif kind == "pareto":
        w = rng.pareto(1.1, g) + 0.05
    else:
        raise ValueError(kind)
    count = np.ones(g, np.int64)
    left = hits - g
    while left > 0:
        free = count < CAP
        add = np.minimum(np.floor(np.where(free, w, 0) / w[free].sum() * left), CAP - count)
        add = add.astype(np.int64)
        if add.sum() == 0:  # the remainder, one HIT each, to random free annotators
            pick = rng.choice(np.flatnonzero(free), size=min(left, int(free.sum())), replace=False)
            add[pick] = 1
        count += add
        left -= int(add.sum())
    return count


def study(rng: np.random.Generator, sc: Scenario, beta: float, mu: float) -> dict:
    """One study's judgment columns, as the service loads them."""
    hits_of = activity(rng, sc.activity, sc.g, sc.hits)
    hit_annot = rng.permutation(np.repeat(np.arange(sc.g), hits_of))
    per_hit = 2 * PER_KIND
    hit = np.repeat(np.arange(sc.hits), per_hit)
    kind = np.tile(np.repeat([0, 1], PER_KIND), sc.hits)
    ann = hit_annot[hit]
    u = rng.normal(0.0, SD_SKILL, sc.g)
    v = rng.normal(mu, sc.sd_kind, sc.g)
    eta = beta + u[ann] + kind * v[ann] + rng.normal(0.0, SD_ITEM, hit.size)
    d = (rng.random(hit.size) < special.expit(eta)).astype(float)
    return {
        "d": d,
        "length": np.full(hit.size, LENGTH),
        "kind": kind,
        "annotator": ann,
        "hit": hit,
        "item": np.arange(hit.size),
    }


def run(sc: Scenario, reps: int, b: int, seed: np.random.SeedSequence) -> dict:
    rng = np.random.default_rng(seed)
    out = {k: 0 for k in ("fp_new", "fp_perm", "fp_pct", "cov_new", "cov_pct", "cov_cgd")}
    out |= {"power": 0, "few": 0}
    g_eff = []
    for ebc_true in (1.0, EBC_ALT):
        beta, mu = parameters(ebc_true, sc.sd_kind)
        for r in range(reps):
            s = study(rng, sc, beta, mu)
            new = estimate_ebc(**s, ci="wild", b=b, seed=r)
            old = estimate_ebc(**s, ci="percentile", b=b, seed=r)
            q, qo = new.ebc(LENGTH), old.ebc(LENGTH)
            if ebc_true == 1.0:
                g_eff.append(q.n_effective)
                out["few"] += q.few_annotators
                out["fp_new"] += q.p_value <= ALPHA
                out["fp_pct"] += not qo.low <= 1.0 <= qo.high
                perm = permutation_test(
                    s["d"], s["length"], s["kind"], s["hit"], s["item"], b=b, seed=r
                )
                out["fp_perm"] += perm[0].p_value <= ALPHA
            else:
                out["cov_new"] += q.low <= ebc_true <= q.high
                out["cov_pct"] += qo.low <= ebc_true <= qo.high
                c = new.cell(LENGTH, 0)
                out["cov_cgd"] += c.low <= CGD_DATA <= c.high
                out["power"] += q.p_value <= ALPHA
    rates = {k: v / reps for k, v in out.items()}
    rates["g_eff"] = float(np.median(g_eff))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=1000, help="studies per scenario and truth")
    ap.add_argument("--b", type=int, default=999, help="bootstrap draws / permutations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="processes")
    ap.add_argument("--g", default="30,60,150")
    ap.add_argument("--activity", default="equal,lognormal,pareto")
    ap.add_argument("--sd-kind", default="0,0.2,0.4")
    args = ap.parse_args()

    for s in (0.0, 0.2, 0.4):  # the quadrature truth against brute force
        for target in (1.0, EBC_ALT):
            beta, mu = parameters(target, s)
            mc = monte_carlo_ebc(beta, mu, s, 4_000_000, seed=1)
            assert abs(mc - target) < 3e-3, (s, target, mc)
    scenarios = [
        Scenario(int(g), act, float(s))
        for g in args.g.split(",")
        for act in args.activity.split(",")
        for s in args.sd_kind.split(",")
    ]
    seeds = np.random.SeedSequence(args.seed).spawn(len(scenarios))
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(
            pool.map(run, scenarios, [args.reps] * len(scenarios), [args.b] * len(scenarios), seeds)
        )
    se = 100 * np.sqrt(0.05 * 0.95 / args.reps)
    print(
        f"\nR = {args.reps:,} studies per scenario and truth, B = {args.b:,}, seed "
        f"{args.seed}; Monte Carlo SE of a 5% or 95% rate {se:.1f} pp; "
        f"{time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f}\n"
    )
    print(
        "| G | activity | SD annotator x kind | G_eff (median) | flagged | "
        "FPR: wild test (new) | FPR: within-HIT permutation | FPR: 1 outside percentile CI "
        "| coverage EB-C: new | coverage EB-C: percentile (old) | coverage CGD(data): "
        "jackknife t | power at EB-C 1.05 |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    pct = "{:.1f}".format
    for sc, r in zip(scenarios, results, strict=True):
        print(
            f"| {sc.g} | {sc.activity} | {sc.sd_kind:g} | {r['g_eff']:.1f} | "
            f"{pct(100 * r['few'])}% | {pct(100 * r['fp_new'])} | {pct(100 * r['fp_perm'])} | "
            f"{pct(100 * r['fp_pct'])} | {pct(100 * r['cov_new'])} | "
            f"{pct(100 * r['cov_pct'])} | {pct(100 * r['cov_cgd'])} | "
            f"{pct(100 * r['power'])} |"
        )


if __name__ == "__main__":
    main()
