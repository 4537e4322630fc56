"""The dashboard's Crowd page, driven with the test client against local stand-ins of the
platforms: MTurk's requester API (tests/crowd/mturk_standin.py, a real boto3 client with
dummy credentials) and Prolific's REST API (the stand-in of
tests/crowd/platforms/prolific/test_provider.py, served over HTTP), on studies built with
`build_hits`, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import lxml.html
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.annotation.identities import crowd_annotator
from app.annotation.leases import next_assignment
from app.crowd.platforms.mturk.formats import (
    QUAL_APPROVAL_RATE,
    QUAL_LOCALE,
    QUAL_MASTERS,
    QUAL_NUMBER_APPROVED,
)
from app.main import create_app
from app.models import (
    Assignment,
    AuditEvent,
    Channel,
    CrowdCall,
    CrowdHit,
    CrowdPosting,
    HitPosition,
    Item,
    ReviewStatus,
)
from app.studies.service import share_study
from app.studytypes.nextword.annotation import submit
from app.web import dashboard_crowd
from tests.crowd.mturk_standin import Server
from tests.crowd.platforms.prolific.test_provider import TOKEN, FakeProlific
from tests.hits.factory import make_study
from tests.web.accounts import csrf_of, login

SLUG = "crowd"
PAGE = f"/dashboard/studies/{SLUG}/crowd"
SUBMIT_TO = "https://workersandbox.mturk.com"
WORKSPACE = "a" * 24


@pytest.fixture(autouse=True)
def aws_env(monkeypatch, tmp_path):
    """Dummy AWS credentials, and no credentials or config of the machine's."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def mturk():
    with Server() as server:
        yield server.standin, server.url


class _ProlificHandler(BaseHTTPRequestHandler):
    """Prolific's stand-in (an httpx handler) answering real HTTP requests."""

    protocol_version = "HTTP/1.1"
    fake: FakeProlific

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = httpx.Request(
            self.command,
            f"http://{self.headers['Host']}{self.path}",
            headers=dict(self.headers.items()),
            content=self.rfile.read(length),
        )
        response = self.fake.handle(request)
        body = response.read()
        self.send_response(response.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _serve

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def prolific():
    fake = FakeProlific()
    handler = type("Handler", (_ProlificHandler,), {"fake": fake})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(  # a short poll: `shutdown` waits for the next one
        target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{httpd.server_address[1]}/api/v1/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def settings(migrated_db, mturk, prolific):
    return migrated_db.settings(
        base_url="https://ebc.example.org",
        mturk_endpoint_url=mturk[1],
        mturk_max_attempts=3,
        crowd_calls_per_second=100,
        prolific_api_token=TOKEN,
        prolific_api_url=prolific[1],
        prolific_workspace_id=WORKSPACE,
    )


@pytest.fixture
def client(settings, connection):
    """The app over https (its session cookie is Secure with an https base URL)."""
    app = create_app(settings, bind=connection)
    with TestClient(app, base_url="https://testserver") as c:
        yield c


def crowd_study(session, **fields):
    """4 HITs of 10 items from build_hits, open to MTurk workers in the sandbox, 50 cents."""
    study = make_study(session, slug=SLUG, lengths=(10,), per_cell=20, reward_cents=50, **fields)
    study.channels = {
        **study.channels,
        "mturk": {"enabled": True, "sandbox": True, "submit_origins": []},
    }
    session.commit()
    return study


def do_work(session, study, worker: str, external: str, hit: str, *, wrong=False):
    """An MTurk worker takes and submits an assignment, as the MTurk pages do: the model's
    top-1 everywhere, or (`wrong`) a wrong answer on the attention items."""
    annotator = crowd_annotator(session, study, Channel.mturk, worker)
    lease = next_assignment(
        session,
        annotator,
        external_assignment_id=external,
        external_hit_id=hit,
        submit_to=SUBMIT_TO,
        serve=True,
    ).assignment
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order, Item.is_attention)
        .join(Item, Item.id == HitPosition.item_id)
        .where(HitPosition.hit_id == lease.hit_id)
    ).all()
    chosen = {p: order.index(1 if (att and wrong) else 0) for p, order, att in rows}
    submit(session, annotator, lease.public_id, chosen, {})
    session.commit()
    return lease


def url(path: str = "", **query) -> str:
    query = {"provider": "mturk", "environment": "sandbox", **query}
    return f"{PAGE}{path}?" + "&".join(f"{k}={v}" for k, v in query.items())


