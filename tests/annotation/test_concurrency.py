"""Many requests at once: caps hold, no slot or HIT is given twice, duplicate
submissions store one set of judgments. Each thread has its own Session and
commits for real, as concurrent web requests do. PostgreSQL is the real test
(row locks, SKIP LOCKED); SQLite runs it too (BEGIN IMMEDIATE serialises)."""

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from sqlalchemy import func, select

from app.annotation.identities import annotator_for_invite
from app.annotation.leases import next_assignment
from app.annotation.schemas import InviteRef, WorkStatus
from app.db import build_engine, make_sessionmaker
from app.models import Assignment, Hit, HitPosition, Judgment
from app.studytypes.nextword.annotation import submit
from tests.hits.factory import annotator, make_study

THREADS = 50


@pytest.fixture
def db(migrated_copy):
    engine = build_engine(migrated_copy.settings(db_pool_size=20))
    yield make_sessionmaker(engine)
    engine.dispose()


def _run(fn):
    barrier = Barrier(THREADS)

    def start(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(start, range(THREADS)))


def _setup(sm, n_annotators, **study_kw):
    with sm() as s, s.begin():
        study = make_study(s, **study_kw)
        refs = [
            InviteRef(a.invite_nonce)
            for a in (annotator(s, study, str(i)) for i in range(n_annotators))
        ]
    return refs


def _ask(sm, ref, external=None):
    with sm() as s, s.begin():
        a = annotator_for_invite(s, ref)
        work = next_assignment(s, a, external_assignment_id=external)
        return work.status, work.assignment.hit_id if work.assignment else None


def test_one_annotator_many_requests_never_exceeds_the_cap(db):
    (ref,) = _setup(db, 1, per_cell=50, per_annotator_cap=7, replicas=3)  # 20 HITs
    results = _run(lambda i: _ask(db, ref, external=f"mturk-{i}"))
    assigned = [hit for status, hit in results if status is WorkStatus.assigned]
    assert len(assigned) == 7 and len(set(assigned)) == 7
    assert Counter(s for s, _ in results)[WorkStatus.cap_reached] == THREADS - 7
    # without an external id every request resumes the same lease
    (ref2,) = _setup(db, 1, slug="s2", per_cell=50)
    hits = {hit for _, hit in _run(lambda i: _ask(db, ref2))}
    assert len(hits) == 1


def test_many_annotators_never_share_a_slot(db):
    refs = _setup(db, THREADS, per_cell=30, lengths=(10, 20), replicas=2)  # 12 HITs x 2 slots
    results = _run(lambda i: _ask(db, refs[i]))
    assert Counter(s for s, _ in results) == {WorkStatus.assigned: 24, WorkStatus.no_work: 26}
    with db() as s:
        per_hit = Counter(s.scalars(select(Assignment.hit_id)).all())
        replicas = dict(s.execute(select(Hit.id, Hit.replicas)).all())
        pairs = s.execute(select(Assignment.hit_id, Assignment.annotator_id)).all()
    assert all(n <= replicas[h] for h, n in per_hit.items()) and sum(per_hit.values()) == 24
    assert len(pairs) == len(set(pairs))


def test_concurrent_duplicate_submissions_store_one_set(db):
    (ref,) = _setup(db, 1, per_cell=5, lengths=(10,))
    with db() as s, s.begin():
        a = annotator_for_invite(s, ref)
        work = next_assignment(s, a).assignment
        public_id = work.public_id
        answers = {
            p: order.index(0)
            for p, order in s.execute(
                select(HitPosition.position, HitPosition.choice_order).where(
                    HitPosition.hit_id == work.hit_id
                )
            )
        }

    def send(_i):
        with db() as s, s.begin():
            return submit(s, annotator_for_invite(s, ref), public_id, answers).repeated

    repeated = _run(send)
    assert repeated.count(False) == 1
    with db() as s:
        assert s.scalar(select(func.count()).select_from(Judgment)) == len(answers)
