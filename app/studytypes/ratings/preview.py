"""Simulate before you pay, for a ratings study (issues 14 and 15): the study page's
section and `ebc simulate` on a study of `type = "ratings"`.

With this study's design (:meth:`Design.from_study`: lengths, pairs per cell, the HIT mix
and its attention pairs, ratings per pair, cap, exclusion rules) and its scale, simulated
raters (:mod:`app.studytypes.ratings.raters`: true mean quality and consistency after data and after
model prefixes, rater leniency, rater x kind effects, pair effects and noise, inattention)
rate the study R times (:func:`~app.studytypes.ratings.simulation.replicate_ratings`), each
replication through the ratings results' own functions, and
:func:`~app.studytypes.ratings.simulation.summarise_ratings` compares them with the exact truth.
The answer (:class:`RatingsPreview`) says, per length and step: what one simulated study
recovers (replication 1's gap and interval against the true gap), the mean gap and ratio
against the true ones, the share of the R studies whose interval covers each (with its
Monte Carlo SE), the power to find the gap (the share whose interval excludes 0), the
typical half-width; what the design needs (pairs per cell for a chosen half-width, and
for power 0.8: :func:`~app.studytypes.ratings.simulation.ratings_needs`); and what each channel
charges for it, a ratings assignment being one HIT of pairs paid per HIT, by the same
code as a next-word study's (the `price` a caller hands in: ``app.simulate.costs``).
Nothing is stored and no platform is asked.

The page's bounds are every type's (:data:`app.simulate.preview.PAGE_LIMITS`):
R <= 50, R x the estimated work of a replication
(:class:`~app.studytypes.ratings.simulation.RatingsWorkload`) <= 4 s, B = 2,000 (the secondary
interval's only resampling), stopping between replications once 5 s have passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.config import Settings
from app.models import StudyType
from app.simulate import preview as shared
from app.simulate.crowd import Crowd, CrowdSpecError
from app.simulate.design import VARIANTS, Design
from app.simulate.verdict import Verdict, covers, crowd_fact, crowd_factor, design_verdict, reaches
from app.studytypes.ratings.queries import scale_of
from app.studytypes.ratings.raters import RaterHeterogeneity, Raters
from app.studytypes.ratings.simulation import (
    DEFAULT_CONSISTENCY,
    DEFAULT_QUALITY,
    MOST_PAIRS,
    RatingsNeeds,
    RatingsRow,
    RatingsSummary,
    RatingsWorkload,
    raters_for,
    ratings_needs,
    replicate_ratings,
    summarise_ratings,
)
from app.validation import INT32_MAX, Line

LEVEL = 0.95  # the ratings results' default level
_HETERO = RaterHeterogeneity()
Mean = Annotated[float, Field(allow_inf_nan=False)]
Sd = Annotated[float, Field(ge=0, le=5, allow_inf_nan=False)]


class RatingsPreviewOptions(BaseModel):
    """What the researcher chooses for a ratings study: the raters' inattention (the crowd
    layers that apply to ratings: ``noisy:S``, ``fast:S``, ``spammers:S``), the true mean
    quality and consistency after data and after model prefixes, how raters and pairs
    differ (rating points), the half-width the gap's interval should reach, R, the seed,
    B and the channels to price."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    crowd: Line(200) = ""
    quality: tuple[Mean, Mean] = DEFAULT_QUALITY
    consistency: tuple[Mean, Mean] = DEFAULT_CONSISTENCY
    sd_rater: Sd = _HETERO.sd_rater
    sd_rater_kind: Sd = _HETERO.sd_rater_kind
    sd_pair: Sd = _HETERO.sd_pair
    sd_noise: Annotated[float, Field(gt=0, le=5, allow_inf_nan=False)] = _HETERO.sd_noise
    half_width: float = Field(0.1, gt=0, le=5, allow_inf_nan=False)
    replications: int = Field(20, ge=1, le=1_000_000)
    seed: int = Field(0, ge=0, le=INT32_MAX)
    b: int = Field(2_000, ge=100, le=1_000_000)
    providers: tuple[str, ...] = shared.CHANNELS

    @field_validator("quality", "consistency", mode="before")
    @classmethod
    def _two_means(cls, value: Any) -> Any:
        """``"3.4,3.1"`` (a form field, a CLI option): the mean after data prefixes, then
        after model prefixes."""
        if not isinstance(value, str):
            return value
        parts = [p.strip() for p in value.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                "two numbers, the true mean after data prefixes and after model prefixes "
                "(e.g. 3.4,3.1)"
            )
        return parts

    def with_limits(self, limits: shared.Limits) -> RatingsPreviewOptions:
        return self if limits.b is None else self.model_copy(update={"b": limits.b})

    def hetero(self) -> RaterHeterogeneity:
        return RaterHeterogeneity(
            sd_rater=self.sd_rater,
            sd_rater_kind=self.sd_rater_kind,
            sd_pair=self.sd_pair,
            sd_noise=self.sd_noise,
        )


