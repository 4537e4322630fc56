"""Two runs make the same posting call at once (two publishes of an expired posting, a
double-clicked expiry, block or unblock), each in its own connection, on PostgreSQL (SQLite
serialises its writers by design): the calls are serialised per posting, so both runs end
well with one ledger row between them, never a unique-token violation (a 500 on the
dashboard)."""

# Fixtures imported from the service tests are taken as test parameters.
# ruff: noqa: F811

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import pytest
from sqlalchemy import select

from app.annotation.identities import crowd_annotator
from app.crowd import common, ledger, payments, publishing
from app.db import build_engine, make_sessionmaker, unit_of_work
from app.models import Channel, CrowdCall, CrowdHit
from tests.crowd.platforms.mturk.test_end_to_end import (  # noqa: F401  (fixtures)
    aws_env,
    crowd_study,
    standin,
)


def _meeting(monkeypatch) -> None:
    """Each run, once it has its call's token, waits (at most 1.5 s) for the other to have
    one too: without a lock both then insert the same token."""
    both = threading.Barrier(2, timeout=1.5)
    real = ledger._toggle_token

    def meet(*args, **kwargs):
        token = real(*args, **kwargs)
        with contextlib.suppress(threading.BrokenBarrierError):  # the other waits for our lock
            both.wait()
        return token

    monkeypatch.setattr(ledger, "_toggle_token", meet)


def _twice(run: Callable[[], object]) -> tuple[list[object], list[BaseException]]:
    outcomes: list[object] = []
    errors: list[BaseException] = []

    def go():
        try:
            outcomes.append(run())
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes, errors


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["reopen", "expire", "block"])
def test_the_same_posting_call_made_twice_at_once_is_one_call(
    migrated_copy, standin, monkeypatch, kind
):
    platform, url = standin
    settings = migrated_copy.settings(
        base_url="https://ebc.example.org",
        mturk_endpoint_url=url,
        crowd_calls_per_second=100,
        mturk_max_attempts=3,
    )
    engine = build_engine(settings)
    try:
        make_session = make_sessionmaker(engine)
        with unit_of_work(make_session) as session:
            crowd_annotator(session, crowd_study(session), Channel.mturk, "W1")
        mturk = common.provider_for(settings, "mturk")
        publishing.publish(make_session, settings, "crowd", mturk, by="cli")
        if kind == "reopen":
            payments.expire(make_session, "crowd", mturk, by="cli")
        _meeting(monkeypatch)

        def run():
            provider = common.provider_for(settings, "mturk")
            if kind == "reopen":
                return publishing.publish(make_session, settings, "crowd", provider, by="cli")
            if kind == "expire":
                return payments.expire(make_session, "crowd", provider, by="cli")
            return payments.block(make_session, "crowd", provider, "W1", reason="x", by="u")

        outcomes, errors = _twice(run)
        assert errors == [] and len(outcomes) == 2
        with unit_of_work(make_session) as session:
            calls = session.execute(
                select(CrowdCall.kind, CrowdCall.status).where(CrowdCall.kind == kind)
            ).all()
            units = set(session.scalars(select(CrowdHit.status)))
        assert calls == [(kind, "ok")]
        if kind == "block":
            assert list(platform.blocks) == ["W1"]
        else:
            live = kind == "reopen"
            assert units == {"published" if live else "expired"}
            statuses = {h["HITStatus"] for h in platform.hits.values()}
            assert statuses == {"Assignable" if live else "Unassignable"}
    finally:
        engine.dispose()


def test_a_block_that_finished_after_the_worker_was_read_is_the_same_call(migrated_copy, standin):
    """The window the race above hit under load, made deterministic (on both databases): a
    second block's unit of work has read the worker (not blocked yet) when the first block
    finishes and commits; its ledger read then sees the first call `ok` and must take it as
    the same call (one ledger row), not make a second block."""
    from app.crowd.claims import lock_posting, writing
    from app.crowd.ledger import CallRequest, begin_call
    from app.models import Annotator

    platform, url = standin
    settings = migrated_copy.settings(
        base_url="https://ebc.example.org", mturk_endpoint_url=url, crowd_calls_per_second=100
    )
    engine = build_engine(settings)
    try:
        make_session = make_sessionmaker(engine)
        with unit_of_work(make_session) as session:
            worker_id = crowd_annotator(session, crowd_study(session), Channel.mturk, "W1").id
        mturk = common.provider_for(settings, "mturk")
        publishing.publish(make_session, settings, "crowd", mturk, by="cli")
        posting_id = common.posting_id_of(make_session, "crowd", mturk)
        with writing(make_session) as second:
            posting = lock_posting(second, posting_id)
            read = second.get(Annotator, worker_id)  # held: the session keeps it as it was read
            assert read.blocked is False
            # The first block runs from start to end meanwhile, in its own connections (our
            # locks are released; expire_on_commit is off, as in every session here).
            second.commit()
            payments.block(make_session, "crowd", mturk, "W1", reason="x", by="u")
            posting = second.get(type(posting), posting_id)
            call = begin_call(
                second, posting, CallRequest("block", annotator_id=worker_id, reason="x"), by="u"
            )
            assert call.status == "ok"  # the first call, not a new one to make
            assert read.blocked is True
        with unit_of_work(make_session) as session:
            kinds = session.scalars(select(CrowdCall.kind).where(CrowdCall.kind == "block"))
            assert list(kinds) == ["block"]
        assert list(platform.blocks) == ["W1"]
    finally:
        engine.dispose()
