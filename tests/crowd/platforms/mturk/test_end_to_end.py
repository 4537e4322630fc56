"""The crowd service end to end against a local stand-in MTurk endpoint (a real boto3
client signing with dummy credentials, `endpoint_url` at tests/crowd/mturk_standin.py),
on SQLite and PostgreSQL, with HITs from `build_hits` and work stored through the
annotation code the MTurk pages use."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from lxml import etree
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.annotation.identities import crowd_annotator
from app.annotation.leases import next_assignment
from app.config import ROOT
from app.crowd import bonuses, claims, common, ledger, overview, payments, publishing, sync
from app.crowd.base import CrowdError, PlatformSubmission
from app.crowd.platforms.mturk.formats import (
    QUAL_APPROVAL_RATE,
    QUAL_LOCALE,
    QUAL_MASTERS,
    QUAL_NUMBER_APPROVED,
    parse_answers,
)
from app.db import build_engine, make_sessionmaker, unit_of_work
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    AuditEvent,
    Channel,
    CrowdCall,
    CrowdHit,
    CrowdPosting,
    Hit,
    HitPosition,
    Item,
    Judgment,
    ReviewStatus,
    Study,
    StudyStatus,
    utcnow,
)
from app.studytypes.nextword.annotation import submit
from tests.crowd.mturk_standin import Server, StandInMTurk, answer_xml
from tests.hits.factory import make_study

XSD = Path(__file__).parents[2] / "data" / "ExternalQuestion.xsd"
SUBMIT_TO = "https://workersandbox.mturk.com"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def standin():
    with Server() as server:
        yield server.standin, server.url


@pytest.fixture
def settings(migrated_db, standin):
    return migrated_db.settings(
        base_url="https://ebc.example.org",
        mturk_endpoint_url=standin[1],
        crowd_calls_per_second=100,
        mturk_max_attempts=3,
    )


@pytest.fixture
def make_session(connection):
    """Units of work on the test's connection: their commits are savepoints."""
    return make_sessionmaker(connection, join_transaction_mode="create_savepoint")


@pytest.fixture
def mturk(settings):
    return common.provider_for(settings, "mturk")


def crowd_study(session: Session, slug: str = "crowd", **fields):
    """4 HITs of 10 items (5 data, 5 model; attention items among them) from build_hits,
    open to MTurk workers in the sandbox, 50 cents each."""
    study = make_study(session, slug=slug, lengths=(10,), per_cell=20, reward_cents=50, **fields)
    study.channels = {
        **study.channels,
        "mturk": {"enabled": True, "sandbox": True, "submit_origins": []},
    }
    session.flush()
    return study


def slots(session: Session, hit_id: int, *, wrong_attention: bool = False) -> dict[int, int]:
    """Screen slots that pick the model's top-1 (or rank 1 on attention items)."""
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order, Item.is_attention)
        .join(Item, Item.id == HitPosition.item_id)
        .where(HitPosition.hit_id == hit_id)
    ).all()
    return {p: order.index(1 if (att and wrong_attention) else 0) for p, order, att in rows}


def work(session, study, worker, external, *, hit_external=None, store=True, wrong=False):
    """A worker takes and (unless `store=False`) submits an MTurk assignment, as the pages do."""
    annotator = crowd_annotator(session, study, Channel.mturk, worker)
    lease = next_assignment(
        session,
        annotator,
        external_assignment_id=external,
        external_hit_id=hit_external,
        submit_to=SUBMIT_TO,
        serve=True,
    ).assignment
    chosen = slots(session, lease.hit_id, wrong_attention=wrong)
    if store:
        submit(session, annotator, lease.public_id, chosen, {})
    session.flush()
    return lease, chosen


def published(session, make_session, settings, mturk, slug="crowd", **kwargs):
    report = publishing.publish(make_session, settings, slug, mturk, by="cli", **kwargs)
    session.expire_all()
    return report


def audit(session, action):
    return session.scalars(select(AuditEvent).where(AuditEvent.action == action)).all()


# -- publishing --------------------------------------------------------------------------