def post(client, path: str, data: dict | None = None, **query):
    return client.post(
        url(path, **query), data={"csrf_token": client.csrf, **(data or {})}, follow_redirects=False
    )


def notices(client, **query) -> str:
    page = client.get(url(**query))
    assert page.status_code == 200
    return " ".join(text for _, text in page.context["notices"])


def published(client, platform, data: dict | None = None) -> str:
    """Publish in the sandbox; the notices of the page it leads to."""
    r = post(client, "/publish", {"reward_cents": "50", "lifetime_days": "7", **(data or {})})
    assert r.status_code == 303, r.text
    assert r.headers["location"] == url()
    return notices(client)


def worked(client, session, study, platform, workers: int, *, wrong: tuple[int, ...] = ()):
    """Published, done by `workers` MTurk workers (one HIT each) and synced."""
    published(client, platform)
    hits = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()
    leases = []
    for n, hit in enumerate(hits[:workers]):
        external = platform.add_assignment(hit, f"W{n}")
        leases.append(do_work(session, study, f"W{n}", external, hit, wrong=n in wrong))
    assert post(client, "/sync").status_code == 303
    assert "Synced" in notices(client)
    session.expire_all()
    return leases


def events(session, action: str) -> list[AuditEvent]:
    return session.scalars(
        select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.id)
    ).all()


def count(session, model) -> int:
    return session.scalar(select(func.count()).select_from(model))


# -- the page and access ---------------------------------------------------------------


def test_the_study_page_links_to_the_crowd_page(logged_in, session):
    crowd_study(session)
    page = logged_in.get(f"/dashboard/studies/{SLUG}")
    assert f'href="{PAGE}"' in page.text
    crowd = logged_in.get(PAGE)
    assert crowd.status_code == 200 and crowd.template.name == "crowd_study.html"
    assert crowd.context["target"].label == "MTurk sandbox"
    assert 'id="not-published"' in crowd.text and 'id="publish-form"' in crowd.text
    assert logged_in.get(f"{PAGE}?provider=nobody").status_code == 400
    assert logged_in.get(f"{PAGE}?environment=live").status_code == 400
    assert logged_in.get("/dashboard/studies/nope/crowd").status_code == 404
    r = logged_in.get(f"{PAGE}?provider=prolific&environment=sandbox")
    assert r.status_code == 400 and "Prolific has no sandbox" in r.text


def test_viewers_see_the_page_but_every_preview_and_post_is_refused(
    client, session, admin, researcher, mturk
):
    platform, _ = mturk
    study = crowd_study(session)
    share_study(session, study, researcher, "view")
    session.commit()
    assert login(client, "bob").status_code == 303
    page = client.get(PAGE)
    assert page.status_code == 200 and not page.context["can_manage"]
    assert 'id="publish-form"' not in page.text and 'id="sync-now"' not in page.text
    client.csrf = csrf_of(client.get("/dashboard").text)
    for path in ("/publish", "/approve", "/bonus"):
        assert client.get(url(path)).status_code == 403, path
    for path in ("/publish", "/sync", "/approve", "/bonus", "/reject"):
        r = post(client, path, {"reward_cents": "50", "confirm": SLUG, "submission": "A1"})
        assert r.status_code == 403, path
        assert "manage access" in r.text
    # A study the researcher may not see at all is not there.
    make_study(session, slug="other", lengths=(10,), per_cell=5)
    session.commit()
    assert client.get("/dashboard/studies/other/crowd").status_code == 404
    assert platform.calls == [] and count(session, CrowdPosting) == 0


def test_every_post_needs_the_csrf_token(logged_in, session, mturk):
    platform, _ = mturk
    crowd_study(session)
    for path in ("/publish", "/sync", "/approve", "/bonus", "/reject"):
        for data in ({}, {"csrf_token": "forged"}):
            r = logged_in.post(url(path), data={"reward_cents": "50", **data})
            assert r.status_code == 403 and "CSRF" in r.text, path
    assert platform.calls == [] and count(session, CrowdPosting) == 0


# -- publishing ------------------------------------------------------------------------


