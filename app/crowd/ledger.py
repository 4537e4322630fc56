"""The ledger of money and standing calls: a `CrowdCall` row with its deterministic token
is committed before each platform call and its outcome after (the steps of
`app.crowd.calls.money_call`).

A call's `status`: `pending` (to be made: new, or refused before), `retrying` (an
earlier attempt may have reached the platform: its outcome is unknown), `ok`, `failed`
(refused: nothing was done) or `unknown` (the error says it may have been done).

Where the platform reviews a participant's *submission* (`Capabilities.review_unit`:
Prolific), which the assignments of a bundle share (`platform_ref`), approving or
rejecting one of them is one call for all of them, and a bonus is paid per participant
(`n`-th bonus of the participant, on their submission).

A submission a sync flagged and that we never stored (no assignment: a worker who posted
straight to the platform) can be rejected by its platform id (`platform_id`): its call has
no assignment and the same token an assignment of that id would have; the audit log
names the submission.

A retried call is sent with the reason it was first made with (the ledger's), unless
the earlier attempt was refused (`failed`: nothing was done), which a new reason replaces.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, true
from sqlalchemy.orm import Session

from app.audit.service import Actor, record_by
from app.crowd.base import CrowdError
from app.crowd.common import (
    CALL_KINDS,
    CrowdServiceError,
    actor_name,
    confirmed,
    is_own_work,
    not_own_work,
    platform_ref,
    posting_parts,
    ref_column,
    request_token,
)
from app.crowd.flagged import flagged_submission
from app.crowd.guards import check_platform_rules
from app.crowd.registry import platform
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    CrowdCall,
    CrowdPosting,
    Hit,
    ReviewStatus,
    Study,
    utcnow,
)

log = logging.getLogger(__name__)

# -- money and standing calls: steps -------------------------------------------------------


@dataclass(frozen=True)
class CallRequest:
    """One money or standing call as asked for (`begin_call`, `calls.money_call`).

    `kind` is one of `CALL_KINDS`; its target is an assignment (approve, reject, bonus)
    or an annotator (block, unblock, qualify), or the posting (expire, reopen); `n` numbers the
    bonuses of one target; `category` is Prolific's rejection category; `platform_id`: a
    rejection of a flagged submission we never stored (no assignment), by the platform's
    id.
    """

    kind: str
    assignment_id: int | None = None
    annotator_id: int | None = None
    amount_cents: int | None = None
    reason: str | None = None
    n: int = 0
    category: str | None = None
    platform_id: str | None = None


@dataclass(frozen=True)
class _Target:
    assignment: Assignment | None
    annotator: Annotator | None


def _target(
    session: Session,
    posting: CrowdPosting,
    *,
    assignment_id: int | None,
    annotator_id: int | None,
) -> _Target:
    assignment = annotator = None
    if assignment_id is not None:
        assignment = session.get(Assignment, assignment_id)
        hit = session.get(Hit, assignment.hit_id) if assignment else None
        if assignment is None or hit is None or hit.study_id != posting.study_id:
            raise CrowdServiceError("no such assignment in this study", 404)
        annotator = session.get(Annotator, assignment.annotator_id)
    elif annotator_id is not None:
        annotator = session.get(Annotator, annotator_id)
        if annotator is None or annotator.study_id != posting.study_id:
            raise CrowdServiceError("no such annotator in this study", 404)
    if annotator is not None and (
        annotator.channel is not platform(posting.provider).channel or not annotator.external_id
    ):
        raise CrowdServiceError(f"this annotator did not come through {posting.provider}", 409)
    if annotator is not None and annotator.simulated:
        # A simulated crowd (`ebc simulate-http`, the demo's) works through invite links
        # but is nobody to review, pay or block on a channel.
        raise CrowdServiceError("this annotator is simulated: nothing to review or pay", 409)
    return _Target(assignment, annotator)


def begin_call(
    session: Session, posting: CrowdPosting, request: CallRequest, *, by: Actor | None = None
) -> CrowdCall:
    """The ledger row for one call, written before the call is made (commit it then).

    The same call (kind, target, `n`) has one deterministic token: a finished (`ok`)
    call is returned as it is (the caller makes nothing), an unfinished or failed one is
    made again with its token (`retrying` when the last attempt may have gone through).
    Bad requests are refused here (4xx) and change nothing.
    """
    kind, amount_cents, n = request.kind, request.amount_cents, request.n
    platform_id = request.platform_id
    if kind not in CALL_KINDS:
        raise CrowdServiceError(f"unknown call {kind!r}")
    target = _target(
        session, posting, assignment_id=request.assignment_id, annotator_id=request.annotator_id
    )
    a, worker = target.assignment, target.annotator
    reason = (request.reason or "").strip() or None
    ref = platform_ref(posting.provider, a) if a is not None else None
    if kind == "reject" and a is None and platform_id is not None:
        if flagged_submission(session, posting, platform_id) is None:
            raise CrowdServiceError(
                f"no submission {platform_id!r} that a sync of this posting flagged and we "
                "never stored",
                404,
            )
        ref = platform_id
    elif kind in ("approve", "reject", "bonus"):
        if a is None:
            raise CrowdServiceError(f"{kind} needs an assignment")
        if a.status is not AssignmentStatus.submitted or not ref:
            raise CrowdServiceError(
                "only a submitted platform assignment can be reviewed"
                + (" (an entry with its session id)" if _per_submission(posting) else ""),
                409,
            )
        own = is_own_work(session, posting, a)
        if not own and a.external_hit_id is not None:
            # Platform ids do not say which environment they belong to: a sandbox
            # assignment id must never reach production, nor the reverse.
            raise CrowdServiceError(not_own_work(posting, "this assignment"), 409)
        if not confirmed(posting.provider, a, own):
            raise CrowdServiceError(
                "the platform has not confirmed this assignment yet: sync first", 409
            )
    if kind == "reject" and not reason:
        raise CrowdServiceError("a rejection needs feedback for the worker")
    check_platform_rules(posting, kind, reason, request.category)
    if kind == "bonus":
        if amount_cents is None or not 1 <= amount_cents <= 100_000:
            raise CrowdServiceError("a bonus is between 1 cent and $1,000")
        if not reason:
            raise CrowdServiceError("a bonus needs a reason for the worker")
    if kind in ("block", "unblock", "qualify") and worker is None:
        raise CrowdServiceError(f"{kind} needs a worker")
    if kind == "block" and not reason:
        raise CrowdServiceError("blocking a worker needs a reason")
    if n < 0:
        raise CrowdServiceError("n must be 0 or more")

    done = _done_kinds(session, posting, _sharing(session, posting, a))
    if kind == "approve" and "reject" in done:
        raise CrowdServiceError("this assignment was rejected; it is not approved now", 409)
    if kind == "reject" and "approve" in done:
        raise CrowdServiceError("this assignment was approved; it cannot be rejected", 409)

    study = session.get(Study, posting.study_id)
    parts = posting_parts(posting, study)
    if kind == "bonus" and _per_submission(posting):
        token = request_token(kind, *parts, "participant", worker.external_id, n)
    elif kind in ("approve", "reject", "bonus"):
        token = request_token(kind, *parts, ref, n)
    elif kind == "qualify":
        token = request_token(kind, *parts, worker.external_id, n)
    else:
        token = _toggle_token(session, posting, kind, parts, worker)
    call = session.scalar(select(CrowdCall).where(CrowdCall.request_token == token))
    if call is not None:
        if kind == "bonus" and call.amount_cents != amount_cents:
            whose = "participant" if _per_submission(posting) else "assignment"
            raise CrowdServiceError(
                f"bonus #{n} of this {whose} is {call.amount_cents} cents "
                f"({call.status}); a further bonus needs another number",
                409,
            )
        if call.status != "ok":
            if call.status == "failed":  # refused, nothing done: asked anew
                call.reason = reason
            call.status = "pending" if call.status == "failed" else "retrying"
            call.by = actor_name(by)
            session.flush()
        return call
    call = CrowdCall(
        posting_id=posting.id,
        assignment_id=a.id if a else None,
        annotator_id=worker.id if worker else None,
        kind=kind,
        request_token=token,
        amount_cents=amount_cents,
        reason=reason,
        status="pending",
        by=actor_name(by),
    )
    session.add(call)
    session.flush()
    return call


def _per_submission(posting: CrowdPosting) -> bool:
    """Whether the platform reviews and pays per participant's submission (Prolific), not
    per assignment (MTurk, the local channel): `Capabilities.review_unit`."""
    return platform(posting.provider).caps.review_unit == "submission"


def bonuses_counted(session: Session, posting: CrowdPosting, a: Assignment) -> int:
    """Bonus calls in the ledger, whatever their outcome, that number bonuses with this
    assignment's: its own on MTurk (and locally), its participant's where a participant's
    submission is reviewed (a bonus is paid per participant there). The next bonus takes
    this number as its `n`."""
    query = select(func.count()).where(
        CrowdCall.posting_id == posting.id, CrowdCall.kind == "bonus"
    )
    if not _per_submission(posting):
        return session.scalar(query.where(CrowdCall.assignment_id == a.id))
    return session.scalar(query.where(CrowdCall.annotator_id == a.annotator_id))


def _sharing(session: Session, posting: CrowdPosting, a: Assignment | None) -> list[Assignment]:
    """The assignments one platform review covers: `a` alone on MTurk (and locally); where
    a participant's submission is reviewed, every submitted assignment of it (a bundle)."""
    if a is None:
        return []
    ref = platform_ref(posting.provider, a)
    if not _per_submission(posting) or not ref:
        return [a]
    return list(
        session.scalars(
            select(Assignment)
            .where(
                Assignment.annotator_id == a.annotator_id,
                ref_column(posting.provider) == ref,
                Assignment.status == AssignmentStatus.submitted,
            )
            .order_by(Assignment.id)
        )
    ) or [a]


