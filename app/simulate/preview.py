"""Simulate before you pay (issue 14): one service for the study page and `ebc simulate`.

With this study's design (:meth:`Design.from_study`: lengths, items per cell, HIT mix and
attention items, replicas, overlap, cap, cell share, exclusion rules), a simulated crowd
(:mod:`app.simulate.crowd`) does the study R times against a stand-in P_D whose EB-C is
known (:func:`~app.simulate.study.stand_in_for`); each replication goes through the
results' own functions (:func:`~app.simulate.study.replicate`) and
:func:`~app.simulate.study.summarise` compares them with the truth. The answer
(:class:`Preview`) says, per length: what one simulated study recovers (x ± y against the
truth z: replication 1's estimate and SE), the share of the R studies whose default
interval covers the truth (p, with its Monte Carlo SE), the share rejecting EB-C = 1 (q:
the power to detect the target EB-C when the truth is the target, as by default); what
the design needs (HITs, assignments, judgments); and what each crowd channel charges for
it, by that channel's own fee rule (`Platform.price` of `app.crowd.registry`: no fee for
invite links), grouped by replicas as
`app.crowd.postings.price_groups` prices a study's HITs. Nothing is stored and no
platform is asked: no network.

`Limits` bound a request's work: the page allows R <= 50 and R x the estimated work of a
replication (`app.simulate.workload`: judgments, and bootstrap draws x annotators x
ratios) <= 4 s, uses B = 2,000 draws, and stops between replications once 5 s have
passed, reporting those done (`Preview.stopped`); the CLI has no limit.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.config import Settings
from app.crowd.base import CostEstimate, PostingSpec, Qualifications
from app.crowd.common import study_qualifications
from app.crowd.postings import price_groups
from app.crowd.registry import PLATFORMS
from app.models import StudyType
from app.results.stats import PlanTarget
from app.results.stats.power import PAPER_CGD_DATA
from app.simulate.crowd import Crowd, CrowdSpecError
from app.simulate.study import (
    VARIANTS,
    Design,
    SimulationSummary,
    replicate,
    stand_in_for,
    summarise,
)
from app.simulate.workload import Workload
from app.validation import INT32_MAX, BadInput, Line, check_text

CHANNELS = tuple(PLATFORMS)
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
    providers: tuple[str, ...] = CHANNELS

    def with_limits(self, limits: Limits) -> PreviewOptions:
        return self if limits.b is None else self.model_copy(update={"b": limits.b})


@dataclass(frozen=True)
class Limits:
    """The most work one call may do: replications; replications x the estimated work of
    one (`max_work`, nanoseconds: `app.simulate.workload.Workload`); the bootstrap
    draws it uses; and `seconds`, a wall-clock budget checked between replications (past
    it, the figures are over the replications done so far)."""

    max_replications: int | None = None
    max_work: float | None = None
    b: int | None = None
    seconds: float | None = None


PAGE_LIMITS = Limits(max_replications=50, max_work=4e9, b=2_000, seconds=5.0)
NO_LIMITS = Limits()


class PreviewError(ValueError):
    """Options or a study that cannot be simulated; `errors` maps each option at fault
    to its message ("form" when it is the study's design or no one option)."""

    def __init__(
        self, message: str, field: str | None = None, errors: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or {field or "form": message}


# The page's form: its fields, as labelled there.
FORM_LABELS = {
    "crowd": "Crowd",
    "target_ebc": "Target EB-C",
    "true_ebc": "Simulated true EB-C",
    "cgd_data": "CGD(data)",
    "replications": "Replications R",
    "seed": "Seed",
}


def options_from_form(
    values: Mapping[str, str],
    limits: Limits = PAGE_LIMITS,
    *,
    model: type[BaseModel] = PreviewOptions,
    labels: Mapping[str, str] = FORM_LABELS,
) -> Any:
    """The page's form (text fields; empty means the default) as options (`model`, whose
    form fields are `labels`; a ratings study's are `app.simulate.ratings_preview`'s), or
    a `PreviewError` with a message per field; R above the page's limit is refused with
    the limit and the CLI's way around it."""
    given = {k: v.strip() for k, v in values.items() if k in labels and v.strip()}
    most, digits = limits.max_replications, given.get("replications", "")
    # str.isdigit alone takes "²", which int() refuses: ASCII digits only; and the length
    # first, since int() refuses a string of more than 4,300 digits.
    number = digits.isascii() and digits.isdigit()
    if most is not None and number and (len(digits) > 9 or int(digits) > most):
        raise PreviewError(
            f"{labels['replications']}: at most {most} here; "
            "`ebc simulate STUDY --replications R` has no limit",
            "replications",
        )
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for e in exc.errors():
            field = str(e["loc"][0]) if e["loc"] else "form"
            errors.setdefault(field, f"{labels.get(field, field)}: {e['msg']}")
        raise PreviewError("; ".join(errors.values()), errors=errors) from None


def form_values(
    values: Mapping[str, str],
    *,
    model: type[BaseModel] = PreviewOptions,
    labels: Mapping[str, str] = FORM_LABELS,
) -> dict[str, str]:
    """What the form shows: the values given, the defaults for the others (a default
    that is a tuple, as a ratings study's true means, shown comma-separated)."""
    defaults = model()

    def shown(value: Any) -> str:
        if value is None:
            return ""
        return ",".join(f"{x:g}" for x in value) if isinstance(value, tuple) else str(value)

    out = {k: shown(getattr(defaults, k)) for k in labels}
    return out | {k: v for k, v in values.items() if k in labels and _showable(v)}


def _showable(value: str) -> bool:
    """A value the form may show again (one short line; a refused one is shown empty)."""
    try:
        check_text(value, max_length=200)
    except BadInput:
        return False
    return True


@dataclass(frozen=True)
class DesignSize:
    """What the design asks for, as `build_hits` lays it out: HITs grouped as
    `(replicas, HITs)`, assignments (HIT replica slots), judgments (every position of
    every assignment, attention items included) and judgments per (length, kind) cell."""

    groups: tuple[tuple[int, int], ...]
    hits: int
    assignments: int
    judgments: int
    judgments_per_cell: dict[str, int]

    @classmethod
    def of(cls, design: Design) -> DesignSize:
        per_length = design.hits_per_length
        overlap = round(design.overlap_share * per_length)
        wide = max(design.overlap_replicas, design.replicas)
        n_len = len(design.lengths)
        count: Counter[int] = Counter()
        count[design.replicas] += (per_length - overlap) * n_len
        count[wide] += overlap * n_len
        groups = tuple(sorted((r, n) for r, n in count.items() if n))
        assignments = sum(r * n for r, n in groups)
        per_length_assignments = assignments // n_len
        return cls(
            groups=groups,
            hits=per_length * n_len,
            assignments=assignments,
            judgments=assignments * design.per_hit,
            judgments_per_cell={
                design.kinds[code]: per_length_assignments * n for code, n in design.mix.items()
            },
        )


@dataclass(frozen=True)
class ChannelCost:
    """A channel's estimate for the design's assignments (None, with `problem`, when it
    cannot be priced); `enabled`: the study takes people through it now."""

    provider: str
    environment: str
    enabled: bool
    assignments: int
    estimate: CostEstimate | None
    problem: str | None = None
    notes: tuple[str, ...] = ()


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


@dataclass(frozen=True)
class Preview:
    options: PreviewOptions
    crowd: str
    level: float
    alpha: float
    rejection: str  # "power", "size" or "rejects EB-C = 1": what the rejection rate is
    rows: list[PreviewRow]
    pooled_rejection: dict[str, float]
    design: Design
    size: DesignSize
    costs: list[ChannelCost]
    summary: SimulationSummary
    assumptions: tuple[str, ...]
    seconds: float
    workload: Workload
    stopped: str | None = None  # why fewer than the R asked were done

    def row(self, variant: str, length: int) -> PreviewRow:
        return next(x for x in self.rows if x.variant == variant and x.length == length)


def simulate_before_paying(
    study: Any, settings: Settings, options: PreviewOptions, *, limits: Limits = NO_LIMITS
) -> Preview:
    """The preview of `study` under `options`, within `limits` (module docstring)."""
    started = time.perf_counter()
    options = options.with_limits(limits)
    try:
        crowd = Crowd.parse(options.crowd)
    except CrowdSpecError as exc:
        raise PreviewError(str(exc), "crowd") from None
    check_channels(options.providers)
    if study.study_type == StudyType.ratings:
        raise PreviewError(
            f"study {study.slug!r} is a ratings study: app.simulate.ratings_preview "
            "simulates its raters"
        )
    design = study_design(study)
    size = DesignSize.of(design)
    workload = Workload.of(design, size.judgments, size.assignments, crowd.hetero, options.b)
    check_limits(options.replications, workload, limits)
    target = PlanTarget(target_ebc=options.target_ebc)
    truth_field = "target_ebc" if options.true_ebc is None else "true_ebc"
    try:
        stand_in = stand_in_for(
            design, crowd, true_ebc=options.true_ebc, cgd_data=options.cgd_data, target=target
        )
    except ValueError as exc:
        raise PreviewError(str(exc), truth_field) from None
    level = 1.0 - target.alpha
    reps = replicate(
        design,
        crowd,
        stand_in,
        replications=options.replications,
        seed=options.seed,
        b=options.b,
        level=level,
        deadline=deadline(limits),
    )
    stopped = stopped_note(len(reps), options.replications, limits)
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
    return Preview(
        options=options,
        crowd=crowd.describe(),
        level=level,
        alpha=target.alpha,
        rejection=rejection,
        rows=rows,
        pooled_rejection=summary.pooled_reject,
        design=design,
        size=size,
        costs=channel_costs(study, settings, size, options.providers),
        summary=summary,
        assumptions=_assumptions(options, crowd, summary, design, rejection),
        seconds=time.perf_counter() - started,
        workload=workload,
        stopped=stopped,
    )


def max_replications(work: Workload, limits: Limits) -> int | None:
    """The most replications `limits` allow for a design whose replication is `work`
    (None: no bound)."""
    bounds = [x for x in (limits.max_replications,) if x is not None]
    if limits.max_work is not None:
        bounds.append(math.floor(limits.max_work / max(work.ns, 1.0)))
    return min(bounds) if bounds else None


def check_channels(providers: tuple[str, ...] | list[str]) -> None:
    """A `PreviewError` naming the first of `providers` that is not a channel."""
    unknown = [p for p in providers if p not in CHANNELS]
    if unknown:
        raise PreviewError(f"unknown channel {unknown[0]!r}: one of {', '.join(CHANNELS)}")


def study_design(study: Any) -> Design:
    """`study`'s design, checked, or a `PreviewError` saying what is wrong with it."""
    try:
        design = Design.from_study(study)
        design.check()
    except ValueError as exc:
        raise PreviewError(f"study {study.slug!r}: {exc}") from None
    return design


def deadline(limits: Limits) -> float | None:
    """When a run within `limits` stops (``time.monotonic()``), None: never."""
    return None if limits.seconds is None else time.monotonic() + limits.seconds


def stopped_note(done: int, asked: int, limits: Limits) -> str | None:
    """What the page says when the time budget of `limits` stopped a run after `done` of
    the `asked` replications; None when all were done."""
    if done >= asked:
        return None
    return (
        f"Stopped after {done} of the {asked} replications asked: "
        f"the time budget here ({limits.seconds:g} s) ran out, so every figure is over "
        f"the {done} done so far (as the first {done} of a full run give them). "
        f"`ebc simulate STUDY --replications {asked}` has no limit."
    )


def check_limits(replications: int, work: Workload, limits: Limits) -> None:
    """A `PreviewError` when `replications` of `work` (a `Workload`, or any estimate with
    `ns` and `describe()`, as a ratings study's) exceed `limits`."""
    most = max_replications(work, limits)
    if most is None or replications <= most:
        return
    if most < 1:
        raise PreviewError(
            f"one simulated study of this design is {work.describe()}: too much to "
            "simulate here; run `ebc simulate STUDY` (no limit)",
            "replications",
        )
    raise PreviewError(
        f"at most {most} replications here for this design (one simulated study is "
        f"{work.describe()}); `ebc simulate STUDY --replications R` has no limit",
        "replications",
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


def channel_costs(
    study: Any, settings: Settings, size: DesignSize, providers: tuple[str, ...] = CHANNELS
) -> list[ChannelCost]:
    """Each channel's estimate for the design's HITs, by its platform's fee rule
    (`Platform.price`: no call to any platform). The study's reward (`payment.reward_cents`)
    per assignment; the environment and qualifications as the study file sets them
    (`Platform.study_environment`: MTurk's sandbox, `channels.mturk`); Prolific at
    `EBC_PROLIFIC_FEE_RATE`, one HIT per place; local: no fee."""
    out = []
    for name in providers:
        platform = PLATFORMS[name]
        spec = _spec(study, name)
        notes: list[str] = []
        environment = platform.study_environment(study)
        enabled = platform.enabled(study)
        price = platform.price(settings, spec)
        if environment == "sandbox":
            notes.append("sandbox: no money moves; production charges this for the same HITs")
        if spec.reward_cents < 1 and platform.caps.remote:
            out.append(
                ChannelCost(
                    name,
                    environment,
                    enabled,
                    size.assignments,
                    None,
                    problem="no reward set (payment.reward_cents): a platform needs one",
                )
            )
            continue
        estimate = price_groups(name, price, size.groups)
        out.append(
            ChannelCost(
                name,
                environment,
                enabled,
                size.assignments,
                estimate,
                notes=(*estimate.notes, *notes),
            )
        )
    return out


def _spec(study: Any, provider: str) -> PostingSpec:
    """What pricing reads of a posting: the reward and (MTurk) Masters; the rest is what
    publishing would fill in and does not change a price."""
    masters = bool(study_qualifications(study, provider).get("masters"))
    return PostingSpec(
        study_slug=study.slug,
        title=study.title,
        description="",
        reward_cents=int(study.reward_cents or 0),
        assignment_seconds=int(study.lease_seconds),
        lifetime_seconds=0,
        auto_approve_seconds=0,
        qualifications=Qualifications(masters=masters),
    )


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


__all__ = [
    "CHANNELS",
    "FORM_LABELS",
    "NO_LIMITS",
    "PAGE_LIMITS",
    "VARIANTS",
    "ChannelCost",
    "DesignSize",
    "Limits",
    "Preview",
    "PreviewError",
    "PreviewOptions",
    "PreviewRow",
    "channel_costs",
    "check_channels",
    "check_limits",
    "deadline",
    "form_values",
    "max_replications",
    "options_from_form",
    "rejection_label",
    "simulate_before_paying",
    "stopped_note",
    "study_design",
]