# The page's form for a ratings study: its fields, as labelled there.
FORM_LABELS = {
    "crowd": "Inattention",
    "quality": "True mean quality (data, model)",
    "consistency": "True mean consistency (data, model)",
    "sd_rater": "Rater leniency sd",
    "sd_rater_kind": "Rater x kind sd",
    "sd_pair": "Pair sd",
    "sd_noise": "Rating noise sd",
    "half_width": "Target half-width of the gap",
    "replications": "Replications R",
    "seed": "Seed",
}


def options_from_form(
    values: Any, limits: shared.Limits = shared.PAGE_LIMITS
) -> RatingsPreviewOptions:
    """The ratings form as options, or a `PreviewError` with a message per field
    (:func:`app.simulate.preview.options_from_form`'s rules)."""
    return shared.options_from_form(values, limits, model=RatingsPreviewOptions, labels=FORM_LABELS)


def form_values(values: Any) -> dict[str, str]:
    """What the ratings form shows: the values given, the defaults for the others."""
    return shared.form_values(values, model=RatingsPreviewOptions, labels=FORM_LABELS)


def raters_crowd(spec: str) -> Crowd:
    """The inattention layers of a crowd description that apply to raters (``noisy``,
    ``fast``, ``spammers``; ``sampler`` is accepted and means nothing here); a
    `PreviewError` on ``crowd`` for the others."""
    try:
        crowd = Crowd.parse(spec)
    except CrowdSpecError as exc:
        raise shared.PreviewError(str(exc), "crowd") from None
    wrong = [
        n for n, on in (("oracle", crowd.base == "oracle"), ("position", crowd.position)) if on
    ]
    if wrong:
        raise shared.PreviewError(
            f"{' and '.join(wrong)} do not apply to raters: use noisy:SHARE, fast:SHARE, "
            "spammers:SHARE",
            "crowd",
        )
    return crowd


def describe_raters(crowd: Crowd) -> str:
    layers = [
        f"{n}:{getattr(crowd, n):g}" for n in ("noisy", "fast", "spammers") if getattr(crowd, n)
    ]
    return "attentive raters" + (f" with {','.join(layers)}" if layers else "")


@dataclass(frozen=True, kw_only=True)
class RatingsPreview(shared.PreviewRun):
    options: RatingsPreviewOptions
    crowd: str
    level: float
    rows: list[RatingsRow]
    needs: list[RatingsNeeds]
    raters: Raters
    summary: RatingsSummary
    assumptions: tuple[str, ...]
    workload: RatingsWorkload
    verdict: str = ""  # too small or enough, and what would be (:func:`ratings_verdict`)
    enough: bool = False  # the verdict's

    def row(self, variant: str, length: int, step: str) -> RatingsRow:
        return self.summary.row(variant, length, step)


