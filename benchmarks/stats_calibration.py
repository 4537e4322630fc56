"""Benchmark: does the headline test of EB-C = 1 hold its level, and do the intervals
cover, when annotators differ (issue 11, docs/design.md §1)?

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

``--suite issue32`` (issue 32) runs instead: **crossed** designs (every HIT done by 3-5
distinct annotators drawn by a lognormal activity weight, the items' difficulty shared by
their judgments, item logit SD 1-1.5, 60-150 annotators): false positives and coverage of
the default (the design is detected as crossed: two-way t) beside the annotator-only wild
test kept as a secondary figure; **three lengths** under EB-C = 1 (the same annotators at
every length): the family-wise rate of the per-length tests, raw and Holm-adjusted, and
the pooled and trend tests' false-positive rates; a **watched** study (20 looks as
annotators arrive, stop at the first rejection): the fixed-n interval against the
anytime-valid one; and the CGD intervals at **8 annotators**.

``--suite assistance`` runs the **LLM-assistance test** (app/results/stats/assistance.py)
on simulated crowds of honest, heterogeneous annotators (skill and annotator x kind
effects on the logit of choosing the model's top-1 word, item-level taste, Pareto activity
under a cap of 60 HITs, 2 lengths x 2 kinds): under the null, the per-annotator rate of
p <= 0.05 (the test's level) and the share of crowds with any flag at FDR 0.05; and its
power on one planted LLM-assisted annotator (who takes the model's top-1 word on a share
of their items and judges honestly otherwise), flagged and p <= 0.05.

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
from app.results.stats.assistance import assistance_signal

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


def parameters(ebc: float, sd_kind: float, sd_item: float = SD_ITEM) -> tuple[float, float]:
    """``(beta, mu)`` giving population CGD(data) = 0.73 and EB-C = ``ebc`` exactly."""
    sd_d = np.hypot(SD_SKILL, sd_item)
    sd_m = np.sqrt(SD_SKILL**2 + sd_kind**2 + sd_item**2)
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


# --------------------------------------------------------------------------- issue 32


@dataclass(frozen=True)
class Crossed:
    """A crossed design: ``hits`` HITs of 5 data + 5 model items, each done by
    ``replicas`` distinct annotators (so every item is judged ``replicas`` times and its
    difficulty is shared), annotators drawn for each HIT by a lognormal activity weight
    (no cap), item logit SD ``sd_item``."""

    g: int
    hits: int
    replicas: int
    sd_item: float
    sd_kind: float = 0.2


def crossed_study(rng: np.random.Generator, sc: Crossed, beta: float, mu: float) -> dict:
    w = np.log(rng.lognormal(0.0, 1.0, sc.g))
    # Gumbel top-r: each HIT's replicas go to r distinct annotators, P ~ weight.
    keys = w[None, :] + rng.gumbel(size=(sc.hits, sc.g))
    who = np.argpartition(-keys, sc.replicas - 1, axis=1)[:, : sc.replicas]  # hits x r
    per_hit = 2 * PER_KIND
    n_items = sc.hits * per_hit
    item = np.repeat(np.arange(n_items), sc.replicas)  # item-major, r judgments each
    hit = item // per_hit
    rep = np.tile(np.arange(sc.replicas), n_items)
    ann = who[hit, rep]
    kind = (item % per_hit >= PER_KIND).astype(int)
    u = rng.normal(0.0, SD_SKILL, sc.g)
    v = rng.normal(mu, sc.sd_kind, sc.g)
    e = rng.normal(0.0, sc.sd_item, n_items)
    eta = beta + u[ann] + kind * v[ann] + e[item]
    d = (rng.random(item.size) < special.expit(eta)).astype(float)
    return {
        "d": d,
        "length": np.full(item.size, LENGTH),
        "kind": kind,
        "annotator": ann,
        "hit": hit * sc.replicas + rep,  # an assignment's HIT copy (one annotator)
        "item": item,
    }


def run_crossed(sc: Crossed, reps: int, b: int, seed: np.random.SeedSequence) -> dict:
    """FPR and coverage of the default (the design decides: two-way) and of the
    annotator-only wild test/interval on the same studies."""
    rng = np.random.default_rng(seed)
    out = {k: 0 for k in ("fp_new", "fp_old", "cov_new", "cov_old", "cov_cgd")}
    crossed, df = 0, []
    for ebc_true in (1.0, EBC_ALT):
        beta, mu = parameters(ebc_true, sc.sd_kind, sc.sd_item)
        for r in range(reps):
            s = crossed_study(rng, sc, beta, mu)
            res = estimate_ebc(**s, b=b, seed=r)  # unit auto
            q, old = res.ebc(LENGTH), res.secondary_tests[0]
            if ebc_true == 1.0:
                crossed += res.design == "crossed"
                df.append(res.tests[0].n_effective)
                out["fp_new"] += q.p_value <= ALPHA
                out["fp_old"] += old.p_value <= ALPHA
            else:
                out["cov_new"] += q.low <= ebc_true <= q.high
                out["cov_old"] += old.low <= ebc_true <= old.high
                c = res.cell(LENGTH, 0)
                out["cov_cgd"] += c.low <= CGD_DATA <= c.high
    rates = {k: v / reps for k, v in out.items()}
    rates["crossed"] = crossed / reps
    rates["g_eff"] = float(np.median(df))
    return rates


LENGTHS = (10, 20, 30)


def lengths_study(rng: np.random.Generator, sc: Scenario, beta: float, mu: float) -> dict:
    """Three lengths, each ``sc.hits`` HITs (nested), the same annotators (their skill and
    annotator x kind effect shared by the lengths): per-length tests are correlated."""
    u = rng.normal(0.0, SD_SKILL, sc.g)
    v = rng.normal(mu, sc.sd_kind, sc.g)
    cols: dict[str, list] = {k: [] for k in ("d", "length", "kind", "annotator", "hit", "item")}
    per_hit = 2 * PER_KIND
    for j, length in enumerate(LENGTHS):
        hits_of = activity(rng, sc.activity, sc.g, sc.hits)
        hit_annot = rng.permutation(np.repeat(np.arange(sc.g), hits_of))
        hit = np.repeat(np.arange(sc.hits), per_hit)
        kind = np.tile(np.repeat([0, 1], PER_KIND), sc.hits)
        ann = hit_annot[hit]
        eta = beta + u[ann] + kind * v[ann] + rng.normal(0.0, SD_ITEM, hit.size)
        cols["d"].append((rng.random(hit.size) < special.expit(eta)).astype(float))
        cols["length"].append(np.full(hit.size, length))
        cols["kind"].append(kind)
        cols["annotator"].append(ann)
        cols["hit"].append(hit + j * sc.hits)
        cols["item"].append(np.arange(hit.size) + j * hit.size)
    return {k: np.concatenate(v) for k, v in cols.items()}


def run_lengths(sc: Scenario, reps: int, b: int, seed: np.random.SeedSequence) -> dict:
    """Family-wise error over the three per-length tests (raw and Holm), and the
    false-positive rates of the pooled test and of the trend, all under EB-C = 1."""
    rng = np.random.default_rng(seed)
    beta, mu = parameters(1.0, sc.sd_kind)
    out = {k: 0 for k in ("fwer_raw", "fwer_holm", "fp_pooled", "fp_trend")}
    for r in range(reps):
        res = estimate_ebc(**lengths_study(rng, sc, beta, mu), b=b, seed=r)
        per = [t for t in res.tests if t.length is not None]
        out["fwer_raw"] += any(t.p_value <= ALPHA for t in per)
        out["fwer_holm"] += any(t.p_holm <= ALPHA for t in per)
        out["fp_pooled"] += next(t for t in res.tests if t.length is None).p_value <= ALPHA
        out["fp_trend"] += res.trend.p_value <= ALPHA
    return {k: v / reps for k, v in out.items()}


LOOKS = 20


def run_sequential(sc: Scenario, reps: int, b: int, seed: np.random.SeedSequence) -> dict:
    """A watched study under EB-C = 1: annotators arrive at uniform times in the first
    half of the study and spread their HITs uniformly over the rest; a look after every
    5% of the time (20 looks), stop at the first look that rejects. The error of the
    fixed-n interval (inverted wild test, p <= 0.05) against the anytime-valid one (1
    outside it); and the same at the last look alone."""
    rng = np.random.default_rng(seed)
    beta, mu = parameters(1.0, sc.sd_kind)
    out = {k: 0 for k in ("any_fixed", "any_av", "last_fixed", "last_av")}
    for r in range(reps):
        s = study(rng, sc, beta, mu)
        ann_hit = s["annotator"][:: 2 * PER_KIND]
        start = rng.uniform(0.0, 0.5, sc.g)
        when = start[ann_hit] + rng.random(ann_hit.size) * (1.0 - start[ann_hit])
        t_row = np.repeat(when, 2 * PER_KIND)
        fixed = av = False
        for look in range(1, LOOKS + 1):
            keep = t_row <= look / LOOKS
            if len(np.unique(s["annotator"][keep])) < 2:
                continue
            q = estimate_ebc(**s, keep=keep, b=b, seed=r).ebc(LENGTH)
            rej_fixed = q.p_value <= ALPHA
            rej_av = bool(q.av_low > 1.0 or q.av_high < 1.0)  # NaN: no interval, no stop
            fixed |= rej_fixed
            av |= rej_av
        out["any_fixed"] += fixed
        out["any_av"] += av
        out["last_fixed"] += rej_fixed
        out["last_av"] += rej_av
    return {k: v / reps for k, v in out.items()}


def run_small(sc: Scenario, reps: int, b: int, seed: np.random.SeedSequence) -> dict:
    """Coverage of the true CGD(data) and CGD(model) by the default jackknife t interval
    (logit scale) at EB-C = 1.05, and the share of studies warned "few annotators"."""
    rng = np.random.default_rng(seed)
    beta, mu = parameters(EBC_ALT, sc.sd_kind)
    out = {"cov_d": 0, "cov_m": 0, "cov_ebc": 0}
    for r in range(reps):
        res = estimate_ebc(**study(rng, sc, beta, mu), b=b, seed=r)
        d, m, q = res.cell(LENGTH, 0), res.cell(LENGTH, 1), res.ebc(LENGTH)
        out["cov_d"] += d.low <= CGD_DATA <= d.high
        out["cov_m"] += m.low <= CGD_DATA * EBC_ALT <= m.high
        out["cov_ebc"] += q.low <= EBC_ALT <= q.high
    return {k: v / reps for k, v in out.items()}


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def issue32(args: argparse.Namespace) -> None:
    """The crossed, several-length and sequential scenarios (``--suite issue32``)."""
    crossed = [
        Crossed(60, 200, 3, 1.0),
        Crossed(60, 120, 5, 1.0),
        Crossed(150, 120, 5, 1.0),
        Crossed(150, 60, 5, 1.5),
    ]
    nested = Scenario(60, "lognormal", 0.2, hits=200)
    small = [Scenario(8, act, 0.4, hits=80) for act in ("equal", "lognormal", "pareto")]
    seeds = np.random.SeedSequence(args.seed).spawn(len(crossed) + 2 + len(small))
    started = time.perf_counter()
    reps, b = args.reps, args.b
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        cr = pool.map(run_crossed, crossed, [reps] * 4, [b] * 4, seeds[:4])
        ln = pool.submit(run_lengths, nested, reps, b, seeds[4])
        sq = pool.submit(run_sequential, nested, reps, b, seeds[5])
        sm = pool.map(run_small, small, [reps] * 3, [b] * 3, seeds[6:])
        cr, ln, sq, sm = list(cr), ln.result(), sq.result(), list(sm)
    se5 = 100 * np.sqrt(0.05 * 0.95 / reps)
    print(
        f"\nR = {reps:,} studies a scenario (and truth), B = {b:,}, seed {args.seed}; "
        f"Monte Carlo SE of a 5% or 95% rate {se5:.1f} pp; "
        f"{time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f}\n"
    )
    print(
        _table(
            [
                "crossed design", "detected crossed", "G_eff (median)",
                "FPR: default (two-way t)", "FPR: annotator-only wild",
                "coverage EB-C: default", "coverage EB-C: annotator-only",
                "coverage CGD(data): default",
            ],
            [
                [
                    f"{c.g} annotators, {c.hits} HITs x {c.replicas}, item SD {c.sd_item:g}",
                    _pct(r["crossed"]), f"{r['g_eff']:.1f}", _pct(r["fp_new"]),
                    _pct(r["fp_old"]), _pct(r["cov_new"]), _pct(r["cov_old"]),
                    _pct(r["cov_cgd"]),
                ]
                for c, r in zip(crossed, cr, strict=True)
            ],
        )
    )  # fmt: skip
    print(
        "\n"
        + _table(
            [
                "3 lengths, EB-C = 1 at each (60 annotators, lognormal, 200 HITs a length)",
                "any length p <= 0.05 (raw)", "any length Holm p <= 0.05",
                "pooled test", "trend test",
            ],
            [
                [
                    "family-wise / false-positive rate", _pct(ln["fwer_raw"]),
                    _pct(ln["fwer_holm"]), _pct(ln["fp_pooled"]), _pct(ln["fp_trend"]),
                ]
            ],
        )
    )  # fmt: skip
    print(
        "\n"
        + _table(
            [
                "20 looks, stop at the first rejection (60 annotators, lognormal, 200 HITs)",
                "fixed-n interval", "anytime-valid interval",
            ],
            [
                ["false rejection at any look", _pct(sq["any_fixed"]), _pct(sq["any_av"])],
                ["false rejection at the last look", _pct(sq["last_fixed"]), _pct(sq["last_av"])],
            ],
        )
    )  # fmt: skip
    print(
        "\n"
        + _table(
            [
                "8 annotators, 80 HITs, SD annotator x kind 0.4, EB-C 1.05",
                "coverage CGD(data)", "coverage CGD(model)", "coverage EB-C",
            ],
            [
                [f"{sc.activity} activity", _pct(r["cov_d"]), _pct(r["cov_m"]),
                 _pct(r["cov_ebc"])]
                for sc, r in zip(small, sm, strict=True)
            ],
        )
    )  # fmt: skip


# --------------------------------------------------------------------------- assistance

ASSIST_LENGTHS = 2


def assistance_crowd(
    rng: np.random.Generator,
    n_honest: int,
    *,
    assisted: tuple[int, float] | None = None,
    skill_sd: float = 0.4,
    kind_sd: float = 0.3,
    cap: int = 60,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(annotator, cell, agrees)`` per judgment. Honest annotators sample their choice
    from an item's distribution over five words and "none" (the model's top-1 word chosen
    about a quarter of the time, less on model prefixes), tilted towards the top-1 by a
    personal skill and a personal x kind effect; Pareto activity under `cap` HITs of one
    length, 5 data + 5 model items. ``assisted = (hits, share)``: one more annotator, last,
    who takes the top-1 word on `share` of their items and is otherwise honest."""
    hits = np.minimum(cap, 1 + np.floor(rng.pareto(1.1, n_honest))).astype(int)
    if assisted is not None:
        hits = np.r_[hits, assisted[0]]
    n_total = hits.size
    skill = rng.normal(0, skill_sd, n_total)
    by_kind = rng.normal(0, kind_sd, (n_total, 2))
    hit_owner = np.repeat(np.arange(n_total), hits)
    length = np.repeat(rng.integers(0, ASSIST_LENGTHS, hit_owner.size), 10)
    annotator = np.repeat(hit_owner, 10)
    kind = np.tile(np.r_[[0] * 5, [1] * 5], hit_owner.size)
    n = annotator.size
    q = rng.gamma(np.broadcast_to(np.array([1.6, 1.2, 1.0, 0.8, 0.6, 1.0]), (n, 6)))
    q[:, 0] *= np.where(kind == 0, 1.0, 0.85)
    logits = np.log(q / q.sum(axis=1, keepdims=True))
    logits[:, 0] += skill[annotator] + by_kind[annotator, kind]
    agrees = np.argmax(logits + rng.gumbel(size=(n, 6)), axis=1) == 0
    if assisted is not None:
        mine = annotator == n_honest
        agrees[mine] |= rng.random(int(mine.sum())) < assisted[1]
    return annotator, length * 2 + kind, agrees


