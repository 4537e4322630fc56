"""The annotator's page in a real browser (Playwright driving Debian's Chromium).

Needs `apt-get install -y chromium` and the `playwright` package (never
`playwright install`: the system Chromium is used). Skipped when either is missing.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import select

from app.annotation.identities import invite_token
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import Assignment, Judgment
from tests.hits.factory import annotator, make_study

CHROMIUM = "/usr/bin/chromium"
# `make test` installs Debian's Chromium; a missing browser is a failure, not a skip.
assert Path(CHROMIUM).exists(), "Chromium is missing: run `make browser` (apt-get install chromium)"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _MTurkStandIn(BaseHTTPRequestHandler):
    """Records what the browser posts to {turkSubmitTo}/mturk/externalSubmit."""

    received: list[tuple[str, dict]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        _MTurkStandIn.received.append((self.path, parse_qs(body)))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html><body><h1>MTurk stand-in: received</h1></body></html>")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    turk_port, port = _free_port(), _free_port()
    turk = HTTPServer(("127.0.0.1", turk_port), _MTurkStandIn)
    threading.Thread(target=turk.serve_forever, daemon=True).start()
    db = tmp_path_factory.mktemp("browser") / "ebc.db"
    settings = Settings(database_url=f"sqlite:///{db}", env="test")
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sm = make_sessionmaker(engine)
    with sm() as s, s.begin():
        study = make_study(s, slug="web", per_cell=50, lengths=(10,), min_ms_per_item=0)
        study.channels = {
            **study.channels,
            "mturk": {"enabled": True, "submit_origins": [f"http://127.0.0.1:{turk_port}"]},
        }
        links = [
            f"/a/{invite_token(settings.secret_key, annotator(s, study, str(i)))}" for i in range(6)
        ]
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
        "links": links,
        "sm": sm,
        "turk": f"http://127.0.0.1:{turk_port}",
    }
    uv.should_exit = True
    thread.join(10)
    turk.shutdown()
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


def _judgments(server, link_index=None, public_id=None):
    with server["sm"]() as s:
        q = select(Judgment).join(Assignment, Assignment.id == Judgment.assignment_id)
        if public_id:
            q = q.where(Assignment.public_id == public_id)
        return s.scalars(q.order_by(Judgment.position)).all()


def _public_id(page):
    return page.locator("#hit-form input[name=assignment]").get_attribute("value")


def test_keyboard_only(server, browser):
    page = browser.new_page()
    page.goto(server["base"] + server["links"][0])
    public_id = _public_id(page)
    n = page.locator("fieldset.item").count()
    page.keyboard.press("Enter")  # incomplete: refused on the page, focus moves to an open item
    assert "Please answer every text" in page.locator("#answered").inner_text()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowUp")
    for i in range(n):
        page.keyboard.press("0" if i == 0 else "2")
    assert "All 11 answered" in page.locator("#answered").inner_text()
    page.keyboard.press("Enter")
    page.wait_for_selector("text=your answers were saved")
    assert "HIT 2 of at most 200" in page.content()
    js = _judgments(server, public_id=public_id)
    assert len(js) == n and js[0].chosen_rank is None and js[1].option == 1
    assert all(j.client_ms is not None for j in js)
    page.close()


def test_mouse(server, browser):
    page = browser.new_page()
    page.goto(server["base"] + server["links"][1])
    public_id = _public_id(page)
    items = page.locator("fieldset.item")
    for i in range(items.count()):
        items.nth(i).locator("label.option").nth(i % 6).click()
    page.click("#send")
    page.wait_for_selector("text=your answers were saved")
    assert len(_judgments(server, public_id=public_id)) == items.count()
    page.close()


def test_without_javascript(server, browser):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(server["base"] + server["links"][2])
    public_id = _public_id(page)
    items = page.locator("fieldset.item")
    for i in range(items.count()):
        items.nth(i).locator("input[type=radio]").nth(5).check()
    page.click("#send")
    page.wait_for_selector("text=your answers were saved")
    js = _judgments(server, public_id=public_id)
    assert len(js) == items.count() and all(j.client_ms is None and j.d == 1.0 for j in js)
    context.close()


def test_phone_viewport(server, browser):
    context = browser.new_context(
        viewport={"width": 360, "height": 740},
        is_mobile=True,
        has_touch=True,
        device_scale_factor=2,
    )
    page = context.new_page()
    page.goto(server["base"] + server["links"][3])
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box = page.locator("label.option").first.bounding_box()
    assert box["height"] >= 40 and box["width"] > 250  # one big target per row
    public_id = _public_id(page)
    items = page.locator("fieldset.item")
    for i in range(items.count()):
        items.nth(i).locator("label.option").nth(2).tap()
    page.locator("#send").tap()
    page.wait_for_selector("text=your answers were saved")
    assert len(_judgments(server, public_id=public_id)) == items.count()
    context.close()


def test_mturk_preview_then_submit_then_external_submit(server, browser):
    page = browser.new_page()
    base = f"{server['base']}/mturk/web?hitId=H7&turkSubmitTo={server['turk']}"
    page.goto(base + "&assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE")
    assert page.locator("#preview").is_visible()
    assert page.locator("input[type=radio]").first.is_disabled()
    page.goto(base + "&assignmentId=MT-A1&workerId=WORKER1")
    public_id = _public_id(page)
    n = page.locator("fieldset.item").count()
    for _ in range(n):
        page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.wait_for_selector("text=MTurk stand-in: received")
    path, fields = _MTurkStandIn.received[-1]
    assert path == "/mturk/externalSubmit" and fields["assignmentId"] == ["MT-A1"]
    stored = _judgments(server, public_id=public_id)
    assert len(stored) == n  # stored before the post
    # What MTurk keeps (its answer XML) can restore ours: our assignment id and the slots.
    assert fields["assignment"] == [public_id] and fields["ebc"] == ["stored"]
    slots = {k: v for k, v in fields.items() if k not in ("assignmentId", "assignment", "ebc")}
    assert slots == {f"o{j.position}": [str(j.option)] for j in stored}
    page.close()


def test_a_second_tab_learns_that_the_first_answers_were_kept(server, browser):
    context = browser.new_context()
    first, second = context.new_page(), context.new_page()
    for page in (first, second):
        page.goto(server["base"] + server["links"][4])
    public_id = _public_id(first)
    assert _public_id(second) == public_id  # the same HIT in both tabs
    n = first.locator("fieldset.item").count()
    for page, key in ((first, "1"), (second, "2")):
        page.bring_to_front()
        page.locator("fieldset.item input[type=radio]").first.focus()
        for _ in range(n):
            page.keyboard.press(key)
    first.keyboard.press("Enter")
    first.wait_for_selector("text=your answers were saved")
    second.keyboard.press("Enter")
    second.wait_for_selector("#kept")
    text = second.locator("#kept").inner_text()
    assert "answers sent first were kept" in text and "were not saved" in text
    # The kept answers are shown: slot 1 checked everywhere, nothing can be changed.
    checked = second.locator("input[type=radio]:checked")
    assert checked.count() == n and all(
        checked.nth(i).get_attribute("value") == "0" and checked.nth(i).is_disabled()
        for i in range(n)
    )
    assert {j.option for j in _judgments(server, public_id=public_id)} == {0}
    context.close()
