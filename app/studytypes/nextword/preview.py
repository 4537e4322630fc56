"""Simulate before you pay (issue 14) for a next-word study: the study page's section and
`ebc simulate`.

With this study's design (:meth:`Design.from_study`: lengths, items per cell, HIT mix and
attention items, replicas, overlap, cap, cell share, exclusion rules), a simulated crowd
(:mod:`app.simulate.crowd`) does the study R times against a stand-in P_D whose EB-C is
known (:func:`~.simulation.stand_in_for`); each replication goes through the
results' own functions (:func:`~.simulation.replicate`) and
:func:`~.simulation.summarise` compares them with the truth. The answer
(:class:`Preview`) says, per length: what one simulated study recovers (x ± y against the
truth z: replication 1's estimate and SE), the share of the R studies whose default
interval covers the truth (p, with its Monte Carlo SE), the share rejecting EB-C = 1 (q:
the power to detect the target EB-C when the truth is the target, as by default); what
the design needs (HITs, assignments, judgments); and what each crowd channel charges for
it (the `price` a caller hands in: ``app.simulate.costs``). Nothing is stored and no
platform is asked: no network. The bounds of a request's work (`Limits`) and the form's
parsing are every type's: ``app.simulate.preview``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.config import Settings
from app.models import StudyType
from app.results.stats import PlanTarget
from app.results.stats.power import PAPER_CGD_DATA
from app.simulate import preview as shared
from app.simulate.crowd import Crowd, CrowdSpecError
from app.simulate.design import VARIANTS, Design
from app.simulate.workload import Workload
from app.studytypes.nextword.simulation import (
    SimulationSummary,
    replicate,
    stand_in_for,
    summarise,
)
from app.studytypes.nextword.verdict import verdict
from app.validation import INT32_MAX, Line

DEFAULT_TARGET = PlanTarget().target_ebc


class PreviewOptions(BaseModel):
    """What the researcher chooses: the crowd (`Crowd.parse`'s mix), the target EB-C, the
    simulated truth (None: the target, so the rejection rate is the power), CGD(data) of
    the stand-in, R, the seed, B, and which channels to price."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    crowd: Line(200) = "sampler"
    target_ebc: float = Field(DEFAULT_TARGET, gt=0, le=3, allow_inf_nan=False)
    true_ebc: float | None = Field(None, gt=0, le=3, allow_inf_nan=False)
    cgd_data: float = Field(PAPER_CGD_DATA, gt=0, lt=1, allow_inf_nan=False)
    replications: int = Field(20, ge=1, le=1_000_000)
    seed: int = Field(0, ge=0, le=INT32_MAX)
    b: int = Field(10_000, ge=100, le=1_000_000)
    providers: tuple[str, ...] = shared.CHANNELS

    def with_limits(self, limits: shared.Limits) -> PreviewOptions:
        return self if limits.b is None else self.model_copy(update={"b": limits.b})


# The page's form: its fields, as labelled there.
FORM_LABELS = {
    "crowd": "Crowd",
    "target_ebc": "Target EB-C",
    "true_ebc": "Simulated true EB-C",
    "cgd_data": "CGD(data)",
    "replications": "Replications R",
    "seed": "Seed",
}


@dataclass(frozen=True)
class PreviewRow:
    """One length, one variant (with or without the study's exclusions): replication 1's
    estimate ± SE and interval, against the truth; coverage and rejection rate over R with
    their Monte Carlo SEs."""

    variant: str
    length: int
    truth: float
    estimate: float
    se: float
    low: float
    high: float
    coverage: float
    coverage_mc: float
    rejection: float
    rejection_mc: float
    mean_estimate: float
    sd_estimate: float
    replications: int


@dataclass(frozen=True, kw_only=True)
class Preview(shared.PreviewRun):
    options: PreviewOptions
    crowd: str
    level: float
    alpha: float
    rejection: str  # "power", "size" or "rejects EB-C = 1": what the rejection rate is
    rows: list[PreviewRow]
    pooled_rejection: dict[str, float]
    summary: SimulationSummary
    assumptions: tuple[str, ...]
    workload: Workload
    verdict: str = ""  # too small or enough, and what would be (`verdict.verdict`)
    enough: bool = False  # the verdict's

    def row(self, variant: str, length: int) -> PreviewRow:
        return next(x for x in self.rows if x.variant == variant and x.length == length)


def simulate_before_paying(
    study: Any,
    settings: Settings,
    options: PreviewOptions,
    *,
    limits: shared.Limits = shared.NO_LIMITS,
    price: shared.Price | None = None,
) -> Preview:
    """The preview of `study` under `options`, within `limits` (module docstring); `price`
    prices the design on each channel (none by default)."""
    try:
        crowd = Crowd.parse(options.crowd)
    except CrowdSpecError as exc:
        raise shared.PreviewError(str(exc), "crowd") from None
    if study.study_type != StudyType.nextword:
        raise shared.PreviewError(
            f"study {study.slug!r} is a ratings study: app.studytypes.ratings.preview "
            "simulates its raters"
        )
    frame = shared.PreviewFrame.of(study, options, limits)
    options, design = frame.options, frame.design
    size = frame.size
    workload = Workload.of(design, size.judgments, size.assignments, crowd.hetero, options.b)
    frame.check(workload)
    target = PlanTarget(target_ebc=options.target_ebc)
    truth_field = "target_ebc" if options.true_ebc is None else "true_ebc"
    try:
        stand_in = stand_in_for(
            design, crowd, true_ebc=options.true_ebc, cgd_data=options.cgd_data, target=target
        )
    except ValueError as exc:
        raise shared.PreviewError(str(exc), truth_field) from None
    level = 1.0 - target.alpha
    reps = replicate(
        design,
        crowd,
        stand_in,
        replications=options.replications,
        seed=options.seed,
        b=options.b,
        level=level,
        deadline=shared.deadline(limits),
    )
    summary = summarise(design, stand_in, crowd, reps, alpha=target.alpha, level=level)
    rows = []
    for s in summary.rows:
        first = reps[0].rows[s.variant].get(s.length, (math.nan,) * 5)
        rows.append(
            PreviewRow(
                variant=s.variant,
                length=s.length,
                truth=s.truth,
                estimate=first[0],
                se=first[1],
                low=first[2],
                high=first[3],
                coverage=s.coverage,
                coverage_mc=s.coverage_mc,
                rejection=s.reject,
                rejection_mc=s.reject_mc,
                mean_estimate=s.mean_estimate,
                sd_estimate=s.sd_estimate,
                replications=s.replications,
            )
        )
    rejection = rejection_label(summary.true_ebc.values(), options.target_ebc)
    said = verdict(
        study,
        summary,
        size,
        target_ebc=options.target_ebc,
        cgd_data=options.cgd_data,
        rejection=rejection,
        price=(lambda grown: price(study, settings, grown, options.providers)) if price else None,
    )
    return Preview(
        verdict=said.text,
        enough=said.enough,
        crowd=crowd.describe(),
        level=level,
        alpha=target.alpha,
        rejection=rejection,
        rows=rows,
        pooled_rejection=summary.pooled_reject,
        summary=summary,
        assumptions=_assumptions(options, crowd, summary, design, rejection),
        **frame.report(study, settings, price, done=len(reps), workload=workload),
    )


def rejection_label(truths: Any, target_ebc: float) -> str:
    """What the share rejecting EB-C = 1 is: the size when the truth is 1, the power when
    it is the target, else just that share."""
    values = list(truths)
    if all(abs(x - 1.0) < 1e-12 for x in values):
        return "size"
    if all(abs(x - target_ebc) < 1e-12 for x in values):
        return "power"
    return "rejects EB-C = 1"


# -- what each channel charges -------------------------------------------------------------


def _assumptions(
    options: PreviewOptions,
    crowd: Crowd,
    summary: SimulationSummary,
    design: Design,
    rejection: str,
) -> tuple[str, ...]:
    h = crowd.hetero
    truth = sorted({round(x, 6) for x in summary.true_ebc.values()})
    return (
        "A simulation: no annotator, platform or payment was involved and nothing was stored.",
        f"Stand-in P_D: population CGD(data) {options.cgd_data:g} and EB-C "
        f"{', '.join(f'{x:g}' for x in truth)} at every length"
        + (" (the target)" if options.true_ebc is None else "")
        + f"; annotators differ in skill (sd {h.sd_annotator:g}) and by prefix kind "
        f"(sd {h.sd_annotator_kind:g}), prefixes in difficulty (sd {h.sd_item:g}), on the "
        f"logit scale; each annotator wants a heavy-tailed number of HITs (Pareto, tail "
        f"{h.activity_tail:g}) under the cap of {design.cap}.",
        f"Crowd: {crowd.describe()} (sampler: one draw from the person's next-word "
        "distribution; oracle: its most likely word; noisy/position/fast/spammers: "
        "inattention layered on top).",
        f"Interval: the results' default {summary.level:.0%} wild cluster bootstrap by "
        f"annotator (B = {options.b:,}); {rejection}: the share of the {summary.replications} "
        f"studies rejecting EB-C = 1 at alpha {summary.alpha:g}"
        + (f" when the truth is the target {options.target_ebc:g}" if rejection == "power" else "")
        + "; ± is the Monte Carlo standard error.",
        "Costs: each platform's fee rules as this service knows them, not a quote; bonuses "
        "and VAT are not included.",
    )


def preview_text(preview: Preview) -> str:
    """The table of `ebc simulate` (plain text)."""
    summary, size, design = preview.summary, preview.size, preview.design
    reject = preview.rejection
    lines = [
        f"SIMULATED crowd ({summary.crowd}), {summary.replications} replications of this "
        f"study's design: {len(design.lengths)} lengths x {design.hits_per_length} HITs, "
        f"{size.assignments} assignments, {size.judgments:,} judgments, cap {design.cap} HITs "
        "per annotator",
        f"stand-in P_D: population CGD(data) {_fmt(summary.cgd_data)}, true EB-C "
        f"{_fmt(summary.true_ebc)}; per study on average {summary.mean_judgments:,.0f} "
        f"judgments, {summary.mean_annotators:.0f} annotators (effective "
        f"{summary.mean_effective:.1f}), {summary.mean_excluded:.0f} judgments excluded",
        f"interval: the results' default {summary.level:.0%} (wild cluster by annotator); "
        f"{reject}: share rejecting EB-C = 1 at alpha {summary.alpha:g}"
        + (f" (target EB-C {preview.options.target_ebc:g})" if reject == "power" else ""),
        "",
        f"{'variant':<20} {'l':>4} {'truth':>7} {'mean est':>9} {'sd est':>7} {'mean SE':>8} "
        f"{'coverage':>15} {reject:>15}",
    ]
    for x in summary.rows:
        lines.append(
            f"{x.variant:<20} {x.length:>4} {x.truth:>7.4f} {x.mean_estimate:>9.4f} "
            f"{x.sd_estimate:>7.4f} {x.mean_se:>8.4f} "
            f"{x.coverage:>8.3f} ± {x.coverage_mc:.3f} {x.reject:>8.3f} ± {x.reject_mc:.3f}"
        )
    for variant, share in summary.pooled_reject.items():
        lines.append(f"pooled over lengths, {variant}: {reject} {share:.3f}")
    lines.append("(± : Monte Carlo standard error over the replications)")
    one = [r for r in preview.rows if r.variant == "with exclusions"]
    lines.append(
        "one simulated study (replication 1, with exclusions): "
        + "; ".join(
            f"l={r.length} {r.estimate:.4f} ± {r.se:.4f} (truth {r.truth:.4g})" for r in one
        )
    )
    lines.append("")
    lines.append(preview.verdict)
    lines.append("")
    lines += shared.cost_lines(preview.costs)
    lines.append(f"{summary.seconds_per_replication * 1000:.0f} ms per replication")
    return "\n".join(lines) + "\n"


def _fmt(values: dict[int, float]) -> str:
    distinct = {round(v, 6) for v in values.values()}
    if len(distinct) == 1:
        return f"{next(iter(values.values())):.4g}"
    return ", ".join(f"l={ln}: {v:.4g}" for ln, v in values.items())


def options_from_form(values: Any, limits: shared.Limits = shared.PAGE_LIMITS) -> PreviewOptions:
    """The page's form as options, or a `PreviewError` with a message per field
    (:func:`app.simulate.preview.options_from_form`'s rules)."""
    return shared.options_from_form(values, limits, model=PreviewOptions, labels=FORM_LABELS)


def form_values(values: Any) -> dict[str, str]:
    """What the form shows: the values given, the defaults for the others."""
    return shared.form_values(values, model=PreviewOptions, labels=FORM_LABELS)


__all__ = [
    "DEFAULT_TARGET",
    "FORM_LABELS",
    "OPTIONS",
    "TEMPLATE",
    "VARIANTS",
    "Preview",
    "PreviewOptions",
    "PreviewRow",
    "form_values",
    "options_from_form",
    "preview_text",
    "rejection_label",
    "run",
    "simulate_before_paying",
    "text",
]


# -- the type's preview namespace (StudyTypePlugin.preview) ------------------------------

OPTIONS = PreviewOptions
TEMPLATE = "nextword/_simulate.html"
run = simulate_before_paying
text = preview_text
