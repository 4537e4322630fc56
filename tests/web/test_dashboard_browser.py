"""The dashboard in a real browser (Playwright driving Debian's Chromium): log in, create a
study from the form, see its page update live; screenshots of the main pages go to
var/screenshots/ (CI artifacts, not committed). The full loop with a worker and
annotators is the demo's test."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import select

from app.auth.service import create_user
from app.config import ROOT, Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import Study, StudyStatus
from app.precompute.service import claim_shard, complete_shard
from tests.browser.test_annotate_browser import CHROMIUM, _free_port
from tests.factories import StudyFactory
from tests.web.accounts import PASSWORD, write_dataset

SHOTS = ROOT / "var" / "screenshots"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import uvicorn

    port = _free_port()
    tmp = tmp_path_factory.mktemp("dashboard")
    settings = Settings(database_url=f"sqlite:///{tmp / 'ebc.db'}", env="test", data_dir=tmp)
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sm = make_sessionmaker(engine)
    with sm() as s, s.begin():
        create_user(s, "ada", PASSWORD, is_admin=True)
        f = StudyFactory(s, "paper", lengths=(10, 20))
        for a in range(3):
            who = f.annotator(f"annotator {a}")
            for length in (10, 20):
                items = [f.item("data", length) for _ in range(2)]
                items += [f.item("model", length) for _ in range(2)]
                f.answer(who, f.hit(items), [0, (a + 1) % 5, None, a % 5])
        f.study.status = StudyStatus.collecting
    uv = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    for _ in range(200):
        if uv.started:
            break
        time.sleep(0.05)
    dataset = write_dataset(tmp / "wiki.txt")  # planning precompute checks it
    yield {"base": f"http://127.0.0.1:{port}", "sm": sm, "dataset": str(dataset)}
    uv.should_exit = True
    thread.join(10)
    engine.dispose()


@pytest.fixture(scope="module")
def page():
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = b.new_context(viewport={"width": 1280, "height": 900})
        pg = context.new_page()
        errors: list[str] = []
        # CSP violations ("Refused to ...") and script errors; a 400 form page is expected.
        pg.on("console", lambda m: errors.append(m.text) if "Refused" in m.text else None)
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.console_errors = errors
        yield pg
        b.close()


def _shot(page, name: str) -> None:
    page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def test_login_create_a_study_and_watch_it(server, page):
    base = server["base"]
    page.goto(base + "/dashboard")
    assert "/login" in page.url
    _shot(page, "login")
    page.fill("#username", "ada")
    page.fill("#password", PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_selector("h1:text('Studies')")
    _shot(page, "studies")

    page.click("text=New study")
    page.fill("#f-slug", "Bad Slug")
    page.fill("#f-title", "GPT-2 on wiki-103")
    page.fill("#f-model\\.name", "gpt2")
    page.fill("#f-dataset\\.path", server["dataset"])
    page.fill("#f-prefix_lengths", "10, 20")
    page.fill("#f-items_per_cell", "20")
    page.click("#create")
    page.wait_for_selector("#e-slug")
    assert "lowercase letters" in page.inner_text("#e-slug")
    _shot(page, "new-study-errors")
    page.fill("#f-slug", "wiki")
    page.click("#create")
    page.wait_for_selector("text=Study wiki created")
    assert page.inner_text("#study-status") == "draft"

    page.click("#plan-precompute")
    page.wait_for_selector("text=Precompute job")
    assert page.inner_text("#study-status") == "precomputing"
    # A worker finishes a shard: the page shows it without a reload.
    with server["sm"]() as s, s.begin():
        study_id = s.scalar(select(Study.id).where(Study.slug == "wiki"))
        shard = claim_shard(s, "w1", lease_seconds=60, study_id=study_id)
        rows = [
            {
                "length": shard.length,
                "kind": shard.kind,
                "index": i,
                "words": " ".join(["word"] * shard.length),
                "true_next_word": "w0" if shard.kind == "data" else None,
                "choices": [{"word": f"w{r}", "prob": 0.2} for r in range(5)],
                "provenance": {},
            }
            for i in range(shard.start_index, shard.stop_index)
        ]
        complete_shard(s, shard.id, "w1", rows, seconds=2.0)
    page.wait_for_selector("td:text('10.0')", timeout=15000)  # 20 items in 2 s
    _shot(page, "study")
    assert not page.console_errors


def test_main_pages(server, page):
    base = server["base"]
    for path, name, marker in [
        ("/dashboard/studies/paper", "study-collecting", "h2:text('Collection')"),
        ("/dashboard/studies/paper/items", "items", "text=true next word"),
        ("/dashboard/studies/paper/annotators", "annotators", "#annotators"),
        ("/dashboard/studies/paper/results?b=1000", "results", "#plot"),
        ("/dashboard/tokens", "tokens", "h1:text('API tokens')"),
        ("/dashboard/users", "users", "h1:text('Researchers')"),
    ]:
        page.goto(base + path)
        page.wait_for_selector(marker)
        _shot(page, name)
    page.goto(base + "/dashboard/studies/paper/results?b=1000")
    # The plot (a data: SVG) rendered: it has a size.
    assert page.eval_on_selector("#plot", "img => img.naturalWidth") > 100
    assert not page.console_errors


def test_sharing_a_study_and_what_a_viewer_sees(server, page):
    base = server["base"]
    with server["sm"]() as s, s.begin():
        create_user(s, "carol", PASSWORD)
    page.goto(base + "/dashboard")
    if "/login" in page.url:  # this test also runs alone
        page.fill("#username", "ada")
        page.fill("#password", PASSWORD)
        page.keyboard.press("Enter")
        page.wait_for_selector("h1:text('Studies')")
    page.goto(base + "/dashboard/studies/paper")
    page.fill("#f-member", "carol")
    page.select_option("#f-role", "view")
    page.click("#share button")
    page.wait_for_selector("text=carol may now view this study")
    assert "carol" in page.inner_text("#members")
    _shot(page, "study-people")

    carol = page.context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    errors: list[str] = []
    carol.on("pageerror", lambda e: errors.append(str(e)))
    carol.goto(base + "/dashboard")
    carol.fill("#username", "carol")
    carol.fill("#password", PASSWORD)
    carol.keyboard.press("Enter")
    carol.wait_for_selector("h1:text('Studies')")
    links = carol.eval_on_selector_all("table a", "as => as.map(a => a.getAttribute('href'))")
    assert links == ["/dashboard/studies/paper"]  # not the admin's other study
    carol.goto(base + "/dashboard/studies/paper")
    carol.wait_for_selector("#people")
    assert carol.query_selector("#close-study") is None and carol.query_selector("#share") is None
    carol.goto(base + "/dashboard/studies/paper/annotators")
    carol.wait_for_selector("#view-only")
    assert (
        carol.query_selector("input.link-box") is None and carol.query_selector("#invite") is None
    )
    _shot(carol, "annotators-viewer")
    carol.context.close()
    assert not errors and not page.console_errors
