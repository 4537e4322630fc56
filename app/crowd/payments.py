"""Reviewing and paying: approve, reject, bonus, block, unblock, expire, balance, and the
bulk approval with its preview. Every call goes through the ledger (`money_call`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, select
from sqlalchemy.orm import Session

from app.audit.service import Actor
from app.config import Settings
from app.crowd.base import (
    CrowdProvider,
)
from app.crowd.calls import CallOutcome, money_call
from app.crowd.common import (
    CrowdServiceError,
    RateLimiter,
    SessionFactory,
    confirmed,
    pacing,
    platform_ref,
    posting_id_of,
    ref_column,
    require_posting,
    study_named,
    work_of,
)
from app.crowd.flagged import FlaggedSubmission, flagged_submission, never_stored
from app.crowd.ledger import CallRequest
from app.crowd.registry import platform
from app.db import unit_of_work
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    Channel,
    CrowdPosting,
    Hit,
    ReviewStatus,
    Study,
)


def _assignment_id(make_session: SessionFactory, slug: str, ref: str) -> int:
    """An assignment of the study by our public id or the platform's id for it: MTurk's
    assignment id, or a Prolific submission's id (its first assignment, for a bundle)."""
    found = _find_assignment(make_session, slug, ref)
    if found is None:
        raise CrowdServiceError(f"no assignment {ref!r} in study {slug!r}", 404)
    return found[0]


def _find_assignment(
    make_session: SessionFactory, slug: str, ref: str
) -> tuple[int, AssignmentStatus] | None:
    with unit_of_work(make_session) as session:
        study = study_named(session, slug)
        found = session.execute(
            select(Assignment.id, Assignment.status)
            .join(Hit, Hit.id == Assignment.hit_id)
            .where(
                Hit.study_id == study.id,
                (Assignment.public_id == ref)
                | (Assignment.external_assignment_id == ref)
                | (Assignment.external_session_id == ref),
            )
            .order_by(Assignment.id)
            .limit(1)
        ).first()
        return None if found is None else (found.id, found.status)


def _annotator_id(
    make_session: SessionFactory, slug: str, provider: CrowdProvider, ref: str
) -> int:
    """A platform worker of the study by the platform's worker id; where the workers are
    our invited annotators (the invite links' channel) also an invited annotator's id or
    label, as `ebc annotators` and the Annotators page name them (their worker id is never
    shown there)."""
    channel = platform(provider.name).channel
    with unit_of_work(make_session) as session:
        study = study_named(session, slug)
        found = session.scalar(
            select(Annotator.id).where(
                Annotator.study_id == study.id,
                Annotator.channel == channel,
                Annotator.external_id == ref,
            )
        )
        if found is None and channel is Channel.local:
            found = _invited(session, study, ref)
        if found is None:
            raise CrowdServiceError(f"no {provider.name} worker {ref!r} in study {slug!r}", 404)
        return found


def _invited(session: Session, study: Study, ref: str) -> int | None:
    from app.annotation.admin import find_annotator
    from app.annotation.errors import AnnotationError

    try:
        annotator = find_annotator(session, study, ref)
    except AnnotationError as exc:
        if exc.status_code == 404:
            return None
        raise CrowdServiceError(exc.message, exc.status_code) from exc
    return annotator.id if annotator.channel is Channel.local else None


def _ledgered(
    make_session: SessionFactory,
    slug: str,
    provider: CrowdProvider,
    kind: str,
    *,
    assignment: str | None = None,
    worker: str | None = None,
    by: Actor | None,
    **fields: Any,
) -> CallOutcome:
    """One ledgered call on the study's posting, its target named as the CLI and the
    dashboard name it: an `assignment` by our public id or the platform's id of it, a
    `worker` by the platform's worker id; `fields` as `CallRequest` takes them."""
    posting_id = posting_id_of(make_session, slug, provider)
    if assignment is not None:
        fields["assignment_id"] = _assignment_id(make_session, slug, assignment)
    if worker is not None:
        fields["annotator_id"] = _annotator_id(make_session, slug, provider, worker)
    return money_call(make_session, provider, posting_id, CallRequest(kind, **fields), by=by)