def test_the_cost_and_balance_are_shown_before_publishing(logged_in, session, admin, mturk):
    platform, _ = mturk
    crowd_study(session)
    preview = logged_in.get(
        url("/publish", reward_cents=50, min_approval_rate=95, locales="us+gb", masters="true")
    )
    assert preview.status_code == 200 and preview.template.name == "crowd_publish.html"
    cost = preview.context["cost"]
    # 4 HITs x 1 assignment x 50 cents; 25% fee (20% + 5% Masters) = 12.5 -> 13 cents each.
    assert (cost.rewards_cents, cost.fees_cents, cost.total_cents) == (200, 52, 252)
    assert "$2.52" in preview.text and "Masters workers: MTurk adds 5%" in preview.text
    assert preview.context["balance"] == 1_000_000 and "$10,000.00" in preview.text
    assert [op for op, _ in platform.calls] == ["GetAccountBalance"]  # nothing published
    assert count(session, CrowdPosting) == 0

    # The confirmation carries the options the preview showed.
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', preview.text))
    assert form["locales"] == "us gb" and form["masters"] == "true"
    r = post(logged_in, "/publish", {k: v for k, v in form.items() if k != "csrf_token"})
    assert r.status_code == 303
    assert "4 HITs published on MTurk sandbox now; 4 there in all." in notices(logged_in)
    assert len(platform.hits) == 4
    (hit_type,) = platform.hit_types.values()
    assert hit_type["Reward"] == "0.50" and len(hit_type["QualificationRequirements"]) == 3
    page = logged_in.get(url())
    assert page.context["overview"].posting["status"] == "published"
    assert 'id="posting-status">published<' in page.text
    (event,) = events(session, "crowd_published")
    assert event.user_id == admin.id and event.detail["total"] == 4

    # Published: other options are refused (the HITs keep theirs), nothing changes.
    r = post(logged_in, "/publish", {"reward_cents": "60"})
    assert r.status_code == 409 and "other settings" in r.text
    assert len(platform.hits) == 4


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"reward_cents": "0"}, "between 1 cent"),
        ({"reward_cents": "abc"}, "whole number"),
        ({"lifetime_days": "inf"}, "a number such as"),
        ({"locales": "USA"}, "country codes"),
        ({"title": "x" * 129}, "malformed"),
    ],
)
def test_bad_publish_options_are_refused_and_change_nothing(
    logged_in, session, mturk, data, message
):
    platform, _ = mturk
    crowd_study(session)
    for r in (
        logged_in.get(url("/publish"), params=data),
        post(logged_in, "/publish", data),
    ):
        assert r.status_code == 400 and message in r.text, r.text
    assert count(session, CrowdPosting) == 0
    assert [op for op, _ in platform.calls if op != "GetAccountBalance"] == []


def test_production_needs_the_setting_and_a_typed_confirmation(logged_in, session, mturk):
    platform, _ = mturk
    study = crowd_study(session)
    study.channels = {**study.channels, "mturk": {**study.channels["mturk"], "sandbox": False}}
    session.commit()
    live = {"environment": "production"}
    page = logged_in.get(url(**live))
    assert page.status_code == 200 and 'id="production-off"' in page.text
    # Off on this server: refused whatever is typed.
    assert logged_in.get(url("/publish", **live)).status_code == 403
    r = post(logged_in, "/publish", {"reward_cents": "50", "confirm": SLUG}, **live)
    assert r.status_code == 403 and "EBC_MTURK_PRODUCTION" in r.text

    logged_in.app.state.settings = logged_in.app.state.settings.model_copy(
        update={"mturk_production": True}
    )
    preview = logged_in.get(url("/publish", reward_cents=50, **live))
    assert preview.status_code == 200 and 'id="live-warning"' in preview.text
    assert 'name="confirm"' in preview.text
    for typed in ("", "yes", "CROWD"):
        r = post(logged_in, "/publish", {"reward_cents": "50", "confirm": typed}, **live)
        assert r.status_code == 400 and "type the study" in r.text
    assert count(session, CrowdPosting) == 0 and platform.hits == {}
    # The sandbox form never asks for it.
    assert 'name="confirm"' not in logged_in.get(url("/publish", reward_cents=50)).text

    r = post(logged_in, "/publish", {"reward_cents": "50", "confirm": SLUG}, **live)
    assert r.status_code == 303 and r.headers["location"] == url(**live)
    assert "4 HITs published on MTurk production" in notices(logged_in, **live)
    posting = session.scalar(select(CrowdPosting))
    assert posting.environment == "production" and len(platform.hits) == 4
    # Paying (or rejecting) in production needs the confirmation too.
    for path in ("/approve", "/bonus", "/reject"):
        data = {"bonus": "x:0", "amount_cents": "5", "reason": "x", "submission": "A1"}
        r = post(logged_in, path, data, **live)
        assert r.status_code == 400 and "type the study" in r.text, path
    assert count(session, CrowdCall) == 0


