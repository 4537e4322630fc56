"""Work that is kept but may not count: late answers past the cap or the replicas, answers
sent after a block, unconfirmed MTurk work; a HIT given back; a second tab's answers; the
link tokens. Then the results' rules for the flagged work, through the database path."""

import csv
import io
from datetime import timedelta

import pytest
from itsdangerous import URLSafeSerializer
from sqlalchemy import func, select

from app.annotation.errors import AnnotationError
from app.annotation.identities import (
    INVITE_SALT,
    address_key,
    annotator_for_invite,
    crowd_annotator,
    invite_token,
    read_invite_token,
)
from app.annotation.leases import next_assignment, return_assignment
from app.annotation.schemas import WorkStatus
from app.models import Assignment, AssignmentStatus, Channel, Hit, HitPosition, Judgment, utcnow
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.studytypes.nextword import exports
from app.studytypes.nextword.annotation import submit
from tests.hits.factory import annotator, make_study


def _answers(session, lease, rank=0):
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(
            HitPosition.hit_id == lease.hit_id
        )
    ).all()
    return {p: order.index(rank) for p, order in rows}


def _flags(session, lease):
    a = session.get(Assignment, lease.id)
    session.refresh(a)
    return {
        f
        for f in ("late", "over_cap", "extra_replica", "after_block", "unverified")
        if getattr(a, f)
    }


def _n_judgments(session):
    return session.scalar(select(func.count()).select_from(Judgment))


def _counters(session, hit_id):
    return tuple(
        session.execute(select(Hit.leased_count, Hit.submitted_count).where(Hit.id == hit_id)).one()
    )


def test_a_late_answer_after_the_slot_was_let_again_is_kept_as_an_extra_replica(session):
    study = make_study(session, per_cell=5, lengths=(10,))  # one HIT, one replica
    late, other = annotator(session, study, "late"), annotator(session, study, "other")
    t0 = utcnow()
    first = next_assignment(session, late, now=t0).assignment
    t1 = t0 + timedelta(seconds=study.lease_seconds + 1)
    relet = next_assignment(session, other, now=t1).assignment
    assert relet.hit_id == first.hit_id
    # The re-let lease is still open: the late answer is the one past the replicas.
    result = submit(session, late, first.public_id, _answers(session, first), now=t1)
    assert result.late and _flags(session, first) == {"late", "extra_replica"}
    submit(session, other, relet.public_id, _answers(session, relet), now=t1)
    assert _flags(session, relet) == set()
    assert _n_judgments(session) == 22  # nothing thrown away
    assert _counters(session, first.hit_id) == (0, 2)


