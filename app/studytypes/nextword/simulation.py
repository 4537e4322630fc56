"""Simulate a whole study with its own design, R times, through the results functions.

One replication (:func:`simulate_judgments`) lays out the study's HITs as
``app.hits.service.build_hits`` does (:mod:`app.simulate.design`: per length, as many HITs
as the scarcest kind of the mix allows, the mix plus the attention items in each; a share
``overlap_share`` of each length's HITs done by ``max(overlap_replicas, replicas)``
annotators, the others by ``replicas``), lets a simulated crowd (:mod:`app.simulate.crowd`)
with heavy-tailed activity take the assignments under the per-annotator cap (and the cell
share, when the study has one; never the same HIT twice), and writes the answers as the
:class:`~.queries.Judgments` columns :func:`~.results.compute_results` reads.
:func:`replicate` then runs the results' own steps on each replication (the study's
exclusion rules, :func:`~app.results.exclusions.exclusion_mask`, then
:func:`~app.results.stats.estimate_ebc` with the results' defaults: annotator clusters,
the wild interval, the headline test) and :func:`summarise` compares them with the truth
of the stand-in P_D: mean estimate and SE, the share of replications whose interval
covers the truth, and the share that reject EB-C = 1 at the target's alpha (the power
when the truth is the researcher's target EB-C, the size when it is 1).

Seeded and deterministic: replication ``r`` of seed ``s`` draws from
``numpy.random.default_rng([s, r])`` and resamples with seed ``s + r``.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np

from app.results.exclusions import exclusion_mask
from app.results.stats import DATA_KIND, EBCResults, PlanTarget, estimate_ebc
from app.simulate.crowd import Crowd, StandIn, answer
from app.simulate.design import VARIANTS, Design, Slots, assign_slots, by_variant, hit_layout
from app.simulate.preview import until
from app.studytypes.nextword.queries import Judgments


def simulate_judgments(
    design: Design, crowd: Crowd, stand_in: StandIn, rng: np.random.Generator
) -> Judgments:
    """One simulated study: its HITs, who did which, and every answer, as the columns
    the results functions read (module docstring)."""
    design.check()
    hetero = crowd.hetero
    k = design.top_k
    att = design.attention_code
    pos_kind, hit_length = hit_layout(design)
    per_hit = pos_kind.size
    n_len = len(design.lengths)
    n_per = design.hits_per_length
    replicas = np.full(hit_length.size, design.replicas, np.int64)
    n_overlap = round(design.overlap_share * n_per)
    for li in range(n_len):
        chosen = rng.choice(n_per, size=n_overlap, replace=False) + li * n_per
        replicas[chosen] = max(design.overlap_replicas, design.replicas)
    a_annot, a_hit, _looked = assign_slots(rng, design, hetero, hit_length, replicas)
    n_annot = int(a_annot.max()) + 1

    slots = Slots.of(design, a_annot, a_hit, pos_kind, hit_length)
    annotator, hit, item = slots.annotator, slots.hit, slots.item
    kind, length, attention = slots.kind, slots.length, slots.attention

    n_items = hit_length.size * per_hit
    n_kinds = len(design.kinds)
    mu = np.zeros((n_len, n_kinds))
    for li, ln in enumerate(design.lengths):
        for code in range(n_kinds):
            if code != att:
                mu[li, code] = stand_in.mu[(ln, code)]
    u = rng.normal(0.0, hetero.sd_annotator, n_annot)
    v = rng.normal(0.0, hetero.sd_annotator_kind, (n_annot, n_kinds))
    e = rng.normal(0.0, hetero.sd_item, n_items)
    spammer = rng.random(n_annot) < crowd.spammers
    li_of = {ln: i for i, ln in enumerate(design.lengths)}
    length_idx = np.vectorize(li_of.__getitem__, otypes=[np.int64])(hit_length)[hit]
    eta = mu[length_idx, kind] + u[annotator] + v[annotator, kind] + e[item]
    rank_at_slot = np.argsort(rng.random((n_items, k)), axis=1) + 1
    ans = answer(
        rng,
        crowd,
        stand_in,
        eta=eta,
        attention=attention,
        spammer=spammer[annotator],
        rank_at_slot=rank_at_slot[item],
    )
    n = eta.size
    client_ms = np.exp(rng.normal(math.log(4000.0), 0.5, n))
    if design.min_ms_per_item > 0:
        client_ms = np.where(ans.too_fast, rng.uniform(100.0, design.min_ms_per_item, n), client_ms)
    too_fast = client_ms < design.min_ms_per_item
    # Sanity figures only: where the true next word sits among a data prefix's choices.
    true_rank = np.where(
        kind == DATA_KIND,
        rng.choice(np.array([1, 2, 3, 4, 5, 0]), size=n, p=[0.3, 0.1, 0.06, 0.04, 0.03, 0.47]),
        np.where(attention, 1, 0),
    )
    true_rank = np.where(true_rank > k, 0, true_rank)  # past the top-k: not shown
    ids = np.arange(1, n_annot + 1, dtype=np.int64)
    return Judgments(
        kinds=list(design.kinds),
        d=(ans.choice != 1).astype(float),
        length=length,
        kind=kind,
        annotator=annotator + 1,
        hit=hit + 1,
        item=item + 1,
        option=ans.option,
        choice=ans.choice,
        client_ms=np.round(client_ms),
        too_fast=too_fast,
        attention=attention,
        true_rank=true_rank,
        **Judgments.simulated_annotators(ids),
    )


def estimate(j: Judgments, keep: np.ndarray, *, b: int, seed: int, level: float) -> EBCResults:
    """The results' main estimate (``app.results.service``: the default options) on the
    judgments in ``keep``, attention items aside."""
    return estimate_ebc(
        j.d,
        j.length,
        j.kind,
        j.annotator,
        j.hit,
        j.item,
        choice=j.choice,
        estimator="single",
        unit="auto",
        b=b,
        ci="wild",
        level=level,
        seed=seed,
        keep=keep & ~j.attention,
    )


@dataclass(frozen=True)
class Replica:
    """One replication's EB-C per length: ``rows[variant][length] = (estimate, se, low,
    high, p_value)``, the pooled test's p-value per variant, and its size."""

    rows: dict[str, dict[int, tuple[float, float, float, float, float]]]
    pooled_p: dict[str, float]
    n_judgments: int
    n_annotators: int
    n_effective: float
    excluded: int
    seconds: float