def simulate_ratings_before_paying(
    study: Any,
    settings: Settings,
    options: RatingsPreviewOptions,
    *,
    limits: shared.Limits = shared.NO_LIMITS,
    price: shared.Price | None = None,
) -> RatingsPreview:
    """The preview of the ratings study `study` under `options`, within `limits`
    (module docstring). Bad options and designs raise `PreviewError` before any work."""
    crowd = raters_crowd(options.crowd)
    if study.study_type != StudyType.ratings:
        raise shared.PreviewError(f"study {study.slug!r} is not a ratings study: nothing to rate")
    frame = shared.PreviewFrame.of(study, options, limits)
    options, design = frame.options, frame.design
    scale_max, step = scale_of(study)
    for name in ("quality", "consistency"):
        if not all(0 < x < scale_max for x in getattr(options, name)):
            raise shared.PreviewError(
                f"{FORM_LABELS[name]}: each mean lies strictly between 0 and {scale_max} "
                f"(the study's scale), not {','.join(f'{x:g}' for x in getattr(options, name))}",
                name,
            )
    hetero = options.hetero()
    size = frame.size
    workload = RatingsWorkload.of(design, size.judgments, size.assignments, hetero, options.b)
    frame.check(workload)
    try:
        raters = raters_for(
            design,
            quality=options.quality,
            consistency=options.consistency,
            hetero=hetero,
            scale_max=scale_max,
            step=step,
            noisy=crowd.noisy,
            spammers=crowd.spammers,
        )
    except ValueError as exc:  # the options' bounds should leave nothing for here
        raise shared.PreviewError(str(exc)) from None
    reps = replicate_ratings(
        design,
        raters,
        replications=options.replications,
        seed=options.seed,
        b=options.b,
        level=LEVEL,
        fast=crowd.fast,
        deadline=shared.deadline(limits),
    )
    summary = summarise_ratings(design, raters, reps, level=LEVEL)
    needs = ratings_needs(design, raters, summary, half_width=options.half_width)
    said = ratings_verdict(
        study,
        summary,
        needs,
        size,
        price=(lambda grown: price(study, settings, grown, options.providers)) if price else None,
    )
    return RatingsPreview(
        verdict=said.text,
        enough=said.enough,
        crowd=describe_raters(crowd),
        level=LEVEL,
        rows=summary.rows,
        needs=needs,
        raters=raters,
        summary=summary,
        assumptions=_assumptions(options, crowd, raters, design),
        **frame.report(study, settings, price, done=len(reps), workload=workload),
    )


def ratings_verdict(
    study: Any,
    summary: RatingsSummary,
    needs: list[RatingsNeeds],
    size: shared.DesignSize,
    *,
    price: Any = None,
) -> Verdict:
    """The sentence that ends the preview (:mod:`app.simulate.verdict`'s rules). *Enough*,
    for the main variant (with exclusions): at every length and step the gap interval
    covers the true gap; where the true gap is not 0, the share of studies finding it
    reaches power 0.8; the gap's half-width is at most the one asked; and the studies
    have ``FEW_ANNOTATORS`` effective raters on average. *What would be enough*: the
    pairs per cell :func:`ratings_needs` gives for the half-width and the power (the
    largest over the steps), against the pairs now. `price(size)` prices the grown
    design on each channel."""
    rows = [r for r in summary.rows if r.variant == VARIANTS[0]]
    level = summary.level
    worst = min((r.gap_coverage for r in rows), default=math.nan)
    facts = [
        (
            all(covers(r.gap_coverage, r.gap_coverage_mc, level) for r in rows),
            f"the {level:.0%} gap intervals cover the true gap in {worst:.0%} of the simulated "
            f"studies at worst ({level:.0%} asked)",
        )
    ]
    powered = [r for r in rows if r.test == "power"]
    goal = needs[0].power if needs else 0.8
    if powered:
        weakest = min(r.reject for r in powered)
        facts.append(
            (
                all(reaches(r.reject, summary.replications, goal) for r in powered),
                f"they find the true gap with power {weakest:.2f} at worst ({goal:g} asked)",
            )
        )
    if needs:
        wide = max(n.half_width_now for n in needs)
        target = needs[0].target_half_width
        facts.append(
            (
                wide <= target,
                f"the gap's half-width is {wide:.3f} at worst ({target:g} asked)",
            )
        )
    effective = [r.mean_effective for r in rows if math.isfinite(r.mean_effective)]
    g = min(effective) if effective else math.nan
    facts.append(crowd_fact(g, "raters"))
    factor = crowd_factor(g)
    wanted = [n.pairs_for_half_width for n in needs if n.half_width_now > n.target_half_width] + [
        n.pairs_for_power for n in needs if n.step in {r.step for r in powered}
    ]
    pairs_now = needs[0].pairs_now if needs else 0
    found = [p for p in wanted if p is not None]
    if found and pairs_now:
        factor = max(factor if math.isfinite(factor) else 0.0, max(found) / pairs_now)
    planned = (
        f" (the simulated interval carried through the raters' variance components: "
        f"{max(found):,} pairs per cell for the half-width and power asked)"
        if found
        else ""
    )
    if None in wanted:
        planned += f" (no design up to {MOST_PAIRS:,} pairs per cell reaches all of it)"
    return design_verdict(
        study,
        size,
        facts,
        factor,
        annotators=summary.mean_annotators,
        who="raters",
        planned=planned,
        price=price,
    )


