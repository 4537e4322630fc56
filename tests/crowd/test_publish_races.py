"""Publishing a Prolific study while another run publishes it (a double click, two CLI
runs), or after a run died half-way: one Prolific study, the one the posting names. On
SQLite and PostgreSQL, against the Prolific stand-in."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select

from app.crowd import claims, common, publishing
from app.crowd.platforms.prolific.api import ProlificError
from app.models import CrowdHit, CrowdPosting, utcnow
from tests.crowd.platforms.prolific.test_end_to_end import (  # noqa: F401  (fixtures)
    fake,
    make_session,
    panel_study,
    settings,
)


def _posting(session) -> CrowdPosting:
    session.expire_all()
    return session.scalar(select(CrowdPosting))


def _live(fake) -> list[str]:
    return [sid for sid, s in fake.studies.items() if s["status"] == "ACTIVE"]


def test_two_concurrent_publishes_make_one_prolific_study(session, make_session, settings, fake):
    """The second run starts while the first waits for Prolific's answer to its POST
    /studies/: it is refused (409 "publishing in progress") and changes nothing."""
    panel_study(session)
    first, second = fake.provider(), fake.provider()
    real_prepare = first.prepare
    refused: list[common.CrowdServiceError] = []

    def prepare_while_another_run_starts(spec):
        made = real_prepare(spec)
        with pytest.raises(common.CrowdServiceError) as raised:
            publishing.publish(make_session, settings, "panel", second, by="other")
        refused.append(raised.value)
        return made

    first.prepare = prepare_while_another_run_starts
    report = publishing.publish(make_session, settings, "panel", first, by="x")

    assert refused[0].status_code == 409 and "publishing in progress" in refused[0].message
    assert len(fake.studies) == 1 and fake.count("POST", "studies/") == 1
    posting = _posting(session)
    assert _live(fake) == [posting.external_id] == [report.external_id]
    assert posting.status == "published" and claims.PREPARING not in posting.settings
    # Once prepared, another run goes through (and makes nothing).
    again = publishing.publish(make_session, settings, "panel", second, by="x")
    assert (again.published, again.total) == (0, 1) and len(fake.studies) == 1


def test_a_run_that_died_after_creating_the_study_is_taken_over_without_a_second_one(
    session, make_session, settings, fake
):
    """The process dies once Prolific made the draft, before the id is stored. While its
    claim is fresh another run is refused; once it is stale the next run finds the draft
    by its internal name (the posting's key) instead of creating another."""
    panel_study(session)
    dying = fake.provider()
    real_prepare = dying.prepare

    def prepare_then_die(spec):
        real_prepare(spec)
        raise KeyboardInterrupt  # killed: nothing after this runs

    dying.prepare = prepare_then_die
    with pytest.raises(KeyboardInterrupt):
        publishing.publish(make_session, settings, "panel", dying, by="x")
    posting = _posting(session)
    assert (posting.status, posting.external_id) == ("preparing", None)
    (made,) = fake.studies

    with pytest.raises(common.CrowdServiceError, match="publishing in progress") as refused:
        publishing.publish(make_session, settings, "panel", fake.provider(), by="x")
    assert refused.value.status_code == 409 and len(fake.studies) == 1

    stale = utcnow() - claims.STALE_CLAIM - timedelta(seconds=1)
    posting.settings = {**posting.settings, claims.PREPARING: stale.isoformat()}
    session.flush()
    report = publishing.publish(make_session, settings, "panel", fake.provider(), by="x")
    assert report.external_id == made and len(fake.studies) == 1
    assert fake.count("POST", "studies/") == 1 and _live(fake) == [made]
    assert _posting(session).external_id == made


def test_a_study_whose_creation_answer_was_lost_is_found_by_the_next_run(
    session, make_session, settings, fake
):
    """A 502 after Prolific made the study: not retried (a POST that is not idempotent),
    the posting is `failed` with no claim held, and the next run finds the study."""
    panel_study(session)
    original = fake.route

    def made_then_lost(request, path):
        answer = original(request, path)
        if request.method == "POST" and path == "studies/":
            return httpx.Response(502, text="Bad gateway")
        return answer

    fake.route = made_then_lost
    with pytest.raises(ProlificError, match="502"):
        publishing.publish(make_session, settings, "panel", fake.provider(), by="x")
    fake.route = original
    posting = _posting(session)
    assert posting.status == "failed" and claims.PREPARING not in posting.settings
    assert fake.count("POST", "studies/") == 1
    (made,) = fake.studies

    report = publishing.publish(make_session, settings, "panel", fake.provider(), by="x")
    assert report.external_id == made and len(fake.studies) == 1 and _live(fake) == [made]
    unit = session.scalar(select(CrowdHit))
    assert (unit.external_hit_id, unit.status) == (made, "published")


def test_the_internal_name_is_the_postings_own(session, make_session, settings, fake):
    """Two studies of one slug (another database, or the study made anew) are told apart
    on Prolific: each internal name carries its posting's key."""
    study = panel_study(session)
    publishing.publish(make_session, settings, "panel", fake.provider(), by="x")
    (made,) = fake.studies
    key = common.posting_key(_posting(session), study)
    assert fake.studies[made]["internal_name"] == f"ebc panel {key}"
    other = common.posting_key(
        CrowdPosting(provider="prolific", environment="production"),
        type(study)(id=study.id + 1, slug=study.slug, created_at=study.created_at),
    )
    assert other != key