# -- sync, approval, bonuses -----------------------------------------------------------


def test_publish_then_sync_shows_each_assignments_state_and_the_flagged_ones(
    logged_in, session, admin, mturk
):
    platform, _ = mturk
    study = crowd_study(session)
    published(logged_in, platform)
    hits = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()
    leases = [
        do_work(session, study, f"W{n}", platform.add_assignment(hit, f"W{n}"), hit)
        for n, hit in enumerate(hits[:2])
    ]
    platform.add_assignment(hits[2], "W9")  # on MTurk, never stored here
    before = logged_in.get(url())
    assert before.context["overview"].states == {"unconfirmed": 2}
    assert before.text.count("no: sync first") == 2 and 'id="synced-at">never<' in before.text

    r = post(logged_in, "/sync")
    assert r.status_code == 303
    text = notices(logged_in)
    assert "3 submissions listed, 2 confirmed now" in text and "1 flagged" in text
    page = logged_in.get(url())
    o = page.context["overview"]
    assert o.states == {"to review": 2} and o.posting["synced_at"] is not None
    assert {r.worker: r.review_status for r in o.rows} == {
        "W0": ReviewStatus.pending,
        "W1": ReviewStatus.pending,
    }
    assert [(f.worker, f.recovered) for f in o.flagged] == [("W9", False)]
    assert 'id="flagged"' in page.text and "NOT stored" in page.text
    assert leases[0].external_assignment_id in page.text
    (event,) = events(session, "crowd_synced")
    assert event.user_id == admin.id and event.detail["listed"] == 3
    assert events(session, "crowd_submission_flagged")[0].user_id == admin.id


def test_bulk_approval_previews_who_is_rejected_then_approves_once(
    logged_in, session, admin, mturk
):
    platform, _ = mturk
    study = crowd_study(session)
    leases = worked(logged_in, session, study, platform, 3, wrong=(2,))

    plain = logged_in.get(url("/approve"))
    assert plain.status_code == 200 and plain.template.name == "crowd_approve.html"
    assert len(plain.context["plan"].approve) == 3 and plain.context["plan"].reject == []
    assert 'name="reject"' not in plain.text
    ruled = logged_in.get(url("/approve", apply_exclusions="true"))
    plan = ruled.context["plan"]
    assert [i.worker for i in plan.reject] == ["W2"] and "attention" in plan.reject[0].reasons[0]
    assert 'id="to-reject"' in ruled.text and leases[2].external_assignment_id in ruled.text
    assert platform.count("ApproveAssignment") == platform.count("RejectAssignment") == 0

    # The confirmation carries exactly the reviews the preview showed.
    form = as_data(form_of(ruled.text, "approve-confirm"))
    form.pop("csrf_token")
    assert form["reject"] == [leases[2].public_id] and form["apply_exclusions"] == ["true"]
    assert sorted(form["approve"]) == sorted(a.public_id for a in leases[:2])
    # Rejections need feedback; a plan other than the preview's is refused: nothing done.
    assert post(logged_in, "/approve", form).status_code == 400
    stale = post(logged_in, "/approve", {**form, "reject": "someone", "reject_feedback": "No"})
    assert stale.status_code == 409 and "preview again" in stale.text
    # A confirmation that would approve the one the preview showed to reject: refused.
    turned = {**form, "approve": [leases[2].public_id], "reject": [], "reject_feedback": "No"}
    assert post(logged_in, "/approve", turned).status_code == 409
    assert platform.count("ApproveAssignment") == platform.count("RejectAssignment") == 0

    r = post(logged_in, "/approve", {**form, "reject_feedback": "Attention checks failed"})
    assert r.status_code == 303
    assert "Approved 2, rejected 1 on MTurk sandbox; 0 had been done before." in notices(logged_in)
    statuses = {a["WorkerId"]: a["AssignmentStatus"] for a in platform.assignments.values()}
    assert statuses == {"W0": "Approved", "W1": "Approved", "W2": "Rejected"}
    o = logged_in.get(url()).context["overview"]
    assert o.states == {"approved": 2, "rejected": 1}

    # The same confirmation again: a no-op, on the platform and here.
    again = post(logged_in, "/approve", {**form, "reject_feedback": "Attention checks failed"})
    assert again.status_code == 303
    assert "Approved 0, rejected 0" in notices(logged_in)
    assert platform.count("ApproveAssignment") == 2 and platform.count("RejectAssignment") == 1
    assert 'id="nothing-to-review"' in logged_in.get(url("/approve")).text
    approvals = events(session, "crowd_approve")
    assert len(approvals) == 2 and {e.user_id for e in approvals} == {admin.id}
    assert events(session, "crowd_reject")[0].user_id == admin.id
    assert set(session.scalars(select(CrowdCall.by))) == {"ada"}