def run_assistance(g: int, reps: int, seed: np.random.SeedSequence, signal=None) -> dict:
    """Null crowds of `g` honest annotators, then crowds with one assisted annotator
    (10 HITs, top-1 on 50% of the items; and 3 HITs, always the top-1)."""
    signal = assistance_signal if signal is None else signal
    rng = np.random.default_rng(seed)
    out = {"p05": 0, "tested": 0, "any_flag": 0, "cpu": 0.0}
    for _ in range(reps):
        t = time.process_time()
        res = signal(*assistance_crowd(rng, g))
        out["cpu"] += time.process_time() - t
        ok = np.isfinite(res.p_value)
        out["p05"] += int(np.sum(res.p_value[ok] <= ALPHA))
        out["tested"] += int(ok.sum())
        out["any_flag"] += bool(res.flagged.any())
    rates = {"fp_annotator": out["p05"] / out["tested"], "any_flag": out["any_flag"] / reps}
    rates["cpu_ms"] = 1000 * out["cpu"] / reps
    for name, planted in (("half_of_10", (10, 0.5)), ("all_of_3", (3, 1.0))):
        flagged = p05 = 0
        for _ in range(reps):
            res = signal(*assistance_crowd(rng, g, assisted=planted))
            flagged += bool(res.flagged[-1])
            p05 += bool(res.p_value[-1] <= ALPHA)
        rates[f"power_{name}"] = flagged / reps
        rates[f"p05_{name}"] = p05 / reps
    return rates


