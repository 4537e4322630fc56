"""A HIT's slot counters follow one rule whichever way its assignments leave `leased`:
submitted on time or late (PostgreSQL's one-statement submit, the separate statements
elsewhere), returned, expired one by one under the annotator's lock or by the sweep."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql

from app.annotation.leases import expire_leases, next_assignment, return_assignment
from app.annotation.queries import LEAVE, PG_STORE_SUBMISSION
from app.annotation.schemas import WorkStatus
from app.models import Assignment, AssignmentStatus, utcnow
from app.studytypes.nextword.annotation import submit
from tests.hits.factory import annotator, make_study
from tests.studytypes.nextword.test_annotation import _answers, _counters


def _recounted(session, hit_id):
    """The counters as the assignments have them: what the stored ones must agree with."""
    a = Assignment
    leased, submitted, floor = session.execute(
        select(
            func.count().filter(a.status == AssignmentStatus.leased),
            func.count().filter(a.status == AssignmentStatus.submitted),
            func.min(a.expires_at).filter(a.status == AssignmentStatus.leased),
        ).where(a.hit_id == hit_id)
    ).one()
    return leased, submitted, floor


@pytest.mark.parametrize("expiry", ["sweep", "reload"])
def test_every_way_out_of_a_lease_counts_the_same(session, expiry):
    study = make_study(session, per_cell=5, lengths=(10,), replicas=5)  # one HIT, 5 slots
    people = [annotator(session, study, str(i)) for i in range(6)]
    t0 = utcnow()
    t1 = t0 + timedelta(seconds=study.lease_seconds + 1)  # every lease of t0 has lapsed
    first_expiry = t0 + timedelta(seconds=study.lease_seconds)
    leases = [next_assignment(session, p, now=t0).assignment for p in people[:5]]
    hit_id = leases[0].hit_id
    assert {lease.hit_id for lease in leases} == {hit_id}

    def step(expected):
        assert _counters(session, hit_id) == expected
        leased, submitted, floor = _recounted(session, hit_id)
        assert expected[:2] == (leased, submitted)
        assert (expected[2] is None) == (floor is None)
        assert floor is None or expected[2] <= floor  # a lower bound of the leases' expiry

    step((5, 0, first_expiry))
    submit(session, people[0], leases[0].public_id, _answers(session, leases[0]), now=t0)
    step((4, 1, first_expiry))  # on time
    return_assignment(session, people[1], leases[1].public_id, now=t0)
    step((3, 1, first_expiry))  # given back
    result = submit(session, people[4], leases[4].public_id, _answers(session, leases[4]), now=t1)
    assert result.late
    step((2, 2, first_expiry))  # late, its lease lapsed but not yet expired
    if expiry == "sweep":
        assert expire_leases(session, study, now=t1) == 2  # two of one HIT in one update
    else:
        for person in people[2:4]:
            work = next_assignment(session, person, now=t1)
            assert work.expired_previous and work.status is WorkStatus.no_work
    step((0, 2, None))  # expired: the last leases clear the bound
    result = submit(session, people[2], leases[2].public_id, _answers(session, leases[2]), now=t1)
    assert result.late
    step((0, 3, None))  # late, after its lease was expired
    work = next_assignment(session, people[5], now=t1)
    assert work.assignment.hit_id == hit_id
    step((1, 3, work.assignment.expires_at))


def test_the_one_statement_submit_sets_the_counters_by_the_same_rule():
    """PostgreSQL's one-statement submit and the separate statements share one SET clause."""
    dialect = postgresql.dialect()

    def hit_update(statement):
        """The SET clause of the statement's UPDATE of hits, and the values bound in it."""
        compiled = statement.compile(dialect=dialect)
        sql = str(compiled)
        counters = sql[sql.index("UPDATE hits SET") : sql.index(" WHERE hits.id")]
        bound = {k: v for k, v in compiled.params.items() if f"%({k})s" in counters}
        return counters, bound

    for was_leased in (True, False):
        combined = hit_update(PG_STORE_SUBMISSION[was_leased])
        assert combined == hit_update(LEAVE[(was_leased, True)])
        assert ("leased_count" in combined[0]) is was_leased and combined[1]
