"""The MTurk provider against botocore's Stubber on a real client: every call's parameter
names and types are checked against AWS's service model (the stubbed client validates
them before the stub answers), plus the checks Stubber does not make: the reward's
decimal string, the token's length, the ExternalQuestion against Amazon's XSD, the
answer XML."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from botocore.stub import ANY, Stubber
from lxml import etree

from app.crowd.base import AlreadyDone, CrowdError, PostingSpec, Qualifications, UnitToPublish
from app.crowd.platforms.mturk.client import (
    PRODUCTION_ENDPOINT,
    SANDBOX_ENDPOINT,
    _RateExceededRetry,
    make_client,
    moves_real_money,
)
from app.crowd.platforms.mturk.formats import (
    EXTERNAL_QUESTION_NS,
    QUAL_APPROVAL_RATE,
    QUAL_LOCALE,
    QUAL_MASTERS,
    QUAL_NUMBER_APPROVED,
    REWARD_PATTERN,
    external_question,
    parse_answers,
    reward_string,
)
from app.crowd.platforms.mturk.provider import PAST, MTurkProvider
from tests.crowd.mturk_standin import answer_xml

XSD = Path(__file__).parents[2] / "data" / "ExternalQuestion.xsd"
HIT_ID = "3AQN9REUTFGXCRWFDAS9NS2ZWBXYD8"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """Dummy credentials, and nothing from this machine's own AWS files."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def stubbed():
    client = make_client("sandbox")
    with Stubber(client) as stub:
        yield MTurkProvider("sandbox", client=client), stub
        stub.assert_no_pending_responses()


def spec(**changes) -> PostingSpec:
    base = {
        "study_slug": "wiki",
        "title": "Guess the next word",
        "description": "Pick the word that comes next.",
        "reward_cents": 50,
        "assignment_seconds": 1800,
        "lifetime_seconds": 7 * 86400,
        "auto_approve_seconds": 3 * 86400,
        "keywords": ("language", "research"),
        "entry_url": "https://ebc.example.org/mturk/wiki",
    }
    return PostingSpec(**{**base, **changes})


def unit(**changes) -> UnitToPublish:
    base = {
        "hit_id": 7,
        "hit_public_id": "h-0123456789abcdef0123456789abcd",
        "max_assignments": 3,
        "request_token": "ebc-hit-" + "a" * 40,
    }
    return UnitToPublish(**{**base, **changes})


def xsd_valid(xml: str) -> bool:
    schema = etree.XMLSchema(etree.parse(str(XSD)))
    return schema.validate(etree.fromstring(xml.encode()))


def request_error(stub, method, message, code, expected_params=None):
    stub.add_client_error(
        method,
        service_error_code="RequestError",
        service_message=message,
        http_status_code=400,
        modeled_fields={"Message": message, "TurkErrorCode": code},
        expected_params=expected_params,
    )


# -- the client --------------------------------------------------------------------------


def test_the_client_is_us_east_1_on_the_sandbox_unless_told_otherwise():
    sandbox = make_client()
    assert sandbox.meta.region_name == "us-east-1"
    assert sandbox.meta.endpoint_url == SANDBOX_ENDPOINT
    assert make_client("production").meta.endpoint_url == PRODUCTION_ENDPOINT
    local = make_client("sandbox", endpoint_url="http://127.0.0.1:9")
    assert local.meta.endpoint_url == "http://127.0.0.1:9"
    assert local.meta.region_name == "us-east-1"  # never region_name="sandbox"
    retries = sandbox.meta.config.retries
    assert retries["mode"] == "standard" and retries["total_max_attempts"] == 5
    assert make_client(retry_mode="adaptive").meta.config.retries["mode"] == "adaptive"
    with pytest.raises(CrowdError, match="sandbox or production"):
        make_client("sandboxed")


