"""Ratings HITs rated pair by pair: quality stored first and locked, the context only
after, repeats, late ratings, time checks, bad input (nothing stored)."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from app.annotation.errors import AnnotationError
from app.annotation.leases import next_assignment, return_assignment
from app.annotation.schemas import WorkStatus
from app.models import Assignment, AssignmentStatus, Hit, HitPosition, Item, Rating, utcnow
from app.studytypes.nextword.annotation import submit
from app.studytypes.ratings.annotation import (
    CONSISTENCY,
    QUALITY,
    RatingPost,
    RatingRefused,
    Scale,
    rate,
    rating_from_form,
    rating_step,
)
from tests.hits.factory import annotator, make_study
from tests.hits.ratings_factory import make_ratings_study


def _study_ref(session, study):
    from app.annotation.identities import study_ref

    return study_ref(session, study.id)


def _post(lease, position, step, value, ms=None):
    return RatingPost(lease.public_id, position, step, value, ms)


def _ratings(session, lease=None):
    q = select(Rating).order_by(Rating.assignment_id, Rating.position)
    if lease is not None:
        q = q.where(Rating.assignment_id == lease.id)
    return session.scalars(q.execution_options(populate_existing=True)).all()


def _stored(session):
    """Everything a refusal must leave as it was: the ratings and the assignments."""
    ratings = session.execute(
        select(Rating.position, Rating.quality, Rating.consistency, Rating.too_fast, Rating.late)
    ).all()
    assignments = session.execute(
        select(Assignment.id, Assignment.status, Assignment.submitted_at, Assignment.late)
    ).all()
    hits = session.execute(select(Hit.id, Hit.leased_count, Hit.submitted_count)).all()
    return sorted(ratings), sorted(assignments), sorted(hits)


def _item(session, lease, position):
    return session.scalar(
        select(Item)
        .join(HitPosition, HitPosition.item_id == Item.id)
        .where(HitPosition.hit_id == lease.hit_id, HitPosition.position == position)
    )


def _rate_all(session, who, lease, now, *, start=0, quality="3", consistency="4"):
    result = None
    n = session.scalar(select(func.count()).where(HitPosition.hit_id == lease.hit_id))
    for position in range(start, n):
        rate(session, who, _post(lease, position, QUALITY, quality, 5000), now=now)
        result = rate(session, who, _post(lease, position, CONSISTENCY, consistency, 5000), now)
    return result


def test_the_two_steps_of_every_pair_then_the_assignment_is_submitted(session):
    study = make_ratings_study(session, per_cell=5)
    who = annotator(session, study)
    ref = _study_ref(session, study)
    now = utcnow()
    lease = next_assignment(session, who, now=now, serve=True).assignment
    n = session.scalar(select(func.count()).where(HitPosition.hit_id == lease.hit_id))
    assert n == 11
    for position in range(n):
        item = _item(session, lease, position)
        shown = rating_step(session, lease, ref, first_hit=True)
        # Step 1: the continuation alone; the context is not even in what the page gets.
        assert (shown.number, shown.step) == (position, QUALITY)
        assert shown.continuation == item.continuation
        assert shown.prompt is None and shown.words is None and shown.quality is None
        assert shown.first == (position == 0)
        assert shown.values == ("0", "0.5", "1", "1.5", "2", "2.5", "3", "3.5", "4", "4.5", "5")
        value = str(position % 6)
        done = rate(session, who, _post(lease, position, QUALITY, value, 2000), now=now)
        assert not done.completed and not done.repeated and not done.late
        stored = _ratings(session, lease)[-1]
        assert (stored.position, stored.item_id, stored.quality) == (
            position,
            item.id,
            position % 6,
        )
        assert stored.consistency is None and stored.consistency_at is None
        # Step 2: the context (prompt + prefix) with the continuation; the quality, locked.
        shown = rating_step(session, lease, ref, first_hit=True)
        assert (shown.number, shown.step, shown.quality) == (position, CONSISTENCY, value)
        assert (shown.prompt, shown.words) == (item.prompt, item.words)
        done = rate(session, who, _post(lease, position, CONSISTENCY, "2.5", 3000), now=now)
        assert done.completed == (position == n - 1)
    assert rating_step(session, lease, ref, first_hit=True) is None
    rows = _ratings(session, lease)
    assert [r.position for r in rows] == list(range(n))
    assert all(
        r.consistency == 2.5 and r.quality_ms == 2000 and r.consistency_ms == 3000 for r in rows
    )
    assert not any(r.too_fast or r.late for r in rows)
    a = session.get(Assignment, lease.id, populate_existing=True)
    assert a.status is AssignmentStatus.submitted and not a.late and a.submitted_at is not None
    hit = session.get(Hit, lease.hit_id, populate_existing=True)
    assert (hit.leased_count, hit.submitted_count) == (0, 1)
    assert next_assignment(session, who, now=now).done == 1


def test_a_quality_once_stored_cannot_be_changed_and_a_repeat_stores_nothing(session):
    study = make_ratings_study(session, per_cell=5)
    who = annotator(session, study)
    lease = next_assignment(session, who, serve=True).assignment
    rate(session, who, _post(lease, 0, QUALITY, "3.5"))
    before = _stored(session)
    with pytest.raises(RatingRefused, match="can no longer be changed") as refused:
        rate(session, who, _post(lease, 0, QUALITY, "1"))
    assert refused.value.status_code == 409 and _stored(session) == before
    again = rate(session, who, _post(lease, 0, QUALITY, "3.5"))  # a resend, a double click
    assert again.repeated and not again.completed and _stored(session) == before
    rate(session, who, _post(lease, 0, CONSISTENCY, "4"))
    before = _stored(session)
    assert rate(session, who, _post(lease, 0, CONSISTENCY, "4")).repeated
    with pytest.raises(RatingRefused) as refused:
        rate(session, who, _post(lease, 0, CONSISTENCY, "0"))
    assert refused.value.status_code == 409 and _stored(session) == before
    with pytest.raises(RatingRefused, match="can no longer be changed"):
        rate(session, who, _post(lease, 0, QUALITY, "5"))  # even with the context seen
    assert _stored(session) == before


@pytest.mark.parametrize(
    ("position", "step", "value", "status", "message"),
    [
        (0, CONSISTENCY, "3", 409, "quality of text 1 first"),  # consistency before quality
        (1, QUALITY, "3", 409, "in order"),  # not the step due
        (1, CONSISTENCY, "3", 409, "quality of text 2 first"),
        (11, QUALITY, "3", 400, "not in this HIT"),  # a tampered position
        (999, QUALITY, "3", 400, "not in this HIT"),
        (0, QUALITY, "5.5", 400, "not"),  # off the scale
        (0, QUALITY, "6", 400, "not"),
        (0, QUALITY, "-1", 400, "not"),
        (0, QUALITY, "2.25", 400, "not"),  # not on the step
        (0, QUALITY, "2.50", 400, "not"),
        (0, QUALITY, "inf", 400, "not"),
        (0, QUALITY, "nan", 400, "not"),
        (0, QUALITY, "\u00b2", 400, "not"),
        (0, QUALITY, " 3", 400, "not"),
        (0, QUALITY, "03", 400, "not"),
        (0, QUALITY, "", 400, "choose a rating"),
    ],
)
def test_bad_ratings_are_refused_and_store_nothing(session, position, step, value, status, message):
    study = make_ratings_study(session, per_cell=5)
    who = annotator(session, study)
    lease = next_assignment(session, who, serve=True).assignment
    before = _stored(session)
    with pytest.raises(RatingRefused, match=message) as refused:
        rate(session, who, _post(lease, position, step, value))
    assert refused.value.status_code == status
    assert _stored(session) == before


def test_a_whole_point_scale_refuses_half_points(session):
    study = make_ratings_study(session, per_cell=5, step=1.0, scale_max=4)
    who = annotator(session, study)
    lease = next_assignment(session, who, serve=True).assignment
    assert rating_step(session, lease, _study_ref(session, study), first_hit=True).values == (
        "0",
        "1",
        "2",
        "3",
        "4",
    )
    for value in ("2.5", "5"):
        with pytest.raises(RatingRefused):
            rate(session, who, _post(lease, 0, QUALITY, value))
    assert rate(session, who, _post(lease, 0, QUALITY, "4.0")).completed is False
    assert _ratings(session)[0].quality == 4.0


@pytest.mark.parametrize(
    "form",
    [
        {"position": "x", "step": "quality"},
        {"position": "-1", "step": "quality"},
        {"position": "1234", "step": "quality"},
        {"position": "\u0661", "step": "quality"},  # an Arabic-Indic one
        {"step": "quality"},
        {"position": "0", "step": "both"},
        {"position": "0"},
        {"position": "0", "step": "quality", "ms": "fast"},
        {"position": "0", "step": "quality", "ms": "9" * 13},
    ],
)
def test_a_malformed_form_is_refused(form):
    with pytest.raises(AnnotationError) as refused:
        rating_from_form({"assignment": "x" * 32, "rating": "3", **form})
    assert refused.value.status_code == 400


def test_someone_elses_assignment_and_a_returned_one_are_refused(session):
    study = make_ratings_study(session, per_cell=10)
    a, b = annotator(session, study, "a"), annotator(session, study, "b")
    lease = next_assignment(session, a, serve=True).assignment
    with pytest.raises(AnnotationError) as refused:
        rate(session, b, _post(lease, 0, QUALITY, "3"))
    assert refused.value.status_code == 404
    rate(session, a, _post(lease, 0, QUALITY, "3"))
    return_assignment(session, a, lease.public_id)
    before = _stored(session)
    with pytest.raises(AnnotationError, match="gave this HIT back") as refused:
        rate(session, a, _post(lease, 0, CONSISTENCY, "3"))
    assert refused.value.status_code == 409 and _stored(session) == before


def test_late_ratings_are_kept_and_flagged_and_complete_the_assignment(session):
    study = make_ratings_study(session, per_cell=10)
    who = annotator(session, study)
    now = utcnow()
    lease = next_assignment(session, who, now=now, serve=True).assignment
    rate(session, who, _post(lease, 0, QUALITY, "3", 5000), now=now)
    later = now + timedelta(seconds=study.lease_seconds + 5)
    # The lapsed lease is expired (its slot given back) when the annotator comes back.
    work = next_assignment(session, who, now=later, serve=True)
    assert work.expired_previous and work.assignment.hit_id != lease.hit_id
    hit = session.get(Hit, lease.hit_id, populate_existing=True)
    assert (hit.leased_count, hit.submitted_count) == (0, 0)
    rate(session, who, _post(lease, 0, CONSISTENCY, "3", 5000), now=later)
    result = _rate_all(session, who, lease, later, start=1)
    assert result.completed and result.late
    rows = _ratings(session, lease)
    assert rows[0].late  # its quality was on time, its consistency late
    assert all(r.late for r in rows) and len(rows) == 11
    a = session.get(Assignment, lease.id, populate_existing=True)
    assert a.status is AssignmentStatus.submitted and a.late
    hit = session.get(Hit, lease.hit_id, populate_existing=True)
    assert (hit.leased_count, hit.submitted_count) == (0, 1)  # its lease had already left


def test_a_lease_that_ran_out_but_is_still_held_is_submitted_late(session):
    study = make_ratings_study(session, per_cell=5)
    who = annotator(session, study)
    now = utcnow()
    lease = next_assignment(session, who, now=now, serve=True).assignment
    rate(session, who, _post(lease, 0, QUALITY, "2", 5000), now=now)
    rate(session, who, _post(lease, 0, CONSISTENCY, "2", 5000), now=now)
    later = now + timedelta(seconds=study.lease_seconds + 5)
    result = _rate_all(session, who, lease, later, start=1)
    assert result.completed and result.late
    rows = _ratings(session, lease)
    assert not rows[0].late and all(r.late for r in rows[1:])
    hit = session.get(Hit, lease.hit_id, populate_existing=True)
    assert (hit.leased_count, hit.submitted_count) == (0, 1)


def test_the_last_rating_sent_again_is_answered_as_stored(session):
    study = make_ratings_study(session, per_cell=5)
    who = annotator(session, study)
    now = utcnow()
    lease = next_assignment(session, who, now=now, serve=True).assignment
    assert _rate_all(session, who, lease, now).completed
    before = _stored(session)
    again = rate(session, who, _post(lease, 10, CONSISTENCY, "4"), now=now)
    assert again.completed and again.repeated and _stored(session) == before


def test_too_fast_by_the_client_time_or_else_by_the_server_time(session):
    study = make_ratings_study(session, per_cell=5, min_seconds_per_item=2.0)
    who = annotator(session, study)
    now = utcnow()
    lease = next_assignment(session, who, now=now, serve=True).assignment
    # the client says 500 ms: too fast, whatever the server saw
    rate(session, who, _post(lease, 0, QUALITY, "3", 500), now=now + timedelta(seconds=30))
    rate(session, who, _post(lease, 0, CONSISTENCY, "3", 9000), now=now + timedelta(seconds=40))
    # no client time (no JavaScript): the server's time since the step was shown
    t = now + timedelta(seconds=40)
    rate(session, who, _post(lease, 1, QUALITY, "3"), now=t + timedelta(seconds=5))
    rate(session, who, _post(lease, 1, CONSISTENCY, "3"), now=t + timedelta(seconds=10))
    rate(session, who, _post(lease, 2, QUALITY, "3"), now=t + timedelta(seconds=11))
    rate(session, who, _post(lease, 2, CONSISTENCY, "3"), now=t + timedelta(seconds=20))
    rate(session, who, _post(lease, 3, QUALITY, "3"), now=t + timedelta(seconds=25))
    rate(session, who, _post(lease, 3, CONSISTENCY, "3"), now=t + timedelta(seconds=25.5))
    fast = [r.too_fast for r in _ratings(session, lease)]
    assert fast == [True, False, True, True]
    assert _ratings(session, lease)[1].quality_ms is None  # no client time, none stored


def test_ratings_and_next_word_answers_do_not_mix(session):
    ratings = make_ratings_study(session, slug="r", per_cell=5)
    who = annotator(session, ratings, "r")
    lease = next_assignment(session, who, serve=True).assignment
    with pytest.raises(AnnotationError, match="collects ratings") as refused:
        submit(session, who, lease.public_id, dict.fromkeys(range(11), 0))
    assert refused.value.status_code == 409
    nextword = make_study(session, slug="n", per_cell=5, lengths=(10,))
    other = annotator(session, nextword, "n")
    work = next_assignment(session, other, serve=True)
    assert work.status is WorkStatus.assigned
    with pytest.raises(AnnotationError, match="next-word") as refused:
        rate(session, other, _post(work.assignment, 0, QUALITY, "3"))
    assert refused.value.status_code == 409
    assert session.scalar(select(func.count()).select_from(Rating)) == 0


def test_the_scale_points_and_parsing():
    half = Scale(5, 0.5)
    assert half.points()[::2] == ("0", "1", "2", "3", "4", "5") and len(half.points()) == 11
    assert [half.parse(v) for v in ("0", "0.5", "3.0", "4.5", "5")] == [0, 0.5, 3, 4.5, 5]
    assert Scale.of({}) == half and Scale.of(None) == half  # studies stored before the section
    assert Scale.of({"scale_max": 10, "step": 1.0}).points()[-1] == "10"