def _done_kinds(session: Session, posting: CrowdPosting, sharing: list[Assignment]) -> set[str]:
    if not sharing:
        return set()
    return set(
        session.scalars(
            select(CrowdCall.kind).where(
                CrowdCall.posting_id == posting.id,
                CrowdCall.assignment_id.in_([a.id for a in sharing]),
                CrowdCall.status == "ok",
            )
        )
    )


def _toggle_token(
    session: Session, posting: CrowdPosting, kind: str, parts: tuple, worker: Annotator | None
) -> str:
    """Block, unblock, expire and reopen may be repeated in turns (block, unblock, block;
    expire, reopen, expire): the n-th of its kind gets the n-th token; an unfinished one
    is taken up again. A block or unblock that would repeat the last finished state is
    the same call (a no-op), unless our own block says otherwise: the Annotators page
    blocks and unblocks outside the ledger (on the local channel our block is the only
    one), so a block of someone it unblocked since is made anew. (Expire and reopen are
    only asked for when there is something to expire or reopen.)"""
    target = worker.external_id if worker is not None else "posting"
    calls = session.execute(
        select(CrowdCall.kind, CrowdCall.status, CrowdCall.request_token)
        .where(
            CrowdCall.posting_id == posting.id,
            CrowdCall.kind.in_(("block", "unblock") if worker is not None else (kind,)),
            (CrowdCall.annotator_id == worker.id) if worker is not None else true(),
        )
        .order_by(CrowdCall.id)
    ).all()
    if worker is not None:
        # Read after the calls: a block another run finished since this unit of work loaded
        # the worker committed its `ok` and the worker's flag together, so both show here
        # (with the flag loaded earlier, a double-clicked block made a second call).
        session.refresh(worker, attribute_names=["blocked"])
    mine = [c for c in calls if c.kind == kind]
    unfinished = [c for c in mine if c.status != "ok"]
    if unfinished:
        return unfinished[-1].request_token
    finished = [c for c in calls if c.status == "ok"]
    repeat = kind not in ("expire", "reopen") and finished and finished[-1].kind == kind
    if repeat and worker is not None and worker.blocked == (kind == "block"):
        return finished[-1].request_token
    return request_token(kind, *parts, target, len(mine))