def test_publish_makes_each_hit_once_even_when_a_retry_meets_hit_already_exists(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    study = crowd_study(session)
    hits = session.scalars(select(Hit).where(Hit.study_id == study.id)).all()
    assert len(hits) == 4
    # The first HIT is made, then the connection drops: botocore retries with the same
    # token and MTurk answers HitAlreadyExists, which is the HIT we asked for.
    platform.faults["CreateHITWithHITType"] = ["drop_after"]
    report = published(session, make_session, settings, mturk)

    assert (report.published, report.total, report.pending) == (4, 4, 0)
    assert platform.count("CreateHITWithHITType") == 5
    assert len(platform.hits) == 4
    rows = session.scalars(select(CrowdHit).order_by(CrowdHit.id)).all()
    assert sorted(r.external_hit_id for r in rows) == sorted(platform.hits)
    assert {r.status for r in rows} == {"published"}
    by_hit = {h.id: h for h in hits}
    for row in rows:
        made = platform.hits[row.external_hit_id]
        assert made["UniqueRequestToken"] == row.request_token and len(row.request_token) <= 64
        assert made["RequesterAnnotation"] == common.hit_public_id(study, row.hit_id)
        assert made["MaxAssignments"] == by_hit[row.hit_id].replicas
        xml = made["Question"]
        assert etree.XMLSchema(etree.parse(str(XSD))).validate(etree.fromstring(xml.encode()))
        assert "https://ebc.example.org/mturk/crowd" in xml
    (hit_type,) = platform.hit_types.values()
    assert hit_type["Reward"] == "0.50"
    assert hit_type["AssignmentDurationInSeconds"] == study.lease_seconds
    (cap,) = platform.qualification_types.values()
    assert {
        "QualificationTypeId": cap["QualificationTypeId"],
        "Comparator": "DoesNotExist",
        "ActionsGuarded": "DiscoverPreviewAndAccept",
    } in hit_type["QualificationRequirements"]
    posting = session.scalar(select(CrowdPosting))
    assert posting.status == "published" and posting.external_id in platform.hit_types
    assert audit(session, "crowd_published")[-1].detail["total"] == 4

    again = published(session, make_session, settings, mturk)
    assert (again.published, again.total) == (0, 4)
    assert platform.count("CreateHITWithHITType") == 5  # nothing made twice
    assert platform.count("CreateHITType") == 1


def test_publish_in_batches_with_qualifications_and_a_cost_estimate(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    crowd_study(session)
    options = common.PublishOptions(min_approval_rate=95, locales=("US",), masters=True)
    first = published(session, make_session, settings, mturk, options=options, limit=3)
    assert (first.published, first.pending) == (3, 1)
    assert session.scalar(select(CrowdPosting)).status == "prepared"
    # 4 HITs x 1 assignment x 50 cents; 25% fee (20% + 5% Masters) = 12.5 -> 13 cents each.
    assert first.estimate.rewards_cents == 200 and first.estimate.fees_cents == 52
    second = published(session, make_session, settings, mturk, limit=3)
    assert (second.published, second.pending, second.total) == (1, 0, 4)
    (hit_type,) = platform.hit_types.values()
    ids = [q["QualificationTypeId"] for q in hit_type["QualificationRequirements"]]
    assert QUAL_APPROVAL_RATE in ids and len(ids) == 4  # rate, locale, Masters, cap
    with pytest.raises(common.CrowdServiceError, match="other settings") as refused:
        published(session, make_session, settings, mturk, options=common.PublishOptions())
    assert refused.value.status_code == 409


def test_qualifications_default_from_the_study_file_and_options_override_them(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    qualified = {"min_approval_rate": 97, "min_approved": 500, "locales": ["GB"], "masters": True}
    for slug in ("from-file", "overridden"):
        study = crowd_study(session, slug)
        study.channels = {**study.channels, "mturk": {**study.channels["mturk"], **qualified}}
    session.flush()
    published(session, make_session, settings, mturk, slug="from-file")
    options = common.PublishOptions(min_approval_rate=90, masters=False, cap_qualification=False)
    published(session, make_session, settings, mturk, slug="overridden", options=options)

    def requirements(slug):
        posting = session.scalar(select(CrowdPosting).join(Study).where(Study.slug == slug))
        kept = platform.hit_types[posting.external_id]["QualificationRequirements"]
        return {q["QualificationTypeId"]: q for q in kept}

    from_file, overridden = requirements("from-file"), requirements("overridden")
    assert from_file[QUAL_APPROVAL_RATE]["IntegerValues"] == [97]
    assert from_file[QUAL_NUMBER_APPROVED]["IntegerValues"] == [500]
    assert from_file[QUAL_LOCALE]["LocaleValues"] == [{"Country": "GB"}]
    assert QUAL_MASTERS["sandbox"] in from_file
    assert overridden[QUAL_APPROVAL_RATE]["IntegerValues"] == [90]
    assert overridden[QUAL_LOCALE]["LocaleValues"] == [{"Country": "GB"}]
    assert QUAL_MASTERS["sandbox"] not in overridden
    assert len(overridden) == 3  # rate, number approved, locale: no Masters, no cap


def test_a_hit_made_before_an_interruption_is_found_not_made_again(
    session, make_session, settings, mturk, standin
):
    """A row left `sending` by a run that died (the call may have been made; its token may
    have lapsed at MTurk after 24 hours) is looked up by its RequesterAnnotation before
    any create, once its claim is stale; until then it is another run's, left alone."""
    platform, _ = standin
    crowd_study(session)
    platform.name_hit_in_duplicate_error = False
    published(session, make_session, settings, mturk, limit=1)
    row = session.scalar(select(CrowdHit).where(CrowdHit.status == "published"))
    platform.tokens.clear()  # the token has lapsed on the platform
    row.status, row.external_hit_id, row.published_at = "sending", None, utcnow()
    session.flush()
    live = published(session, make_session, settings, mturk)
    assert (live.total, live.pending) == (3, 1) and len(platform.hits) == 4
    assert "being published by another run" in " ".join(live.warnings)
    assert session.get(CrowdHit, row.id).status == "sending"

    row = session.get(CrowdHit, row.id)
    row.published_at = utcnow() - claims.STALE_CLAIM - timedelta(seconds=1)
    session.flush()
    report = published(session, make_session, settings, mturk)
    assert (report.total, report.pending) == (4, 0) and len(platform.hits) == 4
    assert platform.count("CreateHITWithHITType") == 4


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"channels": {"mturk": {"enabled": False}}}, 409, "MTurk channel"),
        ({"reward_cents": 0}, 400, "no reward"),
        ({"status": StudyStatus.ready}, 409, "open it"),
    ],
)
def test_bad_publish_requests_are_refused_and_change_nothing(
    session, make_session, settings, mturk, standin, change, status, message
):
    study = crowd_study(session)
    for name, value in change.items():
        setattr(study, name, value)
    session.flush()
    with pytest.raises(common.CrowdServiceError, match=message) as refused:
        published(session, make_session, settings, mturk)
    assert refused.value.status_code == status
    assert session.scalar(select(func.count()).select_from(CrowdPosting)) == 0
    assert standin[0].calls == []