def _assumptions(
    options: RatingsPreviewOptions, crowd: Crowd, raters: Raters, design: Design
) -> tuple[str, ...]:
    h = raters.hetero
    (qd, qm), (cd, cm) = options.quality, options.consistency
    out = [
        "A simulation: no annotator, platform or payment was involved and nothing was stored.",
        f"Simulated raters: true mean quality {qd:g} after data prefixes and {qm:g} after "
        f"model prefixes, consistency {cd:g} and {cm:g}, at every length (population means "
        f"on the study's 0-{raters.scale_max} scale in steps of {raters.step:g}); raters "
        f"differ in leniency (sd {h.sd_rater:g}) and by prefix kind (sd "
        f"{h.sd_rater_kind:g}), pairs in how good they are (sd {h.sd_pair:g}), and each "
        f"rating has noise (sd {h.sd_noise:g}), in rating points; each rater wants a "
        f"heavy-tailed number of HITs (Pareto, tail {h.activity_tail:g}) under the cap of "
        f"{design.cap}; {design.replicas} ratings per pair.",
        f"Raters: {describe_raters(crowd)} (noisy: a share of ratings uniform over the "
        "scale; fast: the same, posted faster than the study's minimum time; spammers: a "
        "share of raters rate uniformly throughout, attention pairs included).",
        f"Interval: the ratings results' headline {LEVEL:.0%} interval, two-way (rater x "
        "pair); power: the share of the simulated studies whose gap interval excludes 0 "
        "(the size where the true gap is 0); ± is the Monte Carlo standard error. The "
        f"annotator-bootstrap column is the results' secondary interval (B = {options.b:,}), "
        "which treats the pairs as fixed.",
        "What the design needs: the simulated interval carried to more or fewer pairs per "
        "cell through the raters' variance components (rater x kind effects over the "
        "effective number of raters, which grows more slowly than the pairs while raters "
        "run out of HITs; pair effects over the pairs; noise over the ratings), the cap and "
        "ratings per pair kept; an approximation, worth a second simulation at that size.",
    ]
    overlap = round(design.overlap_share * design.hits_per_length)
    if overlap and design.overlap_replicas > design.replicas:
        out.append(
            f"The overlap HITs ({overlap} per length, each done by {design.overlap_replicas}) "
            f"are priced as such but simulated with {design.replicas} ratings per pair like "
            "the others."
        )
    out.append(
        "Costs: each platform's fee rules as this service knows them, for one assignment "
        "per HIT of pairs, not a quote; bonuses and VAT are not included."
    )
    return tuple(out)


