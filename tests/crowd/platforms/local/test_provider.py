"""The local channel (invite links) as a crowd provider, end to end on SQLite and
PostgreSQL: HITs from `build_hits`, lab members invited by the invitation service and
working through their signed links (the annotation code the `/a/{token}` pages use), then
the crowd services (publish, sync, approve, reject, bonus, block, expire) with
`--provider local`: bookkeeping in the same ledger, our own block, no platform."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.annotation import admin
from app.annotation.identities import annotator_for_invite, read_invite_token
from app.annotation.leases import next_assignment
from app.annotation.schemas import WorkStatus
from app.crowd import common, ledger, overview, payments, publishing, registry, sync
from app.crowd.base import CrowdProvider
from app.crowd.common import PublishOptions
from app.crowd.platforms.local.provider import NO_FEE, LocalProvider
from app.db import make_sessionmaker, unit_of_work
from app.models import (
    Annotator,
    Assignment,
    AuditEvent,
    CrowdCall,
    CrowdHit,
    CrowdPosting,
    Hit,
    ReviewStatus,
)
from app.studytypes.nextword.annotation import submit
from tests.crowd.platforms.mturk.test_end_to_end import slots
from tests.hits.factory import make_study

SLUG = "lab"


@pytest.fixture
def settings(migrated_db):
    return migrated_db.settings(base_url="https://ebc.example.org")


@pytest.fixture
def make_session(connection):
    """Units of work on the test's connection: their commits are savepoints."""
    return make_sessionmaker(connection, join_transaction_mode="create_savepoint")


@pytest.fixture
def local(settings, make_session):
    return common.provider_for(settings, "local", sessions=make_session)


def lab_study(session: Session, **fields):
    """4 HITs of 10 items (attention items among them) from build_hits, 40 cents each;
    no crowd channel enabled: invite links always work."""
    fields = {"reward_cents": 40, **fields}
    return make_study(session, slug=SLUG, lengths=(10,), per_cell=20, **fields)


def links(session: Session, settings, study, n: int, label: str = "lab member") -> list[str]:
    """`n` lab members invited by the invitation service: their links."""
    made = admin.invite(session, study, n, label, by="cli")
    return [admin.invite_link(settings.base_url, settings.secret_key, a) for a in made]


def through(session: Session, settings, link: str):
    """The annotator a link names, locked, as the invite pages find them."""
    token = link.rsplit("/a/", 1)[1]
    return annotator_for_invite(session, read_invite_token(settings.secret_key, token))


def work(session: Session, settings, link: str, *, hand_in: bool = True, wrong=False):
    """A lab member opens their link, takes a HIT and (unless `hand_in=False`) submits it."""
    annotator = through(session, settings, link)
    lease = next_assignment(session, annotator, serve=True).assignment
    assert lease is not None
    if hand_in:
        submit(
            session,
            annotator,
            lease.public_id,
            slots(session, lease.hit_id, wrong_attention=wrong),
            {},
        )
    session.flush()
    return lease


def published(session, make_session, settings, provider, options=None, **kwargs):
    report = publishing.publish(make_session, settings, SLUG, provider, options, by="cli", **kwargs)
    session.expire_all()
    return report


def audit(session, action: str) -> list[AuditEvent]:
    return session.scalars(select(AuditEvent).where(AuditEvent.action == action)).all()


def calls(session, kind: str) -> list[CrowdCall]:
    return session.scalars(select(CrowdCall).where(CrowdCall.kind == kind)).all()


# -- the provider and publishing ---------------------------------------------------------


def test_the_local_provider_is_one_of_the_providers_with_one_environment(settings, make_session):
    made = common.provider_for(settings, "local", sessions=make_session)
    assert isinstance(made, LocalProvider) and isinstance(made, CrowdProvider)
    assert (made.name, made.environment, made.balance_cents()) == ("local", "local", None)
    assert registry.platform("local").channel.value == "local"
    for environment in ("sandbox", "production"):
        with pytest.raises(common.CrowdServiceError, match="one environment") as refused:
            common.provider_for(settings, "local", environment, sessions=make_session)
        assert refused.value.status_code == 400
    with pytest.raises(common.CrowdServiceError, match="Prolific only"):
        common.provider_for(settings, "local", hits_per_participant=2, sessions=make_session)