def test_production_needs_the_setting_and_a_study_set_to_production(
    session, make_session, settings, standin
):
    with pytest.raises(common.CrowdServiceError, match="EBC_MTURK_PRODUCTION") as refused:
        common.provider_for(settings, "mturk", "production")
    assert refused.value.status_code == 403
    live = common.provider_for(
        settings.model_copy(update={"mturk_production": True}), "mturk", "production"
    )
    assert live.environment == "production"
    crowd_study(session)
    with pytest.raises(common.CrowdServiceError, match="sandbox"):
        published(session, make_session, settings, live)


def test_a_publish_killed_half_way_publishes_the_rest_and_nothing_twice(
    migrated_copy, standin, monkeypatch
):
    """`ebc crowd publish` in its own process, killed (SIGKILL) while MTurk makes its
    second HIT; the next run finishes: every HIT exactly once."""
    platform, url = standin
    db = migrated_copy
    engine = build_engine(db.settings())
    try:
        make = make_sessionmaker(engine)
        with make() as session:
            crowd_study(session, "killed")
            session.commit()
        proc: dict[str, subprocess.Popen] = {}

        def kill_on_second(_params):
            if platform.count("CreateHITWithHITType") == 2:
                os.kill(proc["p"].pid, signal.SIGKILL)
                proc["p"].wait()

        platform.hooks["CreateHITWithHITType"] = kill_on_second
        env = {
            **os.environ,
            "EBC_DATABASE_URL": db.url,
            "EBC_ENV": "test",
            "EBC_BASE_URL": "https://ebc.example.org",
            "EBC_MTURK_ENDPOINT_URL": url,
            "EBC_CROWD_CALLS_PER_SECOND": "100",
        }
        proc["p"] = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "crowd", "publish", "killed", "--yes"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out, _ = proc["p"].communicate(timeout=120)
        assert proc["p"].returncode == -signal.SIGKILL, out
        del platform.hooks["CreateHITWithHITType"]
        with make() as session:
            states = sorted(session.scalars(select(CrowdHit.status)))
        assert states == ["pending", "pending", "published", "sending"]
        assert len(platform.hits) == 2  # the second was made; we never heard back

        settings = db.settings(
            base_url="https://ebc.example.org",
            mturk_endpoint_url=url,
            crowd_calls_per_second=100,
        )
        provider = common.provider_for(settings, "mturk")
        # Right after the kill the claim is the dead run's, left alone; once it is
        # stale the next run takes it over.
        report = publishing.publish(make, settings, "killed", provider, by="cli")
        assert (report.total, report.pending) == (3, 1)
        with make() as session:
            sending = session.scalar(select(CrowdHit).where(CrowdHit.status == "sending"))
            sending.published_at -= claims.STALE_CLAIM
            session.commit()
        report = publishing.publish(make, settings, "killed", provider, by="cli")
        assert (report.total, report.pending) == (4, 0)
        assert len(platform.hits) == 4 and len(platform.tokens) == 4
        with make() as session:
            rows = session.scalars(select(CrowdHit)).all()
            assert sorted(r.external_hit_id for r in rows) == sorted(platform.hits)
            for row in rows:
                assert platform.tokens[row.request_token] == row.external_hit_id
    finally:
        engine.dispose()


