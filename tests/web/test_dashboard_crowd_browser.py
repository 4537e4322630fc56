"""The Crowd page in a real browser (Playwright driving Debian's Chromium) against the local
stand-in MTurk endpoint: publish after the cost preview, sync, tick an assignment for a
bonus (its checkbox sits in the table, outside the bonus form), pay it, approve all."""

from __future__ import annotations

import threading
import time

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import select

from app.auth.service import create_user
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import CrowdHit, Study
from tests.browser.test_annotate_browser import CHROMIUM, _free_port
from tests.crowd.mturk_standin import Server
from tests.web.accounts import PASSWORD
from tests.web.test_dashboard_browser import SHOTS
from tests.web.test_dashboard_crowd import SLUG, crowd_study, do_work


@pytest.fixture
def server(tmp_path, monkeypatch):
    import uvicorn

    for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with Server() as mturk:
        port = _free_port()
        settings = Settings(
            database_url=f"sqlite:///{tmp_path / 'ebc.db'}",
            env="test",
            # MTurk wants an https ExternalQuestion URL; Chromium keeps the Secure session
            # cookie on http://127.0.0.1 (a secure context).
            base_url="https://ebc.example.org",
            mturk_endpoint_url=mturk.url,
            crowd_calls_per_second=100,
        )
        engine = build_engine(settings)
        with engine.begin() as conn:
            upgrade(conn)
        sm = make_sessionmaker(engine)
        with sm() as s:
            create_user(s, "ada", PASSWORD, is_admin=True)
            crowd_study(s)  # commits
        uv = uvicorn.Server(
            uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=uv.run, daemon=True)
        thread.start()
        for _ in range(200):
            if uv.started:
                break
            time.sleep(0.05)
        yield {"base": f"http://127.0.0.1:{port}", "sm": sm, "mturk": mturk.standin}
        uv.should_exit = True
        thread.join(10)
        engine.dispose()


def test_publish_sync_bonus_and_approve_in_a_browser(server):
    base, platform = server["base"], server["mturk"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if "Refused" in m.text else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        page.goto(f"{base}/dashboard/studies/{SLUG}")
        page.fill("#username", "ada")
        page.fill("#password", PASSWORD)
        page.keyboard.press("Enter")
        page.click("#crowd-link")
        page.wait_for_selector("#not-published")
        page.fill("#f-reward", "50")
        page.click("#publish-preview")
        page.wait_for_selector("#estimate")
        assert page.inner_text("#estimate-total") == "$2.40"
        assert platform.hits == {}
        page.screenshot(path=str(SHOTS / "crowd-publish.png"), full_page=True)
        page.click("#publish-now")
        page.wait_for_selector("text=4 HITs published on MTurk sandbox now")
        assert len(platform.hits) == 4

        # A worker does a HIT through the annotation code the MTurk pages use.
        with server["sm"]() as s:
            hit = s.scalars(select(CrowdHit.external_hit_id).order_by(CrowdHit.id)).first()
            study = s.scalar(select(Study).where(Study.slug == SLUG))
            do_work(s, study, "W0", platform.add_assignment(hit, "W0"), hit)
        page.click("#sync-now")
        page.wait_for_selector("text=1 confirmed now")
        page.check("#assignments input[type=checkbox]")
        page.fill("#f-bonus", "25")
        page.fill("#f-bonus-reason", "Thanks for careful work")
        page.click("#bonus-preview")
        page.wait_for_selector("#bonus-lines")
        assert page.inner_text("#bonus-total") == "$0.30"
        page.click("#bonus-now")
        page.wait_for_selector("text=Paid 1 bonuses of $0.25")
        page.click("#approve-preview")
        page.wait_for_selector("#approve-summary")
        page.click("#approve-now")
        page.wait_for_selector("text=Approved 1, rejected 0")
        assert page.inner_text("#assignments td.review").startswith("approved")
        assert page.inner_text("#assignments td.bonus") == "$0.25"
        page.screenshot(path=str(SHOTS / "crowd.png"), full_page=True)
        browser.close()
    assert len(platform.paid_bonuses) == 1
    assert [a["AssignmentStatus"] for a in platform.assignments.values()] == ["Approved"]
    assert not errors
