"""What the ledger checks before it makes a call (`app.crowd.ledger`): the refusals a
platform would answer with, made before anything is written, and whether a bonus whose
earlier attempt may have been paid was paid."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crowd.common import CrowdServiceError, platform_ref, ref_column
from app.crowd.registry import platform
from app.models import Assignment, CrowdCall, CrowdPosting


def check_platform_rules(
    posting: CrowdPosting, kind: str, reason: str | None, category: str | None
) -> None:
    """What the platform would refuse (`Capabilities.rejection_min_chars`,
    `rejection_categories`), refused before anything is written."""
    made = platform(posting.provider)
    names = made.caps.rejection_categories
    if not names:
        if category is not None:
            raise CrowdServiceError(f"{posting.provider} has no rejection category")
        return
    if kind == "reject":
        least = made.caps.rejection_min_chars
        if len(reason or "") < least:
            raise CrowdServiceError(
                f"{made.label} requires a rejection message of at least {least} "
                "characters explaining the reason to the participant"
            )
        if category is not None and category not in names:
            raise CrowdServiceError(
                f"unknown {made.label} rejection category {category!r}: one of {', '.join(names)}"
            )
    elif category is not None:
        raise CrowdServiceError("a rejection category goes with a rejection only")


def check_bonus_paid(
    session: Session, call_id: int, paid_cents: list[int], *, listed_at_once: bool
) -> bool:
    """Whether a bonus whose earlier attempt may have been paid was paid, from the
    platform's list of the submission's bonuses (`paid_cents`): True when it was, False
    when it surely was not (so it is made again), else a 409 asking for a manual check.

    A payment listed beyond those our ledger recorded as paid (the same amount, the same
    submission) must cover this call and every other unfinished one to prove it paid. None
    beyond proves it was not paid only where a payment is listed as soon as it is made
    (`listed_at_once`: MTurk); Prolific pays a bulk bonus asynchronously, so there it may
    not be listed yet. Anything between cannot tell which of several calls was paid.
    """
    call = session.get(CrowdCall, call_id)
    a = session.get(Assignment, call.assignment_id)
    posting = session.get(CrowdPosting, call.posting_id)
    ref = platform_ref(posting.provider, a)
    same = (
        select(CrowdCall.status)
        .join(Assignment, Assignment.id == CrowdCall.assignment_id)
        .where(
            CrowdCall.posting_id == posting.id,
            CrowdCall.kind == "bonus",
            CrowdCall.amount_cents == call.amount_cents,
            CrowdCall.id != call.id,
            ref_column(posting.provider) == ref,
        )
    )
    others = list(session.scalars(same))
    recorded = others.count("ok")
    unfinished = sum(1 for status in others if status in ("pending", "retrying", "unknown"))
    beyond = paid_cents.count(int(call.amount_cents)) - recorded
    if beyond >= 1 + unfinished:
        return True
    if beyond < 1 and listed_at_once:
        return False
    raise CrowdServiceError(
        f"an earlier attempt of this bonus ({call.amount_cents} cents on submission {ref}) "
        "may have been paid, and "
        + (
            "the platform does not list it (yet)"
            if beyond < 1
            else "the platform's payments cannot tell it from other unfinished bonuses"
        )
        + ": check the submission's bonuses on the platform; if it was not paid, pay it "
        "as a bonus with another number",
        409,
    )
