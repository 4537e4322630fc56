"""Simulated annotators (`annotators.simulated`: `ebc simulate-http`, the demo's simulated
crowd) on the local channel: they work through invite links like lab members, but the
crowd service neither syncs, reviews, pays nor blocks them, on SQLite and PostgreSQL."""

# Fixtures imported from the local tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.crowd import bonuses, common, overview, payments, sync
from app.models import Annotator, Assignment, CrowdCall
from app.simulate.http import simulated_annotator
from tests.crowd.platforms.local.test_provider import (  # noqa: F401  (fixtures)
    SLUG,
    lab_study,
    links,
    local,
    make_session,
    published,
    settings,
    work,
)


@pytest.fixture
def mixed(session, make_session, settings, local):
    """Published (4 HITs of 2 replicas); a lab member and a simulated annotator (made as a
    simulated run makes it, its link still open) each handed in one HIT."""
    study = lab_study(session, replicas=2)
    published(session, make_session, settings, local)
    person = work(session, settings, links(session, settings, study, 1)[0])
    robot = simulated_annotator(session, study, settings.secret_key)
    simulated = work(session, settings, f"{settings.base_url}{robot.path}")
    session.expire_all()
    assert session.get(Annotator, simulated.annotator_id).simulated
    return study, person, simulated


def test_a_sync_lists_only_lab_members_work(session, make_session, settings, local, mixed):
    study, person, simulated = mixed
    report = sync.sync(make_session, settings, SLUG, local, by="cli")
    session.expire_all()
    assert (report.listed, report.confirmed) == (1, 1)
    assert session.get(Assignment, simulated.id).external_hit_id is None  # not claimed
    assert session.get(Assignment, simulated.id).review_status is None
    shown = overview.crowd_overview(session, study, "local", "local")
    assert shown.states == {"to review": 1}  # nothing left "unconfirmed" forever
    assert [r.public_id for r in shown.rows] == [person.public_id]


def test_simulated_work_is_never_reviewed_or_paid(session, make_session, settings, local, mixed):
    study, person, simulated = mixed
    sync.sync(make_session, settings, SLUG, local, by="cli")

    plan = payments.preview_approve_all(make_session, SLUG, local, apply_exclusions=True)
    assert [i.public_id for i in plan.approve] == [person.public_id]
    assert (plan.reject, plan.unconfirmed) == ([], 0)

    with pytest.raises(common.CrowdServiceError, match="simulated") as refused:
        bonuses.bonus_plan(
            session, settings, study, local, [person.public_id, simulated.public_id], 25, "Thanks"
        )
    assert refused.value.status_code == 409
    for call in (
        lambda: payments.approve(make_session, SLUG, local, simulated.public_id, by="cli"),
        lambda: payments.bonus(
            make_session, SLUG, local, simulated.public_id, 25, reason="Thanks", by="cli"
        ),
    ):
        with pytest.raises(common.CrowdServiceError, match="simulated") as refused:
            call()
        assert refused.value.status_code == 409
    robot = session.get(Annotator, simulated.annotator_id)
    with pytest.raises(common.CrowdServiceError, match="simulated") as refused:
        payments.block(make_session, SLUG, local, robot.label, reason="x", by="cli")
    assert refused.value.status_code == 409
    assert session.scalars(select(CrowdCall)).all() == []  # nothing ledgered

    # The lab member's work is paid as usual.
    bonus = bonuses.bonus_plan(session, settings, study, local, [person.public_id], 25, "Thanks")
    assert [line.public_id for line in bonus.lines] == [person.public_id]
