"""Syncing a posting: list the platform's submissions, reconcile them with ours (recover
and flag what we never stored), give the cap qualification.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.config import Settings
from app.crowd.base import (
    CapQualifying,
    CrowdError,
    CrowdProvider,
    PlatformSubmission,
)
from app.crowd.calls import money_call
from app.crowd.claims import writing
from app.crowd.common import (
    RateLimiter,
    SessionFactory,
    pacing,
    platform_ref,
    ref_column,
    require_posting,
    study_named,
    work_of,
)
from app.crowd.flagged import already_flagged
from app.crowd.ledger import CallRequest
from app.crowd.recovery import (  # re-exported: the sync's reading of MTurk's copy
    RecoveredSubmission,
    recovered_answers,
    store_recovered_submission,
)
from app.crowd.registry import platform
from app.db import unit_of_work
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    CrowdCall,
    CrowdHit,
    CrowdPosting,
    Hit,
    ReviewStatus,
    Study,
    utcnow,
)

log = logging.getLogger(__name__)

__all__ = [
    "Flagged",
    "RecoveredSubmission",
    "SyncReport",
    "reconcile",
    "recovered_answers",
    "store_recovered_submission",
    "sync",
]

# The platform's review of an assignment, in our words.
REVIEW_OF = {
    "Approved": ReviewStatus.approved,
    "Rejected": ReviewStatus.rejected,
    "Submitted": ReviewStatus.pending,
    # Prolific's submission statuses (a participant's submission, `review_unit`).
    "APPROVED": ReviewStatus.approved,
    "REJECTED": ReviewStatus.rejected,
    "AWAITING REVIEW": ReviewStatus.pending,
}
# Prolific submissions that end without a review: the participant left (our copy of what
# they did is kept, and counts, but the platform pays nothing for it).
_UNREVIEWABLE = {"RETURNED", "TIMED-OUT", "SCREENED-OUT"}
_ID_IN_CHUNK = 500  # ids per IN (...) list

# -- sync ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flagged:
    external_assignment_id: str
    external_worker_id: str
    status: str
    reason: str
    recovered: bool = False


@dataclass
class SyncReport:
    listed: int = 0  # submissions the platform listed
    confirmed: int = 0  # our assignments confirmed now (no longer unverified)
    reviewed: int = 0  # review statuses taken from the platform
    flagged: list[Flagged] = field(default_factory=list)
    recovered: int = 0
    at_cap: list[int] = field(default_factory=list)  # annotators to give the cap qualification
    qualified: int = 0
    # Sandbox work a sandbox sync listed while the study is in production: left unconfirmed
    # (it never counts in the results).
    sandbox_kept_out: int = 0


def reconcile(
    session: Session,
    posting: CrowdPosting,
    submissions: Iterable[PlatformSubmission],
    *,
    by: Actor | None = None,
) -> SyncReport:
    """Match the platform's submissions with our assignments by the platform's id of the
    work (`common.platform_ref`: MTurk's `external_assignment_id`, our own public id on
    the local channel; where a participant's submission is reviewed, Prolific's,
    `external_session_id`: see `_reconcile_submissions`).

    Ours is the source of truth for answers; the platform's for whether the work was
    done and how it was reviewed. A confirmed assignment clears `unverified` (MTurk work
    counts once confirmed through the API) and takes the platform's review status, except
    that a sandbox posting confirms nothing for a study in production (`channels.<name>.
    sandbox` false: `Platform.counts_work`): sandbox work never counts there
    (`sandbox_kept_out`; work a sandbox sync confirmed while the study was in the sandbox
    stays confirmed: its assignments name the sandbox's HITs in `external_hit_id`, so a
    pilot's work can be told apart). A submission we never stored is flagged (reported
    and audited) and, when its answer XML carries our assignment id and its answers (the
    chosen slots, or every pair's ratings), stored through the annotation services
    (`app.crowd.recovery`: one savepoint per assignment; a copy that does not fit, or that
    conflicts with a rating we hold, stores nothing and the flag says why). Workers who
    reached the cap are listed for the cap qualification. Where no platform is reached
    (`Capabilities.remote` false: the local channel) our store lists itself
    (`app.crowd.platforms.local`): the sync claims the work for the posting (its unit in
    `external_hit_id`), which makes it reviewable, and counts what it confirms so.
    """
    study = session.get(Study, posting.study_id)
    assert study is not None
    subs = list(submissions)
    report = SyncReport(listed=len(subs))
    now = utcnow()
    made = platform(posting.provider)
    if made.caps.review_unit == "submission":
        _reconcile_submissions(session, study, posting, subs, report, now, by)
        return _finish(session, study, posting, report, now)
    counts = made.counts_work(study, posting.environment)
    local = not made.caps.remote
    ids = [s.external_assignment_id for s in subs]
    ours: dict[str, tuple[Assignment, str | None]] = {}
    for start in range(0, len(ids), _ID_IN_CHUNK):
        rows = session.execute(
            select(Assignment, Annotator.external_id)
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .join(Hit, Hit.id == Assignment.hit_id)
            .where(
                Hit.study_id == study.id,
                ref_column(posting.provider).in_(ids[start : start + _ID_IN_CHUNK]),
            )
        ).all()
        ours.update({platform_ref(posting.provider, a): (a, worker) for a, worker in rows})
    for sub in subs:
        found = ours.get(sub.external_assignment_id)
        if found is not None and found[1] != sub.external_worker_id:
            _flag(session, report, study, posting, sub, "another worker holds this assignment", by)
            continue
        assignment = found[0] if found else None
        if assignment is None or assignment.status is not AssignmentStatus.submitted:
            assignment = _recover(session, report, study, posting, sub, assignment, by)
            if assignment is None:
                continue
            assignment.external_assignment_id = sub.external_assignment_id
        if assignment.unverified and not counts:
            report.sandbox_kept_out += 1
        elif assignment.unverified:
            assignment.unverified = False
            report.confirmed += 1
        elif local and assignment.review_status is None:
            report.confirmed += 1  # handed in, reviewable from now on
        # The platform's word on which HIT (so which posting) the work belongs to: a
        # worker's URL could name a HIT of another environment.
        if sub.external_hit_id and assignment.external_hit_id != sub.external_hit_id:
            assignment.external_hit_id = sub.external_hit_id
        _take_review(assignment, sub.status, report, now)
    return _finish(session, study, posting, report, now)


def _recover(
    session: Session,
    report: SyncReport,
    study: Study,
    posting: CrowdPosting,
    sub: PlatformSubmission,
    assignment: Assignment | None,
    by: Actor | None,
) -> Assignment | None:
    """A submission of which we hold no submitted work: MTurk's copy of its answers
    stored and flagged as recovered, or flagged as not stored (None). A lease that the
    worker's own request submitted meanwhile (after this sync read it) is no news: it is
    taken as it is, not flagged."""
    reason = "never stored" if assignment is None else "stored lease never submitted"
    recovered = recovered_answers(sub)
    if recovered is None:
        _flag(session, report, study, posting, sub, f"{reason}; its answers are not in the XML", by)
        return None
    outcome = store_recovered_submission(session, study, recovered)
    if outcome.already:
        return outcome.assignment
    if outcome.assignment is None:
        reason += f"; MTurk's copy of its answers was not stored: {outcome.refused}"
    stored = outcome.assignment is not None
    _flag(session, report, study, posting, sub, reason, by, recovered=stored)
    if stored:
        report.recovered += 1
    return outcome.assignment


def _take_review(assignment: Assignment, status: str, report: SyncReport, now: datetime) -> None:
    """The platform's review of the work, ours now (a handed-in one becomes `pending`)."""
    review = REVIEW_OF.get(status)
    if review is ReviewStatus.pending:
        if assignment.review_status is None:
            assignment.review_status = review
    elif review is not None and assignment.review_status is not review:
        assignment.review_status = review
        assignment.reviewed_at = assignment.reviewed_at or now
        report.reviewed += 1


def _finish(
    session: Session, study: Study, posting: CrowdPosting, report: SyncReport, now: datetime
) -> SyncReport:
    session.flush()
    report.at_cap = _at_cap(session, study, posting)
    posting.synced_at = now
    session.flush()
    return report


def _reconcile_submissions(
    session: Session,
    study: Study,
    posting: CrowdPosting,
    subs: list[PlatformSubmission],
    report: SyncReport,
    now: datetime,
    by: Actor | None,
) -> None:
    """A submission (Prolific's) is a participant's whole visit: every assignment they
    submitted under its session id (`external_session_id`, from the entry URL; a bundle of
    HITs shares one). Such a platform holds no answers, so a submission without stored
    work is flagged only; one that ended without a review (returned, timed out) is flagged
    too. The flags' reasons are stored (an audit entry per submission and reason), so
    their words stay as they were written."""
    ids = [s.external_assignment_id for s in subs]
    ours: dict[str, list[tuple[Assignment, str | None]]] = {}
    for start in range(0, len(ids), _ID_IN_CHUNK):
        rows = session.execute(
            select(Assignment, Annotator.external_id)
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .join(Hit, Hit.id == Assignment.hit_id)
            .where(
                Hit.study_id == study.id,
                Annotator.channel == platform(posting.provider).channel,
                Assignment.status == AssignmentStatus.submitted,
                Assignment.external_session_id.in_(ids[start : start + _ID_IN_CHUNK]),
            )
            .order_by(Assignment.id)
        ).all()
        for a, worker in rows:
            ours.setdefault(a.external_session_id, []).append((a, worker))
    for sub in subs:
        found = ours.get(sub.external_assignment_id, [])
        mine = [a for a, worker in found if worker == sub.external_worker_id]
        reason = None
        if found and not mine:
            reason = "another participant holds this session"
        elif not mine:
            reason = "never stored (a panel keeps no answers)"
        elif sub.status in _UNREVIEWABLE:
            reason = (
                f"work stored, but the submission is {sub.status} on the panel: it cannot be "
                "reviewed or paid there"
            )
        if reason is not None:
            _flag(session, report, study, posting, sub, reason, by)
            continue
        for assignment in mine:
            if assignment.review_status is None and sub.status in REVIEW_OF:
                report.confirmed += 1
            # Listed by this posting's platform study: its work from now on (`WorkOf`).
            assignment.external_hit_id = posting.external_id
            _take_review(assignment, sub.status, report, now)


def _flag(
    session: Session,
    report: SyncReport,
    study: Study,
    posting: CrowdPosting,
    sub: PlatformSubmission,
    reason: str,
    by: Actor | None,
    *,
    recovered: bool = False,
) -> None:
    report.flagged.append(
        Flagged(sub.external_assignment_id, sub.external_worker_id, sub.status, reason, recovered)
    )
    if already_flagged(session, posting, sub.external_assignment_id, reason, recovered):
        return  # recorded by an earlier sync
    log.warning(
        "%s submission %s of worker %s: %s",
        posting.provider,
        sub.external_assignment_id,
        sub.external_worker_id,
        reason,
    )
    # Recorded whoever runs the sync (a scheduled one included): a lost submission is news,
    # once.
    record_by(
        session,
        by or "sync",
        "crowd_submission_flagged",
        study=study,
        provider=posting.provider,
        environment=posting.environment,
        external_assignment_id=sub.external_assignment_id,
        worker=sub.external_worker_id,
        external_hit_id=sub.external_hit_id,
        platform_status=sub.status,
        reason=reason,
        recovered=recovered,
    )


def _at_cap(session: Session, study: Study, posting: CrowdPosting) -> list[int]:
    """The posting's workers (with work of its own: a worker of another environment may
    not exist on this one) whose submitted HITs, all environments counted, reached their
    cap and who were not given the cap qualification yet."""
    channel = platform(posting.provider).channel
    with_work = select(Assignment.annotator_id).where(
        work_of(study.id, posting.provider, posting.environment).own
    )
    done = (
        select(Assignment.annotator_id, func.count().label("n"))
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Hit.study_id == study.id, Assignment.status == AssignmentStatus.submitted)
        .group_by(Assignment.annotator_id)
        .subquery()
    )
    qualified = select(CrowdCall.annotator_id).where(
        CrowdCall.posting_id == posting.id,
        CrowdCall.kind == "qualify",
        CrowdCall.status == "ok",
        CrowdCall.annotator_id.is_not(None),
    )
    cap = func.coalesce(Annotator.hit_cap, study.per_annotator_cap)
    return list(
        session.scalars(
            select(Annotator.id)
            .join(done, done.c.annotator_id == Annotator.id)
            .where(
                Annotator.study_id == study.id,
                Annotator.channel == channel,
                Annotator.external_id.is_not(None),
                done.c.n >= cap,
                Annotator.id.not_in(qualified),
                Annotator.id.in_(with_work),
            )
            .order_by(Annotator.id)
        )
    )


