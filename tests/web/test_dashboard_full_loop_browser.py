"""The whole loop in a real browser, on a tiny model: a researcher logs in, creates a
study from the form, precomputes it with an in-process worker, builds HITs and makes an
invite link; an annotator (a second browser context) completes two HITs with the
keyboard; the researcher sees the judgments counted and the results table and plot."""

from __future__ import annotations

import threading
import time

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import func, select

from app.auth.service import create_user
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.migrate import upgrade
from app.models import Item, Judgment
from tests.browser.test_annotate_browser import CHROMIUM, _free_port
from tests.web.accounts import PASSWORD
from tests.web.test_dashboard_browser import SHOTS
from tests.worker.conftest import corpus_lines, tiny_gpt2, word_tokenizer
from worker.runner import Worker, WorkerOptions


@pytest.fixture
def world(tmp_path):
    import uvicorn

    model_dir = tmp_path / "model"
    tok = word_tokenizer()
    tiny_gpt2(tok, seed=1, init=0.2).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(corpus_lines(400)) + "\n")
    port = _free_port()
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ebc.db'}",
        env="test",
        data_dir=tmp_path,
        base_url=f"http://127.0.0.1:{port}",  # invite links point here
    )
    engine = build_engine(settings)
    with engine.begin() as conn:
        upgrade(conn)
    sm = make_sessionmaker(engine)
    with sm() as s, s.begin():
        create_user(s, "ada", PASSWORD, is_admin=True)
    uv = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.05)
    yield {
        "base": f"http://127.0.0.1:{port}",
        "settings": settings,
        "engine": engine,
        "sm": sm,
        "model": model_dir,
        "dataset": dataset,
    }
    uv.should_exit = True
    thread.join(10)
    engine.dispose()


def _launch(p):
    return p.chromium.launch(
        executable_path=CHROMIUM,
        args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    )


def test_the_whole_loop(world):
    base = world["base"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = _launch(p)
        researcher = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        errors: list[str] = []
        researcher.on("pageerror", lambda e: errors.append(str(e)))
        researcher.goto(base + "/dashboard")
        researcher.fill("#username", "ada")
        researcher.fill("#password", PASSWORD)
        researcher.keyboard.press("Enter")
        researcher.wait_for_selector("h1:text('Studies')")

        researcher.click("text=New study")
        researcher.fill("#f-slug", "loop")
        researcher.fill("#f-title", "The whole loop")
        researcher.fill("#f-model\\.name", str(world["model"]))
        researcher.fill("#f-dataset\\.path", str(world["dataset"]))
        researcher.fill("#f-prefix_lengths", "3, 5")
        researcher.fill("#f-items_per_cell", "10")
        researcher.click("#create")
        researcher.wait_for_selector("text=Study loop created")
        researcher.click("#plan-precompute")
        researcher.wait_for_selector("text=Precompute job")

        # A real worker, in process, makes every item; the page follows without a reload.
        opts = WorkerOptions(once=True, device="cpu")
        assert Worker(world["settings"], opts, engine=world["engine"]).run() > 0
        researcher.wait_for_selector("#study-status:text('ready')", timeout=20000)
        researcher.click("#build-hits")
        researcher.wait_for_selector("#study-status:text('collecting')")

        researcher.goto(base + "/dashboard/studies/loop/annotators")
        researcher.click("#invite")
        link = researcher.locator(".link-box").first.input_value()
        assert "/a/" in link

        annotator = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
        annotator.goto(link)
        for hit in range(2):
            annotator.wait_for_selector("fieldset.item")
            n = annotator.locator("fieldset.item").count()
            for i in range(n):
                annotator.keyboard.press(str((i + hit) % 6))
            annotator.keyboard.press("Enter")
            annotator.wait_for_selector("text=your answers were saved")
        annotator.screenshot(path=str(SHOTS / "annotator-after-two-hits.png"), full_page=True)
        with world["sm"]() as s:
            stored = s.scalar(select(func.count()).select_from(Judgment))
        assert stored == 2 * n

        with world["sm"]() as s:
            counted = s.scalar(
                select(func.count())
                .select_from(Judgment)
                .join(Item, Item.id == Judgment.item_id)
                .where(Item.is_attention.is_(False))
            )
        # Keys pressed at machine speed are all "too fast": the pre-declared rule drops them...
        researcher.goto(base + "/dashboard/studies/loop/results?b=1000")
        assert f"0 of {counted} judgments kept" in researcher.content()
        assert f"too_fast: {counted}" in researcher.content()
        # ...and the figures without exclusions are there, side by side.
        researcher.goto(base + "/dashboard/studies/loop/results?b=1000&exclusions=off")
        researcher.wait_for_selector("#plot")
        assert researcher.eval_on_selector("#plot", "img => img.naturalWidth") > 100
        researcher.screenshot(path=str(SHOTS / "results-after-the-loop.png"), full_page=True)
        browser.close()
    assert not errors