def approve(
    make_session: SessionFactory,
    slug: str,
    provider: CrowdProvider,
    assignment: str,
    *,
    feedback: str | None = None,
    by: Actor | None,
) -> CallOutcome:
    """Approve one assignment (our public id or the platform's id); a second is a no-op."""
    return _ledgered(
        make_session, slug, provider, "approve", assignment=assignment, reason=feedback, by=by
    )


def reject(
    make_session: SessionFactory,
    slug: str,
    provider: CrowdProvider,
    assignment: str,
    *,
    feedback: str,
    category: str | None = None,
    by: Actor | None,
) -> CallOutcome:
    """Reject one assignment with the feedback the worker reads (required); where a
    participant's submission is reviewed (Prolific) the whole submission, with one of the
    platform's rejection categories (`category`; Prolific's default OTHER).

    `assignment` may also be the platform's id of a submission a sync flagged and we
    never stored (`app.crowd.flagged`): it is rejected on the platform, with no
    assignment of ours."""
    posting_id = posting_id_of(make_session, slug, provider)
    found = _find_assignment(make_session, slug, assignment)
    ours = found is not None and found[1] is AssignmentStatus.submitted
    if not ours and _is_flagged(make_session, posting_id, assignment):
        flagged = CallRequest("reject", reason=feedback, category=category, platform_id=assignment)
        return money_call(make_session, provider, posting_id, flagged, by=by)
    return _ledgered(
        make_session, slug, provider, "reject", assignment=assignment, reason=feedback,
        category=category, by=by,
    )  # fmt: skip


def _is_flagged(make_session: SessionFactory, posting_id: int, ref: str) -> bool:
    with unit_of_work(make_session) as session:
        posting = session.get(CrowdPosting, posting_id)
        return flagged_submission(session, posting, ref) is not None


def bonus(
    make_session: SessionFactory,
    slug: str,
    provider: CrowdProvider,
    assignment: str,
    amount_cents: int,
    *,
    reason: str,
    n: int = 0,
    by: Actor | None,
) -> CallOutcome:
    """Pay the `n`-th bonus (0: the first) of one assignment, once, whatever retries."""
    return _ledgered(
        make_session, slug, provider, "bonus", assignment=assignment,
        amount_cents=amount_cents, reason=reason, n=n, by=by,
    )  # fmt: skip


def block(
    make_session: SessionFactory,
    slug: str,
    provider: CrowdProvider,
    worker: str,
    *,
    reason: str,
    by: Actor | None,
) -> CallOutcome:
    """Block a worker on the platform and here (their future work stops)."""
    return _ledgered(make_session, slug, provider, "block", worker=worker, reason=reason, by=by)


def unblock(
    make_session: SessionFactory,
    slug: str,
    provider: CrowdProvider,
    worker: str,
    *,
    reason: str = "",
    by: Actor | None,
) -> CallOutcome:
    """Lift a block, on the platform and here."""
    return _ledgered(make_session, slug, provider, "unblock", worker=worker, reason=reason, by=by)


def expire(
    make_session: SessionFactory, slug: str, provider: CrowdProvider, *, by: Actor | None
) -> CallOutcome:
    """Expire every live unit of the posting, and any whose last expire or reopen may or
    may not have taken effect (`unknown`): no new work is accepted. Nothing live (every
    unit expired, or past its lifetime): a no-op ("nothing to expire")."""
    posting_id = posting_id_of(make_session, slug, provider)
    return money_call(make_session, provider, posting_id, CallRequest("expire"), by=by)


def balance(provider: CrowdProvider) -> int | None:
    """The platform account's available balance in cents (None: the platform has none)."""
    return provider.balance_cents()


# -- bulk review ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewItem:
    assignment_id: int
    public_id: str
    external_assignment_id: str
    worker: str
    reasons: tuple[str, ...] = ()


@dataclass
class ReviewPlan:
    """Who a bulk approval would approve, and (with the exclusion rules) reject, and why."""

    approve: list[ReviewItem] = field(default_factory=list)
    reject: list[ReviewItem] = field(default_factory=list)
    unconfirmed: int = 0  # submitted but not yet confirmed by the platform: sync first
    exclusions_applied: bool = False
    # Submissions a sync flagged that we never stored: never approved in bulk; to be
    # rejected one by one (`reject` by their platform id), else the platform pays them.
    flagged: list[FlaggedSubmission] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.approve) + len(self.reject)

    def first(self, n: int) -> list[tuple[str, ReviewItem]]:
        """The first `n` reviews in the order a confirmation makes them: rejections first."""
        todo = [("reject", i) for i in self.reject] + [("approve", i) for i in self.approve]
        return todo[: max(0, n)]