# -- sync --------------------------------------------------------------------------------


def test_sync_pages_through_assignments_confirms_ours_and_takes_reviews(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    platform.page_size = 2
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    rows = session.scalars(select(CrowdHit).order_by(CrowdHit.id)).all()
    h1 = rows[0].external_hit_id
    leases = []
    for n in range(3):
        external = platform.add_assignment(h1, f"W{n}")
        leases.append(work(session, study, f"W{n}", external, hit_external=h1)[0])
    platform.assignments[leases[2].external_assignment_id]["AssignmentStatus"] = "Approved"
    assert all(
        session.get(Assignment, lease.id).unverified for lease in leases
    )  # MTurk work counts once confirmed
    report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    session.expire_all()
    assert (report.listed, report.confirmed, report.flagged, report.recovered) == (3, 3, [], 0)
    calls = [p for op, p in platform.calls if op == "ListAssignmentsForHIT"]
    assert any(p.get("NextToken") for p in calls)  # a second page of h1
    assert all(p["AssignmentStatuses"] == ["Submitted", "Approved", "Rejected"] for p in calls)
    got = [session.get(Assignment, lease.id) for lease in leases]
    assert not any(a.unverified for a in got)
    assert [a.review_status for a in got] == [
        ReviewStatus.pending,
        ReviewStatus.pending,
        ReviewStatus.approved,
    ]
    assert session.scalar(select(CrowdPosting)).synced_at is not None
    again = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    assert again.confirmed == 0 and again.listed == 3


def test_a_submission_we_never_stored_is_flagged_and_recovered_from_its_answer_xml(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    h1 = session.scalars(select(CrowdHit.external_hit_id)).first()
    # W1 took the HIT (our lease exists) and posted to MTurk, but our store was lost.
    external = platform.add_assignment(h1, "W1")
    lease, chosen = work(session, study, "W1", external, hit_external=h1, store=False)
    fields = {"assignment": lease.public_id, "ebc": "stored"}
    fields |= {f"o{p}": str(s) for p, s in chosen.items()}
    platform.assignments[external]["Answer"] = answer_xml(fields)
    # W2's answers are not in the XML; W3's XML names W1's assignment (not theirs).
    platform.add_assignment(h1, "W2")
    platform.add_assignment(h1, "W3", answers=fields)

    report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    session.expire_all()
    assert report.recovered == 1 and len(report.flagged) == 3
    flags = {f.external_worker_id: f for f in report.flagged}
    assert flags["W1"].recovered and not flags["W2"].recovered and not flags["W3"].recovered
    stored = session.get(Assignment, lease.id)
    assert stored.status is AssignmentStatus.submitted and not stored.unverified
    assert stored.external_assignment_id == external
    judged = session.scalars(select(Judgment).where(Judgment.assignment_id == lease.id)).all()
    assert {j.position: j.option for j in judged} == chosen
    assert {j.d for j in judged} == {0.0}  # the top-1 everywhere, resolved from our order
    events = audit(session, "crowd_submission_flagged")
    assert sorted(e.detail["worker"] for e in events) == ["W1", "W2", "W3"]
    assert [e.detail["recovered"] for e in events if e.detail["worker"] == "W1"] == [True]
    # Nothing was stored for W2 or W3.
    n = session.scalar(
        select(func.count())
        .select_from(Judgment)
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .where(Annotator.external_id.in_(("W2", "W3")))
    )
    assert n == 0
    # A second sync stores nothing twice.
    again = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    session.expire_all()
    assert again.recovered == 0
    assert session.scalar(select(func.count()).where(Judgment.assignment_id == lease.id)) == len(
        chosen
    )


def test_the_done_form_carries_what_recovery_needs_and_no_rank(session):
    """mturk_done.html, given `stored`, posts our assignment id and the chosen slots; as
    MTurk's answer XML they parse back into a recoverable submission."""
    from app.web.templating import templates

    # `url_for` in the context, not in `globals`: an overlay shares its parent's globals,
    # and the app's pages would all link this script as their stylesheet afterwards.
    url_for = lambda *a, **k: "/static/annotate.js"  # noqa: E731
    template = templates.env.get_template("annotate/mturk_done.html")
    html = template.render(
        url_for=url_for,
        action="https://workersandbox.mturk.com/mturk/externalSubmit",
        assignment_id="ASG1",
        stored={"assignment": "pub-1_x", "fields": [("o0", "3"), ("o1", "5"), ("o9", "0")]},
    )
    form = etree.HTML(html).xpath("//form[@method='post']")[0]
    fields = {i.get("name"): i.get("value") for i in form.xpath(".//input[@type='hidden']")}
    assert fields == {
        "assignmentId": "ASG1",
        "ebc": "stored",
        "assignment": "pub-1_x",
        "o0": "3",
        "o1": "5",
        "o9": "0",
    }
    # MTurk keeps every field but assignmentId in the answer XML.
    xml = answer_xml({k: v for k, v in fields.items() if k != "assignmentId"})
    sub = PlatformSubmission("ASG1", "W1", "H1", "Submitted", answers=parse_answers(xml))
    recovered = sync.recovered_answers(sub)
    assert recovered.assignment_public_id == "pub-1_x"
    assert recovered.answers == {0: 3, 1: 5, 9: 0}
    bare = template.render(url_for=url_for, action="x", assignment_id="A")
    assert 'name="assignment"' not in bare and 'name="o0"' not in bare


# -- money calls -------------------------------------------------------------------------


@pytest.fixture
def submitted(session, make_session, settings, mturk, standin):
    """Three workers' confirmed MTurk assignments (published, worked, synced)."""
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    hits = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()
    leases = []
    for n, hit in enumerate(hits[:3]):
        external = platform.add_assignment(hit, f"W{n}")
        leases.append(work(session, study, f"W{n}", external, hit_external=hit, wrong=n == 2)[0])
    sync.sync(make_session, settings, "crowd", mturk, by="cli")
    session.expire_all()
    return study, leases


def test_approve_twice_pays_once_and_records_the_outcome(
    session, make_session, mturk, standin, submitted
):
    platform, _ = standin
    _, leases = submitted
    first = payments.approve(make_session, "crowd", mturk, leases[0].public_id, by="cli")
    second = payments.approve(
        make_session, "crowd", mturk, leases[0].external_assignment_id, by="cli"
    )
    session.expire_all()
    assert first.made and not second.made
    assert platform.count("ApproveAssignment") == 1
    assert platform.assignments[leases[0].external_assignment_id]["AssignmentStatus"] == "Approved"
    a = session.get(Assignment, leases[0].id)
    assert a.review_status is ReviewStatus.approved and a.reviewed_at is not None
    (call,) = session.scalars(select(CrowdCall).where(CrowdCall.kind == "approve")).all()
    assert call.status == "ok" and call.by == "cli" and len(call.request_token) <= 64
    (event,) = audit(session, "crowd_approve")
    assert event.detail["outcome"] == "ok" and event.detail["by"] == "cli"
    with pytest.raises(common.CrowdServiceError, match="approved") as refused:
        payments.reject(make_session, "crowd", mturk, leases[0].public_id, feedback="x", by="cli")
    assert refused.value.status_code == 409


def test_an_approval_already_made_on_mturk_is_recorded_as_done(
    session, make_session, mturk, standin, submitted
):
    platform, _ = standin
    _, leases = submitted
    platform.assignments[leases[1].external_assignment_id]["AssignmentStatus"] = "Approved"
    outcome = payments.approve(make_session, "crowd", mturk, leases[1].public_id, by="cli")
    session.expire_all()
    assert outcome.made and outcome.detail == "already done"
    assert session.get(Assignment, leases[1].id).review_status is ReviewStatus.approved


def test_unconfirmed_work_is_not_reviewed_before_a_sync(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    study = crowd_study(session)
    published(session, make_session, settings, mturk)
    hit = session.scalars(select(CrowdHit.external_hit_id)).first()
    lease, _ = work(session, study, "W9", platform.add_assignment(hit, "W9"), hit_external=hit)
    with pytest.raises(common.CrowdServiceError, match="sync first"):
        payments.approve(make_session, "crowd", mturk, lease.public_id, by="cli")
    assert platform.count("ApproveAssignment") == 0
    assert session.scalar(select(func.count()).select_from(CrowdCall)) == 0


def test_throttling_is_retried_then_succeeds(session, make_session, mturk, standin, submitted):
    platform, _ = standin
    _, leases = submitted
    platform.faults["ApproveAssignment"] = ["throttle", "rate_exceeded"]
    outcome = payments.approve(make_session, "crowd", mturk, leases[0].public_id, by="cli")
    assert outcome.made and platform.count("ApproveAssignment") == 3
    platform.faults["GetAccountBalance"] = ["rate_exceeded"]
    assert payments.balance(mturk) == 1_000_000


def test_a_failed_call_is_recorded_on_the_call_and_the_assignment_and_raised(
    session, make_session, mturk, standin, submitted
):
    platform, _ = standin
    _, leases = submitted
    platform.faults["ApproveAssignment"] = ["fault"] * 3  # every attempt of the first call
    with pytest.raises(CrowdError, match="internal error"):
        payments.approve(make_session, "crowd", mturk, leases[0].public_id, by="cli")
    session.expire_all()
    a = session.get(Assignment, leases[0].id)
    assert a.review_status is ReviewStatus.failed and "internal error" in a.review_error
    (call,) = session.scalars(select(CrowdCall)).all()
    # A server fault may have come after the work was done: the outcome is unknown.
    assert call.status == "unknown" and "internal error" in call.error
    assert audit(session, "crowd_approve")[-1].detail["outcome"] == "unknown"
    # Retried later with the same token, it goes through.
    outcome = payments.approve(make_session, "crowd", mturk, leases[0].public_id, by="cli")
    session.expire_all()
    assert outcome.made
    assert session.scalar(select(CrowdCall.request_token)) == call.request_token
    a = session.get(Assignment, leases[0].id)
    assert a.review_status is ReviewStatus.approved and a.review_error is None


def test_a_bonus_retried_with_the_same_token_is_paid_once(
    session, make_session, mturk, standin, submitted
):
    platform, _ = standin
    _, leases = submitted
    ref = leases[0].public_id
    # Paid, then the connection dropped: botocore retries with the same token.
    platform.faults["SendBonus"] = ["drop_after"]
    first = payments.bonus(make_session, "crowd", mturk, ref, 25, reason="Thanks", by="cli")
    assert first.made and first.detail == "already done"
    assert len(platform.paid_bonuses) == 1 and platform.count("SendBonus") == 2
    again = payments.bonus(make_session, "crowd", mturk, ref, 25, reason="Thanks", by="cli")
    assert not again.made and platform.count("SendBonus") == 2
    session.expire_all()
    assert session.get(Assignment, leases[0].id).bonus_cents == 25
    with pytest.raises(common.CrowdServiceError, match="another number"):
        payments.bonus(make_session, "crowd", mturk, ref, 30, reason="Thanks", by="cli")
    more = payments.bonus(make_session, "crowd", mturk, ref, 30, reason="More", n=1, by="cli")
    session.expire_all()
    assert more.made and len(platform.paid_bonuses) == 2
    assert session.get(Assignment, leases[0].id).bonus_cents == 55


def test_a_bonus_whose_process_died_after_paying_is_not_paid_again(
    session, make_session, mturk, standin, submitted
):
    """The ledger row was committed, MTurk paid, and the process died before recording:
    the next run makes the call again with the row's token and MTurk refuses it."""
    platform, _ = standin
    _, leases = submitted
    with unit_of_work(make_session) as s:
        posting = s.scalar(select(CrowdPosting))
        call = ledger.begin_call(
            s,
            posting,
            ledger.CallRequest(
                "bonus", assignment_id=leases[1].id, amount_cents=40, reason="Thanks"
            ),
        )
        token = call.request_token
    mturk.bonus("W1", leases[1].external_assignment_id, 40, reason="Thanks", request_token=token)
    outcome = payments.bonus(
        make_session, "crowd", mturk, leases[1].public_id, 40, reason="Thanks", by="cli"
    )
    session.expire_all()
    assert outcome.made and outcome.detail == "already done"
    assert len(platform.paid_bonuses) == 1
    assert session.get(Assignment, leases[1].id).bonus_cents == 40


def test_bulk_approval_previews_its_rejections_and_applies_rules_only_when_asked(
    session, make_session, settings, mturk, standin, submitted
):
    platform, _ = standin
    plain = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=False)
    assert len(plain.approve) == 3 and plain.reject == []
    blocked = session.scalar(select(Annotator).where(Annotator.external_id == "W1"))
    blocked.blocked, blocked.exclude_past = True, True
    session.flush()
    plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=True)
    rejected = {i.worker: i.reasons for i in plan.reject}
    assert set(rejected) == {"W1", "W2"}  # blocked; failed the attention items
    assert "blocked" in rejected["W1"][0] and "attention" in rejected["W2"][0]
    assert [i.worker for i in plan.approve] == ["W0"]
    # The plain preview's approvals, confirmed while the rules now reject two of them.
    with pytest.raises(common.CrowdServiceError, match="preview again"):
        payments.approve_all(
            make_session, settings, "crowd", mturk, apply_exclusions=True,
            approvals_seen=[i.public_id for i in plain.approve],
            reject_feedback="Attention checks failed", by="cli",
        )  # fmt: skip
    with pytest.raises(common.CrowdServiceError, match="feedback"):
        payments.approve_all(
            make_session, settings, "crowd", mturk, apply_exclusions=True,
            approvals_seen=[i.public_id for i in plan.approve],
            rejections_seen=[i.public_id for i in plan.reject], by="cli",
        )  # fmt: skip
    assert platform.count("ApproveAssignment") == platform.count("RejectAssignment") == 0
    report = payments.approve_all(
        make_session,
        settings,
        "crowd",
        mturk,
        apply_exclusions=True,
        reject_feedback="Attention checks failed",
        approvals_seen=[i.public_id for i in plan.approve],
        rejections_seen=[i.public_id for i in plan.reject],
        by="cli",
    )
    assert (report.approved, report.rejected) == (1, 2)
    statuses = sorted(a["AssignmentStatus"] for a in platform.assignments.values())
    assert statuses == ["Approved", "Rejected", "Rejected"]
    session.expire_all()
    assert (
        payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=True).approve
        == []
    )