def test_a_bonus_is_previewed_with_its_cost_then_paid_once(logged_in, session, admin, mturk):
    platform, _ = mturk
    study = crowd_study(session)
    leases = worked(logged_in, session, study, platform, 2)
    ids = [lease.public_id for lease in leases]

    preview = logged_in.get(
        url("/bonus"), params={"assignment": ids, "amount_cents": 25, "reason": "Thanks!"}
    )
    assert preview.status_code == 200 and preview.template.name == "crowd_bonus.html"
    plan = preview.context["plan"]
    assert [(line.worker, line.n, line.fee_cents) for line in plan.lines] == [
        ("W0", 0, 5),
        ("W1", 0, 5),
    ]
    assert (plan.bonuses_cents, plan.fees_cents, plan.total_cents) == (50, 10, 60)
    assert "$0.60" in preview.text and "$10,000.00" in preview.text
    assert platform.count("SendBonus") == 0

    lines = re.findall(r'name="bonus" value="([^"]+)"', preview.text)
    form = {"bonus": lines, "amount_cents": "25", "reason": "Thanks!"}
    assert post(logged_in, "/bonus", form).status_code == 303
    assert "Paid 2 bonuses of $0.25 on MTurk sandbox; 0 had been paid before." in notices(logged_in)
    assert len(platform.paid_bonuses) == 2
    assert {b["BonusAmount"] for b in platform.paid_bonuses} == {"0.25"}
    # The confirmation sent again (a reload, a double click) pays nothing twice.
    assert post(logged_in, "/bonus", form).status_code == 303
    assert "Paid 0 bonuses" in notices(logged_in) and len(platform.paid_bonuses) == 2
    session.expire_all()
    assert [session.get(Assignment, lease.id).bonus_cents for lease in leases] == [25, 25]
    page = logged_in.get(url())
    assert page.context["overview"].bonus_cents == 50 and "$0.25" in page.text
    # A further bonus is a new one (the next number).
    again = logged_in.get(url("/bonus"), params={"assignment": ids[0], "amount_cents": 10,
                                                  "reason": "More"})  # fmt: skip
    assert [line.n for line in again.context["plan"].lines] == [1]
    paid = events(session, "crowd_bonus")
    assert len(paid) == 2 and {e.user_id for e in paid} == {admin.id}
    assert {e.detail["amount_cents"] for e in paid} == {25}


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({"amount_cents": 0}, 400, "malformed"),
        ({"reason": " "}, 400, "needs a reason"),
        ({"assignment": "nobody"}, 404, "no mturk assignment"),
        ({"assignment": None}, 400, "at least one"),
    ],
)
def test_bad_bonuses_are_refused_and_pay_nothing(
    logged_in, session, mturk, params, status, message
):
    platform, _ = mturk
    study = crowd_study(session)
    (lease,) = worked(logged_in, session, study, platform, 1)
    query = {"assignment": lease.public_id, "amount_cents": 25, "reason": "Thanks", **params}
    query = {k: v for k, v in query.items() if v is not None}
    preview = logged_in.get(url("/bonus"), params=query)
    assert preview.status_code == status and message in preview.text, preview.text
    form = {k: v for k, v in query.items() if k != "assignment"}
    if "assignment" in query:
        form["bonus"] = f"{query['assignment']}:0"
    assert post(logged_in, "/bonus", form).status_code == status
    assert platform.count("SendBonus") == 0 and count(session, CrowdCall) == 0


def test_work_not_confirmed_by_the_platform_gets_no_bonus(logged_in, session, mturk):
    platform, _ = mturk
    study = crowd_study(session)
    published(logged_in, platform)
    hit = session.scalars(select(CrowdHit.external_hit_id)).first()
    lease = do_work(session, study, "W5", platform.add_assignment(hit, "W5"), hit)
    page = logged_in.get(url())
    assert 'form="bonus-form"' not in page.text  # no box to tick before a sync
    r = logged_in.get(
        url("/bonus"), params={"assignment": lease.public_id, "amount_cents": 5, "reason": "x"}
    )
    assert r.status_code == 409 and "sync first" in r.text
    r = post(logged_in, "/bonus", {"bonus": f"{lease.public_id}:0", "amount_cents": 5,
                                   "reason": "x"})  # fmt: skip
    assert r.status_code == 409 and platform.count("SendBonus") == 0