def review_plan(
    session: Session, study: Study, posting: CrowdPosting, *, apply_exclusions: bool
) -> ReviewPlan:
    """The preview of a bulk approval: every confirmed, unreviewed assignment of the
    posting's own work (`common.WorkOf`: never another environment's; where a participant's
    submission is reviewed, one item per submission, which covers its bundle of
    assignments).

    Work the platform has not confirmed for this posting yet (MTurk: `unverified`; a
    Prolific submission no sync listed; work no posting claims yet) is counted as `unconfirmed`;
    flagged submissions we never stored are listed apart (`flagged`). A simulated
    annotator's work is never in it (nobody to pay).

    With `apply_exclusions`, assignments of annotators that the study's pre-declared
    rules drop whole are to be rejected: `blocked` (blocked with their past work
    excluded) and `attention_min_accuracy` (attention accuracy on confirmed work below
    the threshold, as the results compute it). Rules on single judgments (`too_fast`)
    and the late-work flags reject nothing: the worker did the assignment.
    """
    plan = ReviewPlan(exclusions_applied=apply_exclusions)
    work = work_of(study.id, posting.provider, posting.environment)
    rows = session.execute(
        select(Assignment, Annotator, case((work.own, True), else_=False))
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(
            Hit.study_id == study.id,
            Annotator.channel == platform(posting.provider).channel,
            Annotator.simulated.is_(False),  # a simulated crowd is never reviewed or paid
            Assignment.status == AssignmentStatus.submitted,
            ref_column(posting.provider).is_not(None),
            (Assignment.review_status.is_(None))
            | Assignment.review_status.in_((ReviewStatus.pending, ReviewStatus.failed)),
            work.shown,
        )
        .order_by(Assignment.id)
    ).all()
    dropped = _excluded_annotators(session, study) if apply_exclusions else {}
    seen: set[str] = set()
    for assignment, annotator, own in rows:
        ref = platform_ref(posting.provider, assignment)
        if ref in seen:
            continue
        seen.add(ref)
        if not confirmed(posting.provider, assignment, bool(own)):
            plan.unconfirmed += 1
            continue
        item = ReviewItem(
            assignment.id,
            assignment.public_id,
            ref,
            annotator.external_id or "",
            tuple(dropped.get(annotator.id, ())),
        )
        (plan.reject if item.reasons else plan.approve).append(item)
    plan.flagged = never_stored(session, study, posting)
    return plan


def _excluded_annotators(session: Session, study: Study) -> dict[int, list[str]]:
    from app.results.exclusions import DEFAULT_RULES, attention_accuracy
    from app.results.queries import FLAG_UNVERIFIED
    from app.studytypes.registry import study_type_of

    rules = {**DEFAULT_RULES, **(study.exclusions or {})}
    out: dict[int, list[str]] = {}
    if rules.get("blocked"):
        for annotator_id in session.scalars(
            select(Annotator.id).where(
                Annotator.study_id == study.id,
                Annotator.blocked.is_(True),
                Annotator.exclude_past.is_(True),
            )
        ):
            out.setdefault(annotator_id, []).append("blocked, past work excluded")
    threshold = rules.get("attention_min_accuracy")
    if threshold is not None:
        # Its type's answers: judgments, or ratings (an attention pair passed at a quality
        # of at most scale_max / 5).
        j = study_type_of(study).results.answers(session, study)
        ids, accuracy = attention_accuracy(j, among=~j.flagged(FLAG_UNVERIFIED))
        for annotator_id, acc in zip(ids.tolist(), accuracy.tolist(), strict=True):
            if acc < float(threshold):
                out.setdefault(int(annotator_id), []).append(
                    f"attention items {acc:.0%} correct (< {float(threshold):.0%})"
                )
    return out