def test_rate_exceeded_is_retried_with_backoff_until_the_attempts_are_spent():
    retry = _RateExceededRetry(max_attempts=3, base_s=0.5)
    rate = (
        None,
        {"Error": {"Code": "RequestError"}, "TurkErrorCode": "AWS.MechanicalTurk.RateExceeded"},
    )
    assert 0 <= retry.needs_retry(response=rate, attempts=1) <= 0.5
    assert 0 <= retry.needs_retry(response=rate, attempts=2) <= 1.0
    assert retry.needs_retry(response=rate, attempts=3) is None  # spent
    bare = (None, {"Error": {"Code": "RateExceeded"}})
    assert retry.needs_retry(response=bare, attempts=1) is not None
    other = (None, {"Error": {"Code": "RequestError"}, "TurkErrorCode": "AWS.MechanicalTurk.X"})
    assert retry.needs_retry(response=other, attempts=1) is None
    assert retry.needs_retry(response=None, attempts=1) is None


def test_credentials_come_from_the_aws_chain(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    provider = MTurkProvider("sandbox", endpoint_url="http://127.0.0.1:9", max_attempts=1)
    with pytest.raises(CrowdError, match="AWS chain"):
        provider.balance_cents()


# -- what Stubber does not check ---------------------------------------------------------


@pytest.mark.parametrize(("cents", "text"), [(1, "0.01"), (50, "0.50"), (1234, "12.34")])
def test_rewards_are_decimal_strings(cents, text):
    assert reward_string(cents) == text
    assert REWARD_PATTERN.fullmatch(text)


@pytest.mark.parametrize("cents", [0, -5, 1.5, True])
def test_amounts_below_a_cent_are_refused(cents):
    with pytest.raises(CrowdError, match="at least 1 cent"):
        reward_string(cents)


def test_the_external_question_is_valid_against_amazons_schema_with_ampersands_escaped():
    url = "https://ebc.example.org/mturk/wiki?a=1&b=<2>"
    xml = external_question(url, 800)
    assert "&amp;b=&lt;2&gt;" in xml
    assert xsd_valid(xml)
    root = ET.fromstring(xml)
    assert root.tag == f"{{{EXTERNAL_QUESTION_NS}}}ExternalQuestion"
    assert root.find(f"{{{EXTERNAL_QUESTION_NS}}}ExternalURL").text == url
    assert root.find(f"{{{EXTERNAL_QUESTION_NS}}}FrameHeight").text == "800"


def test_the_schema_check_is_real():
    # The same structure with the elements swapped, or the namespace missing, is refused.
    swapped = (
        f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_NS}"><FrameHeight>1</FrameHeight>'
        "<ExternalURL>https://x.org/</ExternalURL></ExternalQuestion>"
    )
    bare = "<ExternalQuestion><ExternalURL>https://x.org/</ExternalURL><FrameHeight>1</FrameHeight></ExternalQuestion>"
    assert not xsd_valid(swapped)
    assert not xsd_valid(bare)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://ebc.example.org/mturk/wiki", "HTTPS"),
        ("https://ebc.example.org/mturk/wiki?workerId=x", "workerId"),
        ("https://ebc.example.org/mturk/wiki?x=1&assignmentId=2", "assignmentId"),
    ],
)
def test_external_urls_mturk_would_refuse_are_refused(url, message):
    with pytest.raises(CrowdError, match=message):
        external_question(url, 800)


def test_answer_xml_is_parsed_to_fields():
    xml = answer_xml({"assignment": "abc_-1", "o0": "3", "o9": "5", "ebc": "stored"})
    assert parse_answers(xml) == {"assignment": "abc_-1", "o0": "3", "o9": "5", "ebc": "stored"}
    selection = (
        "<QuestionFormAnswers><Answer><QuestionIdentifier>q</QuestionIdentifier>"
        "<SelectionIdentifier>a</SelectionIdentifier><SelectionIdentifier>b</SelectionIdentifier>"
        "</Answer></QuestionFormAnswers>"
    )
    assert parse_answers(selection) == {"q": "a|b"}
    assert parse_answers(None) is None and parse_answers("") is None


