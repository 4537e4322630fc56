"""The submissions a sync flagged (`sync._flag`) and that we never stored: a worker who
posted straight to MTurk's externalSubmit, a participant who entered the Prolific
completion code without doing a HIT. Unless they are rejected, the platform approves
and pays them by itself (MTurk after the posting's auto-approval delay).

The audit log is their record (`crowd_submission_flagged`, one entry per submission and
reason: a sync that flags the same submission again writes nothing). They are listed
apart in the bulk approval's preview (`never_stored`: never approved in bulk) and are
rejected by their platform id (`payments.reject`, `ledger.begin_call`'s `platform_id`).
Read-only steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.crowd.common import posting_parts, ref_column, request_token
from app.crowd.registry import platform
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    AuditEvent,
    CrowdCall,
    CrowdPosting,
    Hit,
    Study,
)

FLAGGED = "crowd_submission_flagged"
# Platform statuses of a submission handed in and not reviewed yet.
AWAITING_REVIEW = frozenset({"Submitted", "AWAITING REVIEW"})


@dataclass(frozen=True)
class FlaggedSubmission:
    platform_id: str
    worker: str
    platform_status: str  # as the sync that flagged it saw it
    reason: str
    at: datetime


def _events(session: Session, posting: CrowdPosting, ref: str | None = None) -> list[AuditEvent]:
    query = select(AuditEvent).where(
        AuditEvent.study_id == posting.study_id,
        AuditEvent.action == FLAGGED,
        AuditEvent.detail["provider"].as_string() == posting.provider,
        AuditEvent.detail["environment"].as_string() == posting.environment,
    )
    if ref is not None:
        query = query.where(AuditEvent.detail["external_assignment_id"].as_string() == ref)
    return list(session.scalars(query.order_by(AuditEvent.id)))


def already_flagged(
    session: Session, posting: CrowdPosting, ref: str, reason: str, recovered: bool
) -> bool:
    """Whether a sync recorded this flag (the same submission, reason and outcome)."""
    return any(
        e.detail.get("reason") == reason and bool(e.detail.get("recovered")) == recovered
        for e in _events(session, posting, ref)
    )


def _submitted(session: Session, posting: CrowdPosting, refs: Iterable[str]) -> set[str]:
    """Those of `refs` that are the platform ids of submitted work of ours."""
    refs = list(refs)
    if not refs:
        return set()
    column = ref_column(posting.provider)
    return set(
        session.scalars(
            select(column)
            .join(Hit, Hit.id == Assignment.hit_id)
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .where(
                Hit.study_id == posting.study_id,
                Annotator.channel == platform(posting.provider).channel,
                Assignment.status == AssignmentStatus.submitted,
                column.in_(refs),
            )
        )
    )


def _latest(events: list[AuditEvent]) -> dict[str, FlaggedSubmission]:
    """Per submission, its latest flag, when it left the submission unstored."""
    latest: dict[str, AuditEvent] = {}
    for e in events:
        latest[str(e.detail.get("external_assignment_id", ""))] = e
    return {
        ref: FlaggedSubmission(
            platform_id=ref,
            worker=str(e.detail.get("worker", "")),
            platform_status=str(e.detail.get("platform_status", "")),
            reason=str(e.detail.get("reason", "")),
            at=e.created_at,
        )
        for ref, e in latest.items()
        if ref and not e.detail.get("recovered")
    }


def flagged_submission(
    session: Session, posting: CrowdPosting, ref: str
) -> FlaggedSubmission | None:
    """The submission `ref` if a sync of `posting` flagged it and we hold no submitted
    work under its id (else it is reviewed as that work, or not at all)."""
    found = _latest(_events(session, posting, ref)).get(ref)
    if found is None or _submitted(session, posting, [ref]):
        return None
    return found


def never_stored(session: Session, study: Study, posting: CrowdPosting) -> list[FlaggedSubmission]:
    """The flagged submissions still to reject: not stored as our work, awaiting review on
    the platform when last synced, and not rejected through the ledger; oldest first."""
    flagged = _latest(_events(session, posting))
    stored = _submitted(session, posting, flagged)
    parts = posting_parts(posting, study)
    token = {request_token("reject", *parts, ref, 0): ref for ref in flagged}
    rejected = set(
        session.scalars(
            select(CrowdCall.request_token).where(
                CrowdCall.posting_id == posting.id,
                CrowdCall.status == "ok",
                CrowdCall.request_token.in_(list(token)),
            )
        )
    )
    done = stored | {token[t] for t in rejected}
    return [
        f for ref, f in flagged.items() if ref not in done and f.platform_status in AWAITING_REVIEW
    ]