@dataclass
class BulkReport:
    approved: int = 0
    rejected: int = 0
    already: int = 0  # of those confirmed, reviewed before (a confirmation sent again)
    left: int = 0  # reviews the plan holds beyond this run's: preview and confirm again
    plan: ReviewPlan | None = None


def preview_approve_all(
    make_session: SessionFactory, slug: str, provider: CrowdProvider, *, apply_exclusions: bool
) -> ReviewPlan:
    """The preview a bulk approval shows first (who is approved, who rejected and why)."""
    with unit_of_work(make_session) as session:
        study = study_named(session, slug)
        return review_plan(
            session,
            study,
            require_posting(session, study, provider),
            apply_exclusions=apply_exclusions,
        )


def _reviewed_since(make_session: SessionFactory, public_ids: Collection[str]) -> set[str]:
    """Those of `public_ids` that are reviewed now (approved or rejected: by an earlier
    run of the same confirmation, which a repeated confirmation continues, or by anyone)."""
    if not public_ids:
        return set()
    with unit_of_work(make_session) as session:
        return set(
            session.scalars(
                select(Assignment.public_id).where(
                    Assignment.public_id.in_(list(public_ids)),
                    Assignment.review_status.in_((ReviewStatus.approved, ReviewStatus.rejected)),
                )
            )
        )


def approve_all(
    make_session: SessionFactory,
    settings: Settings,
    slug: str,
    provider: CrowdProvider,
    *,
    approvals_seen: Collection[str],
    rejections_seen: Collection[str] = (),
    apply_exclusions: bool = False,
    reject_feedback: str | None = None,
    reject_category: str | None = None,
    feedback: str | None = None,
    by: Actor | None,
    limiter: RateLimiter | None = None,
    limit: int | None = None,
) -> BulkReport:
    """Make the reviews a preview showed: approve `approvals_seen`, and (with
    `apply_exclusions`) reject `rejections_seen` (our public ids), rejections first.

    The confirmation must match the plan both ways, or nothing is done (409): every
    assignment the preview showed to approve is still to be approved, every one it showed
    to reject still to be rejected (those reviewed since, by an earlier run of the same
    confirmation or by anyone, aside: nothing is made twice). Nothing outside the preview
    is reviewed: work confirmed since waits for the next preview. Flagged submissions we
    never stored are never approved in bulk.

    `limit`: review at most this many now; `left` says how many reviews the plan still
    holds, and running it again (the same confirmation) continues where it stopped. Each
    call is ledgered and paced; the first failure stops the run and is raised."""
    if limit is not None and limit < 1:
        raise CrowdServiceError("the limit must be at least 1")
    plan = preview_approve_all(make_session, slug, provider, apply_exclusions=apply_exclusions)
    to_approve, to_reject = set(approvals_seen), set(rejections_seen)
    done = _reviewed_since(make_session, to_approve | to_reject)
    planned_approve = {i.public_id for i in plan.approve}
    planned_reject = {i.public_id for i in plan.reject}
    if (to_approve & to_reject) or not (
        to_approve - done <= planned_approve and to_reject - done <= planned_reject
    ):
        raise CrowdServiceError(
            "the reviews confirmed are not those of the plan now (an assignment to reject "
            "would be approved, or the reverse, or it is gone); preview again",
            409,
        )
    if to_reject - done and not (reject_feedback or "").strip():
        raise CrowdServiceError("rejections need feedback for the workers")
    posting_id = posting_id_of(make_session, slug, provider)
    limiter = limiter or pacing(settings, provider)
    todo = [("reject", i) for i in plan.reject if i.public_id in to_reject] + [
        ("approve", i) for i in plan.approve if i.public_id in to_approve
    ]
    now = todo if limit is None else todo[:limit]
    report = BulkReport(plan=plan, left=plan.size - len(now), already=len(done))
    counts: Counter[str] = Counter()
    for kind, item in now:
        limiter.wait()
        request = CallRequest(
            kind,
            assignment_id=item.assignment_id,
            reason=reject_feedback if kind == "reject" else feedback,
            category=reject_category if kind == "reject" else None,
        )
        outcome = money_call(make_session, provider, posting_id, request, by=by)
        counts[kind if outcome.made else "already"] += 1
    report.approved, report.rejected = counts["approve"], counts["reject"]
    report.already += counts["already"]
    return report
