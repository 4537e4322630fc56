"""Simulate before you pay (issues 14 and 15): what every study type's preview shares.

Each type simulates its own crowd on its own design (a next-word study's stand-in P_D:
``app.studytypes.nextword.preview``; a ratings study's raters:
``app.studytypes.ratings.preview``); they share what bounds a request's work
(:class:`Limits`: the page allows R <= 50 and R x the estimated work of a replication
(``app.simulate.workload``: answers, and bootstrap draws x annotators x figures) <= 4 s,
uses B = 2,000 draws, and stops between replications once 5 s have passed, reporting
those done; the CLI has no limit), the form's parsing (:func:`options_from_form`,
:func:`form_values`), what the design asks for (:class:`DesignSize`) and what each
channel charges for it (:class:`ChannelCost`, priced by ``app.simulate.costs``). Nothing
is stored and no platform is asked: no network.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.crowd.base import CostEstimate
from app.crowd.registry import PLATFORMS
from app.simulate.design import Design
from app.simulate.workload import Workload
from app.validation import BadInput, check_text

CHANNELS = tuple(PLATFORMS)
T = TypeVar("T")


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


def options_from_form(
    values: Mapping[str, str],
    limits: Limits = PAGE_LIMITS,
    *,
    model: type[BaseModel],
    labels: Mapping[str, str],
) -> Any:
    """The page's form (text fields; empty means the default) as options (`model`, whose
    form fields are `labels`: each study type's own), or
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
    model: type[BaseModel],
    labels: Mapping[str, str],
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


def until(deadline_at: float | None, replications: int, one: Callable[[int], T]) -> list[T]:
    """``one(r)`` for the replications ``r = 0 .. replications - 1``; with a deadline
    (a ``time.monotonic()`` value, :func:`deadline`) only those begun before it (at least
    one): a replication is never cut, so those done are the same as without one."""
    out: list[T] = []
    for r in range(replications):
        if out and deadline_at is not None and time.monotonic() >= deadline_at:
            break
        out.append(one(r))
    return out


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


Price = Callable[[Any, Any, DesignSize, tuple[str, ...]], list[ChannelCost]]
"""What each channel charges for a design: (study, settings, size, channels) -> costs
(``app.simulate.costs.channel_costs``; a type's preview prices nothing without it)."""


@dataclass(frozen=True)
class PreviewFrame:
    """What a preview starts from, whatever the study's type: the options within the
    limits, the study's design (checked) and what it asks for, and when it started."""

    options: Any
    limits: Limits
    design: Design
    size: DesignSize
    started: float

    @classmethod
    def of(cls, study: Any, options: Any, limits: Limits) -> PreviewFrame:
        """The frame of a preview of `study` under `options` (its channels checked)."""
        started = time.perf_counter()
        options = options.with_limits(limits)
        check_channels(options.providers)
        design = study_design(study)
        return cls(options, limits, design, DesignSize.of(design), started)

    def check(self, work: Workload | Any) -> None:
        """The options' replications of `work` within the limits (:func:`check_limits`)."""
        check_limits(self.options.replications, work, self.limits)

    def report(
        self, study: Any, settings: Any, price: Price | None, *, done: int, workload: Any
    ) -> dict[str, Any]:
        """The fields of :class:`PreviewRun` once `done` replications are done, the
        design priced on the options' channels by `price` (none without it)."""
        providers = self.options.providers
        return {
            "options": self.options,
            "design": self.design,
            "size": self.size,
            "costs": price(study, settings, self.size, providers) if price else [],
            "seconds": time.perf_counter() - self.started,
            "workload": workload,
            "stopped": stopped_note(done, self.options.replications, self.limits),
        }


@dataclass(frozen=True, kw_only=True)
class PreviewRun:
    """What every type's preview reports besides its own figures: the options, the
    design, what it asks for and costs, the seconds taken, the work of one replication,
    and why fewer than the replications asked were done (None: all were)."""

    options: Any
    design: Design
    size: DesignSize
    costs: list[ChannelCost]
    seconds: float
    workload: Any
    stopped: str | None = None


def cost_lines(costs: list[ChannelCost]) -> list[str]:
    """What each channel charges for the design, by its own fee rules (no platform asked):
    the lines of `ebc simulate`'s table."""
    lines = ["cost of this design per channel (each platform's fee rules; no platform asked):"]
    for c in costs:
        where = f"{c.provider} ({c.environment})" + ("" if c.enabled else ", channel off")
        if c.estimate is None:
            lines.append(f"  {where}: {c.problem}")
            continue
        e = c.estimate
        lines.append(
            f"  {where}: {c.assignments} assignments, rewards {usd(e.rewards_cents)} + fees "
            f"{usd(e.fees_cents)} = {usd(e.total_cents)}"
        )
        lines += [f"    {note}" for note in c.notes]
    return lines


def usd(cents: int) -> str:
    return f"${cents / 100:,.2f}"


__all__ = [
    "CHANNELS",
    "NO_LIMITS",
    "PAGE_LIMITS",
    "ChannelCost",
    "DesignSize",
    "Limits",
    "PreviewError",
    "PreviewFrame",
    "PreviewRun",
    "Price",
    "check_channels",
    "check_limits",
    "cost_lines",
    "deadline",
    "form_values",
    "max_replications",
    "options_from_form",
    "stopped_note",
    "study_design",
    "until",
    "usd",
]
