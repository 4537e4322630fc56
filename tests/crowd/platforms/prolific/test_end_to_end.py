"""The crowd service with Prolific, end to end against the Prolific stand-in
(tests/crowd/prolific_standin.py), on SQLite and PostgreSQL: HITs from `build_hits`, work
stored through the annotation code the panel pages use, one Prolific study per posting,
reviews per submission (a bundle of HITs shares one), bonuses per participant."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.identities import check_prolific_entry, check_prolific_key, crowd_annotator
from app.annotation.leases import next_assignment
from app.crowd import bonuses, common, ledger, payments, publishing, sync
from app.crowd.base import CrowdError
from app.db import make_sessionmaker, unit_of_work
from app.models import (
    Assignment,
    AuditEvent,
    Channel,
    CrowdCall,
    CrowdHit,
    CrowdPosting,
    Hit,
    HitPosition,
    ReviewStatus,
)
from app.studytypes.nextword.annotation import submit
from tests.crowd.prolific_standin import LONG_MESSAGE, FakeProlific
from tests.hits.factory import make_study

CODE = "C0DE1234"


@pytest.fixture
def settings(migrated_db):
    return migrated_db.settings(base_url="https://ebc.example.org", crowd_calls_per_second=100)


@pytest.fixture
def make_session(connection):
    """Units of work on the test's connection: their commits are savepoints."""
    return make_sessionmaker(connection, join_transaction_mode="create_savepoint")


@pytest.fixture
def fake() -> FakeProlific:
    return FakeProlific()


@pytest.fixture
def prolific(fake):
    """Two HITs per participant: one place, one submission, is a bundle of two HITs."""
    return fake.provider(hits_per_participant=2)


def panel_study(session: Session, slug: str = "panel", **panel):
    """4 HITs of 10 items from build_hits, open to panel participants, 90 cents a HIT; the
    participant's URL parameter renamed (`pid`), as a study may."""
    study = make_study(
        session, slug=slug, lengths=(10,), per_cell=20, reward_cents=90, per_annotator_cap=5
    )
    study.channels = {
        **study.channels,
        "prolific": {
            "enabled": True,
            "completion_code": CODE,
            "participant_param": "pid",
            **panel,
        },
    }
    session.flush()
    return study


def published(session, make_session, settings, provider, slug="panel"):
    report = publishing.publish(make_session, settings, slug, provider, by="cli")
    session.expire_all()
    return report


def work(session, study, participant: str, submission: str, hits: int = 1) -> list[Assignment]:
    """A participant does `hits` HITs in one visit (one Prolific submission), as the panel
    pages do: leases carry the entry's session id."""
    annotator = crowd_annotator(session, study, Channel.prolific, participant)
    done = []
    for _ in range(hits):
        lease = next_assignment(
            session, annotator, external_session_id=submission, serve=True
        ).assignment
        rows = session.execute(
            select(HitPosition.position, HitPosition.choice_order).where(
                HitPosition.hit_id == lease.hit_id
            )
        ).all()
        submit(session, annotator, lease.public_id, {p: order.index(0) for p, order in rows}, {})
        done.append(lease)
    session.flush()
    return done


def visit(fake: FakeProlific, study_id: str) -> tuple[str, str]:
    """A participant starts the Prolific study: their submission id and participant id."""
    sid = fake.add_submission(study_id)
    return sid, fake.submissions[sid]["participant_id"]


def calls(session, kind: str) -> list[CrowdCall]:
    return session.scalars(select(CrowdCall).where(CrowdCall.kind == kind)).all()


# -- publishing --------------------------------------------------------------------------


def test_publish_makes_one_prolific_study_whose_url_our_panel_entry_accepts(
    session, make_session, settings, fake, prolific
):
    study = panel_study(session)
    report = published(session, make_session, settings, prolific)

    assert (report.published, report.total, report.pending) == (1, 1, 0)
    (study_id,) = fake.studies
    sent = fake.studies[study_id]
    assert sent["status"] == "ACTIVE"
    # 4 HITs x 1 replica, 2 HITs a place: 2 places of 2 x 90 cents.
    assert (sent["total_available_places"], sent["reward"]) == (2, 180)
    assert sent["completion_codes"][0]["code"] == CODE
    url = sent["external_study_url"]
    assert "pid={{%PROLIFIC_PID%}}" in url and "{{%pid%}}" not in url
    assert "STUDY_ID={{%STUDY_ID%}}" in url and "SESSION_ID={{%SESSION_ID%}}" in url
    (unit,) = session.scalars(select(CrowdHit)).all()
    assert (unit.external_hit_id, unit.max_assignments, unit.status) == (study_id, 2, "published")
    assert report.estimate.rewards_cents == 360  # 2 places x 180 cents

    # What Prolific sends a participant to, after substituting its placeholders.
    ids = {"PROLIFIC_PID": "5f1e0c9d8b7a6f5e4d3c2b1a", "STUDY_ID": study_id, "SESSION_ID": "s1"}
    landed = re.sub(r"\{\{%(\w+)%\}\}", lambda m: ids[m[1]], url)
    params = dict(parse_qsl(urlsplit(landed).query))
    check_prolific_key(settings.secret_key, study.slug, params)
    assert check_prolific_entry(study, params) == ("5f1e0c9d8b7a6f5e4d3c2b1a", "s1")

    again = published(session, make_session, settings, fake.provider(hits_per_participant=2))
    assert (again.published, again.total) == (0, 1)
    assert len(fake.studies) == 1 and fake.count("POST", r"studies/\w+/transition/") == 1
    with pytest.raises(common.CrowdServiceError, match="2 HITs per participant") as refused:
        published(session, make_session, settings, fake.provider())
    assert refused.value.status_code == 409


