"""The batch against Turkle itself (Turkle 3.1 from PyPI, in a minimal Django site:
tests/crowd/turkle_site), driven in Chromium: export -> the batch uploaded through
Turkle's admin page -> two logged-in workers do every Task -> Turkle's results CSV,
downloaded from its admin -> import. Replicas 2: Turkle's "Assignments per Task" is 2, each
worker gets each HIT once, and every assignment is stored, none refused. The study asks for
consent and takes comments: both workers tick the consent box on every HIT, one writes a
comment, and their consent times and the comment are stored.

About 30 s (Django's migrations, a server, a browser, 4 pages), on SQLite only.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import playwright.sync_api as playwright_api
import pytest
from sqlalchemy import select

from app.audit.service import CLI
from app.crowd.batch import NONE_TEXT, export_batch
from app.crowd.imports import import_results, tool_time
from app.models import Annotator, Assignment, Hit, Judgment
from tests.crowd.test_batch import read_csv
from tests.hits.factory import make_study

pytestmark = pytest.mark.sqlite

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
WORKERS = {"ada": "ada-pass-1234", "bob": "bob-pass-1234"}
CONSENT = "We study how people guess words.\n\nYou may stop at any time."
COMMENT = '<b>"=1+1"</b> ${text_0} & one\nmore line'  # shown and stored as written
ADMIN = ("admin", "admin-pass-1234")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _turkle(env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def turkle(tmp_path):
    """A migrated Turkle site with an admin and two workers, served on a free port;
    yields (base URL, env, the site's project id factory)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.crowd.turkle_site.settings",
        "TURKLE_DB": str(tmp_path / "turkle.sqlite3"),
        "TURKLE_DEBUG": "1",  # runserver serves Turkle's static files
        "TURKLE_SECRET_KEY": "test-only",
        "PYTHONPATH": str(ROOT),
    }
    _turkle(env, "tests.crowd.turkle_site", "migrate", "-v0")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.crowd.turkle_site", "runserver", f"127.0.0.1:{port}",
         "--noreload"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", env
    finally:
        server.terminate()
        server.wait(timeout=10)


def _login(context, base: str, path: str, user: str, password: str):
    page = context.new_page()
    page.goto(base + path)
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.press("input[name=password]", "Enter")
    page.wait_for_load_state()
    return page


def _upload(admin, base: str, project: int, name: str, csv_path: Path, assignments: int) -> str:
    """Turkle's admin "Add Batch" page: the CSV uploaded; returns the review page's text."""
    admin.goto(f"{base}/admin/turkle/batch/add/?project={project}")
    admin.fill("#id_name", name)
    admin.set_input_files("#id_csv_file", str(csv_path))
    admin.fill("#id_assignments_per_task", str(assignments))
    admin.locator("input[type=submit][value='Review Batch']").click()
    admin.wait_for_url("**/review/")
    return admin.content()


def _work(
    page, base: str, batch_id: str, rng: random.Random, comment: str | None = None
) -> dict[tuple[int, int], str]:
    """Do every Task Turkle hands this worker, the consent box ticked (and `comment` written
    on the first); (HIT number, position) -> the word chosen."""
    chose: dict[tuple[int, int], str] = {}
    while True:
        page.goto(f"{base}/batch/{batch_id}/accept_next_task/")
        if "/assignment/" not in page.url:
            return chose
        frame = page.frame_locator("#task_assignment_iframe")
        hit = int(frame.locator("input[name=hit]").get_attribute("value"))
        # What the page shows (one call): per visible text, its visible options' words.
        shown = frame.locator("fieldset.item").evaluate_all(
            """items => items.filter(i => i.offsetParent !== null).map(i => [
                Number(i.id.slice(4)),
                [...i.querySelectorAll("label.option")].map(
                    l => l.offsetParent !== null ? l.querySelector(".word").textContent : null)
            ])"""
        )
        for p, words in shown:
            pick = rng.choice([i for i, word in enumerate(words) if word is not None])
            frame.locator(f"#item{p} label.option").nth(pick).click()  # a real click
            chose[(hit, p)] = words[pick]
        assert frame.locator("#consent .consent-text").inner_text().startswith(CONSENT[:20])
        frame.locator("input[name=consent]").check()
        if comment is not None:
            frame.locator("textarea[name=comment]").fill(comment)
            comment = None
        frame.locator("#submitButton").click()
        page.wait_for_load_state()