def finish_call(
    session: Session,
    call_id: int,
    *,
    by: Actor | None,
    already: bool,
    platform_id: str | None = None,
    unsupported: str | None = None,
) -> None:
    """The call succeeded (or the platform says it was done before): its outcome on the
    assignment, annotator or posting, and in the audit log. Runs once per call.
    `unsupported`: the platform has no such call (Prolific: block), so it was done here
    only; the message stays on the call. `platform_id`: the submission of a call with no
    assignment."""
    call = session.get(CrowdCall, call_id)
    assert call is not None
    if call.status == "ok":
        return
    call.status = "ok"
    call.error = f"not on {unsupported}"[:4000] if unsupported else None
    call.finished_at = now = utcnow()
    a = session.get(Assignment, call.assignment_id) if call.assignment_id else None
    worker = session.get(Annotator, call.annotator_id) if call.annotator_id else None
    posting = session.get(CrowdPosting, call.posting_id)
    if call.kind in ("approve", "reject") and a is not None:
        for each in _sharing(session, posting, a):
            each.review_status = (
                ReviewStatus.approved if call.kind == "approve" else ReviewStatus.rejected
            )
            each.reviewed_at = now
            each.review_error = None
    elif call.kind == "bonus" and a is not None:
        a.bonus_cents = (a.bonus_cents or 0) + int(call.amount_cents or 0)
        a.review_error = None if a.review_status is not ReviewStatus.failed else a.review_error
    elif call.kind in ("block", "unblock") and worker is not None:
        from app.annotation import admin

        if call.kind == "block":
            admin.block(session, worker, reason=call.reason or "", exclude_past=worker.exclude_past)
        else:
            admin.unblock(session, worker)
    elif call.kind in ("expire", "reopen"):
        # Its units were recorded one by one as the platform took them (`calls`).
        posting.status = "expired" if call.kind == "expire" else "published"
    session.flush()
    outcome = "already done" if already else "ok"
    if unsupported:
        outcome = f"done here only; the platform has no such call: {unsupported}"
    _audit(session, call, posting, by, outcome, platform_id=platform_id)