def test_publish_records_the_posting_with_our_own_hit_ids_and_no_fee(
    session, make_session, settings, local
):
    study = lab_study(session)
    report = published(session, make_session, settings, local)

    assert (report.published, report.total, report.pending, report.warnings) == (4, 4, 0, [])
    posting = session.scalar(select(CrowdPosting))
    assert (posting.provider, posting.environment, posting.status) == (
        "local",
        "local",
        "published",
    )
    assert posting.external_id == report.external_id
    assert re.fullmatch(r"local-[0-9a-f]{12}", posting.external_id)
    hits = session.scalars(select(Hit.id).where(Hit.study_id == study.id)).all()
    units = dict(session.execute(select(CrowdHit.hit_id, CrowdHit.external_hit_id)).all())
    assert units == {h: common.hit_public_id(study, h) for h in hits}
    # 4 HITs x 1 replica x 40 cents, paid by the lab: no platform fee.
    cost = report.estimate
    assert (cost.rewards_cents, cost.fees_cents, cost.total_cents) == (160, 0, 160)
    assert cost.notes == (NO_FEE,)
    (event,) = audit(session, "crowd_published")
    assert event.detail["provider"] == "local" and event.detail["total"] == 4

    again = published(session, make_session, settings, local)
    assert (again.published, again.total) == (0, 4)
    assert session.scalar(select(func.count()).select_from(CrowdHit)) == 4


def test_a_lab_study_without_a_reward_publishes_for_volunteers(
    session, make_session, settings, local
):
    lab_study(session, reward_cents=0)
    report = published(session, make_session, settings, local)
    assert report.total == 4 and report.estimate.total_cents == 0
    assert session.scalar(select(CrowdPosting.settings))["reward_cents"] == 0


def test_a_study_not_open_to_annotators_is_not_published(session, make_session, settings, local):
    lab_study(session, build=False)
    with pytest.raises(common.CrowdServiceError, match="open it to annotators") as refused:
        published(session, make_session, settings, local)
    assert refused.value.status_code == 409
    assert session.scalar(select(func.count()).select_from(CrowdPosting)) == 0


# -- lab members, sync and the ledger ----------------------------------------------------


@pytest.fixture
def handed_in(session, make_session, settings, local):
    """Published (4 HITs of 2 replicas: work is left); three lab members each handed in
    one HIT through their link (the third missed the attention items); a fourth holds a
    lease."""
    study = lab_study(session, replicas=2)
    published(session, make_session, settings, local)
    people = links(session, settings, study, 4)
    leases = [work(session, settings, link, wrong=n == 2) for n, link in enumerate(people[:3])]
    held = work(session, settings, people[3], hand_in=False)
    session.expire_all()
    return study, people, leases, held


