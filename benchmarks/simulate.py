"""Benchmark: "simulate before you pay" on a paper-sized study, against scipy.stats.bootstrap.

R replications (default 500) of a study of 3 prefix lengths x 3,000 judgments per cell
(5 data + 5 model items and 1 attention item per HIT, 600 HITs per length, 5% of them done
by 3 annotators), by a simulated sampler crowd with annotator and annotator x kind
effects and heavy-tailed activity under the 200-HIT cap (app.simulate defaults), against
a stand-in P_D with CGD(data) 0.73 and a true EB-C of 1.02 at every length.

Per replication and length, the EB-C interval two ways on the same judgments:

- ebc-judge's default: ``app.studytypes.nextword.simulation.estimate`` = the results' main estimate
  (exclusions applied, annotator clusters, wild cluster bootstrap-t inverted, B draws);
- ``scipy.stats.bootstrap`` over the same annotators: its observations are the
  annotators' (sum of d, count) for the data and the model cell of that length, passed
  as four paired arrays (``paired=True``), so scipy resamples annotators with everything
  they did, and the statistic takes the ratio of pooled means inside each resample
  (percentile interval, ``n_resamples`` = B, vectorised).

Prints time per replication (simulation, ours, scipy's), coverage of the truth with its
Monte Carlo error, mean interval width, and the ratios.

Run: ``python benchmarks/simulate.py [--replications 500] [--b 10000] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from datetime import date

import numpy as np
from scipy import stats

from app.results.exclusions import exclusion_mask
from app.simulate.crowd import Crowd, StandIn
from app.simulate.design import Design
from app.studytypes.nextword.simulation import estimate, simulate_judgments


def scipy_interval(j, keep, length: int, b: int, seed: int) -> tuple[float, float]:
    m = keep & ~j.attention & (j.length == length)
    ids, g = np.unique(j.annotator[m], return_inverse=True)
    cols = []
    for kind in (1, 0):  # model, then data
        sel = j.kind[m] == kind
        cols.append(np.bincount(g[sel], weights=j.d[m][sel], minlength=ids.size))
        cols.append(np.bincount(g[sel], minlength=ids.size).astype(float))

    def ratio(s_m, n_m, s_d, n_d, axis=-1):
        return (s_m.sum(axis) / n_m.sum(axis)) / (s_d.sum(axis) / n_d.sum(axis))

    res = stats.bootstrap(
        tuple(cols),
        ratio,
        paired=True,
        vectorized=True,
        n_resamples=b,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replications", type=int, default=500)
    ap.add_argument("--b", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    design = Design.simple(items_per_cell=3000)
    crowd = Crowd.parse("sampler")
    truth = 1.02
    stand_in = StandIn.calibrated(list(design.lengths), 3, ebc=truth, hetero=crowd.hetero)
    t_sim = t_ours = t_scipy = 0.0
    cover = {"ours": [], "scipy": []}
    width = {"ours": [], "scipy": []}
    n_j, n_eff = [], []
    for r in range(args.replications):
        t0 = time.perf_counter()
        j = simulate_judgments(design, crowd, stand_in, np.random.default_rng([args.seed, r]))
        keep, _ = exclusion_mask(j, design.exclusions)
        t1 = time.perf_counter()
        res = estimate(j, keep, b=args.b, seed=args.seed + r, level=0.95)
        t2 = time.perf_counter()
        scipy_ci = [scipy_interval(j, keep, ln, args.b, args.seed + r) for ln in design.lengths]
        t3 = time.perf_counter()
        t_sim, t_ours, t_scipy = t_sim + t1 - t0, t_ours + t2 - t1, t_scipy + t3 - t2
        n_j.append(len(j))
        n_eff.append(res.n_effective)
        for ln, (lo, hi) in zip(design.lengths, scipy_ci, strict=True):
            q = res.ebc(ln)
            cover["ours"].append(q.low <= truth <= q.high)
            cover["scipy"].append(lo <= truth <= hi)
            width["ours"].append(q.high - q.low)
            width["scipy"].append(hi - lo)
    r = args.replications
    print(
        f"simulate benchmark, {date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, python {platform.python_version()}"
    )
    print(
        f"R = {r} replications x 3 lengths; {np.mean(n_j):,.0f} judgments per study "
        f"(3,000 per cell + overlap + attention), effective annotators {np.mean(n_eff):.1f}; "
        f"B = {args.b}; true EB-C {truth}"
    )
    print(f"{'method':<44} {'s/replication':>13} {'coverage (±MC)':>17} {'mean width':>11}")
    rows = [
        ("ebc-judge default (wild cluster, annotator)", t_ours, "ours"),
        ("scipy.stats.bootstrap (percentile, annot.)", t_scipy, "scipy"),
    ]
    for label, t, key in rows:
        c = float(np.mean(cover[key]))
        mc = math.sqrt(c * (1 - c) / len(cover[key]))
        print(f"{label:<44} {t / r:>13.3f} {c:>9.3f} ± {mc:.3f} {np.mean(width[key]):>11.4f}")
    print(f"{'simulating one study':<44} {t_sim / r:>13.3f}")
    print(
        f"ratios: scipy time / ours {t_scipy / t_ours:.1f}x; "
        f"width scipy / ours {np.mean(width['scipy']) / np.mean(width['ours']):.3f}"
    )


if __name__ == "__main__":
    main()