# -- platform failures -----------------------------------------------------------------


def test_a_platform_error_is_shown_with_its_message_never_a_500(logged_in, session, mturk):
    platform, _ = mturk
    study = crowd_study(session)
    platform.faults["GetAccountBalance"] = ["fault"] * 3
    preview = logged_in.get(url("/publish", reward_cents=50))
    assert preview.status_code == 200 and preview.context["balance"] is None
    assert "did not give the balance: " in preview.text and "internal error" in preview.text

    # Publishing fails at the HIT type: the message is shown and recorded on the posting.
    platform.faults["CreateHITType"] = ["fault"] * 3
    r = post(logged_in, "/publish", {"reward_cents": "50"})
    assert r.status_code == 303
    page = logged_in.get(url())
    notice = " ".join(text for kind, text in page.context["notices"] if kind == "error")
    assert "MTurk sandbox refused or failed" in notice and "internal error" in notice
    assert 'id="posting-error"' in page.text and platform.hits == {}
    # Nothing is lost: publishing again goes through.
    published(logged_in, platform)
    assert len(platform.hits) == 4

    hits = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()
    lease = do_work(session, study, "W0", platform.add_assignment(hits[0], "W0"), hits[0])
    platform.faults["ListAssignmentsForHIT"] = ["fault"] * 3
    assert post(logged_in, "/sync").status_code == 303
    assert "internal error" in notices(logged_in)
    assert post(logged_in, "/sync").status_code == 303  # the fault is spent: it syncs
    assert "1 confirmed now" in notices(logged_in)

    # An approval that fails is shown on the page and on the assignment's row.
    platform.faults["ApproveAssignment"] = ["fault"] * 3
    assert post(logged_in, "/approve", {"approve": lease.public_id}).status_code == 303
    page = logged_in.get(url())
    assert "internal error" in " ".join(text for _, text in page.context["notices"])
    (row,) = page.context["overview"].rows
    assert row.review_status is ReviewStatus.failed and "internal error" in row.review_error
    assert 'class="error small">approve: ' in page.text
    assert post(logged_in, "/approve", {"approve": lease.public_id}).status_code == 303  # retried
    session.expire_all()
    assert session.get(Assignment, lease.id).review_status is ReviewStatus.approved
    assert platform.count("ApproveAssignment") == 4


def test_sync_before_any_publish_is_refused(logged_in, session, mturk):
    crowd_study(session)
    r = post(logged_in, "/sync")
    assert r.status_code == 404 and "never published" in r.text
    assert mturk[0].calls == []


# -- Prolific --------------------------------------------------------------------------


def test_prolific_shows_its_cost_and_balance_and_needs_the_confirmation(
    logged_in, session, prolific
):
    fake, _ = prolific
    study = crowd_study(session)
    study.channels = {
        **study.channels,
        "prolific": {"enabled": True, "completion_code": "C0DE1234"},
    }
    session.commit()
    page = logged_in.get(f"{PAGE}?provider=prolific")
    assert page.status_code == 200 and page.context["target"].label == "Prolific"
    assert 'name="masters"' not in page.text  # MTurk's options only on MTurk

    preview = logged_in.get(f"{PAGE}/publish?provider=prolific&reward_cents=50")
    assert preview.status_code == 200
    cost = preview.context["cost"]
    assert cost.rewards_cents == 200 and "Prolific platform fee" in preview.text
    assert preview.context["balance"] == 81_250 and "812.50" in preview.text
    assert 'name="confirm"' in preview.text  # Prolific has no sandbox: real money

    r = post(logged_in, "/publish", {"reward_cents": "50"}, provider="prolific",
             environment="production")  # fmt: skip
    assert r.status_code == 400 and "type the study" in r.text
    assert fake.studies == {}
    r = post(logged_in, "/publish", {"reward_cents": "50", "confirm": SLUG},
             provider="prolific", environment="production")  # fmt: skip
    assert r.status_code == 303
    text = notices(logged_in, provider="prolific", environment="production")
    assert "published on Prolific" in text, text
    (made,) = fake.studies.values()
    assert made["status"] == "ACTIVE" and made["completion_codes"][0]["code"] == "C0DE1234"

    refused = {"error": {"status": 403, "title": "Forbidden", "detail": "Not your workspace."}}
    fake.fail("GET", f"workspaces/{WORKSPACE}/balance/", httpx.Response(403, json=refused))
    preview = logged_in.get(f"{PAGE}/publish?provider=prolific&reward_cents=50")
    assert preview.status_code == 200 and "did not give the balance" in preview.text
    assert "Not your workspace." in preview.text