def assistance(args: argparse.Namespace, signal=None) -> None:
    """The LLM-assistance test's level and power (``--suite assistance``)."""
    sizes = (20, 60, 150)
    seeds = np.random.SeedSequence(args.seed).spawn(len(sizes))
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        res = list(pool.map(run_assistance, sizes, [args.reps] * len(sizes), seeds,
                            [signal] * len(sizes)))  # fmt: skip
    se5 = 100 * np.sqrt(0.05 * 0.95 / args.reps)
    print(
        f"\nR = {args.reps:,} crowds a size (null, and each planted annotator), seed "
        f"{args.seed}; Monte Carlo SE of a 5% crowd rate {se5:.1f} pp; "
        f"{time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f}\n"
    )
    print(
        _table(
            [
                "honest crowd", "null: annotators with p <= 0.05", "null: crowds with any flag",
                "10 HITs, top-1 on half: flagged (p <= 0.05)",
                "3 HITs, always top-1: flagged (p <= 0.05)", "CPU ms a crowd",
            ],
            [
                [
                    f"{g} annotators", _pct(r["fp_annotator"]), _pct(r["any_flag"]),
                    f"{_pct(r['power_half_of_10'])} ({_pct(r['p05_half_of_10'])})",
                    f"{_pct(r['power_all_of_3'])} ({_pct(r['p05_all_of_3'])})",
                    f"{r['cpu_ms']:.1f}",
                ]
                for g, r in zip(sizes, res, strict=True)
            ],
        )
    )  # fmt: skip