def test_a_late_answer_into_a_free_slot_is_not_flagged(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    t0 = utcnow()
    lease = next_assignment(session, a, now=t0).assignment
    t1 = t0 + timedelta(seconds=study.lease_seconds + 1)
    submit(session, a, lease.public_id, _answers(session, lease), now=t1)
    assert _flags(session, lease) == {"late"}


def test_a_late_answer_past_the_cap_is_kept_and_flagged(session):
    study = make_study(session, per_cell=10, lengths=(10,))  # two HITs
    a = annotator(session, study, hit_cap=1)
    t0 = utcnow()
    lapsed = next_assignment(session, a, now=t0).assignment
    t1 = t0 + timedelta(seconds=study.lease_seconds + 1)
    work = next_assignment(session, a, now=t1)  # the lapsed lease no longer counts
    assert work.expired_previous and work.status is WorkStatus.assigned
    submit(session, a, work.assignment.public_id, _answers(session, work.assignment), now=t1)
    assert next_assignment(session, a, now=t1).status is WorkStatus.cap_reached
    submit(session, a, lapsed.public_id, _answers(session, lapsed), now=t1)
    assert _flags(session, lapsed) == {"late", "over_cap"}
    assert _flags(session, work.assignment) == set()
    done = session.scalar(
        select(func.count()).where(
            Assignment.annotator_id == a.id, Assignment.status == AssignmentStatus.submitted
        )
    )
    assert done == 2  # kept: one counts, one is over the cap


def test_a_hit_given_back_cannot_be_submitted(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    lease = next_assignment(session, a).assignment
    return_assignment(session, a, lease.public_id)
    before = _counters(session, lease.hit_id)
    with pytest.raises(AnnotationError) as exc:
        submit(session, a, lease.public_id, _answers(session, lease))
    assert exc.value.status_code == 409 and "gave this HIT back" in exc.value.message
    assert _n_judgments(session) == 0 and _counters(session, lease.hit_id) == before
    assert session.scalar(select(Assignment.status)).value == "returned"


def test_a_blocked_annotators_held_hit_is_kept_and_flagged(session, settings):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    lease = next_assignment(session, a).assignment
    a.blocked = True
    session.flush()
    ref = read_invite_token(settings.secret_key, invite_token(settings.secret_key, a))
    locked = annotator_for_invite(session, ref)
    result = submit(session, locked, lease.public_id, _answers(session, lease))
    assert not result.late and _flags(session, lease) == {"after_block"}
    assert _n_judgments(session) == 11


def test_mturk_leases_are_unverified_until_confirmed(session):
    study = make_study(session, per_cell=10, lengths=(10,))
    worker = crowd_annotator(session, study, Channel.mturk, "A2WORKER")
    lease = next_assignment(session, worker, external_assignment_id="ASSIGN1").assignment
    local = annotator(session, study)
    mine = next_assignment(session, local).assignment
    assert _flags(session, lease) == {"unverified"} and _flags(session, mine) == set()


def test_a_repeat_with_other_answers_reports_the_kept_ones(session):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    lease = next_assignment(session, a).assignment
    first = _answers(session, lease, rank=0)
    submit(session, a, lease.public_id, first)
    same = submit(session, a, lease.public_id, first)
    assert same.repeated and same.kept == {}
    other = submit(session, a, lease.public_id, _answers(session, lease, rank=2))
    assert other.repeated and other.kept == first
    stored = session.scalars(select(Judgment.chosen_rank)).all()
    assert stored == [0] * 11  # the first answers


def test_tokens_carry_the_nonce_only_in_one_spelling(session, settings):
    study = make_study(session, per_cell=5, lengths=(10,))
    a = annotator(session, study)
    token = invite_token(settings.secret_key, a)
    serializer = URLSafeSerializer(settings.secret_key, salt=INVITE_SALT)
    assert serializer.loads(token) == [a.invite_nonce]  # no sequential id
    assert annotator_for_invite(session, read_invite_token(settings.secret_key, token)).id == a.id
    # The signature's last character has 2 unused bits: 3 other spellings decode the same.
    spellings = [token[:-1] + c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"]
    same = [t for t in [*spellings, token + "=", " " + token] if t != token]
    for variant in same:
        with pytest.raises(AnnotationError) as exc:
            read_invite_token(settings.secret_key, variant)
        assert exc.value.status_code == 404
    # Links of the first format ([id, nonce]) keep working; their id must match.
    legacy = serializer.dumps([a.id, a.invite_nonce])
    assert annotator_for_invite(session, read_invite_token(settings.secret_key, legacy)).id == a.id
    forged = serializer.dumps([a.id + 1, a.invite_nonce])
    with pytest.raises(AnnotationError):
        annotator_for_invite(session, read_invite_token(settings.secret_key, forged))
    a.invite_nonce = None  # revoked
    session.flush()
    for t in (token, legacy):
        with pytest.raises(AnnotationError) as exc:
            annotator_for_invite(session, read_invite_token(settings.secret_key, t))
        assert exc.value.status_code == 404


def test_the_results_leave_flagged_work_out_by_rule(session):
    """Six HITs, answered so that each flag appears once (every answer is the top-1, so
    the attention and speed rules drop nothing); see the comments for who gets what."""
    study = make_study(session, per_cell=30, lengths=(10,), min_ms_per_item=0)
    late, relet, capped, plain, blocked = (
        annotator(session, study, name) for name in ("late", "relet", "capped", "plain", "blk")
    )
    capped.hit_cap = 1
    t0 = utcnow()
    t1 = t0 + timedelta(seconds=study.lease_seconds + 1)

    def take(who, now=t1, **kw):
        return next_assignment(session, who, now=now, **kw).assignment

    def answer(who, lease, now=t1):
        submit(session, who, lease.public_id, _answers(session, lease), now=now)

    h1, h2 = take(late, t0), take(capped, t0)
    r1 = take(relet)  # H1 again: its lease lapsed
    assert r1.hit_id == h1.hit_id
    answer(relet, r1)
    answer(late, h1)  # extra_replica
    c2 = take(capped)
    answer(capped, c2)
    answer(capped, h2)  # over_cap
    answer(plain, take(plain))
    b = take(blocked)
    blocked.blocked = True
    session.flush()
    answer(blocked, b)  # after_block
    worker = crowd_annotator(session, study, Channel.mturk, "A3WORKER", now=t1)
    answer(worker, take(worker, external_assignment_id="ASSIGN9"))  # unverified

    res = study_results(session, study, ResultQuery(b=200, exclusions="on"))
    by_rule = res.exclusions.excluded_by_rule
    assert by_rule == {"blocked": 11, "attention": 0, "too_fast": 0, "over_cap": 11,
                       "extra_replica": 11, "unverified": 11}  # fmt: skip
    assert res.exclusions.n_judgments == 77 and res.exclusions.n_kept == 33
    # With exclusions: relet, capped's first, plain (10 texts each, attention aside).
    assert res.results.n_judgments == 30 and res.results.n_annotators == 3
    # Without: every kept answer but the unconfirmed MTurk one.
    assert res.other.n_judgments == 60 and res.other.n_annotators == 5
    assert any("not yet confirmed through the MTurk API" in m for m in res.messages)

    # The export flags each kept assignment (one row per assignment here: position 0).
    text = "".join(exports.judgments_csv(session, study))
    flags = ("over_cap", "extra_replica", "after_block", "unverified")
    flagged = sorted(
        (r["annotator_label"] or r["worker_id"], tuple(f for f in flags if r[f] == "true"))
        for r in csv.DictReader(io.StringIO(text))
        if r["position"] == "0"
    )
    assert flagged == [
        ("A3WORKER", ("unverified",)),
        ("blk", ("after_block",)),
        ("capped", ()),
        ("capped", ("over_cap",)),
        ("late", ("extra_replica",)),
        ("plain", ()),
        ("relet", ()),
    ]


def test_unconfirmed_mturk_work_does_not_fail_a_worker_on_attention(session):
    study = make_study(session, per_cell=20, lengths=(10,))
    study.exclusions = {**study.exclusions, "attention_min_accuracy": 0.5, "too_fast": False}
    worker = crowd_annotator(session, study, Channel.mturk, "A3WORKER")
    leases = []
    for n, rank in enumerate((0, 2, 2)):  # attention right once (confirmed), wrong twice
        lease = next_assignment(session, worker, external_assignment_id=f"ASG{n}").assignment
        submit(session, worker, lease.public_id, _answers(session, lease, rank=rank))
        leases.append(lease)
    session.get(Assignment, leases[0].id).unverified = False  # confirmed through the API
    session.flush()
    res = study_results(session, study, ResultQuery(b=200, exclusions="on"))
    # Counting the unconfirmed HITs, the worker's attention accuracy would be 1/3 and their
    # confirmed HIT would be dropped too; on the confirmed work alone it is 1/1.
    assert res.exclusions.annotators_excluded["attention"] == []
    assert res.exclusions.excluded_by_rule["unverified"] == 22
    assert res.exclusions.n_kept == 11  # the confirmed HIT: 10 texts and 1 attention item


def test_new_identities_are_counted_per_ipv6_network_not_per_address():
    key = "k" * 40
    one, other = "2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe"
    assert address_key(key, one) == address_key(key, other)  # the same /64
    assert address_key(key, one) != address_key(key, "2001:db8:1:3::1")
    assert address_key(key, "192.0.2.1") != address_key(key, "192.0.2.2")
    assert address_key(key, "::ffff:192.0.2.1") != address_key(key, "::ffff:192.0.2.2")
    assert address_key(key, "testclient") and address_key(key, None) is None
