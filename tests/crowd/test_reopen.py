"""Publishing an expired posting again, on SQLite and PostgreSQL: on MTurk its HITs are
really listed again (`UpdateExpirationForHIT` to a future time, one ledgered call, made
once; a refused one retried by the next publish with its token) and can be expired again;
Prolific, which cannot restart a stopped study, refuses it and changes nothing. Our rows
say what MTurk did, HIT by HIT: a reopen or expiry that stops half-way, an expiry while
another run publishes, HITs whose lifetime ran out."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.crowd import common, overview, payments, publishing
from app.crowd.base import CrowdError
from app.models import CrowdCall, CrowdHit, CrowdPosting, utcnow
from tests.crowd.platforms.mturk.test_end_to_end import (  # noqa: F401  (fixtures)
    audit,
    aws_env,
    crowd_study,
    make_session,
    mturk,
    published,
    settings,
    standin,
)
from tests.crowd.platforms.prolific import test_end_to_end as prolific_tests

DAY = 86_400


def _units(session) -> set[str]:
    return set(session.scalars(select(CrowdHit.status)))


def _states(session, platform) -> list[tuple[str, str]]:
    """Each HIT's row status here and its status on MTurk, in publishing order."""
    rows = session.scalars(select(CrowdHit).order_by(CrowdHit.id)).all()
    return [(r.status, platform.hits[r.external_hit_id]["HITStatus"]) for r in rows]


LIVE, DOWN = ("published", "Assignable"), ("expired", "Unassignable")


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


def test_a_reopen_refused_half_way_records_the_hits_it_listed_and_expire_takes_them_down(
    session, make_session, settings, mturk, standin
):
    """MTurk lists the first two HITs again, then refuses the third: those two are live
    here too (so an expiry finds them), the others stay expired; the next publish retries
    the reopen with its token."""
    platform, _ = standin
    crowd_study(session)
    published(session, make_session, settings, mturk)
    payments.expire(make_session, "crowd", mturk, by="cli")
    platform.faults["UpdateExpirationForHIT"] = [None, None, "refuse"]
    with pytest.raises(CrowdError, match="Refused by the stand-in"):
        published(session, make_session, settings, mturk)
    session.expire_all()
    assert _states(session, platform) == [LIVE, LIVE, DOWN, DOWN]
    (call,) = _calls(session, "reopen")
    assert call.status == "failed"

    expired = payments.expire(make_session, "crowd", mturk, by="cli")
    session.expire_all()
    assert expired.made and expired.detail == "ok"
    assert _states(session, platform) == [DOWN] * 4
    assert session.scalar(select(CrowdPosting.status)) == "expired"

    report = published(session, make_session, settings, mturk)
    assert (report.reopened, report.total) == (4, 4)
    assert _states(session, platform) == [LIVE] * 4
    (retried,) = _calls(session, "reopen")
    assert retried.request_token == call.request_token and retried.status == "ok"


def test_a_reopen_whose_answer_was_lost_leaves_that_hit_to_the_next_expiry(
    session, make_session, settings, mturk, standin
):
    """MTurk lists the second HIT again but its answer never arrives (every attempt's
    connection dropped): we cannot tell, so that HIT is `unknown`, and an expiry sends it
    the past expiry too."""
    platform, _ = standin
    crowd_study(session)
    published(session, make_session, settings, mturk)
    payments.expire(make_session, "crowd", mturk, by="cli")
    platform.faults["UpdateExpirationForHIT"] = [None] + ["drop_after"] * 3
    with pytest.raises(CrowdError) as lost:
        published(session, make_session, settings, mturk)
    assert lost.value.maybe_done
    session.expire_all()
    assert _states(session, platform) == [LIVE, ("unknown", "Assignable"), DOWN, DOWN]
    assert _calls(session, "reopen")[0].status == "unknown"

    assert payments.expire(make_session, "crowd", mturk, by="cli").made
    session.expire_all()
    assert _states(session, platform) == [DOWN] * 4


def test_an_expiry_flips_only_the_hits_it_took_down(
    session, make_session, settings, mturk, standin
):
    """While the expiry calls MTurk, another run publishes the study's last two HITs: they
    are live on MTurk and stay `published` here; a second expiry takes them down."""
    platform, _ = standin
    crowd_study(session)
    published(session, make_session, settings, mturk, limit=2)
    expiring = common.provider_for(settings, "mturk")
    real_expire = expiring.expire

    def expire_while_another_run_publishes(external_id, units):
        if platform.count("CreateHITWithHITType") == 2:
            publishing.publish(make_session, settings, "crowd", mturk, by="other")
        real_expire(external_id, units)

    expiring.expire = expire_while_another_run_publishes
    assert payments.expire(make_session, "crowd", expiring, by="cli").made
    session.expire_all()
    assert _states(session, platform) == [DOWN, DOWN, LIVE, LIVE]

    again = payments.expire(make_session, "crowd", mturk, by="cli")
    session.expire_all()
    assert again.made and _states(session, platform) == [DOWN] * 4
    assert platform.count("UpdateExpirationForHIT") == 4  # each HIT expired once


def test_hits_whose_lifetime_ran_out_count_as_expired_and_publishing_reopens_them(
    session, make_session, settings, mturk, standin, monkeypatch
):
    """Published 8 days ago for the default lifetime of 7 days: MTurk lists none of the
    HITs any more, and neither do we; publishing again lists them again."""
    platform, _ = standin
    study = crowd_study(session)
    then = utcnow() - timedelta(days=8)
    with monkeypatch.context() as clock:
        clock.setattr(publishing, "utcnow", lambda: then)
        published(session, make_session, settings, mturk)
    for hit in platform.hits.values():  # MTurk took them down when their lifetime ran out
        hit["Expiration"], hit["HITStatus"] = then.timestamp() + 7 * DAY, "Unassignable"

    shown = overview.crowd_overview(session, study, "mturk", "sandbox").posting
    assert shown["units"] == {"expired": 4} and shown["status"] == "expired"
    nothing = payments.expire(make_session, "crowd", mturk, by="cli")
    assert not nothing.made and platform.count("UpdateExpirationForHIT") == 0

    before = time.time()
    report = published(session, make_session, settings, mturk)
    assert (report.reopened, report.total) == (4, 4)
    assert _states(session, platform) == [LIVE] * 4
    for hit in platform.hits.values():
        assert before + 7 * DAY - 5 <= hit["Expiration"] <= time.time() + 7 * DAY + 5
    shown = overview.crowd_overview(session, study, "mturk", "sandbox").posting
    assert shown["units"] == {"published": 4} and shown["status"] == "published"
    assert payments.expire(make_session, "crowd", mturk, by="cli").made
    session.expire_all()
    assert _states(session, platform) == [DOWN] * 4


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
