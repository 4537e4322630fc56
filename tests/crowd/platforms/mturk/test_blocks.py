"""Block and unblock on MTurk when the Annotators page changed our block in between
(`ledger._toggle_token`): the ledger then makes a real platform call, checked against
botocore's Stubber (parameters validated against AWS's service model), on SQLite and
PostgreSQL. The work comes from the MTurk stand-in (published, worked, synced).

MTurk documents DeleteWorkerBlock for a worker it does not block as a success ("If the
specified Worker is not blocked, this operation returns successfully"), so there is no
"not blocked" error to map; any error it does give is recorded and raised, never
swallowed."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import pytest
from botocore.stub import Stubber
from sqlalchemy import select

from app.annotation import admin
from app.crowd import payments
from app.crowd.base import CrowdError
from app.crowd.platforms.mturk.client import make_client
from app.crowd.platforms.mturk.provider import MTurkProvider
from app.models import Annotator, AuditEvent, CrowdCall
from tests.crowd.platforms.mturk.test_end_to_end import (  # noqa: F401  (fixtures)
    aws_env,
    make_session,
    mturk,
    settings,
    standin,
    submitted,
)
from tests.crowd.platforms.mturk.test_provider import request_error


@pytest.fixture
def stubbed():
    """The MTurk provider of the sandbox posting on a stubbed client: every call it makes
    must be one the test expects."""
    client = make_client("sandbox")
    with Stubber(client) as stub:
        yield MTurkProvider("sandbox", client=client), stub
        stub.assert_no_pending_responses()


def _worker(session) -> Annotator:
    session.expire_all()
    return session.scalar(select(Annotator).where(Annotator.external_id == "W0"))


def _calls(session, kind: str) -> list[CrowdCall]:
    # In the order made: without ORDER BY, PostgreSQL may list an updated row last.
    return session.scalars(
        select(CrowdCall).where(CrowdCall.kind == kind).order_by(CrowdCall.id)
    ).all()


def test_an_unblock_after_the_annotators_page_blocked_again_is_made_on_mturk(
    session, make_session, submitted, stubbed
):
    provider, stub = stubbed
    stub.add_response("create_worker_block", {}, {"WorkerId": "W0", "Reason": "Random clicks"})
    stub.add_response("delete_worker_block", {}, {"WorkerId": "W0", "Reason": "Appeal"})
    payments.block(make_session, "crowd", provider, "W0", reason="Random clicks", by="cli")
    payments.unblock(make_session, "crowd", provider, "W0", reason="Appeal", by="cli")
    assert not _worker(session).blocked

    # Blocked here only (the Annotators page: MTurk is not told), then unblocked through
    # the ledger: a new call, made on MTurk, which answers as documented for a worker it
    # does not block (success, an empty body).
    admin.block(session, _worker(session), reason="page", exclude_past=False, by="cli")
    session.flush()
    stub.add_response("delete_worker_block", {}, {"WorkerId": "W0", "Reason": "Second look"})
    outcome = payments.unblock(
        make_session, "crowd", provider, "W0", reason="Second look", by="cli"
    )
    assert outcome.made and outcome.detail == "ok"
    assert not _worker(session).blocked
    first, second = _calls(session, "unblock")
    assert (first.status, second.status) == ("ok", "ok")
    assert first.request_token != second.request_token
    # Asked again: the same call, a no-op (the stub would refuse an unexpected call).
    again = payments.unblock(make_session, "crowd", provider, "W0", reason="Second look", by="cli")
    assert not again.made and len(_calls(session, "unblock")) == 2


def test_an_error_from_mturk_on_a_repeated_unblock_is_recorded_and_raised(
    session, make_session, submitted, stubbed
):
    provider, stub = stubbed
    stub.add_response("create_worker_block", {}, {"WorkerId": "W0", "Reason": "Random clicks"})
    stub.add_response("delete_worker_block", {}, {"WorkerId": "W0"})
    payments.block(make_session, "crowd", provider, "W0", reason="Random clicks", by="cli")
    payments.unblock(make_session, "crowd", provider, "W0", by="cli")
    admin.block(session, _worker(session), reason="page", exclude_past=True, by="cli")
    session.flush()

    request_error(
        stub, "delete_worker_block", "WorkerId is invalid.", "AWS.MechanicalTurk.Unknown",
        {"WorkerId": "W0"},
    )  # fmt: skip
    with pytest.raises(CrowdError, match="WorkerId is invalid"):
        payments.unblock(make_session, "crowd", provider, "W0", by="cli")
    worker = _worker(session)
    assert worker.blocked and worker.exclude_past  # our block stands
    failed = _calls(session, "unblock")[-1]
    assert failed.status == "failed" and "WorkerId is invalid" in failed.error
    (event,) = session.scalars(
        select(AuditEvent).where(
            AuditEvent.action == "crowd_unblock",
            AuditEvent.detail["outcome"].as_string() == "failed",
        )
    ).all()
    assert event.detail["worker"] == "W0"
