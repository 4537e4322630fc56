"""The crowd service's money and integrity rules on MTurk (the review of issue 13), end to
end against the MTurk stand-in on SQLite and PostgreSQL: flagged work we never stored is
rejectable, a bonus is never paid twice whatever lapses or times out, sandbox work never
counts in a production study, recovered work keeps the time checks, a bulk approval does
only what its preview showed, the ledger never loses a success."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from botocore.exceptions import ReadTimeoutError
from sqlalchemy import func, select

from app.annotation.errors import AnnotationError
from app.annotation.identities import check_submit_to
from app.crowd import common, ledger, payments, sync
from app.crowd.base import CrowdError
from app.crowd.platforms.mturk.client import PRODUCTION_ENDPOINT
from app.db import unit_of_work
from app.models import (
    Annotator,
    Assignment,
    AuditEvent,
    CrowdCall,
    CrowdHit,
    CrowdPosting,
    Judgment,
    ReviewStatus,
)
from tests.crowd.mturk_standin import answer_xml
from tests.crowd.platforms.mturk.test_end_to_end import (  # noqa: F401  (fixtures)
    aws_env,
    crowd_study,
    make_session,
    mturk,
    published,
    settings,
    standin,
    submitted,
    work,
)


def flag_events(session) -> list[AuditEvent]:
    return session.scalars(
        select(AuditEvent).where(AuditEvent.action == "crowd_submission_flagged")
    ).all()


# -- flagged submissions we never stored -------------------------------------------------


def test_a_flagged_never_stored_mturk_submission_can_be_rejected(
    session, make_session, settings, mturk, standin
):
    """A worker posts straight to MTurk's externalSubmit, never to us. The sync flags it
    (once: a later sync records nothing more); the bulk approval lists it apart and never
    approves it; it is rejected by its MTurk id, else MTurk pays it after the delay."""
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    h1 = session.scalars(select(CrowdHit.external_hit_id)).first()
    junk = platform.add_assignment(h1, "WBAD", answers={"x": "1"})
    real = platform.add_assignment(h1, "W1")
    work(session, study, "W1", real, hit_external=h1)
    for _ in range(2):
        report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
        assert [f.external_assignment_id for f in report.flagged] == [junk]
    session.expire_all()
    assert len(flag_events(session)) == 1

    plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=False)
    assert [i.external_assignment_id for i in plan.approve] == [real]
    assert [(f.platform_id, f.worker) for f in plan.flagged] == [(junk, "WBAD")]
    with pytest.raises(common.CrowdServiceError, match="preview again"):
        payments.approve_all(
            make_session, settings, "crowd", mturk, by="cli",
            approvals_seen=[i.public_id for i in plan.approve] + [junk],
        )  # fmt: skip
    done = payments.approve_all(
        make_session, settings, "crowd", mturk, by="cli",
        approvals_seen=[i.public_id for i in plan.approve],
    )  # fmt: skip
    assert done.approved == 1 and platform.assignments[junk]["AssignmentStatus"] == "Submitted"

    outcome = payments.reject(make_session, "crowd", mturk, junk, feedback="No work.", by="cli")
    assert outcome.made and platform.assignments[junk]["AssignmentStatus"] == "Rejected"
    again = payments.reject(make_session, "crowd", mturk, junk, feedback="No work.", by="cli")
    assert not again.made and platform.count("RejectAssignment") == 1
    session.expire_all()
    (call,) = session.scalars(select(CrowdCall).where(CrowdCall.kind == "reject")).all()
    assert (call.assignment_id, call.status) == (None, "ok")
    (event,) = session.scalars(select(AuditEvent).where(AuditEvent.action == "crowd_reject"))
    assert event.detail["external_assignment_id"] == junk
    plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=False)
    assert plan.flagged == []

    # Only a submission a sync flagged: any other platform id is not ours to touch.
    with pytest.raises(common.CrowdServiceError) as refused:
        payments.reject(make_session, "crowd", mturk, "A" * 30, feedback="No.", by="cli")
    assert refused.value.status_code == 404


# -- a bonus is paid once ---------------------------------------------------------------


def _pending_bonus(make_session, assignment_id: int, cents: int) -> str:
    """A process wrote a bonus's ledger row and died before recording an outcome."""
    with unit_of_work(make_session) as s:
        posting = s.scalar(select(CrowdPosting))
        call = ledger.begin_call(
            s,
            posting,
            ledger.CallRequest(
                "bonus", assignment_id=assignment_id, amount_cents=cents, reason="Thanks"
            ),
        )
        return call.request_token