def run_replication(
    design: Design,
    crowd: Crowd,
    stand_in: StandIn,
    *,
    seed: int,
    r: int,
    b: int = 10_000,
    level: float = 0.95,
) -> Replica:
    started = time.perf_counter()
    rng = np.random.default_rng([seed, r])
    j = simulate_judgments(design, crowd, stand_in, rng)
    keep, _report = exclusion_mask(j, design.exclusions)

    def figures(mask: np.ndarray) -> tuple[dict[int, tuple], float, float]:
        """Per length the EB-C and its interval and p, the pooled p, G_eff."""
        res = estimate(j, mask, b=b, seed=seed + r, level=level)
        per_length = {}
        for ln in design.lengths:
            try:
                q = res.ebc(ln)
            except KeyError:
                continue
            per_length[ln] = (q.estimate, q.se, q.low, q.high, q.p_value)
        pooled = next((t.p_value for t in res.tests if t.length is None), math.nan)
        return per_length, pooled, res.n_effective

    got = by_variant(keep, j.attention, figures, ({}, math.nan, math.nan))
    rows = {variant: g[0] for variant, g in got.items()}
    pooled = {variant: g[1] for variant, g in got.items()}
    n_eff = got[VARIANTS[0]][2]
    return Replica(
        rows=rows,
        pooled_p=pooled,
        n_judgments=len(j),
        n_annotators=int(j.annotator_ids.size),
        n_effective=float(n_eff),
        excluded=int((~keep).sum()),
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class LengthSummary:
    """Over the replications, at one length, for one variant. ``coverage_mc`` and
    ``reject_mc`` are the Monte Carlo standard errors ``sqrt(p (1 - p) / R)``."""

    variant: str
    length: int
    truth: float
    mean_estimate: float
    sd_estimate: float
    mean_se: float
    coverage: float
    coverage_mc: float
    reject: float
    reject_mc: float
    replications: int


@dataclass(frozen=True)
class SimulationSummary:
    """What ``ebc simulate`` prints: per variant and length, and the pooled test."""

    crowd: str
    true_ebc: dict[int, float]
    cgd_data: dict[int, float]
    replications: int
    alpha: float
    level: float
    rows: list[LengthSummary]
    pooled_reject: dict[str, float]
    mean_judgments: float
    mean_annotators: float
    mean_effective: float
    mean_excluded: float
    seconds_per_replication: float

    def row(self, variant: str, length: int) -> LengthSummary:
        return next(x for x in self.rows if x.variant == variant and x.length == length)


def _mc(p: float, r: int) -> float:
    return math.sqrt(p * (1 - p) / r) if r else math.nan


def summarise(
    design: Design,
    stand_in: StandIn,
    crowd: Crowd,
    replicas: list[Replica],
    *,
    alpha: float,
    level: float,
) -> SimulationSummary:
    truth = {ln: stand_in.true_ebc(ln, crowd.base) for ln in design.lengths}
    rows = []
    for variant in VARIANTS:
        for ln in design.lengths:
            got = np.array([x.rows[variant][ln] for x in replicas if ln in x.rows[variant]])
            if got.size == 0:
                continue
            est, se, low, high, p = got.T
            covered = float(np.mean((low <= truth[ln]) & (truth[ln] <= high)))
            reject = float(np.mean(p < alpha))
            n = got.shape[0]
            rows.append(
                LengthSummary(
                    variant=variant,
                    length=ln,
                    truth=truth[ln],
                    mean_estimate=float(est.mean()),
                    sd_estimate=float(est.std(ddof=1)) if n > 1 else math.nan,
                    mean_se=float(np.nanmean(se)),
                    coverage=covered,
                    coverage_mc=_mc(covered, n),
                    reject=reject,
                    reject_mc=_mc(reject, n),
                    replications=n,
                )
            )
    pooled = {v: float(np.mean([x.pooled_p[v] < alpha for x in replicas])) for v in VARIANTS}
    return SimulationSummary(
        crowd=crowd.describe(),
        true_ebc=truth,
        cgd_data={ln: stand_in.cgd(ln, DATA_KIND, crowd.base) for ln in design.lengths},
        replications=len(replicas),
        alpha=alpha,
        level=level,
        rows=rows,
        pooled_reject=pooled,
        mean_judgments=float(np.mean([x.n_judgments for x in replicas])),
        mean_annotators=float(np.mean([x.n_annotators for x in replicas])),
        mean_effective=float(np.nanmean([x.n_effective for x in replicas])),
        mean_excluded=float(np.mean([x.excluded for x in replicas])),
        seconds_per_replication=float(np.mean([x.seconds for x in replicas])),
    )


def stand_in_for(
    design: Design,
    crowd: Crowd,
    *,
    true_ebc: float | None = None,
    cgd_data: float = 0.73,
    target: PlanTarget | None = None,
) -> StandIn:
    """The stand-in P_D whose population EB-C is ``true_ebc`` at every length (None: the
    target's EB-C, so the rejection rate is the power to detect it) and CGD(data)
    ``cgd_data``, for the crowd's honest behaviour."""
    target = target or PlanTarget()
    ebc = target.target_ebc if true_ebc is None else true_ebc
    if ebc is None:
        raise ValueError("no true EB-C: pass one or a target with target_ebc")
    return StandIn.calibrated(
        list(design.lengths),
        len(design.kinds),
        cgd_data=cgd_data,
        ebc=ebc,
        base=crowd.base,
        hetero=crowd.hetero,
        top_k=design.top_k,
    )


def replicate(
    design: Design,
    crowd: Crowd,
    stand_in: StandIn,
    *,
    replications: int,
    seed: int = 0,
    b: int = 10_000,
    level: float = 0.95,
    deadline: float | None = None,
) -> list[Replica]:
    """Replications ``0 .. replications - 1`` of seed ``seed`` (module docstring), within
    a ``deadline`` (:func:`app.simulate.preview.until`)."""
    one = functools.partial(run_replication, design, crowd, stand_in, seed=seed, b=b, level=level)
    return until(deadline, replications, lambda r: one(r=r))


def simulate_study(
    design: Design,
    crowd: Crowd,
    *,
    true_ebc: float | None = None,
    cgd_data: float = 0.73,
    replications: int = 200,
    seed: int = 0,
    b: int = 10_000,
    target: PlanTarget | None = None,
    stand_in: StandIn | None = None,
) -> SimulationSummary:
    """R replications of the study under ``crowd`` against :func:`stand_in_for`'s P_D (or
    an explicit ``stand_in``), summarised."""
    target = target or PlanTarget()
    if stand_in is None:
        stand_in = stand_in_for(design, crowd, true_ebc=true_ebc, cgd_data=cgd_data, target=target)
    level = 1.0 - target.alpha
    reps = replicate(
        design, crowd, stand_in, replications=replications, seed=seed, b=b, level=level
    )
    return summarise(design, stand_in, crowd, reps, alpha=target.alpha, level=level)


__all__ = [
    "LengthSummary",
    "Replica",
    "SimulationSummary",
    "estimate",
    "replicate",
    "run_replication",
    "simulate_judgments",
    "simulate_study",
    "stand_in_for",
    "summarise",
]