@pytest.mark.parametrize(
    ("panel", "message"),
    [
        ({"completion_code": None}, "completion code"),
        ({"study_id": "64aaabfaf6bbc363b9d47c6a"}, "channels.prolific.study_id"),
        ({"enabled": False}, "enable its Prolific channel"),
    ],
)
def test_a_study_prolific_cannot_run_is_refused_and_nothing_changes(
    session, make_session, settings, fake, prolific, panel, message
):
    panel_study(session, **panel)
    with pytest.raises(common.CrowdServiceError, match=message) as refused:
        published(session, make_session, settings, prolific)
    assert refused.value.status_code == 409
    assert session.scalar(select(func.count()).select_from(CrowdPosting)) == 0
    assert fake.calls == []


# -- sync, reviews and bonuses -----------------------------------------------------------


@pytest.fixture
def handed_in(session, make_session, settings, fake, prolific):
    """Published; participant A did a bundle of two HITs (one submission), B one HIT."""
    study = panel_study(session)
    published(session, make_session, settings, prolific)
    (study_id,) = fake.studies
    sub_a, a = visit(fake, study_id)
    sub_b, b = visit(fake, study_id)
    return study, {
        "a": (sub_a, a, work(session, study, a, sub_a, hits=2)),
        "b": (sub_b, b, work(session, study, b, sub_b)),
    }


def test_publish_sync_approve_bonus_reject_through_the_service(
    session, make_session, settings, fake, prolific, handed_in
):
    _, people = handed_in
    sub_a, _, bundle = people["a"]
    sub_b, _, (single,) = people["b"]

    # Not reviewable before a sync has seen the submission handed in.
    with pytest.raises(common.CrowdServiceError, match="sync first"):
        payments.approve(make_session, "panel", prolific, bundle[0].public_id, by="cli")
    report = sync.sync(make_session, settings, "panel", prolific, by="cli")
    assert (report.listed, report.confirmed, report.flagged) == (2, 3, [])
    session.expire_all()
    assert {session.get(Assignment, x.id).review_status for x in (*bundle, single)} == {
        ReviewStatus.pending
    }

    # One approval of the submission covers the bundle; the second (by Prolific's id) is a no-op.
    first = payments.approve(make_session, "panel", prolific, bundle[0].public_id, by="cli")
    second = payments.approve(make_session, "panel", prolific, sub_a, by="cli")
    assert first.made and not second.made
    assert fake.count("POST", rf"submissions/{sub_a}/transition/") == 1
    assert fake.submissions[sub_a]["status"] == "APPROVED"
    session.expire_all()
    assert [session.get(Assignment, x.id).review_status for x in bundle] == [
        ReviewStatus.approved
    ] * 2
    plan = payments.preview_approve_all(make_session, "panel", prolific, apply_exclusions=False)
    assert [item.external_assignment_id for item in plan.approve] == [sub_b]

    # A bonus is paid once per participant, whichever assignment of the bundle names it.
    paid = payments.bonus(
        make_session, "panel", prolific, bundle[0].public_id, 125, reason="Thanks", by="cli"
    )
    again = payments.bonus(
        make_session, "panel", prolific, bundle[1].public_id, 125, reason="Thanks", by="cli"
    )
    assert paid.made and not again.made
    assert fake.paid == [(sub_a, 125)]
    session.expire_all()
    assert session.get(Assignment, bundle[0].id).bonus_cents == 125
    posting = session.scalar(select(CrowdPosting))
    assert ledger.bonuses_counted(session, posting, session.get(Assignment, bundle[1].id)) == 1

    # A rejection needs Prolific's message length and a known category, checked first.
    for feedback, category, message in (
        ("Too fast.", None, "at least 100 characters"),
        (LONG_MESSAGE, "SLOPPY", "rejection category"),
    ):
        with pytest.raises(common.CrowdServiceError, match=message) as refused:
            payments.reject(
                make_session, "panel", prolific, single.public_id, feedback=feedback,
                category=category, by="cli",
            )  # fmt: skip
        assert refused.value.status_code == 400
    assert calls(session, "reject") == []
    rejected = payments.reject(
        make_session, "panel", prolific, single.public_id, feedback=LONG_MESSAGE,
        category="LOW_EFFORT", by="cli",
    )  # fmt: skip
    assert rejected.made and fake.submissions[sub_b]["status"] == "REJECTED"
    (body,) = [b for m, p, b in fake.bodies if p == f"submissions/{sub_b}/transition/"]
    assert body == {"action": "REJECT", "message": LONG_MESSAGE, "rejection_category": "LOW_EFFORT"}
    session.expire_all()
    assert session.get(Assignment, single.id).review_status is ReviewStatus.rejected
    event = session.scalars(select(AuditEvent).where(AuditEvent.action == "crowd_reject")).one()
    assert event.detail["submission"] == sub_b and event.detail["outcome"] == "ok"

    # A later sync agrees with what was done and flags nothing.
    later = sync.sync(make_session, settings, "panel", prolific, by="cli")
    assert (later.confirmed, later.reviewed, later.flagged) == (0, 0, [])