def test_a_lab_study_through_the_crowd_service(session, make_session, settings, local, handed_in):
    study, _, leases, held = handed_in
    a, b, c = (lease.public_id for lease in leases)

    # Before a sync the work is not the posting's yet: nothing is reviewed.
    with pytest.raises(common.CrowdServiceError, match="sync first") as refused:
        payments.approve(make_session, SLUG, local, a, by="cli")
    assert refused.value.status_code == 409 and calls(session, "approve") == []
    shown = overview.crowd_overview(session, study, "local", "local")
    assert shown.states == {"unconfirmed": 3} and shown.total_rows == 3

    report = sync.sync(make_session, settings, SLUG, local, by="cli")
    session.expire_all()
    assert (report.listed, report.confirmed, report.flagged) == (3, 3, [])
    shown = overview.crowd_overview(session, study, "local", "local")
    assert shown.states == {"to review": 3}
    assert {r.platform_id for r in shown.rows} == {a, b, c} and all(r.payable for r in shown.rows)
    assert session.get(Assignment, held.id).review_status is None  # not handed in

    # Approve twice: one ledger row, the second a no-op.
    first = payments.approve(make_session, SLUG, local, a, by="cli")
    second = payments.approve(make_session, SLUG, local, a, feedback="again", by="cli")
    session.expire_all()
    assert first.made and not second.made and second.detail == "already done"
    (call,) = calls(session, "approve")
    assert call.status == "ok" and call.by == "cli" and call.reason is None
    (event,) = audit(session, "crowd_approve")
    assert event.detail["outcome"] == "ok" and event.detail["assignment"] == a
    assert session.get(Assignment, leases[0].id).review_status is ReviewStatus.approved

    # Reject with feedback: kept on the call and in the audit log.
    with pytest.raises(common.CrowdServiceError, match="feedback"):
        payments.reject(make_session, SLUG, local, c, feedback="  ", by="cli")
    outcome = payments.reject(
        make_session, SLUG, local, c, feedback="Attention items missed", by="cli"
    )
    session.expire_all()
    assert outcome.made
    (rejection,) = calls(session, "reject")
    assert rejection.reason == "Attention items missed" and rejection.status == "ok"
    assert session.get(Assignment, leases[2].id).review_status is ReviewStatus.rejected
    with pytest.raises(common.CrowdServiceError, match="rejected") as refused:
        payments.approve(make_session, SLUG, local, c, by="cli")
    assert refused.value.status_code == 409

    # A sync later keeps our reviews (our store is the source of truth) and confirms no
    # work twice.
    again = sync.sync(make_session, settings, SLUG, local, by="cli")
    session.expire_all()
    assert (again.listed, again.confirmed, again.reviewed) == (3, 0, 0)
    assert overview.crowd_overview(session, study, "local", "local").states == {
        "approved": 1,
        "rejected": 1,
        "to review": 1,
    }

    # The bulk approval previews what is left, and makes exactly that (unpaced: no platform).
    plan = payments.preview_approve_all(make_session, SLUG, local, apply_exclusions=False)
    assert [i.public_id for i in plan.approve] == [b] and plan.reject == []
    done = payments.approve_all(make_session, settings, SLUG, local, approvals_seen=[b], by="cli")
    assert (done.approved, done.rejected, done.left) == (1, 0, 0)
    assert len(calls(session, "approve")) == 2


def test_a_bonus_retried_is_paid_once(session, make_session, settings, local, handed_in):
    """The ledger row was committed and the run died before the outcome: the next run
    finishes the same call; a third is a no-op."""
    _, _, leases, _ = handed_in
    sync.sync(make_session, settings, SLUG, local, by="cli")
    with unit_of_work(make_session) as s:
        posting = s.scalar(select(CrowdPosting))
        request = ledger.CallRequest(
            "bonus", assignment_id=leases[1].id, amount_cents=25, reason="Thanks"
        )
        token = ledger.begin_call(s, posting, request, by="cli").request_token
    retried = payments.bonus(
        make_session, SLUG, local, leases[1].public_id, 25, reason="Thanks", by="cli"
    )
    again = payments.bonus(
        make_session, SLUG, local, leases[1].public_id, 25, reason="Thanks", by="cli"
    )
    session.expire_all()
    assert retried.made and not again.made
    (call,) = calls(session, "bonus")
    assert (call.request_token, call.status, call.amount_cents) == (token, "ok", 25)
    assert session.get(Assignment, leases[1].id).bonus_cents == 25
    assert len(audit(session, "crowd_bonus")) == 1
    with pytest.raises(common.CrowdServiceError, match="another number"):
        payments.bonus(make_session, SLUG, local, leases[1].public_id, 30, reason="More", by="cli")
    more = payments.bonus(
        make_session, SLUG, local, leases[1].public_id, 30, reason="More", n=1, by="cli"
    )
    session.expire_all()
    assert more.made and session.get(Assignment, leases[1].id).bonus_cents == 55