def test_a_bonus_retried_after_the_token_lapsed_is_not_paid_twice(
    session, make_session, mturk, standin, submitted
):
    """MTurk forgets a UniqueRequestToken after 24 hours: the retry next week asks
    ListBonusPayments first, finds the payment, and records it without paying again."""
    platform, _ = standin
    _, leases = submitted
    token = _pending_bonus(make_session, leases[1].id, 40)
    mturk.bonus("W1", leases[1].external_assignment_id, 40, reason="Thanks", request_token=token)
    platform.bonuses = {f"expired-{k}": v for k, v in platform.bonuses.items()}  # 24 h later
    outcome = payments.bonus(
        make_session, "crowd", mturk, leases[1].public_id, 40, reason="Thanks", by="c"
    )
    assert outcome.made and outcome.detail == "already done"
    assert len(platform.bonuses) == 1 and platform.count("SendBonus") == 1
    session.expire_all()
    assert session.get(Assignment, leases[1].id).bonus_cents == 40


def test_a_bonus_whose_answer_never_came_is_unknown_then_found_not_paid_again(
    session, make_session, mturk, standin, submitted
):
    """Every attempt is paid and its answer lost: not a refusal, so the outcome is
    unknown (never `failed`, which a retry would pay again); the retry finds it paid."""
    platform, _ = standin
    _, leases = submitted
    real = mturk.client.send_bonus

    def paid_then_timed_out(**params):
        real(**params)
        raise ReadTimeoutError(endpoint_url=PRODUCTION_ENDPOINT)

    mturk.client.send_bonus = paid_then_timed_out
    with pytest.raises(CrowdError, match="may have reached MTurk"):
        payments.bonus(make_session, "crowd", mturk, leases[0].public_id, 25, reason="T", by="c")
    session.expire_all()
    (call,) = session.scalars(select(CrowdCall).where(CrowdCall.kind == "bonus")).all()
    assert call.status == "unknown" and len(platform.bonuses) == 1
    platform.bonuses = {f"expired-{k}": v for k, v in platform.bonuses.items()}
    mturk.client.send_bonus = real
    again = payments.bonus(
        make_session, "crowd", mturk, leases[0].public_id, 25, reason="T", by="c"
    )
    assert again.made and again.detail == "already done" and len(platform.bonuses) == 1


def test_a_bonus_that_died_before_its_call_is_paid_once_after_mturk_lists_none(
    session, make_session, mturk, standin, submitted
):
    """MTurk lists a payment as soon as it is made: none listed means none made, so the
    retry pays it (a platform that lists payments later refuses instead: Prolific)."""
    platform, _ = standin
    _, leases = submitted
    _pending_bonus(make_session, leases[2].id, 30)
    outcome = payments.bonus(
        make_session, "crowd", mturk, leases[2].public_id, 30, reason="Thanks", by="c"
    )
    assert outcome.made and outcome.detail == "ok"
    assert platform.count("ListBonusPayments") == 1 and len(platform.bonuses) == 1