def test_sync_flags_submissions_it_cannot_match(
    session, make_session, settings, fake, prolific, handed_in
):
    _, people = handed_in
    (study_id,) = fake.studies
    stranger, _ = visit(fake, study_id)  # on Prolific, never stored here
    fake.submissions[people["b"][0]]["status"] = "RETURNED"
    report = sync.sync(make_session, settings, "panel", prolific, by="cli")
    flagged = {f.external_assignment_id: f.reason for f in report.flagged}
    assert set(flagged) == {stranger, people["b"][0]}
    assert "never stored" in flagged[stranger] and "RETURNED" in flagged[people["b"][0]]
    assert report.confirmed == 2  # the bundle; the returned one is not reviewable
    session.expire_all()
    assert session.get(Assignment, people["b"][2][0].id).review_status is None


# -- a bonus whose earlier attempt may have been paid -------------------------------------


def _interrupted_bonus(session, make_session, assignment: Assignment, cents: int) -> CrowdCall:
    """A process wrote the ledger row of a bonus and died before recording an outcome."""
    with unit_of_work(make_session) as s:
        posting = s.scalar(select(CrowdPosting))
        call = ledger.begin_call(
            s,
            posting,
            ledger.CallRequest(
                "bonus", assignment_id=assignment.id, amount_cents=cents, reason="Thanks"
            ),
        )
        token = call.request_token
    session.expire_all()
    return session.scalar(select(CrowdCall).where(CrowdCall.request_token == token))


@pytest.fixture
def synced(session, make_session, settings, prolific, handed_in):
    sync.sync(make_session, settings, "panel", prolific, by="cli")
    session.expire_all()
    return handed_in


def test_a_crashed_bonus_that_prolific_paid_is_recorded_not_paid_again(
    session, make_session, fake, synced
):
    _, people = synced
    sub_a, a, bundle = people["a"]
    call = _interrupted_bonus(session, make_session, bundle[0], 60)
    # It was paid before the process died (its own provider object, now gone).
    fake.provider().bonus(a, sub_a, 60, reason="Thanks", request_token=call.request_token)

    retried = payments.bonus(
        make_session, "panel", fake.provider(), bundle[0].public_id, 60, reason="Thanks", by="cli"
    )
    assert retried.made and retried.detail == "already done"
    assert fake.paid == [(sub_a, 60)] and fake.count("POST", r"bulk-bonus-payments/\w+/pay/") == 1
    session.expire_all()
    assert session.get(CrowdCall, call.id).status == "ok"
    assert session.get(Assignment, bundle[0].id).bonus_cents == 60


def test_a_crashed_bonus_that_prolific_does_not_list_is_refused_for_a_manual_check(
    session, make_session, fake, synced
):
    _, people = synced
    bundle = people["a"][2]
    call = _interrupted_bonus(session, make_session, bundle[0], 60)

    with pytest.raises(common.CrowdServiceError, match="check the submission's bonuses") as no:
        payments.bonus(
            make_session, "panel", fake.provider(), bundle[0].public_id, 60, reason="Thanks",
            by="cli",
        )  # fmt: skip
    assert no.value.status_code == 409
    assert fake.paid == [] and fake.count("POST", "submissions/bonus-payments/") == 0
    session.expire_all()
    assert session.get(CrowdCall, call.id).status == "retrying"
    # Checked by hand and not paid: it is paid as another bonus, once.
    other = payments.bonus(
        make_session, "panel", fake.provider(), bundle[0].public_id, 60, reason="Thanks", n=1,
        by="cli",
    )  # fmt: skip
    assert other.made and fake.paid == [(people["a"][0], 60)]


