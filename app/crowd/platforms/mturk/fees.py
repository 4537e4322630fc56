"""MTurk's fees: what it charges for assignments and bonuses, by its pricing page's rules."""

from __future__ import annotations

from app.crowd.base import CostEstimate, CrowdError, PostingSpec

# Fees (percent of rewards and bonuses), as MTurk's pricing page states them.
FEE_PERCENT = 20
FEE_PERCENT_TEN_OR_MORE = 40  # MaxAssignments >= 10
MASTERS_EXTRA_PERCENT = 5
MIN_FEE_CENTS = 1  # per assignment and per bonus


def price(
    spec: PostingSpec,
    assignments: int,
    *,
    bonus_cents: int = 0,
    max_assignments: int | None = None,
) -> CostEstimate:
    """What MTurk charges for `assignments` assignments at the spec's reward: its fee
    rules alone, so an estimate needs no client, credentials or network.

    Fee per assignment: 20% of the reward, 40% when the HIT has 10 or more
    assignments (`max_assignments`), plus 5% for Masters; bonuses carry 20%. Each fee
    is rounded to the cent (half up) with a minimum of 1 cent per assignment, and
    `bonus_cents` is priced as one payment (the 1-cent minimum applies per payment,
    so many small bonuses cost slightly more). The sandbox charges nothing; these are
    production's prices for the same HITs.
    """
    if assignments < 0 or bonus_cents < 0:
        raise CrowdError("assignments and bonuses cannot be negative")
    notes: list[str] = []
    percent = FEE_PERCENT
    if max_assignments is not None and max_assignments >= 10:
        percent = FEE_PERCENT_TEN_OR_MORE
        notes.append("10 or more assignments per HIT: MTurk's fee is 40%, not 20%")
    if spec.qualifications.masters:
        percent += MASTERS_EXTRA_PERCENT
        notes.append("Masters workers: MTurk adds 5%")
    reward = spec.reward_cents
    fee = max(MIN_FEE_CENTS, _percent_of(reward, percent)) if reward > 0 else 0
    bonus_fee = max(MIN_FEE_CENTS, _percent_of(bonus_cents, FEE_PERCENT)) if bonus_cents else 0
    return CostEstimate(
        rewards_cents=reward * assignments,
        fees_cents=fee * assignments + bonus_fee,
        bonuses_cents=bonus_cents,
        notes=tuple(notes),
    )


def _percent_of(cents: int, percent: int) -> int:
    """`percent`% of `cents`, rounded to the cent, halves up (integer arithmetic)."""
    return (cents * percent + 50) // 100