def sync(
    make_session: SessionFactory,
    settings: Settings,
    slug: str,
    provider: CrowdProvider,
    *,
    by: Actor | None,
    limiter: RateLimiter | None = None,
) -> SyncReport:
    """List every submission of the study's published units and reconcile them (one unit
    of work), then give the cap qualification to workers at the cap (one ledgered call
    each)."""
    with unit_of_work(make_session) as session:
        study = study_named(session, slug)
        posting = require_posting(session, study, provider)
        posting_id, external_id = posting.id, posting.external_id
        unit_ids = list(
            session.scalars(
                select(CrowdHit.external_hit_id)
                .where(CrowdHit.posting_id == posting.id, CrowdHit.external_hit_id.is_not(None))
                .order_by(CrowdHit.id)
            )
        )
        cap_id = posting.settings.get("cap_qualification_id")
    try:
        submissions = list(provider.submissions(external_id or "", unit_ids))
    except CrowdError as exc:
        with writing(make_session) as session:
            session.get(CrowdPosting, posting_id).error = f"sync: {exc}"[:4000]
        raise
    with writing(make_session) as session:
        posting = session.get(CrowdPosting, posting_id)
        report = reconcile(session, posting, submissions, by=by)
        record_by(
            session,
            by,
            "crowd_synced",
            study=session.get(Study, posting.study_id),
            provider=posting.provider,
            environment=posting.environment,
            listed=report.listed,
            confirmed=report.confirmed,
            flagged=len(report.flagged),
            recovered=report.recovered,
            sandbox_kept_out=report.sandbox_kept_out,
        )
    if cap_id and isinstance(provider, CapQualifying):
        limiter = limiter or pacing(settings, provider)
        for annotator_id in report.at_cap:
            limiter.wait()
            qualify = CallRequest("qualify", annotator_id=annotator_id)
            outcome = money_call(make_session, provider, posting_id, qualify, by=by)
            report.qualified += outcome.made
    return report
