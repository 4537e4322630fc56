"""The driver of one money or standing call (`money_call`): its ledger row committed
first (`ledger.begin_call`), the platform call, its outcome committed after
(`ledger.finish_call` / `ledger.fail_call`), each in its own writer unit of work.

The calls of one posting are serialised: the ledger row is written under the posting's
lock, so a second run of the same call (a double click, two publishes of an expired
posting) waits, then finds the first one's row (the same token) and takes it up, rather
than inserting the token again. An expiry or a reopen is made unit by unit, each unit's
row recorded as its call returns (`_expire_or_reopen`), so our rows say what the
platform did even when the call stops half-way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

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
from app.crowd.claims import lock_posting, writing
from app.crowd.common import (
    DOWN_UNITS,
    LIVE_UNITS,
    SessionFactory,
    lapse_time,
    lifetime_seconds,
    platform_ref,
    unit_state,
)
from app.crowd.guards import check_bonus_paid
from app.crowd.ledger import CallRequest, begin_call, fail_call, finish_call
from app.models import Annotator, Assignment, CrowdHit, utcnow

# What an expiry or a reopen sends its call to (by `common.unit_state`) and what it makes
# of each unit the platform took.
TOGGLES = {"expire": (LIVE_UNITS, "expired"), "reopen": (DOWN_UNITS, "published")}


@dataclass(frozen=True)
class CallOutcome:
    call_id: int | None
    kind: str
    made: bool  # the call was made (or finished) now; False: it had been done before
    detail: str = ""
    units: int = 0  # expire, reopen: the units it was made for


@dataclass(frozen=True)
class _Unit:
    row_id: int
    external_id: str


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

    An expiry or a reopen is made for the units it finds under the posting's lock
    (`_units_for`), one at a time (`_expire_or_reopen`); with none, it is not made
    (`made=False`, "nothing to expire").
    """
    kind, category, platform_id = request.kind, request.category, request.platform_id
    with writing(make_session) as session:
        posting = lock_posting(session, posting_id)  # one call of a posting at a time
        units = _units_for(session, posting.id, kind) if kind in TOGGLES else []
        if kind in TOGGLES and not units:
            return CallOutcome(None, kind, made=False, detail=f"nothing to {kind}")
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
        external_id = posting.external_id or ""
        cap_id = posting.settings.get("cap_qualification_id")
        where = (posting.provider, dict(posting.settings))
    if kind in TOGGLES:
        return _expire_or_reopen(
            make_session, provider, call_id, kind, external_id, units, where, by=by
        )
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


def _units_for(session: Session, posting_id: int, kind: str) -> list[_Unit]:
    """The units an expiry takes down (published and not lapsed, or `unknown`) or a reopen
    lists again (expired, lapsed, or `unknown`), read under the posting's lock: the call
    is made for these and records these only (a unit another run publishes meanwhile is
    not touched)."""
    rows = session.execute(
        select(CrowdHit.id, CrowdHit.external_hit_id)
        .where(
            CrowdHit.posting_id == posting_id,
            CrowdHit.external_hit_id.is_not(None),
            unit_state(utcnow()).in_(TOGGLES[kind][0]),
        )
        .order_by(CrowdHit.id)
    ).all()
    return [_Unit(row_id, external) for row_id, external in rows]


def _expire_or_reopen(
    make_session: SessionFactory,
    provider: CrowdProvider,
    call_id: int,
    kind: str,
    external_id: str,
    units: list[_Unit],
    where: tuple[str, dict],
    *,
    by: Actor | None,
) -> CallOutcome:
    """Expire or reopen the ledgered call's `units` one at a time, each unit's row recorded
    as the platform takes it: `expired`, or `published` with the time it lapses again
    (`common.lapse_time`: the posting's lifetime from now on MTurk). A unit whose answer
    was lost (`maybe_done`) may have changed or not: `unknown`, which the next expiry and
    the next reopen both include. The first failure stops the call (the units not reached
    keep their state), fails it (`ledger.fail_call`) and is raised; the call made again
    (its token) is made for the units still to do. Once every unit is done the posting
    takes the new state (`ledger.finish_call`)."""
    provider_name, posting_settings = where
    now_is = TOGGLES[kind][1]
    try:
        if kind == "reopen" and not isinstance(provider, Reopening):
            raise Unsupported(f"{provider.name} cannot list expired work again")
        lifetime = lifetime_seconds(posting_settings) if kind == "reopen" else 0
        for unit in units:
            started = utcnow()
            try:
                if kind == "expire":
                    provider.expire(external_id, [unit.external_id])
                else:
                    provider.reopen(external_id, [unit.external_id], lifetime)
            except AlreadyDone:
                pass
            except CrowdError as exc:
                if exc.maybe_done:
                    with writing(make_session) as session:
                        _record_unit(session, unit.row_id, "unknown", None)
                raise
            until = started if kind == "expire" else None
            if kind == "reopen":
                until = lapse_time(provider_name, started, posting_settings)
            with writing(make_session) as session:
                _record_unit(session, unit.row_id, now_is, until)
    except CrowdError as exc:
        with writing(make_session) as session:
            fail_call(session, call_id, exc, by=by)
        raise
    with writing(make_session) as session:
        finish_call(session, call_id, by=by, already=False)
    return CallOutcome(call_id, kind, made=True, detail="ok", units=len(units))


def _record_unit(session: Session, row_id: int, status: str, expires_at: datetime | None) -> None:
    """A unit's state as the platform's answer says, and when it stops (or stopped) being
    listed."""
    row = session.get(CrowdHit, row_id)
    if row is not None:  # None: the posting was deleted meanwhile
        row.status, row.expires_at = status, expires_at
        session.flush()
