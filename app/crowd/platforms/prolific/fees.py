"""Prolific's fees and places: what a study costs at a workspace's fee rate."""

from __future__ import annotations

import math

from app.crowd.base import CostEstimate, CrowdError, PostingSpec

# Prolific's platform fee for a workspace without the academic discount (prolific.com
# pricing: 42.8% corporate, 33.3% academic or non-profit); VAT comes on top where it applies.
DEFAULT_FEE_RATE = 0.428


def places_for(assignments: int, hits_per_participant: int = 1) -> int:
    """Prolific places for `assignments` HIT assignments, `hits_per_participant` per place."""
    if hits_per_participant < 1:
        raise CrowdError("hits_per_participant must be at least 1")
    return math.ceil(max(assignments, 0) / hits_per_participant)


def price(
    spec: PostingSpec,
    assignments: int,
    *,
    fee_rate: float = DEFAULT_FEE_RATE,
    hits_per_participant: int = 1,
    bonus_cents: int = 0,
) -> CostEstimate:
    """Rewards for the places that `assignments` need, plus Prolific's platform fee
    (`fee_rate`, on rewards and on bonuses), rounded half up to the cent: its fee rules
    alone, so an estimate needs no token or network."""
    places = places_for(assignments, hits_per_participant)
    rewards = places * spec.reward_cents * hits_per_participant
    notes = [
        f"Prolific platform fee {fee_rate:.1%} of rewards and bonuses "
        "(EBC_PROLIFIC_FEE_RATE); VAT is added where it applies and is not included"
    ]
    if hits_per_participant > 1:
        notes.append(
            f"{places} places of {hits_per_participant} HITs each; a place is paid "
            "in full even if its participant stops early"
        )
    return CostEstimate(
        rewards_cents=rewards,
        fees_cents=_fee(rewards, fee_rate) + _fee(bonus_cents, fee_rate),
        bonuses_cents=bonus_cents,
        notes=tuple(notes),
    )


def _fee(cents: int, rate: float) -> int:
    # Half-up to the cent, as a bill is rounded (round() would round half to even).
    return math.floor(cents * rate + 0.5)
