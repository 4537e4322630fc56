"""A next-word HIT's assignments and submissions (app.studytypes.nextword.annotation, on
app.annotation.leases and .submissions): caps, no repeats, leases, late and repeated
answers, d."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.annotation.content import HIT_CACHE, HitCache, hit_content
from app.annotation.errors import AnnotationError, InvalidAnswers
from app.annotation.identities import annotator_for_invite, invite_token, read_invite_token
from app.annotation.leases import next_assignment, return_assignment
from app.annotation.schemas import WorkStatus
from app.models import Assignment, AssignmentStatus, Hit, HitPosition, Judgment, StudyStatus, utcnow
from app.studytypes.nextword.annotation import answers_from_form, submit
from tests.hits.factory import annotator, make_study


def _answers(session, assignment, rank=0):
    """Screen slots that pick the word of model rank `rank` ("none" for None)."""
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(
            HitPosition.hit_id == assignment.hit_id
        )
    ).all()
    target = "none" if rank is None else rank
    return {p: order.index(target) for p, order in rows}


def _status(session, assignment):
    """The assignment's status as stored (the service hands out snapshots, not ORM objects)."""
    return session.scalar(select(Assignment.status).where(Assignment.id == assignment.id))


def _counters(session, hit_id):
    """A HIT's (leased_count, submitted_count, next_expiry) as stored."""
    row = session.execute(
        select(Hit.leased_count, Hit.submitted_count, Hit.next_expiry).where(Hit.id == hit_id)
    ).one()
    return tuple(row)


def _judgments(session, assignment):
    return session.scalars(
        select(Judgment).where(Judgment.assignment_id == assignment.id).order_by(Judgment.position)
    ).all()


def test_cap_no_repeat_and_override(session):
    study = make_study(session, per_cell=25, per_annotator_cap=3)
    a = annotator(session, study)
    seen = set()
    for _ in range(3):
        work = next_assignment(session, a)
        assert work.status is WorkStatus.assigned and work.assignment.hit_id not in seen
        seen.add(work.assignment.hit_id)
        submit(session, a, work.assignment.public_id, _answers(session, work.assignment))
    work = next_assignment(session, a)
    assert work.status is WorkStatus.cap_reached and work.done == 3 and work.cap == 3
    a.hit_cap = 4  # the per-annotator override, changed while the study runs
    work = next_assignment(session, a)
    assert work.status is WorkStatus.assigned and work.assignment.hit_id not in seen


def test_a_reload_resumes_the_lease_and_expiry_returns_the_slot(session):
    study = make_study(session, per_cell=5, lengths=(10,))  # one HIT, one replica
    a, b = annotator(session, study, "a"), annotator(session, study, "b")
    now = utcnow()
    first = next_assignment(session, a, now=now).assignment
    assert next_assignment(session, a, now=now).assignment.id == first.id
    assert next_assignment(session, b, now=now).status is WorkStatus.no_work  # slot held
    later = now + timedelta(seconds=study.lease_seconds + 1)
    work_b = next_assignment(session, b, now=later)
    assert work_b.status is WorkStatus.assigned and work_b.assignment.hit_id == first.hit_id
    again = next_assignment(session, a, now=later)
    assert again.expired_previous and again.status is WorkStatus.no_work  # never the same HIT
    assert _status(session, first) is AssignmentStatus.expired
    # a's late answers are still kept, flagged
    result = submit(session, a, first.public_id, _answers(session, first), now=later)
    assert result.late and all(j.late for j in _judgments(session, first))
    # The HIT's counters: b's lease, and a's late submission (its lease was already given back)
    leased, submitted, floor = _counters(session, first.hit_id)
    assert (leased, submitted) == (1, 1) and floor <= work_b.assignment.expires_at
    submit(session, b, work_b.assignment.public_id, _answers(session, first), now=later)
    assert _counters(session, first.hit_id) == (0, 2, None)


def test_fewest_completed_replicas_first_and_replica_slots(session):
    study = make_study(session, per_cell=10, lengths=(10,), replicas=2)  # 2 HITs x 2 slots
    people = [annotator(session, study, str(i)) for i in range(5)]
    w0 = next_assignment(session, people[0]).assignment
    submit(session, people[0], w0.public_id, _answers(session, w0))
    w1 = next_assignment(session, people[1]).assignment
    assert w1.hit_id != w0.hit_id  # the untouched HIT comes first
    w2 = next_assignment(session, people[2]).assignment
    w3 = next_assignment(session, people[3]).assignment
    assert {w2.hit_id, w3.hit_id} == {w0.hit_id, w1.hit_id}
    assert next_assignment(session, people[4]).status is WorkStatus.no_work
    return_assignment(session, people[3], w3.public_id)
    assert next_assignment(session, people[4]).assignment.hit_id == w3.hit_id