def test_block_unblock_and_block_again(session, make_session, mturk, standin, submitted):
    platform, _ = standin
    first = payments.block(make_session, "crowd", mturk, "W0", reason="Random clicks", by="cli")
    again = payments.block(make_session, "crowd", mturk, "W0", reason="Random clicks", by="cli")
    session.expire_all()
    worker = session.scalar(select(Annotator).where(Annotator.external_id == "W0"))
    assert first.made and not again.made and worker.blocked
    assert platform.blocks == {"W0": "Random clicks"}
    payments.unblock(make_session, "crowd", mturk, "W0", reason="Appeal", by="cli")
    session.expire_all()
    assert platform.blocks == {} and not session.get(Annotator, worker.id).blocked
    third = payments.block(make_session, "crowd", mturk, "W0", reason="Again", by="cli")
    assert third.made and platform.blocks == {"W0": "Again"}
    assert platform.count("CreateWorkerBlock") == 2
    with pytest.raises(common.CrowdServiceError, match="no mturk worker"):
        payments.block(make_session, "crowd", mturk, "nobody", reason="x", by="cli")


def test_expire_stops_every_published_hit_once(session, make_session, mturk, standin, submitted):
    platform, _ = standin
    outcome = payments.expire(make_session, "crowd", mturk, by="cli")
    again = payments.expire(make_session, "crowd", mturk, by="cli")
    session.expire_all()
    assert outcome.made and not again.made
    assert platform.count("UpdateExpirationForHIT") == 4
    assert {h["HITStatus"] for h in platform.hits.values()} == {"Unassignable"}
    assert set(session.scalars(select(CrowdHit.status))) == {"expired"}
    assert session.scalar(select(CrowdPosting.status)) == "expired"


