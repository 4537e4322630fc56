"""Ratings sent many times at once (double clicks, a second tab, resends): one stored,
the same value answered as stored, another value refused. Each thread has its own Session
and commits for real; PostgreSQL's row locks are the real test (SQLite serialises)."""

from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from sqlalchemy import select

from app.annotation.errors import AnnotationError
from app.annotation.identities import annotator_for_invite
from app.annotation.leases import next_assignment
from app.annotation.schemas import InviteRef
from app.db import build_engine, make_sessionmaker
from app.models import Hit, Rating
from app.studytypes.ratings.annotation import CONSISTENCY, QUALITY, RatingPost, rate
from tests.hits.factory import annotator
from tests.hits.ratings_factory import make_ratings_study

THREADS = 20


@pytest.fixture
def db(migrated_copy):
    engine = build_engine(migrated_copy.settings(db_pool_size=THREADS))
    yield make_sessionmaker(engine)
    engine.dispose()


def _run(fn):
    barrier = Barrier(THREADS)

    def start(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(start, range(THREADS)))


def test_one_rating_is_stored_whatever_arrives_at_once(db):
    with db() as s, s.begin():
        study = make_ratings_study(s, per_cell=5)
        ref = InviteRef(annotator(s, study).invite_nonce)
    with db() as s, s.begin():
        public_id = next_assignment(s, annotator_for_invite(s, ref)).assignment.public_id

    def send(step, values):
        def one(i):
            post = RatingPost(public_id, 0, step, values[i % len(values)], 4000)
            try:
                with db() as s, s.begin():
                    return rate(s, annotator_for_invite(s, ref), post).repeated
            except AnnotationError as exc:
                return exc.status_code

        return one

    outcomes = _run(send(QUALITY, ["3"]))  # the same quality, twenty times
    assert outcomes.count(False) == 1 and outcomes.count(True) == THREADS - 1
    outcomes = _run(send(CONSISTENCY, ["1", "2"]))  # two tabs, two values
    assert outcomes.count(False) == 1 and outcomes.count(409) == THREADS // 2
    with db() as s:
        (row,) = s.scalars(select(Rating)).all()
        assert row.quality == 3.0 and row.consistency in (1.0, 2.0)
        assert outcomes.count(True) == THREADS // 2 - 1  # the stored value's other sends
        assert s.scalar(select(Hit.submitted_count)) == 0  # ten pairs still to rate
