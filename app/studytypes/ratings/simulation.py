"""Simulate a ratings study with its own design, R times, through the ratings results.

The ratings counterpart of :mod:`app.studytypes.nextword.simulation` (issue 15: "simulate
before you pay" for the later paper's second protocol). One replication
(:func:`run_ratings_replication`) is :func:`~.raters.simulate_ratings` at the study's design
(lengths, pairs per cell, the HIT mix and its attention pairs, ratings per pair, cap;
heavy-tailed rater activity) under :class:`~.raters.Raters` with an exact truth, plus the
``fast`` layer (a share of ratings are uniform clicks posted faster than the study's
minimum time, so the ``too_fast`` rule sees them); then the results' own steps: the
study's exclusion rules (:func:`app.results.exclusions.exclusion_mask`, as
:func:`app.studytypes.ratings.results.compute_ratings` applies them) and the ratings statistics
with the results' defaults, with and without exclusions. The statistics are
:func:`app.results.stats.ratings.mean_ratings`: the cell means, gaps, ratios and trends of
:func:`~app.results.stats.ratings.ratings_results` with the same definitions, intervals
and seeds, without the agreement and the paper's runs (which the preview does not show,
and whose pair bootstrap is 10-60 times the rest of the work).

:func:`summarise_ratings` compares the replications with the truth, per variant, length
and step: the mean gap ``data - model`` and ratio ``data / model`` against the true ones
(:meth:`Raters.true_gap`, :meth:`Raters.true_ratio`), the share of replications whose
headline (two-way) interval covers each, with Monte Carlo SE ``sqrt(p (1 - p) / R)``;
the share whose gap interval excludes 0 (the power to find the true gap; the size when
the true gap is 0); the mean half-width of the gap interval; and the coverage of the
labelled secondary interval (the one-way annotator bootstrap), to show what treating
the pairs as fixed costs. :func:`ratings_needs` carries the simulated interval to the
pairs a design needs through the raters' variance components (:func:`gap_variance`).

Seeded and deterministic: replication ``r`` of seed ``s`` draws from
``numpy.random.default_rng([s, r])`` and the statistics use seed ``s + r``, as in
:mod:`app.studytypes.nextword.simulation`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

from app.results.exclusions import exclusion_mask
from app.results.stats import DATA_KIND, MODEL_KIND
from app.results.stats.ratings import STEPS, mean_ratings
from app.results.stats.ratings_columns import RatingColumns
from app.simulate.crowd import Heterogeneity
from app.simulate.design import VARIANTS, Design, by_variant
from app.simulate.preview import until
from app.simulate.workload import FAST_NS, SLOW_NS, expected_annotators
from app.studytypes.ratings.queries import Ratings
from app.studytypes.ratings.raters import (
    PAPER_CONSISTENCY,
    PAPER_QUALITY,
    RaterHeterogeneity,
    Raters,
)
from app.studytypes.ratings.raters import simulate_ratings as simulate_rating_columns

# True means (data, model) when none are chosen: Raters.paper_like's, the shape of the
# later paper's Table 3 (a continuation after a model prefix rated a little lower).
DEFAULT_QUALITY = PAPER_QUALITY
DEFAULT_CONSISTENCY = PAPER_CONSISTENCY


def raters_for(
    design: Design,
    *,
    quality: tuple[float, float] = DEFAULT_QUALITY,
    consistency: tuple[float, float] = DEFAULT_CONSISTENCY,
    hetero: RaterHeterogeneity | None = None,
    scale_max: int = 5,
    step: float = 0.5,
    noisy: float = 0.0,
    spammers: float = 0.0,
) -> Raters:
    """Raters whose true mean rating after data and after model prefixes is ``quality``
    and ``consistency`` (data, model) at every length of the design, on the study's scale
    (ValueError when a mean is not strictly inside the scale); a diagnostic kind of the
    HIT mix gets the data's (as the simulated raters over HTTP give it)."""
    targets: dict[tuple[int, int, str], float] = {}
    for length in design.lengths:
        for code in design.mix:
            which = 1 if code == MODEL_KIND else 0
            targets[(length, code, "quality")] = quality[which]
            targets[(length, code, "consistency")] = consistency[which]
    return Raters.calibrated(
        targets, hetero, scale_max=scale_max, step=step, noisy=noisy, spammers=spammers
    )


