"""Bonuses for several assignments at once, with a preview: who, how much, what it costs
with the platform's fee (`bonus_plan`), then the payments (`pay_bonuses`), each one a
ledgered call (`payments.bonus`) paid at most once.

The preview fixes each bonus's number `n` (the next bonus of the assignment, or of the
participant where a participant's submission is reviewed: `ledger.bonuses_counted`) and
the confirmation carries it, so a confirmation sent twice (a double click, a reload) pays
nothing twice: the same (assignment or participant, n) is the same call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import case, select
from sqlalchemy.orm import Session

from app.audit.service import Actor
from app.config import Settings
from app.crowd.base import CrowdProvider
from app.crowd.common import (
    CrowdServiceError,
    RateLimiter,
    SessionFactory,
    confirmed,
    not_own_work,
    pacing,
    platform_ref,
    posting_spec,
    require_posting,
    work_of,
)
from app.crowd.ledger import bonuses_counted
from app.crowd.payments import bonus
from app.crowd.registry import platform
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Hit,
    Study,
)

MAX_BONUSES = 200  # per preview and confirmation (each is one paced platform call)
MAX_BONUS_CENTS = 100_000


@dataclass(frozen=True)
class BonusLine:
    public_id: str
    platform_id: str  # the platform's id of the work (`common.platform_ref`)
    worker: str
    n: int  # which bonus of this assignment (0: its first)
    amount_cents: int
    fee_cents: int


@dataclass
class BonusPlan:
    amount_cents: int
    reason: str
    lines: list[BonusLine] = field(default_factory=list)
    notes: tuple[str, ...] = ()

    @property
    def bonuses_cents(self) -> int:
        return sum(line.amount_cents for line in self.lines)

    @property
    def fees_cents(self) -> int:
        return sum(line.fee_cents for line in self.lines)

    @property
    def total_cents(self) -> int:
        return self.bonuses_cents + self.fees_cents


def check_bonus(amount_cents: int, reason: str, count: int) -> str:
    """The reason, stripped; refuses (4xx) an amount, reason or number of bonuses that no
    platform call could take."""
    if not 1 <= amount_cents <= MAX_BONUS_CENTS:
        raise CrowdServiceError("a bonus is between 1 cent and $1,000")
    reason = reason.strip()
    if not reason:
        raise CrowdServiceError("a bonus needs a reason for the worker")
    if count < 1:
        raise CrowdServiceError("choose at least one assignment to pay a bonus on")
    if count > MAX_BONUSES:
        raise CrowdServiceError(f"at most {MAX_BONUSES} bonuses at a time")
    return reason


def bonus_plan(
    session: Session,
    settings: Settings,
    study: Study,
    provider: CrowdProvider,
    assignments: Sequence[str],
    amount_cents: int,
    reason: str,
) -> BonusPlan:
    """The preview of `amount_cents` on each of `assignments` (our public ids): each
    bonus's number and the platform's fee on it (per payment, as the platform rounds).

    Every assignment must be work of the posting confirmed by the platform (MTurk work a
    sync confirmed, a Prolific submission a sync listed), and none a simulated annotator's:
    else 4xx, here rather than at pay time. Bonuses are numbered as the ledger numbers
    them (`ledger.bonuses_counted`): per assignment on MTurk and locally, per participant
    where a participant's submission is reviewed (`Capabilities.review_unit`), where the
    assignments of one participant share a submission and a bonus; there, several
    assignments of one participant make one bonus line.
    """
    wanted = list(dict.fromkeys(assignments))
    reason = check_bonus(amount_cents, reason, len(wanted))
    posting = require_posting(session, study, provider)
    work = work_of(study.id, posting.provider, posting.environment)
    made = platform(provider.name)
    rows = {
        a.public_id: (a, worker, bool(own), simulated)
        for a, worker, own, simulated in session.execute(
            select(
                Assignment,
                Annotator.external_id,
                case((work.own, True), else_=False),
                Annotator.simulated,
            )
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .join(Hit, Hit.id == Assignment.hit_id)
            .where(
                Hit.study_id == study.id,
                Annotator.channel == made.channel,
                Assignment.public_id.in_(wanted),
            )
        )
    }
    spec = posting_spec(session, settings, study, posting)
    plan = BonusPlan(amount_cents, reason)
    notes: list[str] = []
    per_participant = made.caps.review_unit == "submission"
    lines: dict[object, BonusLine] = {}
    for public_id in wanted:
        found = rows.get(public_id)
        if found is None:
            raise CrowdServiceError(
                f"no {provider.name} assignment {public_id!r} in study {study.slug!r}", 404
            )
        a, worker, own, simulated = found
        if simulated:
            raise CrowdServiceError(
                f"assignment {public_id} is a simulated annotator's: nobody to pay", 409
            )
        platform_id = platform_ref(provider.name, a)
        if a.status is not AssignmentStatus.submitted or not platform_id:
            raise CrowdServiceError(f"assignment {public_id} is not a submitted one", 409)
        if not own and a.external_hit_id is not None:
            raise CrowdServiceError(not_own_work(posting, f"assignment {public_id}"), 409)
        if not confirmed(provider.name, a, own):
            raise CrowdServiceError(
                f"the platform has not confirmed assignment {public_id} yet: sync first", 409
            )
        key = a.annotator_id if per_participant else a.id
        if key in lines:
            note = "a participant's assignments share one submission: one bonus per participant"
            notes += [note] if note not in notes else []
            continue
        cost = provider.estimate_cost(spec, 0, bonus_cents=amount_cents)
        notes += [note for note in cost.notes if note not in notes]
        lines[key] = BonusLine(
            public_id=a.public_id,
            platform_id=platform_id,
            worker=worker or "",
            n=bonuses_counted(session, posting, a),
            amount_cents=amount_cents,
            fee_cents=cost.fees_cents,
        )
    plan.lines = list(lines.values())
    plan.notes = tuple(notes)
    return plan


@dataclass
class BonusReport:
    paid: int = 0
    already: int = 0  # paid before (the same confirmation sent again)
    paid_cents: int = 0


def pay_bonuses(
    make_session: SessionFactory,
    settings: Settings,
    slug: str,
    provider: CrowdProvider,
    bonuses: Sequence[tuple[str, int]],
    amount_cents: int,
    *,
    reason: str,
    by: Actor | None,
    limiter: RateLimiter | None = None,
) -> BonusReport:
    """Pay `amount_cents` as bonus number n on each (assignment public id, n) of a
    preview, paced; one ledgered call each, made at most once. The first failure stops
    the run and is raised (the bonuses paid before it stay recorded)."""
    reason = check_bonus(amount_cents, reason, len(bonuses))
    if any(n < 0 for _, n in bonuses):
        raise CrowdServiceError("a bonus number is 0 or more")
    limiter = limiter or pacing(settings, provider)
    report = BonusReport()
    for public_id, n in dict.fromkeys(bonuses):
        limiter.wait()
        outcome = bonus(
            make_session, slug, provider, public_id, amount_cents, reason=reason, n=n, by=by
        )
        if outcome.made:
            report.paid += 1
            report.paid_cents += amount_cents
        else:
            report.already += 1
    return report