def test_d_comes_from_the_stored_permutation(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    work = next_assignment(session, a).assignment
    answers = _answers(session, work, rank=0)
    answers[0] = _answers(session, work, rank=3)[0]
    answers[1] = _answers(session, work, rank=None)[1]
    result = submit(session, a, work.public_id, answers, {p: 5000 for p in answers})
    assert not result.late and not result.repeated and result.too_fast == 0
    js = _judgments(session, work)
    assert [j.d for j in js] == [1.0, 1.0] + [0.0] * (len(js) - 2)
    assert js[0].chosen_rank == 3 and js[1].chosen_rank is None and js[1].chosen_word is None
    assert js[2].chosen_rank == 0 and js[2].option == answers[2]
    assert js[2].chosen_word == session.get(Judgment, js[2].id).chosen_word
    assert result.assignment.status is AssignmentStatus.submitted
    assert _status(session, work) is AssignmentStatus.submitted


def test_repeated_submission_writes_nothing_and_returns_the_stored_result(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    work = next_assignment(session, a).assignment
    submit(session, a, work.public_id, _answers(session, work))
    before = session.scalar(select(func.count()).select_from(Judgment))
    again = submit(session, a, work.public_id, _answers(session, work, rank=None))
    assert again.repeated and session.scalar(select(func.count()).select_from(Judgment)) == before
    assert all(j.d == 0.0 for j in _judgments(session, work))


def test_too_fast_is_flagged_from_client_time_or_server_time(session):
    study = make_study(session, per_cell=10, lengths=(10,), min_ms_per_item=2000)
    a = annotator(session, study)
    work = next_assignment(session, a).assignment
    answers = _answers(session, work)
    ms = {p: (100 if p < 3 else 10**9) for p in answers}
    result = submit(session, a, work.public_id, answers, ms)
    js = _judgments(session, work)
    assert result.too_fast == 3 and [j.too_fast for j in js[:4]] == [True, True, True, False]
    assert js[5].client_ms == 3_600_000  # bounded
    work = next_assignment(session, a).assignment  # no client time: the server's clock
    session.execute(
        update(Assignment).where(Assignment.id == work.id).values(page_served_at=utcnow())
    )
    result = submit(session, a, work.public_id, _answers(session, work))
    assert result.too_fast == len(answers)


def test_bad_answers_change_nothing(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a, b = annotator(session, study, "a"), annotator(session, study, "b")
    work = next_assignment(session, a).assignment
    good = _answers(session, work)
    with pytest.raises(InvalidAnswers):
        submit(session, a, work.public_id, {p: o for p, o in good.items() if p})  # one missing
    with pytest.raises(InvalidAnswers):
        submit(session, a, work.public_id, {**good, 0: 6})  # no slot 6
    with pytest.raises(AnnotationError) as exc:
        submit(session, a, work.public_id, {**good, 11: 0})  # no position 11
    assert exc.value.status_code == 400
    with pytest.raises(AnnotationError) as exc:
        submit(session, a, "forged-id", good)
    assert exc.value.status_code == 404
    with pytest.raises(AnnotationError) as exc:
        submit(session, b, work.public_id, good)  # someone else's
    assert exc.value.status_code == 404
    with pytest.raises(AnnotationError):
        answers_from_form({"o1": "x"})
    assert session.scalar(select(func.count()).select_from(Judgment)) == 0
    assert _status(session, work) is AssignmentStatus.leased


def test_blocked_closed_and_not_open(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study, blocked=True)
    assert next_assignment(session, a).status is WorkStatus.blocked
    b = annotator(session, study, "b")
    study.status = StudyStatus.closed
    assert next_assignment(session, b).status is WorkStatus.closed
    study.status = StudyStatus.ready
    assert next_assignment(session, b).status is WorkStatus.not_open
    assert session.scalar(select(func.count()).select_from(Assignment)) == 0


def test_max_cell_share_limits_each_length(session):
    study = make_study(session, per_cell=20, max_cell_share=0.5)  # 4 HITs per length
    a = annotator(session, study)
    lengths = []
    while (work := next_assignment(session, a)).status is WorkStatus.assigned:
        lengths.append(session.get(Hit, work.assignment.hit_id).length)
        submit(session, a, work.assignment.public_id, _answers(session, work.assignment))
    assert sorted(lengths) == [10, 10, 20, 20]


def test_invite_tokens_are_signed_and_revocable(session, settings):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    token = invite_token(settings.secret_key, a)
    ref = read_invite_token(settings.secret_key, token)
    assert annotator_for_invite(session, ref).id == a.id
    for bad in (token[:-2] + "xx", "garbage", token.replace(".", "x", 1)):
        with pytest.raises(AnnotationError):
            read_invite_token(settings.secret_key, bad)
    with pytest.raises(AnnotationError):
        read_invite_token("another-secret-key", token)
    a.invite_nonce = "rotated"
    with pytest.raises(AnnotationError) as exc:
        annotator_for_invite(session, ref)
    assert exc.value.status_code == 404


def test_hit_content_is_cached_per_database_and_bounded(session):
    study = make_study(session, per_cell=10, lengths=(10,))  # two HITs
    hits = session.scalars(select(Hit.id).where(Hit.study_id == study.id).order_by(Hit.id)).all()
    assert hit_content(session, hits[0]) is not hit_content(session, hits[0])  # no cache here
    cache = session.info[HIT_CACHE] = HitCache(size=1)
    try:
        first = hit_content(session, hits[0])
        assert hit_content(session, hits[0]) is first
        assert [p.number for p in first.positions] == sorted(first.slots) == list(range(11))
        hit_content(session, hits[1])
        assert cache.get(hits[0]) is None and cache.get(hits[1]) is not None  # least recent out
        assert hit_content(session, hits[0]) == first  # read again, the same content
    finally:
        del session.info[HIT_CACHE]