def test_workers_at_the_cap_get_the_cap_qualification_once_and_silently(
    session, make_session, settings, mturk, standin
):
    platform, _ = standin
    study = crowd_study(session, per_annotator_cap=1)
    published(session, make_session, settings, mturk)
    hit = session.scalars(select(CrowdHit.external_hit_id)).first()
    work(session, study, "W5", platform.add_assignment(hit, "W5"), hit_external=hit)
    report = sync.sync(make_session, settings, "crowd", mturk, by="cli")
    assert report.qualified == 1
    (grant,) = platform.grants
    (cap,) = platform.qualification_types.values()
    assert grant == {
        "QualificationTypeId": cap["QualificationTypeId"],
        "WorkerId": "W5",
        "IntegerValue": 1,
        "SendNotification": False,
    }
    assert sync.sync(make_session, settings, "crowd", mturk, by="cli").qualified == 0
    assert len(platform.grants) == 1


def test_the_cli_shows_the_balance(settings, standin, monkeypatch):
    from typer.testing import CliRunner

    from app.cli import cli

    monkeypatch.setenv("EBC_MTURK_ENDPOINT_URL", standin[1])
    result = CliRunner().invoke(cli, ["crowd", "balance", "--provider", "mturk"])
    assert result.exit_code == 0, result.output
    assert "mturk (sandbox) balance: $10,000.00" in result.output
    refused = CliRunner().invoke(cli, ["crowd", "balance", "--provider", "mturk", "--production"])
    assert refused.exit_code == 1 and "EBC_MTURK_PRODUCTION" in refused.output