def test_a_failure_after_a_success_never_undoes_it(session, make_session, mturk, submitted):
    """A concurrent attempt of the same call that failed after it succeeded leaves the call
    `ok` (else the next run would pay it again)."""
    _, leases = submitted
    with unit_of_work(make_session) as s:
        posting = s.scalar(select(CrowdPosting))
        call = ledger.begin_call(
            s,
            posting,
            ledger.CallRequest("bonus", assignment_id=leases[0].id, amount_cents=10, reason="T"),
        )
        call_id = call.id
    with unit_of_work(make_session) as s:
        ledger.finish_call(s, call_id, by="a", already=False)
    with unit_of_work(make_session) as s:
        ledger.fail_call(s, call_id, CrowdError("duplicate refused"), by="b")
    session.expire_all()
    got = session.get(CrowdCall, call_id)
    assert (got.status, got.error) == ("ok", None)
    a = session.get(Assignment, leases[0].id)
    assert a.bonus_cents == 10 and a.review_error is None


def test_a_retried_call_keeps_the_reason_it_was_made_with(
    session, make_session, mturk, standin, submitted
):
    platform, _ = standin
    _, leases = submitted
    ref = leases[0].public_id
    platform.faults["SendBonus"] = ["fault"] * 3  # may have been paid: unknown
    with pytest.raises(CrowdError):
        payments.bonus(make_session, "crowd", mturk, ref, 25, reason="First words", by="c")
    payments.bonus(make_session, "crowd", mturk, ref, 25, reason="Other words", by="c")
    assert [b["Reason"] for b in platform.bonuses.values()] == ["First words"]
    # A refusal did nothing: the reason given with the retry is the one sent.
    platform.faults["RejectAssignment"] = ["refuse"]
    with pytest.raises(CrowdError):
        payments.reject(make_session, "crowd", mturk, leases[1].public_id, feedback="a", by="c")
    payments.reject(make_session, "crowd", mturk, leases[1].public_id, feedback="b", by="c")
    rejected = platform.assignments[leases[1].external_assignment_id]
    assert rejected["RequesterFeedback"] == "b"
    session.expire_all()
    reasons = dict(session.execute(select(CrowdCall.kind, CrowdCall.reason)).all())
    assert reasons == {"bonus": "First words", "reject": "b"}


# -- work that counts --------------------------------------------------------------------


def test_sandbox_work_does_not_count_in_a_production_study(
    session, make_session, settings, mturk, standin
):
    """A pilot in the sandbox, then the study set to production (`sandbox: false`): the
    sandbox's turkSubmitTo is refused from then on, and a sandbox sync confirms nothing
    (its work stays `unverified`, out of the results); the pilot's work keeps its state."""
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)  # the sandbox posting
    h1, h2 = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()[:2]
    pilot, _ = work(session, study, "PILOT", platform.add_assignment(h1, "PILOT"), hit_external=h1)
    sync.sync(make_session, settings, "crowd", mturk, by="cli")
    assert check_submit_to(study, "https://workersandbox.mturk.com") == (
        "https://workersandbox.mturk.com"
    )

    study.channels = {**study.channels, "mturk": {**study.channels["mturk"], "sandbox": False}}
    session.flush()
    with pytest.raises(AnnotationError, match="sandbox") as refused:
        check_submit_to(study, "https://workersandbox.mturk.com/")
    assert refused.value.status_code == 400
    assert check_submit_to(study, "https://www.mturk.com") == "https://www.mturk.com"

    late, _ = work(session, study, "LATE", platform.add_assignment(h2, "LATE"), hit_external=h2)
    report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    assert (report.confirmed, report.sandbox_kept_out) == (0, 1)
    session.expire_all()
    assert session.get(Assignment, late.id).unverified
    assert not session.get(Assignment, pilot.id).unverified


