"""The driver of one money or standing call (`money_call`): its ledger row committed
first (`ledger.begin_call`), the platform call, its outcome committed after
(`ledger.finish_call` / `ledger.fail_call`), each in its own writer unit of work.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from app.audit.service import Actor
from app.crowd.base import (
    AlreadyDone,
    CapQualifying,
    CrowdError,
    CrowdProvider,
    PaidBonuses,
    Reopening,
    Unsupported,
)
from app.crowd.claims import writing
from app.crowd.common import CrowdServiceError, SessionFactory, lifetime_seconds, platform_ref
from app.crowd.guards import check_bonus_paid
from app.crowd.ledger import CallRequest, begin_call, fail_call, finish_call
from app.models import Annotator, Assignment, CrowdHit, CrowdPosting


@dataclass(frozen=True)
class CallOutcome:
    call_id: int | None
    kind: str
    made: bool  # the call was made (or finished) now; False: it had been done before
    detail: str = ""


def money_call(
    make_session: SessionFactory,
    provider: CrowdProvider,
    posting_id: int,
    request: CallRequest,
    *,
    by: Actor | None,
) -> CallOutcome:
    """One ledgered call (`request`, as `ledger.begin_call` takes it): its row committed
    first, the call, its outcome committed after.

    A call already finished is not made again (`made=False`). The platform's "already
    done" (an approval MTurk shows, a bonus token it has seen) finishes the call as a
    success. Any other failure is recorded on the call and the assignment, then raised.
    Block and unblock on a platform without them (`Unsupported`) are done here, and the
    outcome's `detail` says the platform was not told.

    A bonus whose earlier attempt may have been paid (`retrying`) on a platform that lists
    the payments (`PaidBonuses`: Prolific, MTurk, whose token lapses after 24 hours) is
    first looked for there: finished as done when listed, made again (same token) when the
    listing is final and shows nothing (MTurk), else refused (409) for a manual check.
    """
    kind, category, platform_id = request.kind, request.category, request.platform_id
    with writing(make_session) as session:
        posting = session.get(CrowdPosting, posting_id)
        if posting is None:
            raise CrowdServiceError("no such posting", 404)
        call = begin_call(session, posting, request, by=by)
        if call.status == "ok":
            return CallOutcome(call.id, kind, made=False, detail="already done")
        call_id, token, retrying = call.id, call.request_token, call.status == "retrying"
        reason = call.reason  # the one it was first made with (see the module)
        assignment = session.get(Assignment, call.assignment_id) if call.assignment_id else None
        worker = session.get(Annotator, call.annotator_id) if call.annotator_id else None
        external_assignment = (
            platform_ref(posting.provider, assignment) if assignment else platform_id
        )
        if assignment is not None and worker is None:
            worker = session.get(Annotator, assignment.annotator_id)
        worker_id = worker.external_id if worker else None
        # Expire takes the live units down; reopen lists the expired ones again.
        units = list(
            session.scalars(
                select(CrowdHit.external_hit_id).where(
                    CrowdHit.posting_id == posting.id,
                    CrowdHit.status == ("expired" if kind == "reopen" else "published"),
                    CrowdHit.external_hit_id.is_not(None),
                )
            )
        )
        external_id = posting.external_id or ""
        cap_id = posting.settings.get("cap_qualification_id")
        lifetime = lifetime_seconds(posting.settings) if kind == "reopen" else 0
    if kind == "bonus" and retrying and isinstance(provider, PaidBonuses):
        paid = provider.submission_bonuses_cents(external_assignment)
        with writing(make_session) as session:
            if check_bonus_paid(
                session, call_id, paid, listed_at_once=provider.bonuses_listed_at_once
            ):
                finish_call(session, call_id, by=by, already=True)
                return CallOutcome(call_id, kind, made=True, detail="already done")
    already = False
    try:
        if kind == "approve":
            provider.approve(external_assignment, feedback=reason)
        elif kind == "reject":
            if category is not None:  # Prolific's; refused for other platforms before
                provider.reject(external_assignment, feedback=reason or "", category=category)
            else:
                provider.reject(external_assignment, feedback=reason or "")
        elif kind == "bonus":
            provider.bonus(
                worker_id,
                external_assignment,
                int(request.amount_cents),
                reason=reason or "",
                request_token=token,
            )
        elif kind == "block":
            provider.block(worker_id, reason=reason or "")
        elif kind == "unblock":
            provider.unblock(worker_id, reason=reason or "")
        elif kind == "qualify":
            if not (cap_id and isinstance(provider, CapQualifying)):
                raise CrowdError("this posting has no cap qualification")
            provider.grant_cap(cap_id, worker_id)
        elif kind == "expire":
            provider.expire(external_id, units)
        elif kind == "reopen":
            if not isinstance(provider, Reopening):
                raise Unsupported(f"{provider.name} cannot list expired work again")
            provider.reopen(external_id, units, lifetime)
    except AlreadyDone:
        already = True
    except Unsupported as exc:
        if kind not in ("block", "unblock"):
            with writing(make_session) as session:
                fail_call(session, call_id, exc, by=by, platform_id=platform_id)
            raise
        note = f"{provider.name}: {exc}"
        with writing(make_session) as session:
            finish_call(session, call_id, by=by, already=False, unsupported=note)
        return CallOutcome(call_id, kind, made=True, detail=f"done here only; not on {note}")
    except CrowdError as exc:
        with writing(make_session) as session:
            fail_call(session, call_id, exc, by=by, platform_id=platform_id)
        raise
    with writing(make_session) as session:
        finish_call(session, call_id, by=by, already=already, platform_id=platform_id)
    return CallOutcome(call_id, kind, made=True, detail="already done" if already else "ok")