def test_block_stops_future_leases_and_unblock_lets_them_work(
    session, make_session, settings, local, handed_in
):
    study, people, leases, _ = handed_in
    sync.sync(make_session, settings, SLUG, local, by="cli")
    member = session.get(Annotator, leases[0].annotator_id)
    # The Annotators page names lab members by label; their worker id works too.
    first = payments.block(
        make_session, SLUG, local, "lab member 1", reason="Clicks at random", by="cli"
    )
    again = payments.block(
        make_session, SLUG, local, member.external_id, reason="Clicks at random", by="cli"
    )
    session.expire_all()
    assert first.made and not again.made and len(calls(session, "block")) == 1
    member = session.get(Annotator, member.id)
    assert member.blocked and member.blocked_reason == "Clicks at random"
    (event,) = audit(session, "crowd_block")
    assert event.detail["worker"] == member.external_id and event.detail["outcome"] == "ok"
    assert (
        next_assignment(session, through(session, settings, people[0])).status is WorkStatus.blocked
    )
    assert (
        session.scalar(select(func.count()).where(Assignment.annotator_id == member.id)) == 1
    )  # no new lease

    # Unblocked on the Annotators page (outside the ledger): a block is made anew.
    admin.unblock(session, member, by="cli")
    session.flush()
    anew = payments.block(make_session, SLUG, local, "lab member 1", reason="Again", by="cli")
    session.expire_all()
    assert anew.made and session.get(Annotator, member.id).blocked
    assert len(calls(session, "block")) == 2

    unblocked = payments.unblock(make_session, SLUG, local, "lab member 1", by="cli")
    session.expire_all()
    assert unblocked.made and not session.get(Annotator, member.id).blocked
    work_now = next_assignment(session, through(session, settings, people[0]))
    assert work_now.status is WorkStatus.assigned
    for nobody in ("nobody", str(10**6)):
        with pytest.raises(common.CrowdServiceError, match="no local worker") as refused:
            payments.block(make_session, SLUG, local, nobody, reason="x", by="cli")
        assert refused.value.status_code == 404
    # A label two lab members share names neither: refused, nothing blocked.
    links(session, settings, study, 1, "twin")
    links(session, settings, study, 1, "twin")
    with pytest.raises(common.CrowdServiceError, match="2 annotators") as refused:
        payments.block(make_session, SLUG, local, "twin", reason="x", by="cli")
    assert refused.value.status_code == 400


def test_expire_closes_the_links_to_new_work_and_a_held_lease_is_still_handed_in(
    session, make_session, settings, local, handed_in
):
    study, people, _, held = handed_in
    newcomer = links(session, settings, study, 1)[0]
    outcome = payments.expire(make_session, SLUG, local, by="cli")
    again = payments.expire(make_session, SLUG, local, by="cli")
    session.expire_all()
    assert outcome.made and not again.made
    assert set(session.scalars(select(CrowdHit.status))) == {"expired"}
    assert session.scalar(select(CrowdPosting.status)) == "expired"
    assert len(calls(session, "expire")) == 1 and len(audit(session, "crowd_expire")) == 1

    assert (
        next_assignment(session, through(session, settings, newcomer)).status is WorkStatus.closed
    )
    # The fourth member's lease, taken before, is resumed and handed in.
    annotator = through(session, settings, people[3])
    resumed = next_assignment(session, annotator)
    assert resumed.status is WorkStatus.assigned and resumed.assignment.public_id == held.public_id
    submit(session, annotator, held.public_id, slots(session, held.hit_id), {})
    # Handed in, that member gets no new lease either.
    assert (
        next_assignment(session, through(session, settings, people[3])).status is WorkStatus.closed
    )

    # Publishing again reopens the links.
    published(session, make_session, settings, local)
    assert session.scalar(select(CrowdPosting.status)) == "published"
    assert (
        next_assignment(session, through(session, settings, newcomer)).status is WorkStatus.assigned
    )