def test_recovered_work_keeps_the_time_checks(session, make_session, settings, mturk, standin):
    """A worker answers at once and posts straight to MTurk; the sync recovers it ten
    minutes later. Judged as of MTurk's SubmitTime: too fast, and not late."""
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    h1 = session.scalars(select(CrowdHit.external_hit_id)).first()
    external = platform.add_assignment(h1, "W1")
    lease, chosen = work(session, study, "W1", external, hit_external=h1, store=False)
    a = session.get(Assignment, lease.id)
    # The page was served 10 minutes ago (the lease runs out 30 minutes after it); the
    # worker submitted to MTurk 2 s after it.
    a.page_served_at = a.leased_at = (a.page_served_at or a.leased_at) - timedelta(minutes=10)
    a.expires_at = a.page_served_at + timedelta(minutes=30)
    session.flush()
    fields = {"assignment": lease.public_id} | {f"o{p}": str(s) for p, s in chosen.items()}
    platform.assignments[external]["Answer"] = answer_xml(fields)
    platform.assignments[external]["SubmitTime"] = time.time() - 598

    report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    assert report.recovered == 1
    session.expire_all()
    judged = session.scalars(select(Judgment).where(Judgment.assignment_id == lease.id)).all()
    assert len(judged) == len(chosen) and all(j.too_fast for j in judged)
    stored = session.get(Assignment, lease.id)
    assert not stored.late
    assert abs((stored.submitted_at - a.page_served_at).total_seconds() - 2) < 1.5


def test_recovered_work_is_not_too_fast_when_mturks_clock_is_behind_ours(
    session, make_session, settings, mturk, standin
):
    """MTurk's SubmitTime is before the time we served the page (the two clocks differ):
    how long the worker took is unknown, so no judgment is flagged too fast."""
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    h1 = session.scalars(select(CrowdHit.external_hit_id)).first()
    external = platform.add_assignment(h1, "W1")
    lease, chosen = work(session, study, "W1", external, hit_external=h1, store=False)
    a = session.get(Assignment, lease.id)
    a.page_served_at = a.leased_at = (a.page_served_at or a.leased_at) - timedelta(minutes=10)
    session.flush()
    fields = {"assignment": lease.public_id} | {f"o{p}": str(s) for p, s in chosen.items()}
    platform.assignments[external]["Answer"] = answer_xml(fields)
    platform.assignments[external]["SubmitTime"] = a.page_served_at.timestamp() - 5

    report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    assert report.recovered == 1
    session.expire_all()
    judged = session.scalars(select(Judgment).where(Judgment.assignment_id == lease.id)).all()
    assert len(judged) == len(chosen) and not any(j.too_fast for j in judged)
    stored = session.get(Assignment, lease.id)
    assert not stored.late and stored.submitted_at >= a.page_served_at


# -- bulk approval: only what the preview showed -----------------------------------------


def test_a_confirmation_whose_rejections_vanished_is_refused(
    session, make_session, settings, mturk, standin, submitted
):
    """The preview showed W1 to reject (blocked); W1 is unblocked before the confirmation:
    W1 would be approved and paid instead, so nothing is done (409)."""
    platform, _ = standin
    study, _ = submitted
    study.exclusions = {**(study.exclusions or {}), "attention_min_accuracy": None}
    w1 = session.scalar(select(Annotator).where(Annotator.external_id == "W1"))
    w1.blocked, w1.exclude_past = True, True
    session.flush()
    plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=True)
    assert [i.worker for i in plan.reject] == ["W1"]
    w1.blocked = False
    session.flush()
    with pytest.raises(common.CrowdServiceError, match="preview again") as refused:
        payments.approve_all(
            make_session, settings, "crowd", mturk, apply_exclusions=True,
            approvals_seen=[i.public_id for i in plan.approve],
            rejections_seen=[i.public_id for i in plan.reject],
            reject_feedback="Blocked.", by="u",
        )  # fmt: skip
    assert refused.value.status_code == 409
    assert platform.count("ApproveAssignment") == platform.count("RejectAssignment") == 0
    assert session.scalar(select(func.count()).select_from(CrowdCall)) == 0


