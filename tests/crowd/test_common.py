"""The crowd service's pure parts: idempotency tokens, opaque HIT ids, pacing, and the
strict reading of answers recovered from MTurk's XML."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.crowd.base import PlatformSubmission
from app.crowd.common import RateLimiter, hit_public_id, request_token
from app.crowd.sync import recovered_answers
from app.models import Study


def test_tokens_are_deterministic_distinct_and_at_most_64_characters():
    a = request_token("hit", "mturk", "sandbox", 1, "wiki", "2026-11-25T12:00:00", 7, 0)
    assert a == request_token("hit", "mturk", "sandbox", 1, "wiki", "2026-11-25T12:00:00", 7, 0)
    others = {
        request_token("hit", "mturk", "sandbox", 1, "wiki", "2026-11-25T12:00:00", 7, 1),
        request_token("hit", "mturk", "production", 1, "wiki", "2026-11-25T12:00:00", 7, 0),
        request_token("bonus", "mturk", "sandbox", 1, "wiki", "2026-11-25T12:00:00", 7, 0),
    }
    assert a not in others and len(others) == 3
    assert all(len(t) <= 64 for t in (a, *others))
    assert len(request_token("unblock", "x" * 500)) <= 64


def test_the_public_hit_id_is_opaque_and_stable():
    study = Study(id=3, slug="wiki", created_at=datetime(2026, 11, 25, 12, tzinfo=UTC))
    public = hit_public_id(study, 41)
    assert public == hit_public_id(study, 41) != hit_public_id(study, 42)
    assert len(public) == 32
    assert public.startswith("h-") and public[2:].isalnum()


def test_the_rate_limiter_spaces_calls():
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    limiter = RateLimiter(4, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        limiter.wait()
    assert slept == [0.25, 0.25]
    now[0] += 10  # idle for a while: no wait
    limiter.wait()
    assert slept == [0.25, 0.25]
    with pytest.raises(ValueError):
        RateLimiter(0)


def sub(answers):
    return PlatformSubmission("A1", "W1", "H1", "Submitted", answers=answers)


def test_recovered_answers_are_read_strictly():
    got = recovered_answers(sub({"assignment": "pub_1-x", "o0": "3", "o12": "5", "ebc": "x"}))
    assert got.assignment_public_id == "pub_1-x" and got.answers == {0: 3, 12: 5}
    assert got.external_assignment_id == "A1" and got.external_worker_id == "W1"


@pytest.mark.parametrize(
    "answers",
    [
        None,
        {},
        {"o0": "3"},  # whose assignment?
        {"assignment": "pub", "ebc": "stored"},  # no answers
        {"assignment": "pub'; drop", "o0": "3"},
        {"assignment": "pub", "o0": "3.0"},
        {"assignment": "pub", "o0": "²"},
        {"assignment": "pub", "o0": "123"},
    ],
)
def test_answers_that_do_not_parse_recover_nothing(answers):
    assert recovered_answers(sub(answers)) is None