@pytest.mark.parametrize(
    "xml",
    [
        '<!DOCTYPE x [<!ENTITY a "aaaa">]><QuestionFormAnswers>&a;</QuestionFormAnswers>',
        "<QuestionFormAnswers><Answer>",
        "<x>" + "a" * 1_000_001 + "</x>",
    ],
)
def test_hostile_or_broken_answer_xml_is_refused(xml):
    assert parse_answers(xml) is None


# -- money before publishing -------------------------------------------------------------


def test_cost_estimates_follow_mturks_fees_and_rounding():
    p = MTurkProvider("sandbox", client=make_client())
    plain = p.estimate_cost(spec(reward_cents=50), 100)
    assert (plain.rewards_cents, plain.fees_cents, plain.total_cents) == (5000, 1000, 6000)
    ten = p.estimate_cost(spec(reward_cents=50), 100, max_assignments=10)
    assert ten.fees_cents == 2000 and any("40%" in n for n in ten.notes)
    nine = p.estimate_cost(spec(reward_cents=50), 90, max_assignments=9)
    assert nine.fees_cents == 900
    masters = p.estimate_cost(spec(reward_cents=50, qualifications=Qualifications(masters=True)), 2)
    assert masters.fees_cents == 2 * 13  # 25% of 50 = 12.5, rounded half up
    tiny = p.estimate_cost(spec(reward_cents=2), 10)
    assert tiny.fees_cents == 10  # 20% of 2 cents is 0.4: the minimum fee, 1 cent each
    bonus = p.estimate_cost(spec(reward_cents=50), 0, bonus_cents=1000)
    assert (bonus.bonuses_cents, bonus.fees_cents) == (1000, 200)


def test_balance(stubbed):
    provider, stub = stubbed
    stub.add_response("get_account_balance", {"AvailableBalance": "10000.00"}, {})
    assert provider.balance_cents() == 1_000_000


# -- publishing --------------------------------------------------------------------------


def test_the_hit_type_carries_reward_durations_keywords_and_qualifications(stubbed):
    provider, stub = stubbed
    quals = Qualifications(
        min_approval_rate=95,
        min_approved=1000,
        locales=("US", "GB"),
        masters=True,
        cap_qualification_id="CAPQUALID",
    )
    guarded = "DiscoverPreviewAndAccept"
    stub.add_response(
        "create_hit_type",
        {"HITTypeId": "TYPE1"},
        {
            "Title": "Guess the next word",
            "Description": "Pick the word that comes next.",
            "Reward": "0.50",
            "AssignmentDurationInSeconds": 1800,
            "AutoApprovalDelayInSeconds": 3 * 86400,
            "Keywords": "language, research",
            "QualificationRequirements": [
                {
                    "QualificationTypeId": QUAL_APPROVAL_RATE,
                    "Comparator": "GreaterThanOrEqualTo",
                    "IntegerValues": [95],
                    "ActionsGuarded": guarded,
                },
                {
                    "QualificationTypeId": QUAL_NUMBER_APPROVED,
                    "Comparator": "GreaterThanOrEqualTo",
                    "IntegerValues": [1000],
                    "ActionsGuarded": guarded,
                },
                {
                    "QualificationTypeId": QUAL_LOCALE,
                    "Comparator": "In",
                    "LocaleValues": [{"Country": "US"}, {"Country": "GB"}],
                    "ActionsGuarded": guarded,
                },
                {
                    "QualificationTypeId": QUAL_MASTERS["sandbox"],
                    "Comparator": "Exists",
                    "ActionsGuarded": guarded,
                },
                {
                    "QualificationTypeId": "CAPQUALID",
                    "Comparator": "DoesNotExist",
                    "ActionsGuarded": guarded,
                },
            ],
        },
    )
    assert provider.prepare(spec(qualifications=quals)) == "TYPE1"


