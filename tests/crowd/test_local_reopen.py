"""A local posting expired, reopened by publishing again, and expired again: each expiry
closes the invite links to new work, on SQLite and PostgreSQL (HITs from `build_hits`,
lab members through their signed links)."""

# Fixtures imported from the local tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

from sqlalchemy import select

from app.annotation.leases import next_assignment
from app.annotation.schemas import WorkStatus
from app.crowd import overview, payments
from app.models import CrowdCall, CrowdHit, CrowdPosting
from tests.crowd.platforms.local.test_provider import (  # noqa: F401  (fixtures)
    SLUG,
    lab_study,
    links,
    local,
    make_session,
    published,
    settings,
    through,
)


def _units(session) -> set[str]:
    return set(session.scalars(select(CrowdHit.status)))


def test_a_reopened_local_posting_can_be_expired_again(session, make_session, settings, local):
    study = lab_study(session, replicas=2)
    published(session, make_session, settings, local)
    member = links(session, settings, study, 1)[0]

    assert payments.expire(make_session, SLUG, local, by="cli").made
    session.expire_all()
    assert _units(session) == {"expired"}
    assert next_assignment(session, through(session, settings, member)).status is (
        WorkStatus.closed
    )

    # Publishing again reopens the links, and the posting's units with them.
    report = published(session, make_session, settings, local)
    assert (report.published, report.total, report.pending) == (0, 4, 0)
    assert session.scalar(select(CrowdPosting.status)) == "published"
    assert _units(session) == {"published"}
    shown = overview.crowd_overview(session, study, "local", "local")
    assert shown.posting["units"] == {"published": 4}
    taken = next_assignment(session, through(session, settings, member), serve=True)
    assert taken.status is WorkStatus.assigned

    # A second expiry is made (not "nothing to expire") and closes the links again.
    again = payments.expire(make_session, SLUG, local, by="cli")
    session.expire_all()
    assert again.made and again.detail != "nothing to expire"
    assert session.scalar(select(CrowdPosting.status)) == "expired"
    assert _units(session) == {"expired"}
    calls = session.scalars(select(CrowdCall).where(CrowdCall.kind == "expire")).all()
    assert [c.status for c in calls] == ["ok", "ok"]
    assert calls[0].request_token != calls[1].request_token
    newcomer = links(session, settings, study, 1)[0]
    assert next_assignment(session, through(session, settings, newcomer)).status is (
        WorkStatus.closed
    )
    # The lease taken while it was open is still handed in, but no new one is given.
    resumed = next_assignment(session, through(session, settings, member))
    assert resumed.status is WorkStatus.assigned
    assert resumed.assignment.public_id == taken.assignment.public_id