# -- environments: a sandbox pilot, then production --------------------------------------


@pytest.fixture
def production(settings):
    """MTurk production on a stand-in of its own: platform ids do not say which environment
    they belong to, and this one does not know the sandbox's (its ids never collide)."""
    with Server(StandInMTurk(_ids=itertools.count(5000))) as server:
        live = settings.model_copy(
            update={"mturk_production": True, "mturk_endpoint_url": server.url}
        )
        yield server.standin, live, common.provider_for(live, "mturk", "production")


def test_a_sandbox_pilot_is_never_reviewed_paid_or_qualified_in_production(
    session, make_session, settings, mturk, standin, production
):
    sandbox_platform, _ = standin
    live_platform, live_settings, live = production
    study = crowd_study(session, per_annotator_cap=1)
    published(session, make_session, settings, mturk)
    pilot_hit = session.scalars(select(CrowdHit.external_hit_id)).first()
    pilot, _ = work(session, study, "W0", sandbox_platform.add_assignment(pilot_hit, "W0"),
                    hit_external=pilot_hit)  # fmt: skip
    sync.sync(make_session, settings, "crowd", mturk, by="cli")
    study.channels = {**study.channels, "mturk": {**study.channels["mturk"], "sandbox": False}}
    session.flush()
    published(session, make_session, live_settings, live)
    live_hits = session.scalars(
        select(CrowdHit.external_hit_id)
        .join(CrowdPosting, CrowdPosting.id == CrowdHit.posting_id)
        .where(CrowdPosting.environment == "production")
        .order_by(CrowdHit.id)
    ).all()
    real, _ = work(session, study, "W1", live_platform.add_assignment(live_hits[0], "W1"),
                   hit_external=live_hits[0])  # fmt: skip
    # A sandbox worker whose URL names a production HIT: the sandbox's listing decides.
    forged, _ = work(session, study, "W2", sandbox_platform.add_assignment(pilot_hit, "W2"),
                     hit_external=live_hits[1])  # fmt: skip
    sync.sync(make_session, settings, "crowd", mturk, by="cli")
    report = sync.sync(make_session, live_settings, "crowd", live, by="cli")
    session.expire_all()
    assert session.get(Assignment, forged.id).external_hit_id == pilot_hit

    # W0 (at the cap after the pilot) exists only in the sandbox: production qualifies W1.
    assert report.qualified == 1
    assert [g["WorkerId"] for g in live_platform.grants] == ["W1"]
    assert sorted(g["WorkerId"] for g in sandbox_platform.grants) == ["W0", "W2"]

    plan = payments.preview_approve_all(make_session, "crowd", live, apply_exclusions=False)
    assert [i.worker for i in plan.approve] == ["W1"] and plan.unconfirmed == 0
    pilot_plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=False)
    # W2's sandbox work came after the study moved to production: never confirmed.
    assert [i.worker for i in pilot_plan.approve] == ["W0"] and pilot_plan.unconfirmed == 1
    done = payments.approve_all(
        make_session, live_settings, "crowd", live, by="cli",
        approvals_seen=[i.public_id for i in plan.approve],
    )  # fmt: skip
    assert (done.approved, done.left) == (1, 0)
    approved = [p["AssignmentId"] for op, p in live_platform.calls if op == "ApproveAssignment"]
    assert approved == [real.external_assignment_id]
    assert sandbox_platform.count("ApproveAssignment") == 0

    # One sandbox assignment named in production: refused before the ledger or a call.
    for ref in (pilot.public_id, pilot.external_assignment_id):
        with pytest.raises(common.CrowdServiceError, match="another environment") as refused:
            payments.bonus(make_session, "crowd", live, ref, 25, reason="Thanks", by="cli")
        assert refused.value.status_code == 409
    with pytest.raises(common.CrowdServiceError, match="not work of") as refused:
        bonuses.bonus_plan(session, live_settings, study, live, [pilot.public_id], 25, "Thanks")
    assert refused.value.status_code == 409
    assert live_platform.count("SendBonus") == 0
    assert session.scalar(select(func.count()).where(CrowdCall.kind == "bonus")) == 0

    # Each environment's page lists its own work only.
    live_rows = overview.crowd_overview(session, study, "mturk", "production").rows
    assert [(r.worker, r.review_status, r.payable) for r in live_rows] == [
        ("W1", ReviewStatus.approved, True)
    ]
    pilot_rows = overview.crowd_overview(session, study, "mturk", "sandbox").rows
    assert sorted(r.worker for r in pilot_rows) == ["W0", "W2"]


