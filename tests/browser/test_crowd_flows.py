"""A crowd worker's whole path in a real browser (Playwright driving Debian's Chromium),
with the platforms played by local stand-ins:

- MTurk: the study published through the crowd service on the requester API's stand-in
  (tests/crowd/mturk_standin.py); the worker previews, accepts, answers; our server stores
  the answers and the browser posts them to `externalSubmit` (a recorder standing in for
  MTurk's site). That post, as MTurk's answer XML, brings the submission back by a sync
  when our stored copy is lost.
- Prolific: the study published through the service on Prolific's API stand-in
  (tests/crowd/prolific_standin.py); the participant opens the `external_study_url` it
  received with Prolific's placeholders filled in, does a bundle of HITs and sees the
  completion code (and follows the study's redirect back to the panel).
"""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import delete, select, update

from app.config import Settings
from app.crowd import common, publishing, sync
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import Assignment, AssignmentStatus, CrowdHit, Hit, Judgment, Study
from tests.browser.test_annotate_browser import CHROMIUM, _free_port
from tests.crowd.mturk_standin import Server, answer_xml
from tests.crowd.prolific_standin import FakeProlific
from tests.hits.factory import make_study

BASE_URL = "https://ebc.example.org"  # what the platforms are given (MTurk frames https only)
CODE = "C0DE1234"


class _Recorder(BaseHTTPRequestHandler):
    """MTurk's externalSubmit and Prolific's completion page: records what arrives."""

    received: list[tuple[str, str, dict[str, list[str]]]] = []

    def _answer(self, fields: dict[str, list[str]]) -> None:
        path = urlsplit(self.path).path
        if path != "/favicon.ico":  # the browser's own request
            type(self).received.append((self.command, path, fields))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html><body><h1>Stand-in: received</h1></body></html>")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        self._answer(parse_qs(body))

    def do_GET(self):
        self._answer(parse_qs(urlsplit(self.path).query))

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    recorder = type("Recorder", (_Recorder,), {"received": []})
    outside = HTTPServer(("127.0.0.1", _free_port()), recorder)
    threading.Thread(target=outside.serve_forever, daemon=True).start()
    outside_url = f"http://127.0.0.1:{outside.server_address[1]}"
    tmp = tmp_path_factory.mktemp("crowd-flows")
    with pytest.MonkeyPatch.context() as env, Server() as mturk:
        # Dummy AWS credentials, and none of the machine's.
        for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t")):
            env.setenv(name, value)
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "none"))
        env.setenv("AWS_CONFIG_FILE", str(tmp / "none"))
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        env.delenv("AWS_PROFILE", raising=False)
        settings = Settings(
            database_url=f"sqlite:///{tmp / 'ebc.db'}",
            env="test",
            base_url=BASE_URL,
            mturk_endpoint_url=mturk.url,
            crowd_calls_per_second=100,
        )
        engine = build_engine(settings)
        with engine.begin() as conn:
            upgrade(conn)
        sm = make_sessionmaker(engine)
        with sm() as s, s.begin():
            turk = make_study(
                s, slug="turk", lengths=(10,), per_cell=20, reward_cents=50, min_ms_per_item=0
            )
            turk.channels = {
                **turk.channels,
                "mturk": {"enabled": True, "sandbox": True, "submit_origins": [outside_url]},
            }
            for slug, redirect in (("panel", None), ("panel-back", outside_url)):
                study = make_study(
                    s, slug=slug, lengths=(10,), per_cell=20, reward_cents=90, min_ms_per_item=0
                )
                panel = {"enabled": True, "completion_code": CODE}
                if redirect:
                    panel["redirect_url"] = f"{redirect}/submissions/complete?cc={CODE}"
                study.channels = {**study.channels, "prolific": panel}
        port = _free_port()
        uv = uvicorn.Server(
            uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        for _ in range(200):
            if uv.started:
                break
            time.sleep(0.05)
        yield {
            "base": f"http://127.0.0.1:{port}",
            "settings": settings,
            "sm": sm,
            "mturk": mturk.standin,
            "outside": outside_url,
            "received": recorder.received,
        }
        uv.should_exit = True
        thread.join(10)
        outside.shutdown()
        engine.dispose()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield b
        b.close()


def _answer_the_hit(page) -> None:
    """Answer every text with the mouse (a different slot on each) and send."""
    items = page.locator("fieldset.item")
    for i in range(items.count()):
        items.nth(i).locator("label.option").nth(i % 6).click()
    page.click("#send")


def _stored(sm, public_id: str) -> list[tuple]:
    """The answers stored for an assignment, as the results read them."""
    with sm() as s:
        rows = s.execute(
            select(
                Judgment.position,
                Judgment.item_id,
                Judgment.option,
                Judgment.chosen_rank,
                Judgment.chosen_word,
                Judgment.d,
            )
            .join(Assignment, Assignment.id == Judgment.assignment_id)
            .where(Assignment.public_id == public_id)
            .order_by(Judgment.position)
        ).all()
    return [tuple(r) for r in rows]


def _lose_the_store(sm, public_id: str) -> None:
    """Our store of the submission never happened: no judgments, the lease still open, the
    HIT's counters as they were (the reverse of `app.annotation.submissions.submit`)."""
    with sm() as s, s.begin():
        a = s.scalar(select(Assignment).where(Assignment.public_id == public_id))
        s.execute(delete(Judgment).where(Judgment.assignment_id == a.id))
        a.status, a.submitted_at, a.late = AssignmentStatus.leased, None, False
        s.execute(
            update(Hit)
            .where(Hit.id == a.hit_id)
            .values(leased_count=Hit.leased_count + 1, submitted_count=Hit.submitted_count - 1)
        )


def test_mturk_submission_posted_to_mturk_is_recovered_from_its_answer_xml(server, browser):
    sm, settings, platform = server["sm"], server["settings"], server["mturk"]
    provider = common.provider_for(settings, "mturk")
    report = publishing.publish(sm, settings, "turk", provider, by="cli")
    assert report.total == 4
    with sm() as s:
        hit = s.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).first()
    external = platform.add_assignment(hit, "WORKER7")  # MTurk's id once the worker accepts
    page = browser.new_page()
    url = f"{server['base']}/mturk/turk?hitId={hit}&turkSubmitTo={server['outside']}"
    page.goto(url + "&assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE")
    assert page.locator("#preview").is_visible()
    assert page.locator("input[type=radio]").first.is_disabled()

    page.goto(f"{url}&assignmentId={external}&workerId=WORKER7")
    public_id = page.locator("#hit-form input[name=assignment]").get_attribute("value")
    _answer_the_hit(page)
    page.wait_for_selector("text=Stand-in: received")
    page.close()
    method, path, fields = server["received"][-1]
    assert (method, path) == ("POST", "/mturk/externalSubmit")
    stored = _stored(sm, public_id)
    assert len(stored) == 11  # stored before the post (10 texts and an attention item)
    # The post carries our assignment id and the screen slots stored, nothing else.
    assert fields.pop("assignmentId") == [external] and fields.pop("ebc") == ["stored"]
    assert fields.pop("assignment") == [public_id]
    assert {f"o{position}": [str(option)] for position, _, option, *_ in stored} == fields

    # MTurk keeps the post (but assignmentId) as the answer XML; our copy is lost.
    posted = {"ebc": "stored", "assignment": public_id} | {k: v[0] for k, v in fields.items()}
    platform.assignments[external]["Answer"] = answer_xml(posted)
    _lose_the_store(sm, public_id)
    assert _stored(sm, public_id) == []

    synced = sync.sync(sm, settings, "turk", provider, by="cli")
    assert (synced.listed, synced.recovered) == (1, 1)
    assert [(f.external_worker_id, f.recovered) for f in synced.flagged] == [("WORKER7", True)]
    assert _stored(sm, public_id) == stored  # the same choices, ranks, words and d
    with sm() as s:
        a = s.scalar(select(Assignment).where(Assignment.public_id == public_id))
        assert a.status is AssignmentStatus.submitted and not a.unverified
        assert (a.external_assignment_id, a.external_hit_id) == (external, hit)