def simulate_study_ratings(
    design: Design, raters: Raters, rng: np.random.Generator, *, fast: float = 0.0
) -> Ratings:
    """One simulated ratings study as the results load it (:class:`Ratings`: the columns
    and what the exclusion rules read), every annotator simulated, none blocked.

    ``fast``: a share of all ratings (both steps of a pair at once) replaced by uniform
    clicks over the scale's points and, when the study has a minimum time per pair,
    flagged too fast."""
    cols = simulate_rating_columns(design, raters, rng)
    too_fast = np.zeros(cols.n, bool)
    if fast > 0:
        clicked = rng.random(cols.n) < fast
        points = raters.points()
        cols.quality = np.where(clicked, rng.choice(points, cols.n), cols.quality)
        cols.consistency = np.where(clicked, rng.choice(points, cols.n), cols.consistency)
        too_fast = clicked & (design.min_ms_per_item > 0)
    ids = np.unique(cols.annotator)
    base = {f.name: getattr(cols, f.name) for f in dataclasses.fields(RatingColumns)}
    return Ratings(
        **(base | {"too_fast": too_fast}),
        **Ratings.simulated_annotators(ids),
        annotator_simulated=np.ones(ids.size, bool),
    )


class Got(NamedTuple):
    """One replication's figures of one (length, step): the headline gap and ratio with
    their intervals, the secondary (annotator bootstrap) gap interval, the effective
    number of annotators behind the gap."""

    gap: float
    gap_low: float
    gap_high: float
    ratio: float
    ratio_low: float
    ratio_high: float
    boot_low: float
    boot_high: float
    effective: float


@dataclass(frozen=True)
class RatingsReplica:
    """One replication: ``rows[variant][(length, step)]``, its size and its time."""

    rows: dict[str, dict[tuple[int, str], Got]]
    n_ratings: int
    n_annotators: int
    excluded: int
    seconds: float


def run_ratings_replication(
    design: Design,
    raters: Raters,
    *,
    seed: int,
    r: int,
    b: int = 2000,
    level: float = 0.95,
    fast: float = 0.0,
) -> RatingsReplica:
    started = time.perf_counter()
    rng = np.random.default_rng([seed, r])
    ratings = simulate_study_ratings(design, raters, rng, fast=fast)
    keep, _report = exclusion_mask(ratings, design.exclusions)

    def figures(mask: np.ndarray) -> dict[tuple[int, str], Got]:
        """Per (length, step) the gap and ratio with their intervals, and G_eff."""
        res = mean_ratings(ratings.subset(mask), b=b, seed=seed + r, level=level)
        boot = {(c.length, c.step): c for c in res.secondary}
        return {
            (c.length, c.step): Got(
                c.gap,
                c.gap_low,
                c.gap_high,
                c.ratio,
                c.ratio_low,
                c.ratio_high,
                boot[(c.length, c.step)].gap_low,
                boot[(c.length, c.step)].gap_high,
                c.effective_annotators,
            )
            for c in res.contrasts
        }

    rows = by_variant(keep, ratings.attention, figures, {})
    return RatingsReplica(
        rows=rows,
        n_ratings=ratings.n,
        n_annotators=int(ratings.annotator_ids.size),
        excluded=int((~keep).sum()),
        seconds=time.perf_counter() - started,
    )


