"""A ratings HIT in a real browser (Playwright driving Debian's Chromium): keyboard only,
without JavaScript on a phone, the quality locked once the context is shown.

Needs `apt-get install -y chromium` and the `playwright` package (the system Chromium,
never `playwright install`).
"""

from __future__ import annotations

import threading
import time
from http.server import HTTPServer

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import select

from app.annotation.identities import invite_token
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import Assignment, HitPosition, Item, Rating
from tests.browser.test_annotate_browser import CHROMIUM, _free_port, _MTurkStandIn
from tests.hits.factory import annotator
from tests.hits.ratings_factory import make_ratings_study

KINDS = ("data", "model", "attention")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    turk_port, port = _free_port(), _free_port()
    turk = HTTPServer(("127.0.0.1", turk_port), _MTurkStandIn)
    threading.Thread(target=turk.serve_forever, daemon=True).start()
    db = tmp_path_factory.mktemp("rate-browser") / "ebc.db"
    settings = Settings(database_url=f"sqlite:///{db}", env="test")
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sm = make_sessionmaker(engine)
    with sm() as s, s.begin():
        study = make_ratings_study(s, slug="rate", per_cell=15, min_seconds_per_item=0)
        study.channels = {
            **study.channels,
            "mturk": {"enabled": True, "submit_origins": [f"http://127.0.0.1:{turk_port}"]},
        }
        links = [
            f"/a/{invite_token(settings.secret_key, annotator(s, study, str(i)))}" for i in range(2)
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


def _ratings(server, public_id):
    with server["sm"]() as s:
        q = select(Rating).join(Assignment, Assignment.id == Rating.assignment_id)
        return s.scalars(q.where(Assignment.public_id == public_id).order_by(Rating.position)).all()


def _pair(server, public_id, position):
    with server["sm"]() as s:
        return s.scalar(
            select(Item)
            .join(HitPosition, HitPosition.item_id == Item.id)
            .join(Assignment, Assignment.hit_id == HitPosition.hit_id)
            .where(Assignment.public_id == public_id, HitPosition.position == position)
        )


def _field(page, name):
    return page.locator(f"#rating-form input[name={name}]").get_attribute("value")


def _no_kind(page):
    html = page.content().lower()
    for kind in KINDS:
        assert f">{kind}<" not in html and f'"{kind}"' not in html and f" {kind} " not in html


def test_keyboard_only_over_mturk_then_external_submit(server, browser):
    page = browser.new_page()
    page.goto(
        f"{server['base']}/mturk/rate?assignmentId=MT-R1&hitId=H1&workerId=WORKER1"
        f"&turkSubmitTo={server['turk']}"
    )
    public_id = _field(page, "assignment")
    for n in range(11):
        assert page.locator("#context").count() == 0  # step 1: the continuation alone
        assert _field(page, "step") == "quality" and _field(page, "position") == str(n)
        _no_kind(page)
        page.keyboard.press("3")
        page.keyboard.press(".")  # 3 and a half
        assert "Chosen: 3.5" in page.locator("#rating-status").inner_text()
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert page.locator("#context").is_visible()  # step 2: the context, now
        assert "3.5" in page.locator("#locked").inner_text()
        page.keyboard.press("4")
        if n < 10:
            with page.expect_navigation():
                page.keyboard.press("Enter")
    page.keyboard.press("Enter")  # the last: stored, then posted on to MTurk by itself
    page.wait_for_selector("text=MTurk stand-in: received")
    path, fields = _MTurkStandIn.received[-1]
    assert path == "/mturk/externalSubmit" and fields["assignmentId"] == ["MT-R1"]
    rows = _ratings(server, public_id)
    assert [(r.quality, r.consistency) for r in rows] == [(3.5, 4.0)] * 11
    assert all(r.quality_ms is not None and r.consistency_ms is not None for r in rows)
    assert fields["assignment"] == [public_id] and fields["q0"] == ["3.5"]
    assert fields["c10"] == ["4"]
    page.close()


def test_without_javascript_on_a_phone_and_the_quality_stays_locked(server, browser):
    context = browser.new_context(
        java_script_enabled=False,
        viewport={"width": 360, "height": 740},
        is_mobile=True,
        has_touch=True,
        device_scale_factor=2,
    )
    page = context.new_page()
    link = server["base"] + server["links"][0]
    page.goto(link)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box = page.locator("label.point").first.bounding_box()
    assert box["height"] >= 40 and box["width"] >= 44  # a finger-sized target per point
    public_id = _field(page, "assignment")
    pair = _pair(server, public_id, 0)
    html = page.content()
    assert pair.continuation in html and pair.words not in html and pair.prompt not in html
    # Keyboard without JavaScript: the first point has the focus, the arrows move along
    # the scale, Enter sends the form.
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.locator("#context").inner_text() == f"{pair.prompt} {pair.words}"
    assert "2.5" in page.locator("#locked").inner_text()
    assert _ratings(server, public_id)[0].quality == 2.5
    # Back to the quality page? The page is never cached: the step due comes again.
    page.go_back()
    assert _field(page, "step") == "consistency" and page.locator("#locked").is_visible()
    # A forged second quality is refused, and nothing changes.
    forged = {
        "assignment": public_id,
        "position": "0",
        "step": "quality",
        "rating": "5",
        "ms": "",
    }
    refused = context.request.post(f"{link}/submit", form=forged, max_redirects=0)
    assert refused.status == 409 and "can no longer be changed" in refused.text()
    assert [(r.quality, r.consistency) for r in _ratings(server, public_id)] == [(2.5, None)]
    # The rest by touch.
    for _ in range(21):
        page.locator("label.point", has_text="1.5").tap()
        with page.expect_navigation():
            page.locator("#send").tap()
    page.wait_for_selector("text=your answers were saved")
    rows = _ratings(server, public_id)
    assert len(rows) == 11 and rows[0].consistency == 1.5 and rows[10].quality == 1.5
    assert all(r.quality_ms is None and r.consistency_ms is None for r in rows)
    context.close()