@pytest.mark.parametrize("slug", ["panel", "panel-back"])
def test_prolific_participant_from_the_study_url_to_the_completion_code(server, browser, slug):
    sm, settings = server["sm"], server["settings"]
    fake = FakeProlific()
    provider = fake.provider(hits_per_participant=2)
    assert publishing.publish(sm, settings, slug, provider, by="cli").total == 1
    ((study_id, made),) = fake.studies.items()
    assert made["status"] == "ACTIVE" and made["total_available_places"] == 2

    # Prolific fills in its placeholders and sends the participant to the study's URL.
    submission = fake.add_submission(study_id, status="ACTIVE")
    participant = fake.submissions[submission]["participant_id"]
    ids = {"PROLIFIC_PID": participant, "STUDY_ID": study_id, "SESSION_ID": submission}
    landed = re.sub(r"\{\{%(\w+)%\}\}", lambda m: ids[m[1]], made["external_study_url"])
    assert landed.startswith(f"{BASE_URL}/p/{slug}?") and "{{" not in landed
    page = browser.new_page()
    page.goto(server["base"] + landed.removeprefix(BASE_URL))
    assert page.locator(".finish").count() == 0  # no code before any work
    for _ in range(2):  # the bundle of one place
        _answer_the_hit(page)
        page.wait_for_selector("text=your answers were saved")
    assert page.inner_text(".finish strong.code") == CODE
    back = page.locator(".finish a")
    if slug == "panel":
        assert back.count() == 0
    else:
        assert back.inner_text() == "Return to the panel"
        back.click()
        page.wait_for_selector("text=Stand-in: received")
        assert server["received"][-1] == ("GET", "/submissions/complete", {"cc": [CODE]})
    page.close()

    # The participant entered the code: Prolific lists the submission, the bundle counts.
    fake.submissions[submission]["status"] = "AWAITING REVIEW"
    report = sync.sync(sm, settings, slug, provider, by="cli")
    assert (report.listed, report.confirmed, report.flagged) == (1, 2, [])
    with sm() as s:
        study = s.scalar(select(Study).where(Study.slug == slug))
        assert study.channels["prolific"]["study_id"] == study_id
        done = s.scalars(
            select(Assignment.external_session_id)
            .join(Hit, Hit.id == Assignment.hit_id)
            .where(Hit.study_id == study.id, Assignment.status == AssignmentStatus.submitted)
        ).all()
    assert done == [submission, submission]