def test_masters_has_its_own_id_in_production():
    client = make_client("production")
    with Stubber(client) as stub:
        stub.add_response(
            "create_hit_type",
            {"HITTypeId": "T"},
            {
                "Title": ANY,
                "Description": ANY,
                "Reward": "0.50",
                "AssignmentDurationInSeconds": ANY,
                "AutoApprovalDelayInSeconds": ANY,
                "Keywords": ANY,
                "QualificationRequirements": [
                    {
                        "QualificationTypeId": "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH",
                        "Comparator": "Exists",
                        "ActionsGuarded": "DiscoverPreviewAndAccept",
                    }
                ],
            },
        )
        MTurkProvider("production", client=client).prepare(
            spec(qualifications=Qualifications(masters=True))
        )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"reward_cents": 0}, "1 cent"),
        ({"title": "x" * 129}, "title"),
        ({"assignment_seconds": 10}, "assignment"),
        ({"qualifications": Qualifications(locales=("usa",))}, "country codes"),
        ({"qualifications": Qualifications(min_approval_rate=101)}, "percentage"),
    ],
)
def test_a_hit_type_mturk_would_refuse_is_refused_before_calling(stubbed, changes, message):
    provider, _ = stubbed  # no response queued: a call would fail the test
    with pytest.raises(CrowdError, match=message):
        provider.prepare(spec(**changes))


def test_a_hit_is_created_with_the_external_question_replicas_and_token(stubbed):
    provider, stub = stubbed
    u = unit()
    stub.add_response(
        "create_hit_with_hit_type",
        {"HIT": {"HITId": HIT_ID, "HITTypeId": "TYPE1"}},
        {
            "HITTypeId": "TYPE1",
            "MaxAssignments": 3,
            "LifetimeInSeconds": 7 * 86400,
            "Question": ANY,
            "RequesterAnnotation": u.hit_public_id,
            "UniqueRequestToken": u.request_token,
        },
    )
    assert provider.publish("TYPE1", spec(), u) == HIT_ID


def test_the_question_sent_is_schema_valid(stubbed):
    provider, stub = stubbed
    sent = {}

    def capture(params, **_):
        sent.update(params)

    events = provider.client.meta.events
    events.register("before-parameter-build.mturk.CreateHITWithHITType", capture)
    stub.add_response("create_hit_with_hit_type", {"HIT": {"HITId": HIT_ID}})
    provider.publish("TYPE1", spec(entry_url="https://e.org/mturk/s?x=1&y=2"), unit())
    assert xsd_valid(sent["Question"])
    assert "https://e.org/mturk/s?x=1&amp;y=2" in sent["Question"]
    assert len(sent["UniqueRequestToken"]) <= 64


@pytest.mark.parametrize("token", ["", "t" * 65])
def test_tokens_longer_than_64_characters_are_refused(stubbed, token):
    provider, _ = stubbed
    with pytest.raises(CrowdError, match="64"):
        provider.publish("TYPE1", spec(), unit(request_token=token))


def test_ten_or_more_assignments_warn_about_the_fee(stubbed, caplog):
    provider, stub = stubbed
    stub.add_response("create_hit_with_hit_type", {"HIT": {"HITId": HIT_ID}})
    with caplog.at_level(logging.WARNING, logger="app.crowd.platforms.mturk.provider"):
        provider.publish("TYPE1", spec(), unit(max_assignments=10))
    assert "40%" in caplog.text


def test_hit_already_exists_is_the_hit_it_names(stubbed):
    provider, stub = stubbed
    request_error(
        stub,
        "create_hit_with_hit_type",
        f"There is already a HIT which exists with the same request token. HITId: {HIT_ID}",
        "AWS.MechanicalTurk.HitAlreadyExists",
    )
    assert provider.publish("TYPE1", spec(), unit()) == HIT_ID


