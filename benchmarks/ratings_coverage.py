"""Coverage of a ratings study's gap and ratio intervals on simulated raters (issue 15).

R simulated studies per scenario (`app.studytypes.ratings.raters.simulate_ratings`: 3 lengths x
`--pairs` pairs per kind, 5 raters per pair, heavy-tailed rater activity, rater leniency,
rater x kind, pair effects and noise, rounded to the half-point scale) are each scored by
`app.results.stats.ratings.mean_ratings`; the share of intervals that hold the exact
population truth (`Raters.true_gap`, `Raters.true_ratio`) is printed per scenario and
method, pooled over lengths and steps, with its Monte Carlo standard error, and the time
per study. The headline method is the two-way (annotator x pair) interval; the one-way
annotator bootstrap is the secondary figure.

    .venv/bin/python benchmarks/ratings_coverage.py [--reps 1000] [--pairs 250] [--b 300]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from app.results.stats.ratings import mean_ratings
from app.simulate.design import Design
from app.studytypes.ratings.raters import RaterHeterogeneity, Raters, simulate_ratings

SCENARIOS = {
    "default heterogeneity": (RaterHeterogeneity(), 200),
    "a few busy raters, rater x kind sd 0.4": (
        RaterHeterogeneity(sd_rater_kind=0.4, activity_min=6.0, activity_tail=0.9),
        200,
    ),
    "pairs differ more (pair sd 1.0)": (RaterHeterogeneity(sd_pair=1.0), 200),
}


def run(reps: int, pairs: int, b: int) -> None:
    lengths = (10, 20, 30)
    print(f"{reps} studies per scenario, {pairs} pairs per (length, kind), 5 raters a pair")
    head = f"{'scenario':42} {'method':22} {'gap':>14} {'ratio':>14}"
    print(f"{head} {'eff. raters':>11} {'s/study':>8}")
    for name, (hetero, cap) in SCENARIOS.items():
        design = Design.simple(
            lengths=lengths, items_per_cell=pairs, replicas=5, overlap_share=0, cap=cap
        )
        raters = Raters.paper_like(lengths, hetero=hetero)
        hits: dict[tuple[str, str], list[bool]] = {}
        eff: list[float] = []
        started = time.perf_counter()
        for r in range(reps):
            cols = simulate_ratings(design, raters, np.random.default_rng([29, r]))
            res = mean_ratings(cols, b=b, seed=r)
            for which, contrasts in (("two-way (headline)", res.contrasts),
                                     ("annotator bootstrap", res.secondary)):  # fmt: skip
                for c in contrasts:
                    gap = raters.true_gap(c.length, c.step)
                    ratio = raters.true_ratio(c.length, c.step)
                    hits.setdefault((which, "gap"), []).append(c.gap_low <= gap <= c.gap_high)
                    hits.setdefault((which, "ratio"), []).append(
                        c.ratio_low <= ratio <= c.ratio_high
                    )
            eff.append(float(np.nanmean([c.effective_annotators for c in res.contrasts])))
        per = (time.perf_counter() - started) / reps
        for which in ("two-way (headline)", "annotator bootstrap"):
            cells = []
            for what in ("gap", "ratio"):
                p = float(np.mean(hits[(which, what)]))
                # Monte Carlo se over studies (the 6 contrasts of a study are correlated:
                # counted as one study, conservatively).
                cells.append(f"{p:.3f} ± {math.sqrt(p * (1 - p) / reps):.3f}")
            print(f"{name:42} {which:22} {cells[0]:>14} {cells[1]:>14} "
                  f"{np.mean(eff):>11.1f} {per:>8.3f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=250)
    parser.add_argument("--b", type=int, default=300)
    args = parser.parse_args()
    run(args.reps, args.pairs, args.b)


if __name__ == "__main__":
    main()