def replicate_ratings(
    design: Design,
    raters: Raters,
    *,
    replications: int,
    seed: int = 0,
    b: int = 2000,
    level: float = 0.95,
    fast: float = 0.0,
    deadline: float | None = None,
) -> list[RatingsReplica]:
    """Replications ``0 .. replications - 1`` of seed ``seed``, within a ``deadline``
    (:func:`app.simulate.preview.until`)."""
    one = functools.partial(
        run_ratings_replication, design, raters, seed=seed, b=b, level=level, fast=fast
    )
    return until(deadline, replications, lambda r: one(r=r))


@dataclass(frozen=True)
class RatingsRow:
    """Over the replications, one variant, length and step. The truth is the population's
    (:class:`Raters`); ``*_mc`` are Monte Carlo SEs ``sqrt(p (1 - p) / R)``; ``reject``
    is the share whose gap interval excludes 0 (``test``: "power" when the true gap is not
    0, "size" when it is); ``half_width`` the mean half-width of the gap interval;
    ``boot_coverage`` the secondary interval's coverage of the true gap; ``first_*``
    replication 1's gap and interval (one simulated study)."""

    variant: str
    length: int
    step: str
    true_data: float
    true_model: float
    true_gap: float
    true_ratio: float
    mean_gap: float
    sd_gap: float
    gap_coverage: float
    gap_coverage_mc: float
    mean_ratio: float
    sd_ratio: float
    ratio_coverage: float
    ratio_coverage_mc: float
    reject: float
    reject_mc: float
    test: str
    half_width: float
    boot_coverage: float
    boot_coverage_mc: float
    mean_effective: float
    first_gap: float
    first_low: float
    first_high: float
    first_ratio: float
    replications: int


@dataclass(frozen=True)
class RatingsSummary:
    replications: int
    level: float
    rows: list[RatingsRow]
    mean_ratings: float
    mean_annotators: float
    mean_excluded: float
    seconds_per_replication: float

    def row(self, variant: str, length: int, step: str) -> RatingsRow:
        return next(
            x for x in self.rows if (x.variant, x.length, x.step) == (variant, length, step)
        )


def _mc(p: float, r: int) -> float:
    return math.sqrt(p * (1 - p) / r) if r else math.nan


def _sd(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) if x.size > 1 else math.nan


def summarise_ratings(
    design: Design, raters: Raters, replicas: list[RatingsReplica], *, level: float
) -> RatingsSummary:
    rows = []
    for variant in VARIANTS:
        for ln in design.lengths:
            for step in STEPS:
                got = [
                    x.rows[variant][(ln, step)] for x in replicas if (ln, step) in x.rows[variant]
                ]
                if not got:
                    continue
                a = np.array(got, float)
                g = dict(zip(Got._fields, a.T, strict=True))
                gap, ratio = raters.true_gap(ln, step), raters.true_ratio(ln, step)
                n = a.shape[0]
                cover = float(np.mean((g["gap_low"] <= gap) & (gap <= g["gap_high"])))
                cover_r = float(np.mean((g["ratio_low"] <= ratio) & (ratio <= g["ratio_high"])))
                boot = float(np.mean((g["boot_low"] <= gap) & (gap <= g["boot_high"])))
                reject = float(np.mean((g["gap_low"] > 0) | (g["gap_high"] < 0)))
                first = replicas[0].rows[variant].get((ln, step))
                first = first or Got(*([math.nan] * len(Got._fields)))
                rows.append(
                    RatingsRow(
                        variant=variant,
                        length=ln,
                        step=step,
                        true_data=raters.truth(ln, DATA_KIND, step),
                        true_model=raters.truth(ln, MODEL_KIND, step),
                        true_gap=gap,
                        true_ratio=ratio,
                        mean_gap=float(g["gap"].mean()),
                        sd_gap=_sd(g["gap"]),
                        gap_coverage=cover,
                        gap_coverage_mc=_mc(cover, n),
                        mean_ratio=float(g["ratio"].mean()),
                        sd_ratio=_sd(g["ratio"]),
                        ratio_coverage=cover_r,
                        ratio_coverage_mc=_mc(cover_r, n),
                        reject=reject,
                        reject_mc=_mc(reject, n),
                        test="size" if abs(gap) < 1e-12 else "power",
                        half_width=float(np.nanmean((g["gap_high"] - g["gap_low"]) / 2)),
                        boot_coverage=boot,
                        boot_coverage_mc=_mc(boot, n),
                        mean_effective=float(np.nanmean(g["effective"])),
                        first_gap=first.gap,
                        first_low=first.gap_low,
                        first_high=first.gap_high,
                        first_ratio=first.ratio,
                        replications=n,
                    )
                )
    return RatingsSummary(
        replications=len(replicas),
        level=level,
        rows=rows,
        mean_ratings=float(np.mean([x.n_ratings for x in replicas])),
        mean_annotators=float(np.mean([x.n_annotators for x in replicas])),
        mean_excluded=float(np.mean([x.excluded for x in replicas])),
        seconds_per_replication=float(np.mean([x.seconds for x in replicas])),
    )