def test_hit_already_exists_without_an_id_is_found_by_its_annotation(stubbed):
    provider, stub = stubbed
    u = unit()
    request_error(
        stub,
        "create_hit_with_hit_type",
        "request token used",
        "AWS.MechanicalTurk.HitAlreadyExists",
    )
    other = {"HITId": "H" * 30, "HITTypeId": "TYPE1", "RequesterAnnotation": "h-other"}
    mine = {"HITId": HIT_ID, "HITTypeId": "TYPE1", "RequesterAnnotation": u.hit_public_id}
    stub.add_response("list_hits", {"HITs": [other], "NextToken": "p2"}, {"MaxResults": 100})
    stub.add_response("list_hits", {"HITs": [mine]}, {"MaxResults": 100, "NextToken": "p2"})
    assert provider.publish("TYPE1", spec(), u) == HIT_ID


def test_other_publish_errors_are_raised(stubbed):
    provider, stub = stubbed
    request_error(stub, "create_hit_with_hit_type", "Insufficient funds", "AWS.MechanicalTurk.X")
    with pytest.raises(CrowdError, match="Insufficient funds") as raised:
        provider.publish("TYPE1", spec(), unit())
    assert raised.value.code == "AWS.MechanicalTurk.X"
    assert not isinstance(raised.value, AlreadyDone)


def test_the_cap_qualification_is_made_once_and_granted_silently(stubbed):
    provider, stub = stubbed
    name = "ebc-judge cap reached: wiki"
    stub.add_response(
        "create_qualification_type",
        {"QualificationType": {"QualificationTypeId": "Q1", "Name": name}},
        {
            "Name": name,
            "Description": ANY,
            "QualificationTypeStatus": "Active",
            "Keywords": "ebc-judge",
        },
    )
    assert provider.cap_qualification(spec()) == "Q1"
    request_error(stub, "create_qualification_type", "already created", "AWS.MechanicalTurk.Dup")
    stub.add_response(
        "list_qualification_types",
        {"QualificationTypes": [{"QualificationTypeId": "Q1", "Name": name}]},
        {"Query": name, "MustBeRequestable": False, "MustBeOwnedByCaller": True, "MaxResults": 100},
    )
    assert provider.cap_qualification(spec()) == "Q1"
    stub.add_response(
        "associate_qualification_with_worker",
        {},
        {
            "QualificationTypeId": "Q1",
            "WorkerId": "W1",
            "IntegerValue": 1,
            "SendNotification": False,
        },
    )
    provider.grant_cap("Q1", "W1")


def test_the_cap_qualification_is_named_per_study_not_per_slug(stubbed):
    """Two studies of one slug (another database on the same account, or the study made
    anew) have postings of other keys: each gets its own qualification."""
    provider, stub = stubbed
    for key, made in (("0123456789ab", "Q1"), ("ba9876543210", "Q2")):
        name = f"ebc-judge cap reached: wiki {key}"
        stub.add_response(
            "create_qualification_type",
            {"QualificationType": {"QualificationTypeId": made, "Name": name}},
            {"Name": name, "Description": ANY, "QualificationTypeStatus": "Active",
             "Keywords": "ebc-judge"},
        )  # fmt: skip
        assert provider.cap_qualification(spec(key=key)) == made


# -- sync --------------------------------------------------------------------------------


def test_submissions_are_listed_page_by_page_with_explicit_statuses(stubbed):
    provider, stub = stubbed
    statuses = ["Submitted", "Approved", "Rejected"]
    when = datetime(2026, 11, 25, 12, tzinfo=UTC)

    def asg(n, status="Submitted"):
        return {
            "AssignmentId": f"A{n}",
            "WorkerId": f"W{n}",
            "HITId": "H1",
            "AssignmentStatus": status,
            "SubmitTime": when,
            "Answer": answer_xml({"assignment": f"pub{n}", "o0": "2"}),
        }

    base = {"HITId": "H1", "MaxResults": 100, "AssignmentStatuses": statuses}
    stub.add_response("list_assignments_for_hit", {"Assignments": [asg(1)], "NextToken": "n"}, base)
    stub.add_response(
        "list_assignments_for_hit",
        {"Assignments": [asg(2, "Approved")]},
        {**base, "NextToken": "n"},
    )
    stub.add_response(
        "list_assignments_for_hit",
        {"Assignments": []},
        {"HITId": "H2", "MaxResults": 100, "AssignmentStatuses": statuses},
    )
    subs = list(provider.submissions("TYPE1", ["H1", "H2"]))
    assert [(s.external_assignment_id, s.status) for s in subs] == [
        ("A1", "Submitted"),
        ("A2", "Approved"),
    ]
    assert subs[0].answers == {"assignment": "pub1", "o0": "2"}
    assert subs[0].submitted_at == when and subs[0].external_worker_id == "W1"


