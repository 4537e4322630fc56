"""Who may take part through each platform (issue 33): Prolific's prescreeners and its
previous-studies blocklist in the study-creation body (the Prolific stand-in records it), the
MTurk qualification that keeps out earlier studies' workers (botocore's Stubber, then the
MTurk stand-in end to end), and what the Crowd page shows before publishing."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber
from sqlalchemy import select
from typer.testing import CliRunner

from app.annotation.participants import earlier_workers
from app.cli import cli
from app.crowd import common, publishing
from app.crowd.audience import audience
from app.crowd.base import PostingSpec, Qualifications
from app.crowd.platforms.mturk.client import make_client
from app.crowd.platforms.mturk.formats import qualification_requirements
from app.crowd.platforms.mturk.provider import MTurkProvider
from app.crowd.registry import PLATFORMS
from app.db import build_engine, make_sessionmaker
from app.models import Annotator, Channel, CrowdPosting, StudyStatus
from tests.crowd.mturk_standin import Server
from tests.crowd.prolific_standin import FakeProlific
from tests.hits.factory import make_study

PRESCREENERS = {
    "first_languages": ["19"],
    "fluent_languages": ["19", "47"],
    "countries": ["1", "2"],
    "min_approval_rate": 98,
}


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def make_session(connection):
    return make_sessionmaker(connection, join_transaction_mode="create_savepoint")


def _earlier(session):
    """An earlier study, published on Prolific and on MTurk, with two MTurk workers."""
    old = make_study(session, slug="pilot", lengths=(10,), per_cell=10)
    for provider, environment, external in (
        ("prolific", "production", "65f0aa11bb22cc33dd44ee55"),
        ("mturk", "sandbox", "HITTYPEOLD"),
    ):
        session.add(
            CrowdPosting(
                study_id=old.id,
                provider=provider,
                environment=environment,
                settings={},
                status="published",
                external_id=external,
            )
        )
    for worker in ("WOLD2", "WOLD1"):
        session.add(Annotator(study_id=old.id, channel=Channel.mturk, external_id=worker))
    session.add(Annotator(study_id=old.id, channel=Channel.prolific, external_id="P1"))
    session.flush()
    return old


def _study(session, slug="main", **channels):
    study = make_study(session, slug=slug, lengths=(10,), per_cell=20, reward_cents=90)
    study.channels = {**study.channels, **channels}
    study.participants = {"exclude_studies": ["pilot", "never-made"]}
    session.flush()
    return study


def test_prolific_prescreeners_and_previous_studies_land_in_the_creation_body(
    session, make_session, migrated_db
):
    settings = migrated_db.settings(base_url="https://ebc.example.org", crowd_calls_per_second=100)
    _earlier(session)
    _study(
        session,
        prolific={"enabled": True, "completion_code": "C0DE", "prescreeners": PRESCREENERS},
    )
    fake = FakeProlific()
    publishing.publish(make_session, settings, "main", fake.provider(), by="cli")
    (body,) = [b for method, path, b in fake.bodies if method == "POST" and path == "studies/"]
    filters = {f["filter_id"]: f for f in body["filters"]}
    assert filters["first-language"]["selected_values"] == ["19"]
    assert filters["fluent-languages"]["selected_values"] == ["19", "47"]
    assert filters["current-country-of-residence"]["selected_values"] == ["1", "2"]
    assert filters["approval_rate"]["selected_range"] == {"lower": 98, "upper": 100}
    # The blocklist, never Prolific's `previous_studies` (its AllowList: the opposite).
    assert filters["previous_studies_blocklist"]["selected_values"] == ["65f0aa11bb22cc33dd44ee55"]
    assert "previous_studies" not in filters and len(filters) == 5


def test_a_prolific_study_with_nothing_set_sends_no_filters(session, make_session, migrated_db):
    settings = migrated_db.settings(base_url="https://ebc.example.org", crowd_calls_per_second=100)
    study = make_study(session, slug="open", lengths=(10,), per_cell=20, reward_cents=90)
    study.channels = {**study.channels, "prolific": {"enabled": True, "completion_code": "C"}}
    session.flush()
    fake = FakeProlific()
    publishing.publish(make_session, settings, "open", fake.provider(), by="cli")
    (body,) = [b for method, path, b in fake.bodies if method == "POST" and path == "studies/"]
    assert body["filters"] == []


def _spec(**changes) -> PostingSpec:
    base = {
        "study_slug": "main",
        "title": "Guess the next word",
        "description": "Pick the word that comes next.",
        "reward_cents": 50,
        "assignment_seconds": 1800,
        "lifetime_seconds": 7 * 86400,
        "auto_approve_seconds": 3 * 86400,
        "key": "k1",
    }
    return PostingSpec(**{**base, **changes})


def test_mturk_exclusion_qualification_with_stubber():
    client = make_client("sandbox")
    with Stubber(client) as stub:
        provider = MTurkProvider("sandbox", client=client)
        stub.add_response(
            "create_qualification_type",
            {"QualificationType": {"QualificationTypeId": "QEXCL", "Name": "x"}},
            {
                "Name": "ebc-judge took part before: main k1",
                "Description": "Workers of the studies that study main excludes (they took "
                "part before).",
                "QualificationTypeStatus": "Active",
                "Keywords": "ebc-judge",
            },
        )
        for worker in ("WOLD1", "WOLD2"):
            stub.add_response(
                "associate_qualification_with_worker",
                {},
                {
                    "QualificationTypeId": "QEXCL",
                    "WorkerId": worker,
                    "IntegerValue": 1,
                    "SendNotification": False,
                },
            )
        made = provider.exclusion_qualification(_spec(exclude_workers=("WOLD1", "WOLD2")))
        stub.assert_no_pending_responses()
    assert made == "QEXCL"
    required = qualification_requirements(
        Qualifications(exclusion_qualification_id="QEXCL"), "sandbox"
    )
    assert required == [
        {
            "QualificationTypeId": "QEXCL",
            "Comparator": "DoesNotExist",
            "ActionsGuarded": "DiscoverPreviewAndAccept",
        }
    ]


def test_mturk_publish_grants_the_earlier_workers_and_requires_its_absence(
    session, make_session, migrated_db
):
    _earlier(session)
    _study(session, mturk={"enabled": True, "sandbox": True, "submit_origins": []})
    with Server() as server:
        settings = migrated_db.settings(
            base_url="https://ebc.example.org",
            mturk_endpoint_url=server.url,
            crowd_calls_per_second=100,
        )
        mturk = common.provider_for(settings, "mturk")
        publishing.publish(make_session, settings, "main", mturk, by="cli")
        standin = server.standin
        (hit_type,) = standin.hit_types.values()
    posting = session.scalar(
        select(CrowdPosting)
        .where(CrowdPosting.external_id.is_not(None))
        .where(CrowdPosting.external_id != "HITTYPEOLD")
        .where(CrowdPosting.provider == "mturk")
    )
    session.refresh(posting)
    qualification = posting.settings["exclusion_qualification_id"]
    granted = [g for g in standin.grants if g["QualificationTypeId"] == qualification]
    assert sorted(g["WorkerId"] for g in granted) == ["WOLD1", "WOLD2"]
    assert not any(g["SendNotification"] for g in granted)
    kept = {q["QualificationTypeId"]: q for q in hit_type["QualificationRequirements"]}
    assert kept[qualification]["Comparator"] == "DoesNotExist"


def test_what_the_crowd_page_is_told(session):
    _earlier(session)
    study = _study(
        session,
        prolific={"enabled": True, "completion_code": "C", "prescreeners": PRESCREENERS},
    )
    prolific = audience(session, study, PLATFORMS["prolific"])
    assert prolific.prescreeners == PRESCREENERS
    assert prolific.excluded == ["pilot"] and prolific.unknown == ["never-made"]
    assert prolific.units == ["65f0aa11bb22cc33dd44ee55"] and prolific.how
    mturk = audience(session, study, PLATFORMS["mturk"])
    assert mturk.prescreeners == {} and mturk.workers == 2 and mturk.how == "qualification"
    local = audience(session, study, PLATFORMS["local"])
    assert local.how == "" and local.excluded == ["pilot"]
    assert earlier_workers(session, study, Channel.mturk) == ["WOLD1", "WOLD2"]


def test_the_cli_shows_who_may_take_part_before_publishing(migrated_copy, monkeypatch):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        _earlier(s)
        study = _study(s)
        study.status = StudyStatus.collecting
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    monkeypatch.setenv("EBC_BASE_URL", "https://ebc.example.org")
    args = ["crowd", "publish", "main", "--provider", "local"]
    out = CliRunner().invoke(cli, args, input="n\n")  # the preview, then "no"
    engine.dispose()
    assert out.exit_code == 1, out.output
    assert "excluded: people of pilot (refused at entry; Local (invite links): our records" in (
        out.output
    )
    assert "names 'never-made', which no study is" in out.output
