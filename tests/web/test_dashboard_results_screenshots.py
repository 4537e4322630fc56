"""The results page in a real browser at two sizes, screenshots to var/screenshots/ (CI
artifacts, not committed): the demo's size (two lengths, 60 HITs a length, 1,200
judgments, about 45 effective annotators a length, as the demo's crowd leaves) and a
paper-scale study (450,000 judgments, three lengths, ~300 annotators). Both are built as
`benchmarks/results.py` builds its study: simulated columns COPYed into PostgreSQL
(PostgreSQL only; the module's setup took 59-82 s on the shared machine at load 5-8)."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time

import numpy as np
import playwright.sync_api as playwright_api
import pytest

from app.auth.service import create_user
from app.config import ROOT, Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study
from tests.browser.test_annotate_browser import CHROMIUM, _free_port
from tests.conftest import fresh_database
from tests.web.accounts import PASSWORD

pytestmark = pytest.mark.postgres

SHOTS = ROOT / "var" / "screenshots"
_spec = importlib.util.spec_from_file_location("bench_results", ROOT / "benchmarks" / "results.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_results", bench)  # its dataclasses look their module up
_spec.loader.exec_module(bench)

# (slug, lengths, assignments a length, overlap HITs a length, annotators, cap, id offset)
STUDIES = {
    "demo-size": ((10, 20), 60, 0, 150, 2, 0),
    "paper-size": ((10, 20, 30), 15_000, 250, 300, 200, 1_000_000),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, databases):
    import uvicorn

    tmp = tmp_path_factory.mktemp("screenshots")
    with fresh_database("postgres", tmp, template=databases.template("postgres")) as db:
        settings = Settings(database_url=db.url, env="test", data_dir=tmp)
        engine = build_engine(settings)
        sm = make_sessionmaker(engine)
        sizes = {}
        for slug, (lengths, asg, overlap, annotators, cap, offset) in STUDIES.items():
            with sm() as s, s.begin():
                study = create_study(
                    s,
                    StudyConfig(
                        slug=slug,
                        title=f"{slug} study",
                        model=ModelSection(name="gpt2"),
                        dataset=DatasetSection(path="wiki.test.tokens"),
                        prefix_lengths=list(lengths),
                        items_per_cell=asg * 5,
                    ),
                )
                study_id = study.id
            sim = bench.simulate(
                np.random.default_rng(0),
                lengths=lengths,
                assignments=asg,
                overlap=overlap,
                annotators=annotators,
                cap=cap,
            )
            bench.load(engine, sim, study_id, offset=offset)
            sizes[slug] = int(sim["j_d"].size)
        with sm() as s, s.begin():
            create_user(s, "ada", PASSWORD, is_admin=True)
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
        yield {"base": f"http://127.0.0.1:{port}", "sizes": sizes}
        uv.should_exit = True
        thread.join(10)
        engine.dispose()


@pytest.fixture(scope="module")
def page(server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        pg.set_default_timeout(120_000)  # the large study's page computes for seconds
        pg.goto(server["base"] + "/login")
        pg.fill("#username", "ada")
        pg.fill("#password", PASSWORD)
        pg.keyboard.press("Enter")
        pg.wait_for_selector("h1:text('Studies')")
        yield pg
        browser.close()


@pytest.mark.parametrize(("slug", "judgments"), [("demo-size", 1_200), ("paper-size", 450_000)])
def test_the_results_page_reads_at_the_demo_size_and_at_450k(server, page, slug, judgments):
    assert server["sizes"][slug] == judgments
    page.goto(f"{server['base']}/dashboard/studies/{slug}/results")
    page.wait_for_selector("#plot")
    lengths = STUDIES[slug][0]
    rows = page.locator("table.results").first.locator("tbody tr")
    assert rows.count() == len(lengths)
    assert page.locator("#plot").evaluate("img => img.complete && img.naturalWidth > 500")
    # Enough annotators at both sizes: every EB-C interval says something, so no sentence.
    assert page.locator("#uninformative").count() == 0
    assert page.locator("#plan-costs").count() == 1
    page.screenshot(path=str(SHOTS / f"results-{slug}.png"), full_page=True)