# --suite gap (issue 34): a synthetic pair's EB-C_gap, recovered by an oracle crowd.
GAP_KINDS = ["data", "model", "data_shuffled+gap@2", "data_corrupted@0.3+gap@2"]
GAP_DESIGNS = (  # (label, items per cell, cap, activity_min, activity_tail)
    ("light activity (the demo's), cap 5", 300, 5, 0.5, 3.0),
    ("Pareto activity, cap 25", 300, 25, 2.0, 1.1),
    ("Pareto activity, cap 60, 1,000 items a cell", 1000, 60, 2.0, 1.1),
)


def gap_pool(items: int, seed: int):
    """A pool of the synthetic pair (P_M = fake:1, P_D = fake:4, data prefixes sampled from
    P_D; lengths 3 and 5, both gap kinds at g = 2) made by the real worker in a scratch
    SQLite database: ``items`` a cell, and the CPU seconds it took."""
    import tempfile
    from pathlib import Path

    from app.cli.common import migrate_database
    from app.config import Settings
    from app.db import build_engine, make_sessionmaker
    from app.precompute import service
    from app.studies.schemas import StudyConfig
    from app.studies.service import create_study
    from app.studytypes.nextword.gap_coverage import Pool
    from app.studytypes.nextword.queries import load_references
    from worker.fake import WORDS
    from worker.runner import Worker, WorkerOptions

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/pool.db", data_dir=Path(tmp))
        migrate_database(settings)
        engine = build_engine(settings)
        dataset = Path(tmp) / "lines.txt"  # unread: data prefixes come from P_D
        dataset.write_text(" ".join(WORDS) + "\n", encoding="utf-8")
        config = StudyConfig(
            slug="gap-pool",
            title="gap pool",
            model={"name": "fake:1"},
            dataset={"path": str(dataset)},
            prefix_lengths=[3, 5],
            kinds=GAP_KINDS,
            items_per_cell=items,
            seed=seed,
            hits={"mix": {k: 3 for k in GAP_KINDS}, "attention": 0},
            reference={"model": "fake:4", "data_prefixes": "reference"},
        )
        with make_sessionmaker(engine)() as session, session.begin():
            study = create_study(session, config)
            service.plan_job(session, study, shard_size=1000)
        started = time.process_time()
        Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine).run()
        cpu = time.process_time() - started
        with make_sessionmaker(engine)() as session:
            pool = Pool.of(load_references(session, session.merge(study)))
        engine.dispose()
    return pool, cpu