# -- money and standing ------------------------------------------------------------------


def test_approve(stubbed):
    provider, stub = stubbed
    stub.add_response(
        "approve_assignment", {}, {"AssignmentId": "A1", "RequesterFeedback": "Thanks"}
    )
    provider.approve("A1", feedback="Thanks")


def test_approving_an_approved_assignment_is_already_done(stubbed):
    provider, stub = stubbed
    request_error(stub, "approve_assignment", "status of: Submitted", "AWS.MechanicalTurk.Invalid")
    stub.add_response(
        "get_assignment",
        {"Assignment": {"AssignmentId": "A1", "AssignmentStatus": "Approved"}},
        {"AssignmentId": "A1"},
    )
    with pytest.raises(AlreadyDone):
        provider.approve("A1")


def test_an_approval_refused_for_another_reason_is_an_error(stubbed):
    provider, stub = stubbed
    request_error(stub, "approve_assignment", "not enough funds", "AWS.MechanicalTurk.Funds")
    stub.add_response(
        "get_assignment",
        {"Assignment": {"AssignmentId": "A1", "AssignmentStatus": "Submitted"}},
        {"AssignmentId": "A1"},
    )
    with pytest.raises(CrowdError, match="not enough funds") as raised:
        provider.approve("A1")
    assert not isinstance(raised.value, AlreadyDone)


def test_reject_needs_feedback_and_sends_it(stubbed):
    provider, stub = stubbed
    with pytest.raises(CrowdError, match="feedback"):
        provider.reject("A1", feedback="  ")
    stub.add_response(
        "reject_assignment", {}, {"AssignmentId": "A1", "RequesterFeedback": "Attention checks"}
    )
    provider.reject("A1", feedback=" Attention checks ")


def test_a_bonus_carries_its_own_token_and_a_repeat_is_already_done(stubbed):
    provider, stub = stubbed
    token = "ebc-bonus-" + "b" * 40
    params = {
        "WorkerId": "W1",
        "AssignmentId": "A1",
        "BonusAmount": "0.25",
        "Reason": "Great work",
        "UniqueRequestToken": token,
    }
    stub.add_response("send_bonus", {}, params)
    provider.bonus("W1", "A1", 25, reason="Great work", request_token=token)
    request_error(
        stub,
        "send_bonus",
        f"The bonus for request token {token} was already paid.",
        "AWS.MechanicalTurk.DuplicateRequest",
        params,
    )
    with pytest.raises(AlreadyDone):
        provider.bonus("W1", "A1", 25, reason="Great work", request_token=token)
    request_error(stub, "send_bonus", "Insufficient funds", "AWS.MechanicalTurk.Funds")
    with pytest.raises(CrowdError) as raised:
        provider.bonus("W1", "A1", 25, reason="Great work", request_token=token)
    assert not isinstance(raised.value, AlreadyDone)
    with pytest.raises(CrowdError, match="reason"):
        provider.bonus("W1", "A1", 25, reason="", request_token=token)


def test_only_a_refusal_naming_the_token_is_already_done(stubbed):
    """The API reference says a repeated token is answered "with a message containing the
    request ID", nothing more: other refusals, however worded, are refusals."""
    provider, stub = stubbed
    token = "ebc-bonus-" + "c" * 40
    for message, code in (
        ("This request already exists for another assignment.", "AWS.MechanicalTurk.Dup"),
        ("Worker W1 was already paid a bonus today (token limit).", "AlreadyExists"),
        ("Duplicate request", "AWS.MechanicalTurk.DuplicateRequest"),
    ):
        request_error(stub, "send_bonus", message, code)
        with pytest.raises(CrowdError) as raised:
            provider.bonus("W1", "A1", 25, reason="Thanks", request_token=token)
        assert not isinstance(raised.value, AlreadyDone) and not raised.value.maybe_done
    request_error(stub, "send_bonus", f"Request {token} was already processed.", "AWS.X")
    with pytest.raises(AlreadyDone):
        provider.bonus("W1", "A1", 25, reason="Thanks", request_token=token)