def test_bulk_approval_in_batches_continues_and_repeats_nothing(
    session, make_session, settings, mturk, standin, submitted
):
    platform, _ = standin
    plan = payments.preview_approve_all(make_session, "crowd", mturk, apply_exclusions=True)
    seen = [i.public_id for i in plan.reject]
    assert [i.worker for i in plan.reject] == ["W2"] and len(plan.approve) == 2

    def run():
        return payments.approve_all(
            make_session, settings, "crowd", mturk, apply_exclusions=True,
            reject_feedback="Attention checks failed", rejections_seen=seen, by="cli", limit=1,
            approvals_seen=[i.public_id for i in plan.approve],
        )  # fmt: skip

    # The same confirmation, sent again, goes on from where the last one stopped.
    reports = [run() for _ in range(4)]
    assert [(r.rejected, r.approved, r.left) for r in reports] == [
        (1, 0, 2),
        (0, 1, 1),
        (0, 1, 0),
        (0, 0, 0),
    ]
    assert platform.count("RejectAssignment") == 1 and platform.count("ApproveAssignment") == 2
    assert session.scalar(select(func.count()).select_from(CrowdCall)) == 3
    with pytest.raises(common.CrowdServiceError, match="at least 1"):
        payments.approve_all(
            make_session, settings, "crowd", mturk, approvals_seen=[], by="cli", limit=0
        )