def gap_suite(args: argparse.Namespace) -> None:
    """Coverage of the synthetic EB-C_gap by the default interval (``--suite gap``)."""
    from app.simulate.crowd import Heterogeneity
    from app.simulate.design import Design
    from app.studytypes.nextword.gap_coverage import coverage

    pool, pool_cpu = gap_pool(args.pool, args.seed)
    started = time.perf_counter()
    rows = []
    for label, items, cap, a_min, tail in GAP_DESIGNS:
        design = Design(
            lengths=(3, 5),
            kinds=pool.kinds,
            mix={code: 3 for code in range(len(GAP_KINDS))},
            attention=1,
            items_per_cell=items,
            cap=cap,
        )
        hetero = Heterogeneity(activity_min=a_min, activity_tail=tail)
        got, per = coverage(design, pool, hetero, replications=args.reps, seed=args.seed, b=args.b)
        rows += [
            [
                label, f"{r.name} l={r.length} {r.kind}", f"{r.truth:.4f}",
                f"{r.mean_estimate:.4f}", f"{r.median_effective:.0f}",
                f"{r.median_rel_width:.2f}", f"{_pct(r.coverage)} ± {_pct(r.coverage_mc)}",
                f"{1000 * per:.0f}",
            ]
            for r in got
        ]  # fmt: skip
    print(
        f"\nR = {args.reps:,} studies per design, B = {args.b:,}, seed {args.seed}; the pool: "
        f"{args.pool:,} items a cell made by the worker in {pool_cpu:.0f} CPU s; "
        f"{time.perf_counter() - started:.0f} s, load average {os.getloadavg()[0]:.2f}\n"
    )
    header = [
        "design", "ratio", "truth (pool, exact)", "mean estimate", "G_eff (median)",
        "interval width / truth (median)", "coverage %", "CPU ms a study",
    ]  # fmt: skip
    print(_table(header, rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=1000, help="studies per scenario and truth")
    ap.add_argument("--b", type=int, default=999, help="bootstrap draws / permutations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="processes")
    ap.add_argument("--g", default="30,60,150")
    ap.add_argument("--activity", default="equal,lognormal,pareto")
    ap.add_argument("--sd-kind", default="0,0.2,0.4")
    ap.add_argument(
        "--suite",
        default="nested",
        choices=("nested", "issue32", "assistance", "gap"),
        help="nested: the table of issue 11; issue32: crossed, several lengths, looks; "
        "assistance: the LLM-assistance test's level and power; "
        "gap: a synthetic pair's EB-C_gap recovered by an oracle crowd (issue 34)",
    )
    ap.add_argument("--pool", type=int, default=5000, help="--suite gap: pool items a cell")
    args = ap.parse_args()
    if args.suite == "issue32":
        issue32(args)
        return
    if args.suite == "assistance":
        assistance(args)
        return
    if args.suite == "gap":
        gap_suite(args)
        return

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
