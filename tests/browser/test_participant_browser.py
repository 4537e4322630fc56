"""A participant's way through a study in a real browser (issue 33): consent, a HIT, its
comment, the end-of-study comment; on a desktop, on a phone and without JavaScript; the five
choices on one row, the deadline in the participant's time, the page signals.

Playwright driving Debian's Chromium (/usr/bin/chromium), as tests/browser/ does.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import select

from app.annotation.identities import invite_token
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import Annotator, Assignment, Judgment
from tests.hits.factory import annotator, make_study
from tests.hits.ratings_factory import make_ratings_study

CHROMIUM = "/usr/bin/chromium"
assert Path(CHROMIUM).exists(), "Chromium is missing: run `make browser` (apt-get install chromium)"
CONSENT = "We study how people guess words.\n\nYou may stop at any time; <b>nothing</b> is lost."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    port = _free_port()
    db = tmp_path_factory.mktemp("participants") / "ebc.db"
    settings = Settings(database_url=f"sqlite:///{db}", env="test")
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sm = make_sessionmaker(engine)
    with sm() as s, s.begin():
        # HITs of 11 texts, one per person (the cap): then the study's end for them.
        study = make_study(s, slug="consent", per_cell=30, lengths=(10,), min_ms_per_item=0)
        study.participants = {"consent": CONSENT, "comments": True}
        study.per_annotator_cap = 1
        links = [
            f"/a/{invite_token(settings.secret_key, annotator(s, study, str(i)))}" for i in range(4)
        ]
        rated = make_ratings_study(s, slug="rated", per_cell=10, min_seconds_per_item=0)
        rated.participants = {"consent": "Rate short texts.", "comments": True}
        rated_link = f"/a/{invite_token(settings.secret_key, annotator(s, rated, 'r'))}"
    uv = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if uv.started:
            break
        time.sleep(0.05)
    yield {"base": f"http://127.0.0.1:{port}", "links": links, "rated": rated_link, "sm": sm}
    uv.should_exit = True
    thread.join(10)
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


def _assignment(server, public_id) -> Assignment:
    with server["sm"]() as s:
        return s.scalar(select(Assignment).where(Assignment.public_id == public_id))


def _person(server, public_id) -> Annotator:
    with server["sm"]() as s:
        return s.get(Annotator, _assignment(server, public_id).annotator_id)


def _consent_then_hit(page, server, link) -> str:
    """Open the link: the consent page first (the HIT only after agreeing); the HIT's id."""
    page.goto(server["base"] + link)
    assert page.url.endswith("/consent")
    assert "<b>nothing</b>" in page.locator("#consent-text").inner_text()  # shown as text
    page.locator("#consent-accept").click()  # unticked: the browser's own check stops it
    assert page.url.endswith("/consent")
    page.locator("#agree").check()
    page.locator("#consent-accept").click()
    page.wait_for_selector("#hit-form")
    assert "you agreed to take part" in page.content()
    return page.locator("#hit-form input[name=assignment]").get_attribute("value")


def _answer(page, *, tap: bool = False) -> None:
    items = page.locator("fieldset.item")
    for i in range(items.count()):
        option = items.nth(i).locator("label.option").nth(1)
        option.tap() if tap else option.click()


def _answer_and_comment(page, comment: str, *, tap: bool = False) -> None:
    _answer(page, tap=tap)
    page.locator("#hit-comment summary").click()
    page.locator("#f-comment").fill(comment)
    page.locator("#send").click()


def _end_comment(page, text: str) -> None:
    page.wait_for_selector("#study-comment")
    page.locator("#f-study-comment").fill(text)
    page.locator("#send-comment").click()
    page.wait_for_selector("text=your comment was saved")


