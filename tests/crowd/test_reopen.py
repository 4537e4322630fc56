"""Publishing an expired posting again, on SQLite and PostgreSQL: on MTurk its HITs are
really listed again (`UpdateExpirationForHIT` to a future time, one ledgered call, made
once; a refused one retried by the next publish with its token) and can be expired again;
Prolific, which cannot restart a stopped study, refuses it and changes nothing."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from app.crowd import common, payments
from app.crowd.base import CrowdError
from app.models import CrowdCall, CrowdHit, CrowdPosting
from tests.crowd import test_service_prolific as prolific_tests
from tests.crowd.test_service_mturk import (  # noqa: F401  (fixtures)
    audit,
    aws_env,
    crowd_study,
    make_session,
    mturk,
    published,
    settings,
    standin,
)

DAY = 86_400


def _units(session) -> set[str]:
    return set(session.scalars(select(CrowdHit.status)))


def _calls(session, kind: str) -> list[CrowdCall]:
    return session.scalars(
        select(CrowdCall).where(CrowdCall.kind == kind).order_by(CrowdCall.id)
    ).all()


def test_an_expired_mturk_posting_published_again_is_live_on_mturk(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    crowd_study(session)
    published(
        session, make_session, settings, mturk, options=common.PublishOptions(lifetime_days=3)
    )
    assert payments.expire(make_session, "crowd", mturk, by="cli").made
    session.expire_all()
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Unassignable"}

    before = time.time()
    report = published(session, make_session, settings, mturk)
    assert (report.reopened, report.published, report.total, report.pending) == (4, 0, 4, 0)
    # Every HIT listed again, for the posting's lifetime from now.
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Assignable"}
    for hit in platform.hits.values():
        assert before + 3 * DAY - 5 <= hit["Expiration"] <= time.time() + 3 * DAY + 5
    assert platform.count("UpdateExpirationForHIT") == 8  # 4 to expire, 4 to reopen
    assert _units(session) == {"published"}
    assert session.scalar(select(CrowdPosting.status)) == "published"
    (call,) = _calls(session, "reopen")
    assert call.status == "ok"
    assert [e.detail["outcome"] for e in audit(session, "crowd_reopen")] == ["ok"]

    # Published once more: nothing to reopen, no call.
    again = published(session, make_session, settings, mturk)
    assert again.reopened == 0 and platform.count("UpdateExpirationForHIT") == 8
    assert len(_calls(session, "reopen")) == 1

    # It can be expired again (a new call), and reopened again (a new call).
    assert payments.expire(make_session, "crowd", mturk, by="cli").made
    session.expire_all()
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Unassignable"}
    assert published(session, make_session, settings, mturk).reopened == 4
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Assignable"}
    tokens = [c.request_token for c in _calls(session, "reopen")]
    assert len(tokens) == 2 and len(set(tokens)) == 2
    assert [c.status for c in _calls(session, "expire")] == ["ok", "ok"]


def test_a_refused_reopen_leaves_the_posting_expired_and_the_next_publish_retries_it(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    crowd_study(session)
    published(session, make_session, settings, mturk)
    payments.expire(make_session, "crowd", mturk, by="cli")
    platform.faults["UpdateExpirationForHIT"] = ["refuse"]
    with pytest.raises(CrowdError, match="Refused by the stand-in"):
        published(session, make_session, settings, mturk)
    session.expire_all()
    # Not shown as published: its HITs are still expired, here and on MTurk.
    assert session.scalar(select(CrowdPosting.status)) == "expired"
    assert _units(session) == {"expired"}
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Unassignable"}
    (call,) = _calls(session, "reopen")
    assert call.status == "failed" and "Refused" in call.error

    report = published(session, make_session, settings, mturk)
    assert report.reopened == 4 and report.total == 4
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Assignable"}
    (retried,) = _calls(session, "reopen")  # the same call, its token, now done
    assert retried.request_token == call.request_token and retried.status == "ok"
    assert session.scalar(select(CrowdPosting.status)) == "published"


@pytest.fixture
def prolific_settings(migrated_db):
    return migrated_db.settings(base_url="https://ebc.example.org", crowd_calls_per_second=100)


def test_an_expired_prolific_study_is_not_published_again(session, make_session, prolific_settings):
    fake = prolific_tests.FakeProlific()
    prolific = fake.provider()
    prolific_tests.panel_study(session)
    prolific_tests.published(session, make_session, prolific_settings, prolific)
    assert payments.expire(make_session, "panel", prolific, by="cli").made
    session.expire_all()
    (study_id,) = fake.studies
    assert fake.studies[study_id]["status"] == "AWAITING REVIEW"  # stopped
    calls = list(fake.calls)

    with pytest.raises(common.CrowdServiceError, match="cannot take a stopped study") as refused:
        prolific_tests.published(session, make_session, prolific_settings, prolific)
    assert refused.value.status_code == 409
    session.expire_all()
    assert fake.calls == calls  # nothing asked of Prolific
    assert session.scalar(select(CrowdPosting.status)) == "expired"
    assert _units(session) == {"expired"}
    assert _calls(session, "reopen") == []