def test_work_confirmed_after_the_preview_waits_for_the_next_one(
    session, make_session, settings, mturk, standin, submitted
):
    platform, _ = standin
    study, leases = submitted
    plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=False)
    seen = [i.public_id for i in plan.approve[:2]]
    hit = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()[3]
    newer, _ = work(session, study, "W9", platform.add_assignment(hit, "W9"), hit_external=hit)
    sync.sync(make_session, settings, "crowd", mturk, by="cli")
    report = payments.approve_all(
        make_session, settings, "crowd", mturk, approvals_seen=seen, by="u"
    )
    assert (report.approved, report.left) == (2, 2)
    session.expire_all()
    assert session.get(Assignment, newer.id).review_status is ReviewStatus.pending
    assert session.get(Assignment, leases[2].id).review_status is ReviewStatus.pending


# -- the production guard ----------------------------------------------------------------


def test_an_endpoint_at_mturk_production_needs_the_production_setting_and_environment(
    settings,
):
    live = settings.model_copy(update={"mturk_endpoint_url": PRODUCTION_ENDPOINT})
    for environment in (None, "sandbox"):
        with pytest.raises(common.CrowdServiceError, match="real money") as refused:
            common.provider_for(live, "mturk", environment)
        assert refused.value.status_code == 403
    with pytest.raises(common.CrowdServiceError, match="EBC_MTURK_PRODUCTION"):
        common.provider_for(live, "mturk", "production")
    allowed = live.model_copy(update={"mturk_production": True})
    assert common.provider_for(allowed, "mturk", "production").environment == "production"
    with pytest.raises(common.CrowdServiceError, match="real money"):
        common.provider_for(allowed, "mturk", "sandbox")


# -- the CLI -----------------------------------------------------------------------------


def test_the_cli_approves_what_it_previewed_and_rejects_a_flagged_submission(
    migrated_copy, standin, monkeypatch
):
    """`ebc crowd approve --all` lists a flagged submission apart (never approved) with
    the command that rejects it, and `ebc crowd reject` takes its MTurk id."""
    from typer.testing import CliRunner

    from app.cli import cli
    from app.db import build_engine, make_sessionmaker

    platform, url = standin
    on_file = migrated_copy.settings(
        base_url="https://ebc.example.org", mturk_endpoint_url=url, crowd_calls_per_second=100
    )
    engine = build_engine(on_file)
    try:
        make = make_sessionmaker(engine)
        with make() as session:
            study = crowd_study(session)
            session.commit()
        provider = common.provider_for(on_file, "mturk")
        published(session, make, on_file, provider)
        with make() as session:
            h1 = session.scalars(select(CrowdHit.external_hit_id)).first()
            good = platform.add_assignment(h1, "W1")
            work(session, session.merge(study), "W1", good, hit_external=h1)
            session.commit()
        junk = platform.add_assignment(h1, "WBAD")
        sync.sync(make, on_file, "crowd", provider, by="cli")
    finally:
        engine.dispose()

    for name, value in {
        "EBC_DATABASE_URL": migrated_copy.url,
        "EBC_ENV": "test",
        "EBC_BASE_URL": "https://ebc.example.org",
        "EBC_MTURK_ENDPOINT_URL": url,
        "EBC_CROWD_CALLS_PER_SECOND": "100",
    }.items():
        monkeypatch.setenv(name, value)
    approved = CliRunner().invoke(cli, ["crowd", "approve", "crowd", "--all", "--yes"])
    assert approved.exit_code == 0, approved.output
    assert "to approve: 1" in approved.output and "approved 1, rejected 0" in approved.output
    assert f"ebc crowd reject --assignment {junk}" in approved.output
    assert platform.assignments[good]["AssignmentStatus"] == "Approved"
    assert platform.assignments[junk]["AssignmentStatus"] == "Submitted"

    rejected = CliRunner().invoke(
        cli, ["crowd", "reject", "crowd", "--assignment", junk, "--feedback", "No work."]
    )
    assert rejected.exit_code == 0, rejected.output
    assert f"rejected {junk}" in rejected.output
    assert platform.assignments[junk]["AssignmentStatus"] == "Rejected"
