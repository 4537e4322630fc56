"""The crowd drivers next to annotators who write at the same time: every unit of work
that writes starts as a writer on SQLite (no "database is locked" when an annotator's
request commits between a step's read and its write), and two publish runs on MTurk
share the HITs between them, each made once."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import event, select, text
from sqlalchemy.exc import OperationalError

from app.crowd import common, payments, publishing, sync
from app.db import begin_write, build_engine, make_sessionmaker, unit_of_work
from app.models import CrowdHit
from tests.crowd.platforms.mturk.test_end_to_end import (  # noqa: F401  (fixtures)
    aws_env,
    crowd_study,
    make_session,
    settings,
    standin,
    work,
)


@pytest.fixture
def sqlite_file(migrated_copy):
    engine = build_engine(migrated_copy.settings())
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE bump (n INTEGER)"))
    yield migrated_copy, engine
    engine.dispose()


def annotators_write_meanwhile(engine, path: str) -> list[str]:
    """After the first read of every transaction of `engine`, another connection commits
    a write at once, as an annotator's request may (it gives up at once if this one
    holds the write lock: then it would have waited its turn). What it did, in order."""
    seen: list[str] = []

    @event.listens_for(engine, "begin")
    def began(conn):
        conn.info["bumped"] = False

    @event.listens_for(engine, "after_cursor_execute")
    def after(conn, cursor, statement, params, context, many):
        if conn.info.get("bumped") or not statement.lstrip().upper().startswith("SELECT"):
            return
        conn.info["bumped"] = True
        other = sqlite3.connect(path, timeout=0.05, isolation_level=None)
        try:
            other.execute("INSERT INTO bump VALUES (1)")
            seen.append("committed")
        except sqlite3.OperationalError:
            seen.append("waited")
        finally:
            other.close()

    return seen


# SQLite's writer lock; on PostgreSQL row locks serialise the same steps (tested elsewhere).
@pytest.mark.sqlite
def test_every_crowd_unit_of_work_that_writes_starts_as_a_writer(sqlite_file, standin, aws_env):
    db, engine = sqlite_file
    platform, url = standin
    on_file = db.settings(
        base_url="https://ebc.example.org", mturk_endpoint_url=url, crowd_calls_per_second=100
    )
    make = make_sessionmaker(engine)
    with make() as session:
        study = crowd_study(session)
        session.commit()
    seen = annotators_write_meanwhile(engine, engine.url.database)

    # The mechanism: a unit of work that reads, then writes, as a reader.
    with pytest.raises(OperationalError, match="locked"), unit_of_work(make) as session:
        session.execute(select(CrowdHit.id)).all()
        session.execute(text("INSERT INTO bump VALUES (2)"))

    provider = common.provider_for(on_file, "mturk")
    report = publishing.publish(make, on_file, "crowd", provider, by="cli")
    assert report.total == 4
    with make() as session:
        begin_write(session)  # as an annotator's request starts
        hit = session.scalars(select(CrowdHit.external_hit_id)).first()
        lease, _ = work(session, study, "W1", platform.add_assignment(hit, "W1"), hit_external=hit)
        session.commit()
    assert sync.sync(make, on_file, "crowd", provider, by="cli").confirmed == 1
    assert payments.approve(make, "crowd", provider, lease.public_id, by="cli").made
    assert payments.bonus(make, "crowd", provider, lease.public_id, 5, reason="Hi", by="c").made
    assert payments.block(make, "crowd", provider, "W1", reason="Bot", by="cli").made
    assert payments.expire(make, "crowd", provider, by="cli").made
    assert "waited" in seen and seen.count("committed") >= 1  # both kinds of unit ran


def test_two_runs_publishing_at_once_share_the_hits_and_make_each_once(
    session, make_session, settings, standin
):
    """A second run starts while the first waits for MTurk to make a HIT: it leaves the
    HIT being made to the first run (its claim is fresh) and makes the others."""
    platform, _ = standin
    crowd_study(session)
    first, second = (common.provider_for(settings, "mturk") for _ in range(2))
    real_publish = first.publish
    inner = []

    def publish_while_another_run_goes(external_id, spec, unit):
        made = real_publish(external_id, spec, unit)
        if not inner:
            inner.append(publishing.publish(make_session, settings, "crowd", second, by="b"))
        return made

    # The HIT type exists (a first click published one HIT); then two runs at once.
    publishing.publish(make_session, settings, "crowd", first, by="a", limit=1)
    first.publish = publish_while_another_run_goes
    outer = publishing.publish(make_session, settings, "crowd", first, by="a")

    assert (inner[0].published, outer.published) == (2, 1)
    assert len(platform.hits) == 4 and platform.count("CreateHITWithHITType") == 4
    session.expire_all()
    rows = session.scalars(select(CrowdHit)).all()
    assert {r.status for r in rows} == {"published"}
    assert sorted(r.external_hit_id for r in rows) == sorted(platform.hits)
