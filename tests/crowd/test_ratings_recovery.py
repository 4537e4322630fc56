"""MTurk recovery of a ratings study's answers, end to end on SQLite and PostgreSQL: a worker
rates a HIT through the MTurk pages (the app over HTTP), the done page posts every pair's
quality and consistency on to MTurk, our store of it is lost, and `crowd sync` reads
MTurk's copy back from the stand-in's answer XML (tests/crowd/mturk_standin.py) and stores
it through the ratings service; a conflicting or malformed copy stores nothing."""

# Fixtures imported from the MTurk service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from app.annotation.identities import crowd_annotator
from app.annotation.leases import next_assignment
from app.crowd import sync
from app.crowd.base import PlatformSubmission
from app.models import Annotator, Assignment, AssignmentStatus, Channel, CrowdHit, Hit, Rating
from app.studytypes.ratings.annotation import RatingPost, Scale, point, rate
from tests.crowd.mturk_standin import answer_xml
from tests.crowd.platforms.mturk.test_end_to_end import (  # noqa: F401  (fixtures)
    SUBMIT_TO,
    audit,
    aws_env,
    make_session,
    mturk,
    published,
    settings,
    standin,
)
from tests.hits.ratings_factory import make_ratings_study
from tests.web.test_mturk_done import submit_form

SLUG = "rrate"
PAIRS = 11  # 5 data, 5 model, 1 attention pair per HIT
POINTS = Scale(5, 0.5).points()
# What the worker gives pair p: varied, so a value stored at the wrong pair or step shows.
VALUES = {p: (POINTS[(3 * p + 1) % 11], POINTS[(5 * p + 2) % 11]) for p in range(PAIRS)}


def ratings_study(session):
    """2 HITs of 11 pairs from build_hits, open to MTurk workers in the sandbox."""
    study = make_ratings_study(session, slug=SLUG, per_cell=10, reward_cents=50)
    study.channels = {
        **study.channels,
        "mturk": {"enabled": True, "sandbox": True, "submit_origins": []},
    }
    session.flush()
    return study


def _hidden(html: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', html))


def rate_through_pages(client, page, steps: int | None = None):
    """Post the rating each step of the MTurk page asks for (`VALUES`), `steps` of them
    (all: None); the page the last post leads to."""
    done = 0
    while page.template.name == "ratings/rate.html" and (steps is None or done < steps):
        fields = _hidden(page.text)
        value = VALUES[int(fields["position"])][fields["step"] == "consistency"]
        r = client.post(f"/mturk/{SLUG}/submit", data={**fields, "rating": value})
        assert r.status_code in (200, 303), r.text
        page = client.get(r.headers["location"]) if r.status_code == 303 else r
        done += 1
    return page


def ratings_of(session, assignment_id: int) -> dict[int, tuple[str, str | None]]:
    rows = session.execute(
        select(Rating.position, Rating.quality, Rating.consistency).where(
            Rating.assignment_id == assignment_id
        )
    ).all()
    return {p: (point(q), None if c is None else point(c)) for p, q, c in rows}


def snapshot(session):
    ratings = session.execute(
        select(Rating.assignment_id, Rating.position, Rating.quality, Rating.consistency)
    ).all()
    assignments = session.execute(
        select(Assignment.id, Assignment.status, Assignment.submitted_at, Assignment.unverified)
    ).all()
    hits = session.execute(select(Hit.id, Hit.leased_count, Hit.submitted_count)).all()
    annotators = session.scalar(select(func.count(Annotator.id)))
    return sorted(ratings), sorted(assignments), sorted(hits), annotators


@pytest.fixture
def hit_on_mturk(session, make_session, settings, mturk, standin):
    """The study published on the stand-in, and one of its MTurk HITs."""
    study = ratings_study(session)
    published(session, make_session, settings, mturk, slug=SLUG)
    return study, session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).first()