@dataclass(frozen=True)
class RatingsNeeds:
    """What the design needs, per step, from the simulation (with exclusions): the pairs
    per (length, kind) cell for a gap interval of half-width at most
    ``target_half_width`` at every length, and for power ``power`` to find the true gap
    at every length where it is not 0 (None where it is 0 at every length, or where no
    design up to ``MOST_PAIRS`` reaches it)."""

    step: str
    pairs_now: int
    half_width_now: float
    target_half_width: float
    pairs_for_half_width: int | None
    power: float
    pairs_for_power: int | None


MOST_PAIRS = 10_000_000  # pairs per cell past which "what the design needs" gives up
_MOST_TERMS = 100_000  # as app.simulate.workload: the activity sums are cut there


def activity_moments(
    design: Design, hetero: Heterogeneity, hits_per_length: int
) -> tuple[float, float]:
    """``E[m]`` and ``E[m^2]`` of the HITs one rater takes of the design with
    ``hits_per_length`` HITs at each length: each wants ``W = ceil(a (1 + X))``, X Lomax
    with tail ``t``, and takes ``m = min(W, M)``, ``M`` the cap (with a cell share, at
    most the share's HITs per length), and at most the HITs there are (never one twice).
    With ``P(W > k) = min(1, (a / k)^t)`` (``k >= 1``; 1 at ``k = 0``): ``E[m] = sum_(k <
    M) P(W > k)``, ``E[m^2] = sum_(k < M) (2k + 1) P(W > k)``. The queue's end is ignored (as in
    :func:`app.simulate.workload.expected_annotators`)."""
    most = min(design.cap, hits_per_length * len(design.lengths))
    if design.max_cell_share:
        share_cap = max(1, math.floor(design.max_cell_share * hits_per_length))
        most = min(most, share_cap * len(design.lengths))
    k = np.arange(0, max(1, min(most, _MOST_TERMS)), dtype=float)
    with np.errstate(divide="ignore"):
        wants_more = np.minimum(1.0, (hetero.activity_min / k) ** hetero.activity_tail)
    return float(wants_more.sum()), float(((2 * k + 1) * wants_more).sum())


def gap_variance(design: Design, raters: Raters, pairs: int) -> tuple[float, float]:
    """The variance of the gap at one length and step, on the latent scale, with
    ``pairs`` data and model pairs per cell and the rest of the design as it is, and the
    effective number of raters behind it::

        V = 2 (sd_rater_kind^2 / G_eff + sd_pair^2 / P + (sd_noise^2 + step^2 / 12) / (P k))

    (:mod:`app.studytypes.ratings.raters`: a rater's leniency cancels in the gap, as every HIT
    holds both kinds; the rater x kind effects average over the raters, weighted by
    their ratings; pair effects over the ``P`` pairs; noise and rounding over the ``P k``
    ratings, ``k`` per pair). ``G_eff = G E[m]^2 / (E[m^2] + E[m] (L - 1))``: Kish's
    effective number of raters at one of ``L`` lengths, ``G = assignments / E[m]`` raters
    taking ``m`` HITs each (:func:`activity_moments`) spread over the lengths at random
    (binomially)."""
    h = raters.hetero
    hits_per_length = max(1, math.ceil(pairs / design.mix[DATA_KIND]))
    n_len = len(design.lengths)
    mean_m, mean_m2 = activity_moments(design, h.activity(), hits_per_length)
    g = max(1.0, hits_per_length * n_len * design.replicas / mean_m)
    g_eff = g * mean_m**2 / (mean_m2 + mean_m * (n_len - 1))
    noise = (h.sd_noise**2 + raters.step**2 / 12) / (pairs * design.replicas)
    return 2 * (h.sd_rater_kind**2 / g_eff + h.sd_pair**2 / pairs + noise), g_eff


