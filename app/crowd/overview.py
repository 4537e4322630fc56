"""What the dashboard's Crowd page shows of a study on one platform environment: the
posting's state, each assignment's payment state and the submissions a sync flagged.
Read-only steps: they query and change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.crowd.common import (
    confirmed,
    find_posting,
    listing_rule,
    platform_ref,
    unit_counts,
    work_of,
)
from app.crowd.registry import platform
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    AuditEvent,
    CrowdCall,
    Hit,
    ReviewStatus,
    Study,
)

ROWS_SHOWN = 500
FLAGS_SHOWN = 100


@dataclass(frozen=True)
class PaymentRow:
    """One submitted platform assignment and where its payment stands."""

    public_id: str
    platform_id: str | None  # the platform's id of the work (`common.platform_ref`)
    worker: str
    submitted_at: datetime | None
    unverified: bool  # not yet confirmed through the platform's API (MTurk): sync first
    review_status: ReviewStatus | None
    reviewed_at: datetime | None
    bonus_cents: int
    review_error: str | None
    # Confirmed by the platform as work of this posting (`common.confirmed`): only these
    # are reviewed and paid; the others wait for a sync.
    confirmed: bool = False

    @property
    def payable(self) -> bool:
        """A bonus can be paid on it (the ledger refuses the others)."""
        return bool(self.platform_id) and self.confirmed


@dataclass(frozen=True)
class FlaggedRow:
    """A platform submission that a sync could not match with our stored work."""

    at: datetime
    external_assignment_id: str
    worker: str
    platform_status: str
    reason: str
    recovered: bool


@dataclass
class CrowdOverview:
    provider: str
    environment: str
    posting: dict[str, Any] | None  # None: never published in this environment
    # Submitted assignments of the platform's workers by payment state.
    states: dict[str, int] = field(default_factory=dict)
    bonus_cents: int = 0
    rows: list[PaymentRow] = field(default_factory=list)
    total_rows: int = 0
    flagged: list[FlaggedRow] = field(default_factory=list)


def _state(confirmed: bool, review: ReviewStatus | None) -> str:
    if review in (ReviewStatus.approved, ReviewStatus.rejected, ReviewStatus.failed):
        return review.value
    return "to review" if confirmed else "unconfirmed"


def crowd_overview(
    session: Session, study: Study, provider: str, environment: str, *, limit: int = ROWS_SHOWN
) -> CrowdOverview:
    """The study's posting on `provider` (`environment`), its submitted assignments with
    their payment state (the first `limit`), and the latest flagged submissions.

    Assignments are those of the platform's workers that this posting may pay
    (`common.WorkOf.shown`): its own, and those no posting claims yet (unconfirmed until a
    sync matches them), never those of the study's posting in another environment.
    """
    posting = _posting_state(session, study, provider, environment)
    out = CrowdOverview(provider, environment, posting)
    work = work_of(study.id, provider, environment)
    own = case((work.own, True), else_=False)
    mine = (
        select(Assignment, Annotator.external_id, own)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(
            Hit.study_id == study.id,
            Annotator.channel == platform(provider).channel,
            Annotator.simulated.is_(False),  # no sync ever claims it: not payable
            Assignment.status == AssignmentStatus.submitted,
            work.shown,
        )
    )
    rows = mine.with_only_columns(
        own.label("own"), Assignment.unverified, Assignment.review_status, Assignment.bonus_cents
    ).subquery()
    counted = select(
        rows.c.own,
        rows.c.unverified,
        rows.c.review_status,
        func.count(),
        func.coalesce(func.sum(rows.c.bonus_cents), 0),
    ).group_by(rows.c.own, rows.c.unverified, rows.c.review_status)
    for is_own, unverified, review, n, bonus in session.execute(counted):
        sure = bool(is_own) and not unverified and listing_rule(provider, review)
        state = _state(sure, review)
        out.states[state] = out.states.get(state, 0) + n
        out.bonus_cents += int(bonus)
        out.total_rows += n
    for a, worker, is_own in session.execute(mine.order_by(Assignment.id).limit(limit)):
        out.rows.append(
            PaymentRow(
                public_id=a.public_id,
                platform_id=platform_ref(provider, a),
                worker=worker or "",
                submitted_at=a.submitted_at,
                unverified=a.unverified,
                review_status=a.review_status,
                reviewed_at=a.reviewed_at,
                bonus_cents=a.bonus_cents,
                review_error=a.review_error,
                confirmed=confirmed(provider, a, bool(is_own)),
            )
        )
    out.flagged = _flagged(session, study, provider, environment)
    return out


def _posting_state(
    session: Session, study: Study, provider: str, environment: str
) -> dict[str, Any] | None:
    posting = find_posting(session, study, provider, environment)
    if posting is None:
        return None
    units = unit_counts(session, posting.id)
    shown = posting.status
    if shown == "published" and units and set(units) == {"expired"}:
        shown = "expired"  # every unit's lifetime ran out: the platform lists none
    calls: dict[str, dict[str, int]] = {}
    for kind, status, n in session.execute(
        select(CrowdCall.kind, CrowdCall.status, func.count())
        .where(CrowdCall.posting_id == posting.id)
        .group_by(CrowdCall.kind, CrowdCall.status)
        .order_by(CrowdCall.kind, CrowdCall.status)
    ):
        calls.setdefault(kind, {})[status] = n
    return {
        "external_id": posting.external_id,
        "status": shown,
        "error": posting.error,
        "settings": dict(posting.settings),
        "units": units,
        "calls": calls,
        "published_at": posting.published_at,
        "synced_at": posting.synced_at,
    }


def _flagged(session: Session, study: Study, provider: str, environment: str) -> list[FlaggedRow]:
    # The sync records each flag in the audit log (whoever ran it); it is the only record.
    events = session.scalars(
        select(AuditEvent)
        .where(
            AuditEvent.study_id == study.id,
            AuditEvent.action == "crowd_submission_flagged",
            AuditEvent.detail["provider"].as_string() == provider,
            AuditEvent.detail["environment"].as_string() == environment,
        )
        .order_by(AuditEvent.created_at.desc(), AuditEvent.id.desc())
        .limit(FLAGS_SHOWN)
    )
    return [
        FlaggedRow(
            at=e.created_at,
            external_assignment_id=str(e.detail.get("external_assignment_id", "")),
            worker=str(e.detail.get("worker", "")),
            platform_status=str(e.detail.get("platform_status", "")),
            reason=str(e.detail.get("reason", "")),
            recovered=bool(e.detail.get("recovered")),
        )
        for e in events
    ]