@pytest.mark.parametrize("lost_after", [0, 7])
def test_ratings_posted_to_mturk_but_lost_here_are_recovered_exactly(
    client, session, make_session, settings, mturk, standin, hit_on_mturk, lost_after
):
    """The worker rates the whole HIT; our store keeps only the first `lost_after` steps
    (none, or three pairs and a quality); MTurk's copy restores the rest, the same values."""
    platform, _ = standin
    _, hit = hit_on_mturk
    external = platform.add_assignment(hit, "W1")
    page = client.get(
        f"/mturk/{SLUG}?assignmentId={external}&hitId={hit}&workerId=W1&turkSubmitTo={SUBMIT_TO}"
    )
    public_id = _hidden(page.text)["assignment"]
    page = rate_through_pages(client, page, steps=lost_after)
    lost = session.begin_nested()  # what is written from here on is lost
    session.connection()  # the SAVEPOINT, now (a session begins it when it is first used)
    done = rate_through_pages(client, page)
    assert done.template.name == "annotate/mturk_done.html"
    posted = dict(submit_form(done.text))
    lost.rollback()
    session.expire_all()

    # What the done page posts to externalSubmit: our assignment id and every pair's
    # quality and consistency at its position; nothing else.
    assert {k: v for k, v in posted.items() if k[0] in "qc"} == {
        **{f"q{p}": q for p, (q, _) in VALUES.items()},
        **{f"c{p}": c for p, (_, c) in VALUES.items()},
    }
    assert set(posted) - {f"{s}{p}" for s in "qc" for p in range(PAIRS)} == {
        "assignmentId",
        "ebc",
        "assignment",
    }
    assert posted["assignment"] == public_id and posted["assignmentId"] == external
    lease = session.scalar(select(Assignment).where(Assignment.public_id == public_id))
    assert lease.status is AssignmentStatus.leased and lease.submitted_at is None
    kept = {p: VALUES[p] for p in range(lost_after // 2)}
    if lost_after % 2:
        kept[lost_after // 2] = (VALUES[lost_after // 2][0], None)
    assert ratings_of(session, lease.id) == kept

    # MTurk holds the submission, its answer XML the fields posted (all but assignmentId);
    # 2 s per step not stored, after the last step stored or the page's first showing.
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)
    session.execute(
        update(Assignment)
        .where(Assignment.id == lease.id)
        .values(leased_at=since, page_served_at=since)
    )
    kept_rows = update(Rating).where(Rating.assignment_id == lease.id)
    session.execute(kept_rows.values(quality_at=since))
    session.execute(kept_rows.where(Rating.consistency.is_not(None)).values(consistency_at=since))
    session.flush()
    steps_lost = 2 * PAIRS - lost_after
    submit_time = since + timedelta(seconds=2 * steps_lost)
    platform.assignments[external]["Answer"] = answer_xml(
        {k: v for k, v in posted.items() if k != "assignmentId"}
    )
    platform.assignments[external]["SubmitTime"] = submit_time.timestamp()

    report = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    assert report.recovered == 1
    assert [(f.external_worker_id, f.recovered) for f in report.flagged] == [("W1", True)]
    assert ratings_of(session, lease.id) == VALUES
    stored = session.get(Assignment, lease.id)
    assert stored.status is AssignmentStatus.submitted and not stored.unverified
    assert stored.external_assignment_id == external and not stored.late
    assert abs(stored.submitted_at - submit_time) < timedelta(seconds=1)
    assert session.get(Hit, stored.hit_id).submitted_count == 1
    rows = session.scalars(select(Rating).where(Rating.assignment_id == lease.id)).all()
    recovered = [r for r in rows if r.position >= (lost_after + 1) // 2]
    assert recovered and not any(r.too_fast for r in recovered)  # 2 s a step; at least 1 s
    times = sorted(t for r in rows for t in (r.quality_at, r.consistency_at))
    assert times[-1] == stored.submitted_at and times[lost_after] > since
    (event,) = audit(session, "crowd_submission_flagged")
    assert event.detail["recovered"] and event.detail["worker"] == "W1"

    # A second sync changes nothing.
    before = snapshot(session)
    again = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    assert (again.recovered, again.flagged) == (0, [])
    assert snapshot(session) == before
    assert len(audit(session, "crowd_submission_flagged")) == 1


# -- conflicts and malformed copies: nothing stored -----------------------------------------


def lease_for(session, study, worker: str, external: str, hit: str):
    """A worker's MTurk assignment, leased as the ExternalQuestion page does."""
    annotator = crowd_annotator(session, study, Channel.mturk, worker)
    lease = next_assignment(
        session,
        annotator,
        external_assignment_id=external,
        external_hit_id=hit,
        submit_to=SUBMIT_TO,
        serve=True,
    ).assignment
    session.flush()
    return annotator, lease


def copy(public_id: str, values=VALUES) -> dict[str, str]:
    """MTurk's copy of a ratings HIT, as the done page posts it."""
    fields = {"assignment": public_id, "ebc": "stored"}
    for p, (q, c) in values.items():
        fields |= {f"q{p}": q, f"c{p}": c}
    return fields


def test_a_rating_that_conflicts_with_ours_is_reported_not_stored(
    session, make_session, settings, mturk, standin, hit_on_mturk
):
    platform, _ = standin
    study, hit = hit_on_mturk
    external = platform.add_assignment(hit, "W1")
    annotator, lease = lease_for(session, study, "W1", external, hit)
    for step in ("quality", "consistency"):  # the first pair reached us
        rate(session, annotator, RatingPost(lease.public_id, 0, step, VALUES[0][step[0] == "c"], 0))
    rate(session, annotator, RatingPost(lease.public_id, 1, "quality", VALUES[1][0], 0))
    session.flush()
    theirs = dict(VALUES)
    theirs[1] = ("5" if VALUES[1][0] != "5" else "0", VALUES[1][1])  # not what we stored
    platform.assignments[external]["Answer"] = answer_xml(copy(lease.public_id, theirs))
    before = snapshot(session)

    report = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    again = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    assert report.recovered == 0 and again.recovered == 0
    (flag,) = report.flagged
    assert not flag.recovered and "conflict" in flag.reason
    assert f"quality of text 2 is {VALUES[1][0]} here and {theirs[1][0]} in MTurk's copy" in (
        flag.reason
    )
    assert snapshot(session) == before  # ours kept, nothing of the copy stored
    assert ratings_of(session, lease.id) == {0: VALUES[0], 1: (VALUES[1][0], None)}
    assert session.get(Assignment, lease.id).status is AssignmentStatus.leased
    assert len(audit(session, "crowd_submission_flagged")) == 1  # reported once


def test_a_last_rating_stored_while_a_sync_recovers_the_copy_is_taken_as_stored(
    session, make_session, settings, mturk, standin, hit_on_mturk, monkeypatch
):
    """The sync lists the submission while our lease still waits for its last rating; that
    rating reaches us (the worker's request holds the worker's lock) before the sync takes
    the lock to store MTurk's copy. The sync then finds the lease submitted: taken as
    stored, confirmed, nothing flagged, nothing stored twice."""
    from app.annotation import identities

    platform, _ = standin
    study, hit = hit_on_mturk
    external = platform.add_assignment(hit, "W1")
    annotator, lease = lease_for(session, study, "W1", external, hit)
    steps = [(p, step) for p in range(PAIRS) for step in ("quality", "consistency")]
    for p, step in steps:
        post = RatingPost(lease.public_id, p, step, VALUES[p][step == "consistency"], 3000)
        if (p, step) != steps[-1]:
            rate(session, annotator, post)
    session.flush()
    platform.assignments[external]["Answer"] = answer_xml(copy(lease.public_id))
    real = identities.crowd_annotator

    def the_last_rating_comes_first(s, *args, **kwargs):
        rate(s, real(s, *args, **kwargs), post)  # the worker's own request, done first
        return real(s, *args, **kwargs)

    monkeypatch.setattr(identities, "crowd_annotator", the_last_rating_comes_first)
    report = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    assert (report.recovered, report.flagged, report.confirmed) == (0, [], 1)
    assert audit(session, "crowd_submission_flagged") == []
    stored = session.get(Assignment, lease.id)
    assert stored.status is AssignmentStatus.submitted and not stored.unverified
    assert ratings_of(session, lease.id) == VALUES
    assert session.get(Hit, stored.hit_id).submitted_count == 1


def test_recovered_steps_are_not_too_fast_when_mturks_clock_is_behind_ours(
    session, make_session, settings, mturk, standin, hit_on_mturk
):
    """MTurk's SubmitTime is 5 s before the last step we stored (the two clocks differ):
    how long the steps not stored took is unknown, so none is flagged too fast."""
    platform, _ = standin
    study, hit = hit_on_mturk
    external = platform.add_assignment(hit, "W1")
    annotator, lease = lease_for(session, study, "W1", external, hit)
    for step in ("quality", "consistency"):  # the first pair reached us, in good time
        rate(session, annotator, RatingPost(lease.public_id, 0, step, VALUES[0][step[0] == "c"], 0))
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    session.execute(
        update(Assignment)
        .where(Assignment.id == lease.id)
        .values(leased_at=since - timedelta(minutes=1), page_served_at=since - timedelta(minutes=1))
    )
    session.execute(
        update(Rating)
        .where(Rating.assignment_id == lease.id)
        .values(quality_at=since - timedelta(seconds=30), consistency_at=since, too_fast=False)
    )
    session.flush()
    platform.assignments[external]["Answer"] = answer_xml(copy(lease.public_id))
    platform.assignments[external]["SubmitTime"] = (since - timedelta(seconds=5)).timestamp()

    report = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    assert report.recovered == 1
    assert ratings_of(session, lease.id) == VALUES
    rows = session.scalars(select(Rating).where(Rating.assignment_id == lease.id)).all()
    assert len(rows) == PAIRS and not any(r.too_fast for r in rows)
    stored = session.get(Assignment, lease.id)
    assert stored.status is AssignmentStatus.submitted and not stored.late
    # Stored in order, none before the step we hold.
    assert min(r.quality_at for r in rows if r.position > 0) >= since


def _off_scale(fields):
    return fields | {"c10": "6"}


def _one_pair_short(fields):
    return {k: v for k, v in fields.items() if k not in ("q10", "c10")}


def _a_pair_too_many(fields):
    return fields | {"q11": "3", "c11": "3"}


def _quality_without_consistency(fields):
    return {k: v for k, v in fields.items() if k != "c4"}


def _not_a_point(fields):
    return fields | {"q3": "2.25"}


def _next_word_answers_too(fields):
    return fields | {"o0": "2"}


def _next_word_answers_only(fields):
    return {"assignment": fields["assignment"], **{f"o{p}": "1" for p in range(PAIRS)}}


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (_off_scale, "A rating is one of 0, 0.5"),
        (_one_pair_short, "rates 10 texts"),
        (_a_pair_too_many, "rates 12 texts"),
        (_quality_without_consistency, "not in the XML"),
        (_not_a_point, "not in the XML"),
        (_next_word_answers_too, "not in the XML"),
        (_next_word_answers_only, "carries next-word answers"),
    ],
)
def test_a_malformed_copy_stores_nothing(
    session, make_session, settings, mturk, standin, hit_on_mturk, tamper, reason
):
    platform, _ = standin
    study, hit = hit_on_mturk
    external = platform.add_assignment(hit, "W1")
    _, lease = lease_for(session, study, "W1", external, hit)
    platform.assignments[external]["Answer"] = answer_xml(tamper(copy(lease.public_id)))
    before = snapshot(session)

    report = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    (flag,) = report.flagged
    assert report.recovered == 0 and not flag.recovered and reason in flag.reason
    assert snapshot(session) == before
    assert session.get(Assignment, lease.id).status is AssignmentStatus.leased


def test_a_copy_naming_another_workers_assignment_stores_nothing_and_makes_no_worker(
    session, make_session, settings, mturk, standin, hit_on_mturk
):
    """W2 posts W1's assignment id with ratings: refused in its savepoint, so not even W2's
    annotator (made on the way) is left behind; W1's own copy is recovered."""
    platform, _ = standin
    study, hit = hit_on_mturk
    mine = platform.add_assignment(hit, "W1")
    _, lease = lease_for(session, study, "W1", mine, hit)
    platform.assignments[mine]["Answer"] = answer_xml(copy(lease.public_id))
    platform.add_assignment(hit, "W2", answers=copy(lease.public_id))

    report = sync.sync(make_session, settings, SLUG, mturk, by="cli")
    session.expire_all()
    flags = {f.external_worker_id: f for f in report.flagged}
    assert report.recovered == 1 and flags["W1"].recovered and not flags["W2"].recovered
    assert "names no assignment of this worker" in flags["W2"].reason
    assert ratings_of(session, lease.id) == VALUES
    workers = session.scalars(select(Annotator.external_id).where(Annotator.study_id == study.id))
    assert sorted(workers) == ["W1"]


# -- reading MTurk's copy ------------------------------------------------------------------


def test_the_copy_of_a_ratings_hit_is_read_strictly():
    fields = {"assignment": "pub_1", "ebc": "stored", "q0": "3.5", "c0": "0"}
    fields |= {"q10": "5", "c10": "4.5"}
    got = sync.recovered_answers(PlatformSubmission("A1", "W1", "H1", "Submitted", answers=fields))
    assert got.ratings == {0: ("3.5", "0"), 10: ("5", "4.5")} and got.answers == {}
    for bad in ({"c10": "4.5 "}, {"c10": "-1"}, {"c10": "½"}, {"c10": "1e1"}, {"q10": "05"}):
        sub = PlatformSubmission("A1", "W1", "H1", "Submitted", answers=fields | bad)
        assert sync.recovered_answers(sub) is None, bad