def test_two_turkle_workers_do_every_assignment_and_all_of_it_is_stored(session, turkle, tmp_path):
    base, env = turkle
    study = make_study(
        session, slug="turkle", lengths=(10,), per_cell=10, replicas=2,
        participants={"consent": CONSENT, "comments": True},
    )  # fmt: skip
    batch = export_batch(session, study)
    assert [(f.name, f.assignments, f.hits) for f in batch.inputs] == [("input.csv", 2, 2)]
    (tmp_path / "hit_template.html").write_text(batch.template, encoding="utf-8")
    csv_path = tmp_path / "input.csv"
    csv_path.write_bytes(batch.inputs[0].text.encode())
    users = [":".join(ADMIN), *(f"{u}:{p}" for u, p in WORKERS.items())]
    project = int(
        _turkle(env, "tests.crowd.turkle_site.seed", str(tmp_path / "hit_template.html"), *users)
    )
    # The same batch with a column the template does not name: Turkle warns (the check
    # this test relies on is live).
    extra = tmp_path / "extra.csv"
    rows = read_csv(batch.inputs[0].text)
    extra.write_text(
        "replica," + batch.inputs[0].text.split("\r\n", 1)[0] + "\r\n"
        + "".join("0," + line + "\r\n" for line in batch.inputs[0].text.split("\r\n")[1:-1])
    )  # fmt: skip
    assert len(rows) == 2

    rng = random.Random(5)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            admin = _login(browser.new_context(), base, "/admin/login/?next=/admin/", *ADMIN)
            warned = _upload(admin, base, project, "not this one", extra, 2)
            assert "fields that are not in the HTML template" in warned and "replica" in warned
            review = _upload(admin, base, project, "next word", csv_path, 2)
            assert "not in the HTML template" not in review
            batch_id = admin.url.rstrip("/").split("/")[-2]
            admin.locator("#publishButton").click()
            admin.wait_for_load_state()
            clicks = {}
            for user, password in WORKERS.items():
                page = _login(browser.new_context(), base, "/login/", user, password)
                clicks[user] = _work(page, base, batch_id, rng, COMMENT if user == "ada" else None)
            download = admin.request.get(f"{base}/admin/turkle/batch/{batch_id}/download/")
            assert download.ok
            results = download.text()
        finally:
            browser.close()

    file_rows = read_csv(results)
    assert len(file_rows) == 4  # 2 HITs x 2 assignments
    assert {r["Turkle.Username"] for r in file_rows} == set(WORKERS)
    assert all(r["Answer.study"] == "turkle" for r in file_rows)
    for user in WORKERS:  # each worker got each HIT once
        assert sorted({h for h, _ in clicks[user]}) == sorted(int(r["hit"]) for r in rows)

    report = import_results(session, study, results, source="lab-turkle", by=CLI)
    assert (report.stored, report.repeated, report.errors) == (4, 0, [])
    again = import_results(session, study, results, source="lab-turkle", by=CLI)
    assert (again.stored, again.repeated, again.errors) == (0, 4, [])

    # What each worker clicked is what is stored (the word, from the stored screen order).
    worker_of = {r["WorkerId"]: r["Turkle.Username"] for r in file_rows}
    stored = session.execute(
        select(Annotator.external_id, Hit.index, Judgment.position, Judgment.chosen_word)
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Annotator.study_id == study.id)
    ).all()
    got = {
        (worker_of[ext.removeprefix("lab-turkle:")], hit, pos): word
        for ext, hit, pos, word in stored
    }
    want = {
        (user, hit, pos): (None if word == NONE_TEXT else word)
        for user, chose in clicks.items()
        for (hit, pos), word in chose.items()
    }
    assert got == want and len(got) == 4 * 11
    filled = session.execute(
        select(Hit.submitted_count, Hit.replicas).where(Hit.study_id == study.id)
    ).all()
    assert all(submitted == replicas == 2 for submitted, replicas in filled)

    # Consent: each worker's earliest SubmitTime; the comment: ada's first HIT's, as written.
    consented = dict(
        session.execute(
            select(Annotator.external_id, Annotator.consented_at).where(
                Annotator.study_id == study.id
            )
        ).all()
    )
    first_sent = {
        user: min(tool_time(r["SubmitTime"]) for r in file_rows if r["Turkle.Username"] == user)
        for user in WORKERS
    }
    assert {worker_of[e.removeprefix("lab-turkle:")]: t for e, t in consented.items()} == first_sent
    comments = session.execute(
        select(Annotator.external_id, Hit.index, Assignment.comment)
        .join(Assignment, Assignment.annotator_id == Annotator.id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Annotator.study_id == study.id, Assignment.comment.is_not(None))
    ).all()
    ada_first = min(h for h, _ in clicks["ada"])  # Turkle hands out Tasks in order
    assert [(worker_of[e.removeprefix("lab-turkle:")], h, c) for e, h, c in comments] == [
        ("ada", ada_first, COMMENT)
    ]