def test_prolific_without_a_token_is_refused(logged_in, session, prolific):
    crowd_study(session)
    logged_in.app.state.settings = logged_in.app.state.settings.model_copy(
        update={"prolific_api_token": None}
    )
    page = logged_in.get(f"{PAGE}?provider=prolific")
    assert page.status_code == 200 and 'id="prolific-off"' in page.text
    r = logged_in.get(f"{PAGE}/publish?provider=prolific")
    assert r.status_code == 400 and "EBC_PROLIFIC_API_TOKEN" in r.text


# -- the publish form, bulk approval in batches, notices ---------------------------------


def form_of(page: str, form_id: str) -> list[tuple[str, str]]:
    """What a browser sends for the form as the page shows it (ticked boxes only)."""
    return list(lxml.html.fromstring(page).get_element_by_id(form_id).form_values())


def as_data(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Form pairs as the test client posts them."""
    data: dict[str, list[str]] = {}
    for name, value in pairs:
        data.setdefault(name, []).append(value)
    return data


def test_the_publish_form_starts_from_the_study_file_and_sends_only_changes(
    logged_in, session, mturk
):
    platform, _ = mturk
    study = crowd_study(session)
    given = {"min_approval_rate": 97, "min_approved": 500, "locales": ["GB"], "masters": True}
    study.channels = {**study.channels, "mturk": {**study.channels["mturk"], **given}}
    session.commit()
    form = form_of(logged_in.get(url()).text, "publish-form")
    shown = dict(form)
    assert (shown["min_approval_rate"], shown["min_approved"]) == ("97", "500")
    assert (shown["locales"], shown["masters"]) == ("GB", "true")

    # Masters unticked and the approval rate emptied: those two change, the rest is the file's.
    changed = [(k, "" if k == "min_approval_rate" else v) for k, v in form if k != "masters"]
    asked = logged_in.get(f"{PAGE}/publish", params=changed).context["asked"]
    assert (asked["min_approval_rate"], asked["min_approved"]) == (None, 500)
    assert (asked["locales"], asked["masters"]) == (["GB"], False)

    preview = logged_in.get(f"{PAGE}/publish", params=form)
    assert "approval rate at least 97%; at least 500 approved; countries GB; Masters only" in (
        preview.text
    )
    r = logged_in.post(url("/publish"), data=as_data(form_of(preview.text, "publish-confirm")))
    assert r.status_code == 200 and "4 HITs published" in r.text
    (hit_type,) = platform.hit_types.values()
    kept = {q["QualificationTypeId"]: q for q in hit_type["QualificationRequirements"]}
    assert kept[QUAL_APPROVAL_RATE]["IntegerValues"] == [97]
    assert kept[QUAL_NUMBER_APPROVED]["IntegerValues"] == [500]
    assert kept[QUAL_LOCALE]["LocaleValues"] == [{"Country": "GB"}]
    assert QUAL_MASTERS["sandbox"] in kept


def test_prolific_publishes_the_bundle_the_form_asks_for_and_pins_its_study(
    logged_in, session, prolific
):
    fake, _ = prolific
    study = crowd_study(session)
    study.channels = {**study.channels, "prolific": {"enabled": True, "completion_code": "C0DE"}}
    session.commit()
    query = "?provider=prolific&environment=production"
    form = dict(form_of(logged_in.get(PAGE + query).text, "publish-form"))
    assert form["hits_per_participant"] == "1" and "masters" not in form
    bad = logged_in.get(f"{PAGE}/publish", params={**form, "hits_per_participant": "0"})
    assert bad.status_code == 400 and "hits_per_participant" in bad.text

    form |= {"reward_cents": "50", "hits_per_participant": "2"}
    preview = logged_in.get(f"{PAGE}/publish", params=form)
    # 4 HITs of one assignment, 2 a place: 2 places of 2 x 50 cents.
    assert preview.context["cost"].rewards_cents == 200 and "2 HITs per participant" in preview.text
    confirm = dict(form_of(preview.text, "publish-confirm")) | {"confirm": SLUG}
    r = logged_in.post(f"{PAGE}/publish{query}", data=confirm, follow_redirects=False)
    assert r.status_code == 303
    (made,) = fake.studies.values()
    assert (made["total_available_places"], made["reward"]) == (2, 100)
    session.expire_all()
    assert study.channels["prolific"]["study_id"] == made["id"]
    page = logged_in.get(PAGE + query)
    assert 'name="hits_per_participant" inputmode="numeric" value="2" readonly' in page.text
    assert events(session, "crowd_prolific_study_set")[0].detail["study_id"] == made["id"]


def test_bulk_approval_goes_in_batches_and_says_how_many_are_left(
    logged_in, session, mturk, monkeypatch
):
    platform, _ = mturk
    monkeypatch.setattr(dashboard_crowd, "APPROVE_BATCH", 2)
    study = crowd_study(session)
    worked(logged_in, session, study, platform, 3)
    preview = logged_in.get(url("/approve"))
    assert 'id="approve-batches"' in preview.text and "Review the first 2 of 3" in preview.text
    form = as_data(form_of(preview.text, "approve-confirm"))

    first = logged_in.post(url("/approve"), data=form, follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == url("/approve")
    rest = logged_in.get(first.headers["location"])
    notice = " ".join(text for _, text in rest.context["notices"])
    assert "Approved 2, rejected 0" in notice and "1 left: confirm again to continue." in notice
    assert len(rest.context["plan"].approve) == 1 and platform.count("ApproveAssignment") == 2

    last = logged_in.post(url("/approve"), data=as_data(form_of(rest.text, "approve-confirm")))
    assert last.status_code == 200 and last.template.name == "crowd_study.html"
    assert "Approved 1, rejected 0" in " ".join(text for _, text in last.context["notices"])
    # The first confirmation sent again (a reload): nothing is approved twice.
    again = logged_in.post(url("/approve"), data=form)
    assert "Approved 0, rejected 0" in " ".join(text for _, text in again.context["notices"])
    assert platform.count("ApproveAssignment") == 3
    assert last.context["overview"].states == {"approved": 3}


def test_two_notices_in_a_row_are_both_shown(logged_in, session, mturk):
    platform, _ = mturk
    crowd_study(session)
    published(logged_in, platform)
    for _ in range(2):
        assert post(logged_in, "/sync").status_code == 303
    shown = [text for _, text in logged_in.get(url()).context["notices"]]
    assert len(shown) == 2 and all(text.startswith("Synced: ") for text in shown)


def test_a_flagged_submission_never_stored_is_listed_apart_and_rejected_from_the_preview(
    logged_in, session, admin, mturk
):
    """A worker who posted straight to MTurk: never approved in bulk; the preview lists it
    with a form that rejects it by its MTurk id (else MTurk pays it by itself)."""
    platform, _ = mturk
    study = crowd_study(session)
    worked(logged_in, session, study, platform, 1)
    hit = session.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).all()[1]
    junk = platform.add_assignment(hit, "WBAD")
    assert post(logged_in, "/sync").status_code == 303
    assert "1 flagged" in notices(logged_in)

    preview = logged_in.get(url("/approve"))
    assert [f.platform_id for f in preview.context["plan"].flagged] == [junk]
    assert 'id="flagged-never-stored"' in preview.text
    assert junk not in dict(form_of(preview.text, "approve-confirm")).values()
    form = preview.text.split('class="reject-flagged"')[1]
    assert f'name="submission" value="{junk}"' in form

    assert post(logged_in, "/reject", {"submission": junk, "feedback": ""}).status_code == 400
    r = post(logged_in, "/reject", {"submission": junk, "feedback": "No work was done."})
    assert r.status_code == 303
    assert f"Rejected {junk} on MTurk sandbox." in notices(logged_in)
    assert platform.assignments[junk]["AssignmentStatus"] == "Rejected"
    assert 'id="flagged-never-stored"' not in logged_in.get(url("/approve")).text
    assert events(session, "crowd_reject")[0].user_id == admin.id
    # Anything but a flagged submission of this posting is not found: nothing done.
    r = post(logged_in, "/reject", {"submission": "A" * 30, "feedback": "No."})
    assert r.status_code == 404 and platform.count("RejectAssignment") == 1