def test_desktop_consent_hit_comment_signals_and_layout(server, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="Asia/Tokyo")
    page = context.new_page()
    link = server["links"][0]
    public_id = _consent_then_hit(page, server, link)
    # the five words of a text on one row ("none" on its own below)
    words = page.locator("fieldset.item").first.locator("label.option:not(.none)")
    tops = {round(words.nth(i).bounding_box()["y"]) for i in range(words.count())}
    assert words.count() == 5 and len(tops) == 1
    # the deadline in the participant's own time (Tokyo is UTC+9), not in UTC
    deadline = page.locator("#deadline")
    assert "(your time)" in deadline.inner_text() and "UTC" not in deadline.inner_text()
    lease = _assignment(server, public_id)
    local = (lease.expires_at + timedelta(hours=9)).strftime("%-I:%M")
    assert local in deadline.inner_text()
    # leaving the page on the first text: the window loses the focus for a while
    page.evaluate("window.dispatchEvent(new Event('blur'))")
    page.wait_for_timeout(300)
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    _answer(page)
    # then, on the last text, the tab hidden for a while (another tab in front)
    for state in ("hidden", "visible"):
        page.evaluate(
            "s => { Object.defineProperty(document, 'visibilityState', "
            "{configurable: true, get: () => s}); "
            "document.dispatchEvent(new Event('visibilitychange')); }",
            state,
        )
        page.wait_for_timeout(200)
    _answer_and_comment(page, "Text 3 was <odd>")
    _end_comment(page, "Thank you, it was fun")
    stored = _assignment(server, public_id)
    assert stored.comment == "Text 3 was <odd>"
    away, ms = stored.page_signals["0"]
    assert away == 1 and 250 <= ms < 10_000
    hidden, hidden_ms = stored.page_signals["10"]
    assert hidden == 1 and 150 <= hidden_ms < 10_000
    assert all(v == [0, 0] for k, v in stored.page_signals.items() if k not in ("0", "10"))
    person = _person(server, public_id)
    assert person.consented_at is not None and person.comment == "Thank you, it was fun"
    context.close()


def test_phone_consent_hit_comment(server, browser):
    context = browser.new_context(
        viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    link = server["links"][1]
    public_id = _consent_then_hit(page, server, link)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator("#instructions").get_attribute("open") is not None  # the first HIT
    _answer_and_comment(page, "fine on a phone", tap=True)
    _end_comment(page, "small screen ok")
    assert _assignment(server, public_id).comment == "fine on a phone"
    context.close()


def test_without_javascript(server, browser):
    context = browser.new_context(java_script_enabled=False, timezone_id="Asia/Tokyo")
    page = context.new_page()
    link = server["links"][2]
    public_id = _consent_then_hit(page, server, link)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", page.locator("#deadline").inner_text())
    _answer_and_comment(page, "no scripts here")
    _end_comment(page, "done without JavaScript")
    stored = _assignment(server, public_id)
    assert stored.comment == "no scripts here"
    assert stored.page_signals is None  # no script ran: no signals, not zeros
    with server["sm"]() as s:
        n = len(s.scalars(select(Judgment).where(Judgment.assignment_id == stored.id)).all())
    assert n == 11
    context.close()


def test_phone_instructions_collapsed_after_the_first_hit(server, browser):
    """A ratings study: consent, the first pair's steps with the instructions open, the
    later ones and the next HIT's with them collapsed; the comment box at the HIT's last
    step."""
    context = browser.new_context(
        viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(server["base"] + server["rated"])
    assert page.url.endswith("/consent")
    page.locator("#agree").check()
    page.locator("#consent-accept").click()
    page.wait_for_selector("#rating-form")
    assert page.locator("#instructions").get_attribute("open") is not None
    public_id = page.locator("#rating-form input[name=assignment]").get_attribute("value")
    steps, second = 0, False
    while page.locator("#rating-form").count():
        if page.locator("#rating-form input[name=assignment]").get_attribute("value") != public_id:
            # the second HIT: the instructions collapsed (a tap opens them)
            assert page.locator("#instructions").get_attribute("open") is None
            second = True
            break
        if page.locator("#rating-form input[name=position]").get_attribute("value") != "0":
            assert page.locator("#instructions").get_attribute("open") is None
        if page.locator("#hit-comment").count():
            page.locator("#hit-comment summary").tap()
            page.locator("#f-comment").fill("a rated comment")
        page.locator("label.point").nth(2).tap()
        with page.expect_navigation():
            page.locator("#send").tap()
        steps += 1
    assert steps >= 2 and second
    assert _assignment(server, public_id).comment == "a rated comment"
    context.close()
