"""The crowd service's rules on Prolific (the review of issue 13), end to end against the
Prolific stand-in on SQLite and PostgreSQL: a flagged submission we never stored can be
rejected, a block says what it did (here) and what it could not (on Prolific)."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.crowd import common, payments, sync
from app.models import Annotator, AuditEvent, CrowdCall
from tests.crowd.platforms.prolific.test_end_to_end import (  # noqa: F401  (fixtures)
    fake,
    handed_in,
    make_session,
    panel_study,
    prolific,
    published,
    settings,
    synced,
    visit,
    work,
)
from tests.crowd.prolific_standin import LONG_MESSAGE


def test_a_flagged_never_stored_submission_can_be_rejected(
    session, make_session, settings, fake, prolific, handed_in
):
    """Someone enters the study's (static) completion code without doing a HIT: the sync
    flags it once; the bulk approval lists it apart; it is rejected by its submission id,
    else Prolific's auto-approval pays for nothing."""
    (study_id,) = fake.studies
    stranger, pid = visit(fake, study_id)
    for _ in range(2):
        report = sync.sync(make_session, settings, "panel", prolific, by="cli")
        assert [f.external_assignment_id for f in report.flagged] == [stranger]
    session.expire_all()
    flags = session.scalars(
        select(AuditEvent).where(AuditEvent.action == "crowd_submission_flagged")
    ).all()
    assert len(flags) == 1

    plan = payments.preview_approve_all(make_session, "panel", prolific, apply_exclusions=False)
    assert [(f.platform_id, f.worker) for f in plan.flagged] == [(stranger, pid)]
    assert stranger not in {i.external_assignment_id for i in plan.approve}

    with pytest.raises(common.CrowdServiceError, match="100"):
        payments.reject(make_session, "panel", prolific, stranger, feedback="No.", by="cli")
    outcome = payments.reject(
        make_session, "panel", prolific, stranger, feedback=LONG_MESSAGE, category="NO_DATA",
        by="cli",
    )  # fmt: skip
    assert outcome.made and fake.submissions[stranger]["status"] == "REJECTED"
    body = [b for m, p, b in fake.bodies if p == f"submissions/{stranger}/transition/"][-1]
    assert body["rejection_category"] == "NO_DATA"
    session.expire_all()
    (event,) = session.scalars(select(AuditEvent).where(AuditEvent.action == "crowd_reject"))
    assert event.detail["submission"] == stranger
    plan = payments.preview_approve_all(make_session, "panel", prolific, apply_exclusions=False)
    assert plan.flagged == []


def test_blocking_a_prolific_participant_blocks_them_here_and_says_prolific_was_not_told(
    session, make_session, settings, fake, prolific, synced
):
    """Prolific's API has no block call: the participant is blocked here (their entries
    are refused), and the outcome and the ledger say that Prolific was not told."""
    _, people = synced
    _, pid, _ = people["b"]
    outcome = payments.block(make_session, "panel", prolific, pid, reason="bot", by="cli")
    assert outcome.made and "here only" in outcome.detail and "Custom Blocklist" in outcome.detail
    session.expire_all()
    who = session.scalar(select(Annotator).where(Annotator.external_id == pid))
    assert who.blocked
    (call,) = session.scalars(select(CrowdCall).where(CrowdCall.kind == "block")).all()
    assert call.status == "ok" and "not on prolific" in call.error
    (event,) = session.scalars(select(AuditEvent).where(AuditEvent.action == "crowd_block"))
    assert "here only" in event.detail["outcome"]
    again = payments.block(make_session, "panel", prolific, pid, reason="bot", by="cli")
    assert not again.made

    lifted = payments.unblock(make_session, "panel", prolific, pid, by="cli")
    assert lifted.made and "here only" in lifted.detail
    session.expire_all()
    assert not session.get(Annotator, who.id).blocked
    assert fake.calls and not any("block" in path for _, path in fake.calls)