def preview_text(preview: RatingsPreview) -> str:
    """The table of `ebc simulate` on a ratings study (plain text)."""
    summary, size, design, raters = preview.summary, preview.size, preview.design, preview.raters
    (qd, qm), (cd, cm) = preview.options.quality, preview.options.consistency
    mix = " + ".join(f"{n} {design.kinds[k]}" for k, n in sorted(design.mix.items()))
    lines = [
        f"SIMULATED raters ({preview.crowd}), {summary.replications} replications of this "
        f"study's design: {len(design.lengths)} lengths x {design.hits_per_length} HITs of "
        f"{mix} pairs and {design.attention} attention, {design.replicas} ratings per pair, "
        f"{size.assignments} assignments, {size.judgments:,} ratings, cap {design.cap} HITs "
        "per rater",
        f"true means on 0-{raters.scale_max} in steps of {raters.step:g}: quality {qd:g} "
        f"(data) {qm:g} (model), consistency {cd:g} (data) {cm:g} (model), at every length; "
        f"per study on average {summary.mean_ratings:,.0f} ratings, "
        f"{summary.mean_annotators:.0f} raters, {summary.mean_excluded:.0f} ratings excluded",
        f"interval: the ratings results' headline {summary.level:.0%} (two-way, rater x "
        "pair); power: share whose gap interval excludes 0 (size where the true gap is 0); "
        "boot: the secondary annotator-bootstrap interval's coverage of the true gap",
        "",
        f"{'variant':<20} {'l':>4} {'step':<11} {'true gap':>8} {'mean':>7} {'sd':>6} "
        f"{'coverage':>15} {'true ratio':>10} {'mean':>6} {'coverage':>15} "
        f"{'power/size':>15} {'half-w':>6} {'boot':>15}",
    ]
    for x in summary.rows:
        lines.append(
            f"{x.variant:<20} {x.length:>4} {x.step:<11} {x.true_gap:>8.4f} {x.mean_gap:>7.4f} "
            f"{x.sd_gap:>6.4f} {x.gap_coverage:>7.3f} ± {x.gap_coverage_mc:.3f} "
            f"{x.true_ratio:>10.4f} {x.mean_ratio:>6.4f} "
            f"{x.ratio_coverage:>7.3f} ± {x.ratio_coverage_mc:.3f} "
            f"{x.reject:>7.3f} ± {x.reject_mc:.3f} {x.half_width:>6.3f} "
            f"{x.boot_coverage:>7.3f} ± {x.boot_coverage_mc:.3f}"
        )
    lines.append("(gap: data - model, ratio: data / model, true and mean over the replications;")
    lines.append(" ± : Monte Carlo standard error over the replications)")
    one = [r for r in summary.rows if r.variant == "with exclusions"]
    lines.append(
        "one simulated study (replication 1, with exclusions): "
        + "; ".join(
            f"l={r.length} {r.step} gap {r.first_gap:.3f} [{r.first_low:.3f}, "
            f"{r.first_high:.3f}] (truth {r.true_gap:.3g})"
            for r in one
        )
    )
    lines.append("")
    if preview.needs:
        lines.append(
            f"what the design needs ({preview.needs[0].pairs_now} pairs per cell now; the "
            "simulated interval carried through the raters' variance components):"
        )
    for n in preview.needs:
        power = (
            f"{n.pairs_for_power:,} for power {n.power:g} at every length"
            if n.pairs_for_power is not None
            else "no power figure (the true gap is 0, or out of reach)"
        )
        width = (
            f"{n.pairs_for_half_width:,} pairs per cell"
            if n.pairs_for_half_width is not None
            else "more pairs per cell than it computes"
        )
        lines.append(
            f"  {n.step}: gap half-width {n.half_width_now:.3f} now; {width} for "
            f"{n.target_half_width:g}; {power}"
        )
    lines.append("")
    lines.append(preview.verdict)
    lines.append("")
    lines += shared.cost_lines(preview.costs)
    lines.append(f"{summary.seconds_per_replication * 1000:.0f} ms per replication")
    return "\n".join(lines) + "\n"


# -- the type's preview namespace (StudyTypePlugin.preview) ------------------------------

OPTIONS = RatingsPreviewOptions
TEMPLATE = "ratings/_simulate.html"
run = simulate_ratings_before_paying
text = preview_text


__all__ = [
    "FORM_LABELS",
    "LEVEL",
    "OPTIONS",
    "TEMPLATE",
    "RatingsPreview",
    "RatingsPreviewOptions",
    "describe_raters",
    "form_values",
    "options_from_form",
    "preview_text",
    "raters_crowd",
    "ratings_verdict",
    "run",
    "simulate_ratings_before_paying",
    "text",
]