def test_the_bonuses_paid_on_an_assignment_are_listed_over_every_page(stubbed):
    provider, stub = stubbed
    when = datetime(2026, 11, 25, 12, tzinfo=UTC)

    def paid(amount: str) -> dict:
        return {
            "WorkerId": "W1",
            "BonusAmount": amount,
            "AssignmentId": "A1",
            "Reason": "Thanks",
            "GrantTime": when,
        }

    stub.add_response(
        "list_bonus_payments",
        {"BonusPayments": [paid("0.40"), paid("1.25")], "NextToken": "p2", "NumResults": 2},
        {"AssignmentId": "A1", "MaxResults": 100},
    )
    stub.add_response(
        "list_bonus_payments",
        {"BonusPayments": [paid("0.40")], "NumResults": 1},
        {"AssignmentId": "A1", "MaxResults": 100, "NextToken": "p2"},
    )
    assert provider.submission_bonuses_cents("A1") == [40, 125, 40]
    assert provider.bonuses_listed_at_once


def test_an_answer_that_never_came_may_have_been_done_and_a_refusal_was_not(stubbed):
    from botocore.exceptions import ReadTimeoutError

    provider, stub = stubbed
    stub.add_client_error("send_bonus", service_error_code="ServiceFault", http_status_code=500)
    with pytest.raises(CrowdError) as fault:
        provider.bonus("W1", "A1", 25, reason="Thanks", request_token="ebc-bonus-" + "d" * 40)
    assert fault.value.maybe_done
    request_error(stub, "approve_assignment", "Insufficient funds", "AWS.MechanicalTurk.Funds")
    stub.add_response("get_assignment", {"Assignment": {"AssignmentStatus": "Submitted"}})
    with pytest.raises(CrowdError) as refused:
        provider.approve("A1")
    assert not refused.value.maybe_done

    def timed_out(**_):
        raise ReadTimeoutError(endpoint_url=SANDBOX_ENDPOINT)

    provider.client.send_bonus = timed_out
    with pytest.raises(CrowdError, match="may have reached MTurk") as lost:
        provider.bonus("W1", "A1", 25, reason="Thanks", request_token="ebc-bonus-" + "e" * 40)
    assert lost.value.maybe_done


@pytest.mark.parametrize(
    ("url", "real"),
    [
        (None, False),
        ("http://127.0.0.1:9000", False),
        (SANDBOX_ENDPOINT, False),
        (PRODUCTION_ENDPOINT, True),
        ("https://MTURK-REQUESTER.us-east-1.amazonaws.com./", True),
        ("https://mturk-requester.us-east-1.amazonaws.com:443", True),
    ],
)
def test_an_endpoint_on_aws_other_than_the_sandbox_moves_real_money(url, real):
    assert moves_real_money(url) is real


def test_block_unblock_and_expire(stubbed):
    provider, stub = stubbed
    stub.add_response("create_worker_block", {}, {"WorkerId": "W1", "Reason": "Random clicks"})
    provider.block("W1", reason="Random clicks")
    stub.add_response("delete_worker_block", {}, {"WorkerId": "W1", "Reason": "Appeal"})
    provider.unblock("W1", reason="Appeal")
    stub.add_response("update_expiration_for_hit", {}, {"HITId": "H1", "ExpireAt": PAST})
    stub.add_response("update_expiration_for_hit", {}, {"HITId": "H2", "ExpireAt": PAST})
    provider.expire("TYPE1", ["H1", "H2"])
    assert datetime.now(UTC) > PAST
