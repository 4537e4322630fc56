"""The sentence that ends every type's "simulate before you pay" (issue 32): is this design
enough, and if not, what would be — the shared part. A study type says what it checked
(its facts, whether each holds) and by what factor its design would have to grow;
:func:`design_verdict` writes the sentence, the grown design (:func:`grown`) priced on each
channel by the `price` the preview was handed (each platform's own fee rule).

*Enough* for a figure checked by simulation: its intervals cover the truth in at least
``level - max(0.02, 2 MC SE)`` of the simulated studies (:func:`covers`), a power at least
the goal less 2 MC SE (:func:`reaches`), and on average at least ``FEW_ANNOTATORS``
effective annotators, below which the results call every interval unreliable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from app.results.stats import FEW_ANNOTATORS
from app.simulate.preview import ChannelCost, DesignSize, usd


class Verdict(NamedTuple):
    """Whether the design is enough, and the sentence that says so."""

    enough: bool
    text: str


def covers(coverage: float, coverage_mc: float, level: float) -> bool:
    """A simulated coverage that holds the level, up to the simulation's noise."""
    return coverage >= level - max(0.02, 2 * coverage_mc)


def reaches(share: float, replications: int, goal: float) -> bool:
    """A simulated power (share of `replications` studies rejecting) at the goal, up to
    2 Monte Carlo SEs."""
    mc = math.sqrt(share * (1 - share) / max(replications, 1)) if math.isfinite(share) else 0.0
    return share >= goal - 2 * mc


def crowd_fact(effective: float, who: str = "annotators") -> tuple[bool, str]:
    """Whether the studies have enough effective annotators, and the words for it."""
    return (
        effective >= FEW_ANNOTATORS,
        f"with {effective:.1f} effective {who} on average ({FEW_ANNOTATORS} wanted)",
    )


def crowd_factor(effective: float) -> float:
    """How much the design must grow for ``FEW_ANNOTATORS`` effective annotators (the
    simulated crowd brings annotators in proportion to the work); NaN without any."""
    return FEW_ANNOTATORS / effective if effective > 0 else math.nan


def grown(size: DesignSize, factor: float) -> DesignSize:
    """`size` with every group's HITs (and so assignments and judgments) times `factor`."""
    groups = tuple((r, math.ceil(n * factor)) for r, n in size.groups)
    hits = sum(n for _, n in groups)
    assignments = sum(r * n for r, n in groups)
    per_assignment = size.judgments / size.assignments if size.assignments else 0
    return DesignSize(
        groups=groups,
        hits=hits,
        assignments=assignments,
        judgments=round(assignments * per_assignment),
        judgments_per_cell={k: math.ceil(v * factor) for k, v in size.judgments_per_cell.items()},
    )


def design_verdict(
    study: Any,
    size: DesignSize,
    facts: Iterable[tuple[bool, str]],
    factor: float,
    *,
    annotators: float,
    who: str = "annotators",
    planned: str = "",
    price: Callable[[DesignSize], list[ChannelCost]] | None = None,
) -> Verdict:
    """The verdict on a design: *Enough* when every fact holds; otherwise *Too small*,
    what failed and what would be enough: the study's ``items_per_cell`` times `factor`
    (the HITs, assignments and about `annotators` x factor `who` it takes, and its price
    on each channel, `price`), or, when the factor is not above 1, more replications to
    tell. `planned`: how the factor was found, said after it."""
    facts = list(facts)
    said = ", ".join(text for _, text in facts)
    if all(ok for ok, _ in facts):
        return Verdict(True, f"Enough: {said}.")
    if not math.isfinite(factor) or factor <= 1:
        enough = "more replications to tell (the shortfall is within the simulation's noise)"
        return Verdict(False, f"Too small: {said}; {enough}{planned}.")
    bigger = grown(size, factor)
    items = math.ceil(int(study.items_per_cell) * factor)
    scale = (
        f"{100 * (factor - 1):.0f}% more than this design"
        if factor < 2
        else f"{factor:.1f} times this design"
    )
    enough = (
        f"enough would be about {scale}: items_per_cell = {items:,} "
        f"({bigger.hits:,} HITs, {bigger.assignments:,} assignments, about "
        f"{annotators * factor:,.0f} {who})"
    )
    costs = price(bigger) if price is not None else []
    priced = [f"{usd(c.estimate.total_cents)} on {c.provider}" for c in costs if c.estimate]
    if priced:
        enough += ", costing " + ", ".join(priced)
    return Verdict(False, f"Too small: {said}; {enough}{planned}.")


__all__ = [
    "Verdict",
    "covers",
    "crowd_fact",
    "crowd_factor",
    "design_verdict",
    "grown",
    "reaches",
]