# -- the CLI -----------------------------------------------------------------------------


def test_the_cli_runs_a_lab_study_with_provider_local(migrated_copy, monkeypatch):
    from typer.testing import CliRunner

    from app.cli import cli
    from app.db import build_engine

    on_file = migrated_copy.settings(base_url="https://ebc.example.org")
    engine = build_engine(on_file)
    make = make_sessionmaker(engine)
    for name, value in {
        "EBC_DATABASE_URL": migrated_copy.url,
        "EBC_ENV": "test",
        "EBC_BASE_URL": "https://ebc.example.org",
    }.items():
        monkeypatch.setenv(name, value)

    def ebc(*args: str):
        return CliRunner().invoke(cli, ["crowd", *args])

    try:
        with make() as s:
            lab_study(s)
            s.commit()

        out = ebc("publish", SLUG, "--provider", "local", "--yes", "--invites", "2")
        assert out.exit_code == 0, out.output
        assert "local (local): rewards $1.60, fees $0.00, total $1.60" in out.output
        assert "balance: not applicable" in out.output
        assert "published 4 now; 4 on local in all, 0 still to publish" in out.output
        printed = re.findall(r"^(invite \d),(https://ebc\.example\.org/a/\S+)$", out.output, re.M)
        assert [label for label, _ in printed] == ["invite 1", "invite 2"]

        with make() as s:
            lease = work(s, on_file, printed[0][1])
            s.commit()
        out = ebc("sync", SLUG, "--provider", "local")
        assert out.exit_code == 0 and "listed 1, confirmed 1" in out.output, out.output

        approve = ("approve", SLUG, "--provider", "local", "--assignment", lease.public_id)
        bonus = ("bonus", SLUG, "--provider", "local", "--assignment", lease.public_id,
                 "--cents", "25", "--reason", "Thanks")  # fmt: skip
        for args, said in (
            (approve, f"approved {lease.public_id}"),
            (approve, "already approved"),
            (bonus, "paid $0.25"),
            (bonus, "already paid"),
            (("block", SLUG, "--provider", "local", "--worker", "invite 2", "--reason", "Left"),
             "blocked invite 2"),
            (("balance", "--provider", "local"), "local (local) balance: not applicable"),
            (("expire", SLUG, "--provider", "local", "--yes"), "expired"),
        ):  # fmt: skip
            out = ebc(*args)
            assert out.exit_code == 0, out.output
            assert out.output.splitlines()[-1] == said

        with make() as s:
            (call,) = s.scalars(select(CrowdCall).where(CrowdCall.kind == "approve")).all()
            assert call.status == "ok" and call.by == "cli"
            assert s.scalar(select(Assignment.bonus_cents)) == 25
            blocked = s.scalar(select(Annotator).where(Annotator.label == "invite 2"))
            assert blocked.blocked
            assert s.scalar(select(CrowdPosting.status)) == "expired"

        for args, message in (
            (("publish", SLUG, "--provider", "mturk", "--invites", "1", "--yes"), "local channel"),
            (("sync", SLUG, "--provider", "local", "--production"), "one environment"),
            (("approve", SLUG, "--provider", "local", "--assignment", "nope"), "no assignment"),
        ):
            out = ebc(*args)
            assert out.exit_code == 1 and message in out.output, out.output
    finally:
        engine.dispose()


def test_the_cap_option_is_off_where_the_platform_has_no_cap_qualification(
    session, make_session, settings, local
):
    """The CLI asks for it by default and the dashboard's local form has no checkbox: both
    must store the same settings, or publishing again from the other surface is refused."""
    lab_study(session)
    published(session, make_session, settings, local, PublishOptions(cap_qualification=True))
    assert session.scalar(select(CrowdPosting.settings))["cap_qualification"] is False
    again = published(
        session, make_session, settings, local, PublishOptions(cap_qualification=False)
    )
    assert again.total == 4