def _t(g_eff: float, level: float) -> float:
    return float(special.stdtrit(max(g_eff - 1.0, 1.0), 0.5 + level / 2))


def ratings_needs(
    design: Design,
    raters: Raters,
    summary: RatingsSummary,
    *,
    half_width: float,
    power: float = 0.8,
) -> list[RatingsNeeds]:
    """Pairs per cell for a target half-width ``h`` of the gap interval, and for a target
    power, per step, at every length (the largest over the lengths).

    Per length and step the simulation gives the mean half-width ``w`` and effective
    raters ``G_eff`` at ``n`` pairs per cell now, so the gap's SE ``w / t_(G_eff - 1)``;
    :func:`gap_variance` says how the variance changes with the pairs (pairs, ratings and
    raters grow together, the raters sub-linearly while their heavy-tailed activity is
    cut by the HITs there are), and ``c = SE^2 / V(n)`` carries what it leaves out
    (rounding at the scale's ends, inattention, exclusions). The pairs ``n'`` needed are
    the fewest whole HITs' worth with ``t_(G_eff(n') - 1) sqrt(c V(n')) <= h``, and for
    power, with ``D`` the true gap, ``(t_(G_eff(n') - 1) + z_power) sqrt(c V(n')) <=
    |D|`` (``t`` the interval's quantile, ``z_power`` the normal one). An approximation
    to check with a simulation at that size."""
    variant = VARIANTS[0]
    per_hit = design.mix[DATA_KIND]
    pairs_now = design.hits_per_length * per_hit
    z_power = float(special.ndtri(power))

    @functools.cache
    def variance(pairs: int) -> tuple[float, float]:
        return gap_variance(design, raters, pairs)

    v_now, _ = variance(pairs_now)

    def fewest(ok) -> int | None:
        """The fewest pairs, in whole HITs, for which ``ok(pairs)`` holds (monotone)."""
        hi = per_hit
        while not ok(hi):
            hi *= 2
            if hi > MOST_PAIRS:
                return None
        lo = max(per_hit, hi // 2)
        if ok(lo):
            return lo
        while hi - lo > per_hit:  # ok(hi), not ok(lo)
            mid = (lo + hi) // 2 // per_hit * per_hit
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    out = []
    for step in STEPS:
        rows = [
            r
            for r in summary.rows
            if r.variant == variant
            and r.step == step
            and math.isfinite(r.half_width)
            and math.isfinite(r.mean_effective)
        ]
        if not rows:
            continue
        for_width: list[int | None] = []
        for_power: list[int | None] = []
        for r in rows:
            c = (r.half_width / _t(r.mean_effective, summary.level)) ** 2 / v_now

            def narrow(p: int, c: float = c) -> bool:
                v, g_eff = variance(p)
                return _t(g_eff, summary.level) * math.sqrt(c * v) <= half_width

            def strong(p: int, c: float = c, gap: float = r.true_gap) -> bool:
                v, g_eff = variance(p)
                return (_t(g_eff, summary.level) + z_power) * math.sqrt(c * v) <= abs(gap)

            for_width.append(fewest(narrow))
            if abs(r.true_gap) >= 1e-12:
                for_power.append(fewest(strong))
        out.append(
            RatingsNeeds(
                step=step,
                pairs_now=pairs_now,
                half_width_now=max(r.half_width for r in rows),
                target_half_width=half_width,
                pairs_for_half_width=None if None in for_width else max(for_width),
                power=power,
                pairs_for_power=None if not for_power or None in for_power else max(for_power),
            )
        )
    return out


# -- how much work one replication is ------------------------------------------------------

FIXED_NS = 8_000_000  # a replication's own overhead: its rater draws, masks and tables
RATING_NS = 4_000  # simulating one rating (both steps), its exclusions and its subsets
CELL_NS = 300_000  # a cell's mean, counts and interval, per variant and step
JACK_NS = 50  # the two-way jackknife, per rating x (quantity + cell), variant and step
QUANTILE_NS = 200  # the bootstrap's percentile interval, per draw x quantity, variant and step
_IN_CACHE = 1 << 18  # as app.simulate.workload: float64 entries in a core's 2 MiB cache


@dataclass(frozen=True)
class RatingsWorkload:
    """One replication of a ratings design, as the page's limits see it: its ratings, its
    cells (length x kind x step), the expected annotators G, and the estimated work ``ns``
    (nanoseconds of this service's two-core machine)::

        ns = FIXED_NS + RATING_NS n
             + 4 (CELL_NS J + JACK_NS n (K + J) + B (c 2 J G + QUANTILE_NS K))

    for ``n`` ratings, ``J`` cells of a step (lengths x kinds of the mix), ``K = J + 2 L
    (+ 2 with two lengths or more)`` quantities (means, gaps, log ratios, trends), 4 =
    2 variants x 2 steps. The headline (two-way) interval resamples nothing: its three
    jackknifes cost ``n (K + J)``; the secondary annotator bootstrap multiplies B draws
    into the ``G x 2J`` totals at ``c`` per multiply-add, ``FAST_NS`` while they fit a
    core's cache, ``SLOW_NS`` past it (:mod:`app.simulate.workload`, where one draw at a
    time streams them from memory: a cap of 1 HIT, 20,000 raters, ~34 s). Measured on
    that machine over 171 designs (1-40 lengths, 10-2,000 pairs per cell, caps 1-200, 1
    or 5 ratings per pair, B = 200 or 2,000): the time taken was at most 1.3 times the
    estimate, and well under it for most designs."""

    ratings: int
    cells: int
    annotators: float
    ns: float

    @classmethod
    def of(
        cls, design: Design, ratings: int, assignments: int, hetero: RaterHeterogeneity, b: int
    ) -> RatingsWorkload:
        g = expected_annotators(design, assignments, hetero.activity())
        n_len = len(design.lengths)
        j = n_len * len(design.mix)
        k = j + 2 * n_len + (2 if n_len >= 2 else 0)
        per = FAST_NS if g * 2 * j <= _IN_CACHE else SLOW_NS
        boot = b * (per * 2 * j * g + QUANTILE_NS * k)
        per_fit = CELL_NS * j + JACK_NS * ratings * (k + j) + boot
        ns = FIXED_NS + RATING_NS * ratings + 2 * len(STEPS) * per_fit
        return cls(ratings, j * len(STEPS), g, ns)

    def describe(self) -> str:
        return (
            f"{self.ratings:,} ratings in {self.cells:,} cells by about "
            f"{self.annotators:,.0f} raters, an estimated {self.ns / 1e9:.2g} s of work"
        )


__all__ = [
    "DEFAULT_CONSISTENCY",
    "DEFAULT_QUALITY",
    "MOST_PAIRS",
    "Got",
    "RatingsNeeds",
    "RatingsReplica",
    "RatingsRow",
    "RatingsSummary",
    "RatingsWorkload",
    "activity_moments",
    "gap_variance",
    "raters_for",
    "ratings_needs",
    "replicate_ratings",
    "run_ratings_replication",
    "simulate_study_ratings",
    "summarise_ratings",
]