def test_a_bonus_whose_answer_was_lost_is_found_on_prolific_by_the_next_process(
    session, make_session, fake, synced
):
    _, people = synced
    sub_a, _, bundle = people["a"]
    original = fake.route

    def lose_the_answer(request, path):
        answer = original(request, path)
        if re.fullmatch(r"bulk-bonus-payments/\w+/pay/", path):
            return httpx.Response(502, text="Bad gateway")  # paid, but we never hear
        return answer

    fake.route = lose_the_answer
    ref = bundle[0].public_id
    with pytest.raises(CrowdError, match="may have gone through"):
        payments.bonus(make_session, "panel", fake.provider(), ref, 80, reason="T", by="cli")
    session.expire_all()
    (call,) = calls(session, "bonus")
    assert call.status == "unknown"
    fake.route = original

    retried = payments.bonus(make_session, "panel", fake.provider(), ref, 80, reason="T", by="cli")
    assert retried.made and retried.detail == "already done"
    assert fake.paid == [(sub_a, 80)]
    session.expire_all()
    assert session.get(CrowdCall, call.id).status == "ok"


def test_publishing_counts_hits_per_study_not_per_unit(session, make_session, settings, fake):
    """HITs built after publishing need more places: the report says so (Prolific's places
    are not raised by this service)."""
    study = panel_study(session)
    published(session, make_session, settings, fake.provider())
    hit = session.scalars(select(Hit).where(Hit.study_id == study.id)).first()
    hit.replicas += 2
    session.flush()
    report = published(session, make_session, settings, fake.provider())
    assert report.published == 0 and len(fake.studies) == 1
    assert any("6 Prolific places" in w and "has 4" in w for w in report.warnings)


# -- the bonus preview and the Prolific study id ------------------------------------------


def test_the_bonus_preview_needs_a_sync_and_numbers_bonuses_per_participant(
    session, make_session, settings, fake, prolific, handed_in
):
    study, people = handed_in
    sub_a, _, bundle = people["a"]
    sub_b, _, (single,) = people["b"]
    everyone = [bundle[0].public_id, bundle[1].public_id, single.public_id]
    # Shown in the preview, not found at pay time: Prolific has not listed the work yet.
    with pytest.raises(common.CrowdServiceError, match="sync first") as refused:
        bonuses.bonus_plan(session, settings, study, prolific, everyone, 40, "Thanks")
    assert refused.value.status_code == 409
    sync.sync(make_session, settings, "panel", prolific, by="cli")
    session.expire_all()
    payments.bonus(make_session, "panel", prolific, bundle[1].public_id, 40, reason="T", by="cli")
    session.expire_all()

    plan = bonuses.bonus_plan(session, settings, study, prolific, everyone, 40, "Thanks")
    # One line per participant: A's assignments share a submission and their bonuses.
    assert [(line.platform_id, line.n) for line in plan.lines] == [(sub_a, 1), (sub_b, 0)]
    assert plan.bonuses_cents == 80 and any("one bonus per participant" in n for n in plan.notes)
    paid = bonuses.pay_bonuses(
        make_session, settings, "panel", prolific,
        [(line.public_id, line.n) for line in plan.lines], 40, reason="Thanks", by="cli",
    )  # fmt: skip
    assert (paid.paid, paid.already) == (2, 0)
    assert fake.paid == [(sub_a, 40), (sub_a, 40), (sub_b, 40)]


def test_publishing_pins_the_prolific_study_so_other_panel_studies_are_refused(
    session, make_session, settings, fake, prolific
):
    study = panel_study(session)
    report = published(session, make_session, settings, prolific)
    (study_id,) = fake.studies
    assert study.channels["prolific"]["study_id"] == study_id
    assert not any("study_id" in w for w in report.warnings)
    event = session.scalars(
        select(AuditEvent).where(AuditEvent.action == "crowd_prolific_study_set")
    ).one()
    assert event.detail["study_id"] == study_id and event.detail["by"] == "cli"
    ids = {"pid": "5f1e0c9d8b7a6f5e4d3c2b1a", "SESSION_ID": "s1"}
    assert check_prolific_entry(study, {**ids, "STUDY_ID": study_id})[0] == ids["pid"]
    with pytest.raises(AnnotationError) as refused:
        check_prolific_entry(study, {**ids, "STUDY_ID": "6" * 24})
    assert refused.value.status_code == 403
    # Publishing again keeps it (and audits nothing more).
    published(session, make_session, settings, fake.provider(hits_per_participant=2))
    assert study.channels["prolific"]["study_id"] == study_id
    assert (
        session.scalar(select(func.count()).where(AuditEvent.action == "crowd_prolific_study_set"))
        == 1
    )
