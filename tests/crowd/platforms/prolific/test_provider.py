"""ProlificProvider against a stand-in of Prolific's REST API (an httpx.MockTransport,
tests/crowd/prolific_standin.py)."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import httpx
import pytest

from app.config import Settings
from app.crowd.base import (
    AlreadyDone,
    CrowdError,
    CrowdProvider,
    PostingSpec,
    Qualifications,
    Unsupported,
)
from app.crowd.base import UnitToPublish as Unit
from app.crowd.platforms.prolific.api import ProlificError
from app.crowd.platforms.prolific.entry import PLACEHOLDERS, completion_url, entry_url
from app.crowd.platforms.prolific.fees import places_for
from app.crowd.platforms.prolific.provider import ProlificProvider
from tests.crowd.prolific_standin import BASE, LONG_MESSAGE, TOKEN, FakeProlific, prolific_error


@pytest.fixture
def fake() -> FakeProlific:
    return FakeProlific()


def spec(**fields) -> PostingSpec:
    study = SimpleNamespace(slug="wiki-eb", channels={"prolific": {"enabled": True}})
    values = {
        "study_slug": "wiki-eb",
        "title": "Guess the next word",
        "description": "Read ten short texts and pick the most plausible next word.",
        "reward_cents": 90,
        "assignment_seconds": 1800,
        "lifetime_seconds": 7 * 86400,
        "auto_approve_seconds": 3 * 86400,
        # The URL the dashboard gives the panel: our /p/{slug} with the study's entry key.
        "entry_url": entry_url("https://ebc.example.org", "k" * 40, study),
        "completion_code": "C1A2B3C4",
        "places": 12,
        "minutes_estimate": 6,
    }
    return PostingSpec(**{**values, **fields})


def unit(n: int = 1) -> Unit:
    return Unit(hit_id=n, hit_public_id=f"h{n}", max_assignments=1, request_token=f"tok-{n}")


# -- publishing ---------------------------------------------------------------------


def test_a_draft_study_carries_our_panel_url_code_and_places(fake):
    provider = fake.provider()
    assert isinstance(provider, CrowdProvider)
    study_id = provider.prepare(spec(qualifications=Qualifications(min_approval_rate=95)))

    sent = fake.studies[study_id]
    assert sent["status"] == "UNPUBLISHED"
    url = sent["external_study_url"]
    assert url.startswith("https://ebc.example.org/p/wiki-eb?key=")
    assert all(p in url for p in PLACEHOLDERS)
    assert sent["prolific_id_option"] == "url_parameters"
    assert sent["completion_codes"] == [
        {"code": "C1A2B3C4", "code_type": "COMPLETED", "actions": [{"action": "MANUALLY_REVIEW"}]}
    ]
    assert (sent["total_available_places"], sent["reward"]) == (12, 90)
    assert sent["estimated_completion_time"] == 6
    assert sent["filters"] == [
        {"filter_id": "approval_rate", "selected_range": {"lower": 95, "upper": 100}}
    ]


def test_a_bundle_of_hits_per_participant_pays_the_bundle_per_place(fake):
    provider = fake.provider(hits_per_participant=3)
    places = places_for(10, 3)
    study_id = provider.prepare(spec(places=places))
    sent = fake.studies[study_id]
    assert (sent["total_available_places"], sent["reward"]) == (4, 270)
    assert sent["estimated_completion_time"] == 18


def test_publish_publishes_the_study_once_for_all_units(fake):
    provider = fake.provider()
    study_id = provider.prepare(spec())
    assert [provider.publish(study_id, spec(), unit(n)) for n in (1, 2, 3)] == [study_id] * 3
    assert fake.studies[study_id]["status"] == "ACTIVE"
    assert fake.count("POST", rf"studies/{study_id}/transition/") == 1
    # A new provider (another process) finds it published and publishes nothing again.
    again = fake.provider()
    assert again.publish(study_id, spec(), unit(4)) == study_id
    assert fake.count("POST", rf"studies/{study_id}/transition/") == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"entry_url": "https://ebc.example.org/p/wiki-eb"}, "placeholders"),
        ({"completion_code": None}, "completion code"),
        ({"places": 0}, "number of places"),
        ({"qualifications": Qualifications(locales=("US",))}, "countries"),
    ],
)
def test_a_study_prolific_cannot_run_is_refused_before_any_call(fake, fields, message):
    with pytest.raises(CrowdError, match=message):
        fake.provider().prepare(spec(**fields))
    assert fake.calls == []


def test_submissions_are_listed_over_every_page(fake):
    provider = fake.provider()
    study_id = provider.prepare(spec())
    provider.publish(study_id, spec(), unit())
    handed_in = [fake.add_submission(study_id) for _ in range(5)]
    fake.add_submission(study_id, "ACTIVE")  # still in the study: not handed in
    handed_in.append(fake.add_submission(study_id, "APPROVED"))
    fake.add_submission(provider.prepare(spec()))  # another study's

    got = list(provider.submissions(study_id, [study_id]))

    assert [s.external_assignment_id for s in got] == handed_in
    assert {s.external_hit_id for s in got} == {study_id}
    first = fake.submissions[handed_in[0]]
    assert (got[0].external_worker_id, got[0].status) == (first["participant_id"], first["status"])
    assert got[0].submitted_at is not None and got[0].answers is None
    assert fake.count("GET", rf"studies/{study_id}/submissions/") == 3  # 7 rows, 3 a page


# -- reviewing ------------------------------------------------------------------------


def test_approving_twice_is_already_done_the_second_time(fake):
    provider = fake.provider()
    study_id = provider.prepare(spec())
    sid = fake.add_submission(study_id)

    provider.approve(sid)
    assert fake.submissions[sid]["status"] == "APPROVED"
    with pytest.raises(AlreadyDone):
        provider.approve(sid)
    assert fake.submissions[sid]["status"] == "APPROVED"


def test_reject_needs_the_message_and_category_prolific_requires(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    calls = len(fake.calls)

    with pytest.raises(CrowdError, match="at least 100 characters"):
        provider.reject(sid, feedback="Too fast.")
    with pytest.raises(CrowdError, match="rejection category"):
        provider.reject(sid, feedback=LONG_MESSAGE, category="SLOPPY")
    assert len(fake.calls) == calls  # refused here, nothing sent

    provider.reject(sid, feedback=LONG_MESSAGE, category="FAILED_INSTRUCTIONS")
    assert fake.submissions[sid]["status"] == "REJECTED"
    with pytest.raises(AlreadyDone):
        provider.reject(sid, feedback=LONG_MESSAGE)


def test_approving_a_rejected_submission_raises_prolifics_message(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    provider.reject(sid, feedback=LONG_MESSAGE)
    with pytest.raises(ProlificError, match="cannot be transitioned from REJECTED") as info:
        provider.approve(sid)
    assert not isinstance(info.value, AlreadyDone) and info.value.status == 400


# -- bonuses --------------------------------------------------------------------------


def test_a_bonus_retried_with_the_same_token_pays_once(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    worker = fake.submissions[sid]["participant_id"]

    provider.bonus(worker, sid, 125, reason="thanks", request_token="bonus-1")
    with pytest.raises(AlreadyDone):
        provider.bonus(worker, sid, 125, reason="thanks", request_token="bonus-1")

    assert fake.paid == [(sid, 125)]
    assert provider.submission_bonuses_cents(sid) == [125]
    provider.bonus(worker, sid, 40, reason="again", request_token="bonus-2")  # another bonus
    assert fake.paid == [(sid, 125), (sid, 40)]


def test_a_refused_payment_is_paid_later_from_the_same_set_up(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    worker = fake.submissions[sid]["participant_id"]
    original = fake.route
    state = {"left": 1}

    def refuse_once(request, path):  # before it pays anything, whatever the set-up's id
        if re.fullmatch(r"bulk-bonus-payments/\w+/pay/", path) and state["left"]:
            state["left"] -= 1
            return prolific_error(402, "Insufficient balance to pay these bonuses.")
        return original(request, path)

    fake.route = refuse_once
    with pytest.raises(ProlificError, match="Insufficient balance") as info:
        provider.bonus(worker, sid, 300, reason="r", request_token="bonus-9")
    assert fake.paid == [] and info.value.status == 402

    provider.bonus(worker, sid, 300, reason="r", request_token="bonus-9")
    assert fake.paid == [(sid, 300)]
    assert fake.count("POST", "submissions/bonus-payments/") == 1  # the same set-up


def test_a_payment_whose_answer_is_lost_is_never_paid_again(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    worker = fake.submissions[sid]["participant_id"]
    original = fake.route

    def lose_the_answer(request, path):
        answer = original(request, path)
        if re.fullmatch(r"bulk-bonus-payments/\w+/pay/", path):
            return httpx.Response(502, text="Bad gateway")  # paid, but we never hear
        return answer

    fake.route = lose_the_answer
    with pytest.raises(ProlificError, match="may have gone through") as info:
        provider.bonus(worker, sid, 125, reason="r", request_token="bonus-3")
    assert info.value.retryable is False
    fake.route = original
    with pytest.raises(ProlificError, match="check the submission's bonuses"):
        provider.bonus(worker, sid, 125, reason="r", request_token="bonus-3")

    assert fake.paid == [(sid, 125)]  # no retry of the pay call, no second payment
    assert fake.count("POST", r"bulk-bonus-payments/\w+/pay/") == 1
    assert provider.submission_bonuses_cents(sid) == [125]


def test_a_bonus_for_another_participants_submission_is_refused(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    with pytest.raises(CrowdError, match="another participant"):
        provider.bonus("someone-else", sid, 100, reason="r", request_token="bonus-4")
    assert fake.paid == []


# -- throttling and errors ---------------------------------------------------------


def test_throttling_is_retried_after_the_wait_prolific_asks_for(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    slow = httpx.Response(429, headers={"Retry-After": "2"}, json={"detail": "Throttled."})
    fake.fail("POST", f"submissions/{sid}/transition/", slow, slow)

    provider.approve(sid)

    assert fake.submissions[sid]["status"] == "APPROVED"
    assert fake.sleeps == [2.0, 2.0]
    assert fake.count("POST", f"submissions/{sid}/transition/") == 3


def test_a_throttled_payment_is_retried_and_paid_once(fake):
    provider = fake.provider()
    sid = fake.add_submission(provider.prepare(spec()))
    worker = fake.submissions[sid]["participant_id"]
    original = fake.route
    state = {"left": 1}

    def throttle_pay_once(request, path):
        if re.fullmatch(r"bulk-bonus-payments/\w+/pay/", path) and state["left"]:
            state["left"] -= 1
            return httpx.Response(429, json={"detail": "Request was throttled."})
        return original(request, path)

    fake.route = throttle_pay_once
    provider.bonus(worker, sid, 60, reason="r", request_token="bonus-5")
    assert fake.paid == [(sid, 60)] and fake.sleeps == [0.5]


def test_server_errors_are_retried_a_bounded_number_of_times_then_raised(fake):
    provider = fake.provider(max_retries=3)
    study_id = provider.prepare(spec())
    down = httpx.Response(503, text="Service Unavailable")
    fake.fail("GET", f"studies/{study_id}/", *[down] * 10)

    with pytest.raises(ProlificError, match=r"\(503\)") as info:
        provider.publish(study_id, spec(), unit())
    assert info.value.retryable and info.value.status == 503
    assert fake.sleeps == [0.5, 1.0, 2.0]
    assert fake.count("GET", f"studies/{study_id}/") == 4
    assert fake.studies[study_id]["status"] == "UNPUBLISHED"


@pytest.mark.parametrize(
    "lost",
    [
        httpx.Response(502, text="Bad gateway"),
        lambda request: (_ for _ in ()).throw(httpx.ReadTimeout("lost", request=request)),
    ],
)
def test_creating_a_study_is_never_retried_and_an_interrupted_one_is_found(fake, lost):
    """POST /studies/ is not idempotent: a 5xx or a timeout may have made the study, so
    it is not sent again; the next publish run finds it by its internal name."""
    provider = fake.provider()
    original = fake.route

    def made_then_lost(request, path):
        answer = original(request, path)
        if request.method == "POST" and path == "studies/":
            return lost(request) if callable(lost) else lost
        return answer

    fake.route = made_then_lost
    with pytest.raises(ProlificError):
        provider.prepare(spec(key="0123456789ab"))
    fake.route = original
    assert fake.count("POST", "studies/") == 1 and fake.sleeps == []
    (made,) = fake.studies
    assert fake.studies[made]["internal_name"] == "ebc wiki-eb 0123456789ab"

    for n in range(4):  # other studies of the workspace, over several pages
        provider.prepare(spec(study_slug=f"other{n}", key=f"{n:012d}"))
    assert provider.find_prepared(spec(key="0123456789ab")) == made
    assert provider.find_prepared(spec(key="ffffffffffff")) is None
    assert fake.count("GET", "studies/") >= 3  # every page (3 studies a page)


def test_a_refusal_raises_prolifics_own_message(fake):
    provider = fake.provider()
    fake.fail(
        "POST",
        "studies/",
        prolific_error(400, {"reward": ["Reward per hour is below the minimum."]}, "Invalid study"),
    )
    with pytest.raises(ProlificError) as info:
        provider.prepare(spec())
    assert "Invalid study" in str(info.value)
    assert "reward: Reward per hour is below the minimum." in str(info.value)
    assert info.value.status == 400 and not info.value.retryable
    assert fake.count("POST", "studies/") == 1  # a refusal is not retried


def test_a_lost_connection_is_retried_for_reads(fake):
    provider = fake.provider()
    study_id = provider.prepare(spec())
    original = fake.handle
    state = {"left": 2}

    def flaky(request):
        if request.method == "GET" and state["left"]:
            state["left"] -= 1
            raise httpx.ReadTimeout("timed out", request=request)
        return original(request)

    provider._api._http._transport = httpx.MockTransport(flaky)
    assert provider.publish(study_id, spec(), unit()) == study_id
    assert fake.sleeps == [0.5, 1.0]


def test_the_token_is_only_ever_in_the_authorization_header(fake, caplog):
    caplog.set_level(logging.DEBUG)
    provider = fake.provider(max_retries=1)
    sid = fake.new_id()
    fake.fail("GET", f"submissions/{sid}/", httpx.Response(503), prolific_error(400, "Nope."))
    with pytest.raises(ProlificError) as info:
        provider.submission(sid)
    assert TOKEN not in str(info.value) and TOKEN not in repr(provider)
    assert TOKEN not in caplog.text and "retry 1" in caplog.text

    settings = Settings(_env_file=None, prolific_api_token=TOKEN)
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())

    wrong = ProlificProvider("wrong", api_url=BASE, transport=fake.transport())
    with pytest.raises(ProlificError, match="Invalid token") as info:
        wrong.submission(fake.new_id())
    assert info.value.status == 401


def test_settings_build_the_provider_and_refuse_a_missing_token(fake):
    with pytest.raises(CrowdError, match="EBC_PROLIFIC_API_TOKEN"):
        ProlificProvider.from_settings(Settings(_env_file=None))
    settings = Settings(
        _env_file=None,
        prolific_api_token=TOKEN,
        prolific_api_url=BASE,
        prolific_workspace_id="64aaabfaf6bbc363b9d47c6a",
        prolific_fee_rate=0.333,
    )
    provider = ProlificProvider.from_settings(settings, transport=fake.transport())
    assert provider.balance_cents() == 81_250
    assert provider.fee_rate == 0.333
    assert fake.provider().balance_cents() is None  # no workspace: no balance to show


# -- the rest of the interface ---------------------------------------------------------


def test_block_says_prolific_was_not_told_and_what_to_do_instead(fake):
    provider = fake.provider()
    with pytest.raises(Unsupported, match="Custom Blocklist") as info:
        provider.block("p1", reason="spam")
    assert "Prolific was not told" in str(info.value) and "blocked here" not in str(info.value)
    with pytest.raises(Unsupported, match="remove the participant's id"):
        provider.unblock("p1", reason="mistake")
    assert fake.calls == []


def test_expire_stops_the_study_once(fake):
    provider = fake.provider()
    study_id = provider.prepare(spec())
    provider.publish(study_id, spec(), unit())
    provider.expire(study_id, [study_id])
    provider.expire(study_id, [study_id])
    assert fake.studies[study_id]["status"] == "AWAITING REVIEW"
    assert fake.count("POST", rf"studies/{study_id}/transition/") == 2  # publish, stop


def test_the_cost_estimate_adds_prolifics_fee_rounded_half_up(fake):
    estimate = fake.provider().estimate_cost(spec(reward_cents=50), 10, bonus_cents=100)
    assert (estimate.rewards_cents, estimate.fees_cents, estimate.bonuses_cents) == (500, 257, 100)
    assert estimate.total_cents == 857  # 500 + 214 + 100 + 43
    assert "42.8%" in estimate.notes[0]

    bundled = fake.provider(hits_per_participant=3, fee_rate=0.333).estimate_cost(
        spec(reward_cents=50), 10
    )
    assert (bundled.rewards_cents, bundled.fees_cents) == (600, 200)  # 4 places of 150
    assert "4 places of 3 HITs" in bundled.notes[1]


def test_the_completion_url_carries_the_code():
    assert completion_url("C1A2 B3") == "https://app.prolific.com/submissions/complete?cc=C1A2%20B3"