def fail_call(
    session: Session,
    call_id: int,
    error: CrowdError,
    *,
    by: Actor | None,
    platform_id: str | None = None,
) -> None:
    """The call failed: the error on the call and on the assignment, and in the audit log.
    An approval or rejection that failed leaves the assignment (its whole submission, where
    a submission is reviewed) `failed` (so it shows); a failed bonus keeps the review status
    and records the error. An error that may have taken effect leaves the call `unknown`. A
    call that finished (`ok`: a concurrent attempt of the same call succeeded) is left as
    it is."""
    call = session.get(CrowdCall, call_id)
    assert call is not None
    if call.status == "ok":
        log.warning("call %s (%s) failed after it succeeded: %s", call.id, call.kind, error)
        return
    posting = session.get(CrowdPosting, call.posting_id)
    message = str(error)[:4000]
    call.status = "unknown" if error.maybe_done else "failed"
    call.error = message
    call.finished_at = utcnow()
    a = session.get(Assignment, call.assignment_id) if call.assignment_id else None
    for each in _sharing(session, posting, a) if call.kind in ("approve", "reject") else [a]:
        if each is None:
            continue
        if call.kind in ("approve", "reject"):
            each.review_status = ReviewStatus.failed
        each.review_error = f"{call.kind}: {message}"[:4000]
    session.flush()
    _audit(session, call, posting, by, call.status, message, platform_id=platform_id)


def _audit(
    session: Session,
    call: CrowdCall,
    posting: CrowdPosting,
    by: Actor | None,
    outcome: str,
    error: str | None = None,
    *,
    platform_id: str | None = None,
) -> None:
    a = session.get(Assignment, call.assignment_id) if call.assignment_id else None
    worker = session.get(Annotator, call.annotator_id) if call.annotator_id else None
    detail: dict[str, Any] = {
        "provider": posting.provider,
        "environment": posting.environment,
        "outcome": outcome,
        "request_token": call.request_token,
    }
    ref_key = platform(posting.provider).work_ref_key
    if a is not None:
        detail["assignment"] = a.public_id
        detail[ref_key] = platform_ref(posting.provider, a)
    elif platform_id is not None:  # a flagged submission we never stored
        detail[ref_key] = platform_id
    if worker is not None:
        detail["worker"] = worker.external_id
    if call.amount_cents is not None:
        detail["amount_cents"] = call.amount_cents
    if error:
        detail["error"] = error[:500]
    # Money calls are audited whoever makes them (a scheduled sync's qualification too).
    record_by(
        session,
        by or "system",
        f"crowd_{call.kind}",
        study=session.get(Study, posting.study_id),
        **detail,
    )
