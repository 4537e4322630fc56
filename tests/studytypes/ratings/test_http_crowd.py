"""Simulated raters over HTTP against a live server (uvicorn on 127.0.0.1), both databases: a
ratings study's pairs rated quality first, then consistency, as a browser without JavaScript
posts them; every acknowledged rating stored once and exactly as the simulator recorded it
(double clicks and lost responses too); nothing sent names a pair's kind; the cap holds; the
links die with the run; the command works on a ratings study."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qsl

import httpx
import numpy as np
import pytest
from sqlalchemy import select

from app.models import Annotator, Assignment, AssignmentStatus, Item, Rating
from app.simulate import http
from app.simulate.crowd import Crowd
from app.simulate.godview import GodView, SimulationError
from app.studytypes.nextword.http_crowd import run_http_crowd
from app.studytypes.nextword.judges import ModelJudge
from app.studytypes.ratings.http_crowd import RatersOverHttp, run_http_raters
from app.studytypes.ratings.judges import RaterJudge
from app.studytypes.ratings.raters import RaterHeterogeneity
from tests.hits.ratings_factory import make_ratings_study

EBC = str(Path(sys.executable).with_name("ebc"))
CAP = 3
POINTS = {f"{x / 2:g}" for x in range(11)}  # the page's scale: 0, 0.5, ..., 5
KINDS = {"data", "model", "attention"}


@pytest.fixture
def live(live_db):
    """A collecting ratings study (HITs from build_hits: 2 lengths x 2 HITs of 5 data + 5
    model pairs and 1 attention pair, 2 ratings per pair: 8 assignments), served by uvicorn."""
    with live_db.sm() as session, session.begin():
        study = make_ratings_study(
            session, slug="r", lengths=(4, 6), per_cell=10, replicas=2, min_seconds_per_item=1.0
        )
        study.per_annotator_cap = CAP
        study_id = study.id
    with live_db.serve() as base:
        yield base, live_db.sm, study_id, live_db.settings


class Lossy(httpx.HTTPTransport):
    """Keeps every request sent, and loses the response to every `every`-th POST after the
    server has handled it (the client sees a broken connection and sends it again). Counts
    the 503s too (a busy SQLite under two raters at once), which the client also resends."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every, self.posts, self.lost, self.sent = every, 0, 0, []
        self.busy = {"GET": 0, "POST": 0}
        self.broken = []  # requests that failed on their own (a closed keep-alive connection)
        self.lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            with self.lock:
                self.broken.append((request.method, repr(exc)))
            raise
        with self.lock:
            self.sent.append((request.method, request.url.path, request.url.query, request.read()))
            if response.status_code == 503:
                self.busy[request.method] += 1
                return response
            if request.method != "POST":
                return response
            self.posts += 1
            if self.posts % self.every:
                return response
            self.lost += 1
        response.read()
        response.close()
        raise httpx.ReadError("the response was lost", request=request)


def _stored(sm, study_id):
    with sm() as session:
        rows = session.execute(
            select(
                Assignment.public_id,
                Rating.position,
                Rating.item_id,
                Rating.quality,
                Rating.consistency,
                Rating.quality_ms,
                Rating.consistency_ms,
                Rating.too_fast,
                Item.length,
                Item.kind,
                Item.is_attention,
            )
            .join(Assignment, Assignment.id == Rating.assignment_id)
            .join(Item, Item.id == Rating.item_id)
            .where(Item.study_id == study_id)
        ).all()
    return rows


def test_simulated_raters_rate_every_pair_and_every_rating_is_stored_once_as_recorded(live):
    base, sm, study_id, settings = live
    # A large true gap, so the direction cannot flake; random and too-fast ratings; busy
    # raters (4 or more HITs wanted) against a cap of 3; half the posts sent twice and the
    # response to every 7th post lost on the way back.
    judge = RaterJudge.calibrated(
        GodView(sm, study_id).study(),
        quality=(4.2, 1.2),
        consistency=(4.0, 1.0),
        hetero=RaterHeterogeneity(activity_min=4.0),
        noisy=0.05,
        fast=0.15,
        seed=4,
    )
    lossy = Lossy(every=7)
    run = run_http_raters(
        base, sm, study_id, settings.secret_key, judge, seed=4, resend_share=0.5, parallel=2,
        transport=lossy,
    )  # fmt: skip

    # Every acknowledged rating stored once, exactly as recorded (a resent or retried post
    # stores nothing).
    assert run.resent > 0 and lossy.lost > 0
    assert run.retried == lossy.lost + sum(lossy.busy.values()) + len(lossy.broken), lossy.broken
    record = [
        (r.assignment, r.position, r.item_id, r.quality, r.consistency, r.quality_ms,
         r.consistency_ms, r.too_fast)
        for r in run.ratings
    ]  # fmt: skip
    rows = _stored(sm, study_id)
    assert len(rows) == len(record) == len(set(record)) == 8 * 11 and run.steps == 2 * 88
    assert sorted(tuple(r[:8]) for r in rows) == sorted(record)
    assert len({(r.assignment, r.position) for r in run.ratings}) == 88
    assert any(r.too_fast for r in run.ratings) and not all(r.too_fast for r in run.ratings)
    # The god-view's record of each pair is the stored pair's.
    by_pair = {(r[0], r[1]): r for r in rows}
    for r in run.ratings:
        row = by_pair[(r.assignment, r.position)]
        assert (r.length, r.kind, r.attention) == (row.length, row.kind, row.is_attention)

    # The form carried what a browser's does, and nothing that names a pair's kind.
    posts = [parse_qsl(body.decode()) for method, _, _, body in lossy.sent if method == "POST"]
    assert len(posts) == 2 * 88 + run.resent + lossy.lost + lossy.busy["POST"]
    publics = {r.assignment for r in run.ratings}
    for form in posts:
        fields = dict(form)
        assert [k for k, _ in form] == ["assignment", "position", "step", "rating", "ms"]
        assert fields["assignment"] in publics and fields["position"].isdigit()
        assert fields["step"] in ("quality", "consistency") and fields["rating"] in POINTS
        assert fields["ms"].isdigit() and not KINDS & set(fields.values())
    for method, path, query, _ in lossy.sent:
        assert re.fullmatch(r"/a/[\w.-]+(/submit)?", path) and method in ("GET", "POST")
        assert query == b"", query

    # Assignments all done, the cap held (the server stopped the busy raters), and the raters
    # are simulated annotators whose links died with the run.
    with sm() as session:
        people = session.execute(
            select(Annotator.id, Annotator.simulated, Annotator.invite_nonce).where(
                Annotator.study_id == study_id
            )
        ).all()
        done = session.execute(
            select(Assignment.annotator_id, Assignment.status)
            .join(Annotator)
            .where(Annotator.study_id == study_id)
        ).all()
    assert len(done) == run.hits == 8
    assert all(status is AssignmentStatus.submitted for _, status in done)
    per = {a.annotator_id: a.done for a in run.annotators}
    assert per == {i: sum(1 for x, _ in done if x == i) for i in per} and max(per.values()) <= CAP
    assert "cap_reached" in {a.stopped for a in run.annotators}
    assert {i for i, *_ in people} == set(per)
    assert all(simulated and nonce is None for _, simulated, nonce in people)
    assert GodView(sm, study_id).open_slots() == 0

    # The stored means per kind follow the true means (data rated far above model), and
    # the record's columns are the stored ratings'.
    cols = run.columns(["data", "model", "attention"], scale_max=5, step=0.5)
    for length in (4, 6):
        for step, (data, model) in (("quality", (4.2, 1.2)), ("consistency", (4.0, 1.0))):
            assert judge.raters.truth(length, 0, step) == pytest.approx(data)
            assert judge.raters.truth(length, 1, step) == pytest.approx(model)
            values = getattr(cols, step)
            mean = {
                k: values[(cols.length == length) & (cols.kind == k) & ~cols.attention].mean()
                for k in (0, 1)
            }
            stored = {
                kind: np.mean(
                    [
                        getattr(r, step)
                        for r in rows
                        if r.length == length and r.kind == kind and not r.is_attention
                    ]
                )
                for kind in ("data", "model")
            }
            assert stored == pytest.approx({"data": mean[0], "model": mean[1]}, abs=1e-12)
            assert mean[0] - mean[1] > 1.0, (length, step, mean)


def test_a_budget_leaves_work_and_the_command_finishes_it(live, monkeypatch):
    base, sm, study_id, settings = live
    judge = RaterJudge.calibrated(GodView(sm, study_id).study(), seed=1)
    paths, made_by_run = [], http.simulated_annotator

    def recruit(*args):  # the run's own recruiting, its links noted on the way
        made = made_by_run(*args)
        paths.append(made.path)
        return made

    monkeypatch.setattr(http, "simulated_annotator", recruit)
    first = run_http_raters(base, sm, study_id, settings.secret_key, judge, max_hits=3)
    assert first.hits == 3 and GodView(sm, study_id).open_slots() == 5
    assert len(first.ratings) == 33 and all(r.consistency is not None for r in first.ratings)
    # The run is over: its links no longer work, though work is left.
    assert len(paths) == len(first.annotators) > 0
    for path in paths:
        dead = httpx.get(f"{base}{path}")
        assert dead.status_code == 404 and "This link is no longer valid" in dead.text
    monkeypatch.undo()

    # A next-word crowd is refused before it recruits anyone.
    with pytest.raises(SimulationError, match="is a ratings study: simulate raters"):
        run_http_crowd(base, sm, study_id, settings.secret_key, Crowd.parse("oracle"), ModelJudge())
    assert GodView(sm, study_id).open_slots() == 5 and len(paths) == len(first.annotators)

    env = {**os.environ, "EBC_ENV": "test", "DATABASE_URL": settings.database_url}
    # Next-word options on a ratings study: refused, nothing done.
    bad = subprocess.run(
        [EBC, "simulate-http", "r", base, "--judge", "reference", "--true-ebc", "1.1"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "r is a ratings study, rated by simulated raters" in bad.stderr
    assert "for next-word studies only: --judge reference, --true-ebc" in bad.stderr
    # Through the command, as a user runs it: the rest of the work, then nobody finds any.
    out = subprocess.run(
        [EBC, "simulate-http", "r", base, "--quality", "4,1.5", "--consistency", "3.5,2",
         "--sd-pair", "0.3", "--crowd", "noisy:0.1", "--seed", "2", "--parallel", "2"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SIMULATED raters over HTTP on r:" in out.stdout
    assert "did 5 HITs, rated 55 pairs (110 ratings acknowledged" in out.stdout
    assert "no_work" in out.stdout
    assert "l=4: quality 4 (data) 1.5 (model), consistency 3.5 (data) 2 (model)" in out.stdout
    assert "pair 0.3" in out.stdout and "inattention: noisy 0.1" in out.stdout
    assert GodView(sm, study_id).open_slots() == 0
    assert len(_stored(sm, study_id)) == 8 * 11
    with sm() as session:
        live_links = session.scalars(
            select(Annotator.id).where(Annotator.invite_nonce.is_not(None))
        ).all()
    assert live_links == []  # the command's run closed its links too


def test_a_hit_whose_lease_runs_out_midway_is_abandoned_and_spends_no_budget(live, monkeypatch):
    """The first HIT's lease runs out after its first quality: the server moves the rater on
    to another HIT. The abandoned HIT is not done and gives its share of the budget back,
    so the run still submits the 2 assignments asked for; its rating stays stored."""
    base, sm, study_id, settings = live
    judge = RaterJudge.calibrated(GodView(sm, study_id).study(), seed=1)
    post, lapsed = RatersOverHttp._post_step, []

    def post_then_lapse(self, client, page, form):
        acknowledged = post(self, client, page, form)
        if not lapsed:
            lapsed.append(form["assignment"])
            with sm() as session, session.begin():
                held = session.scalar(
                    select(Assignment).where(Assignment.public_id == form["assignment"])
                )
                held.expires_at = held.leased_at  # as if the rater took too long
        return acknowledged

    monkeypatch.setattr(RatersOverHttp, "_post_step", post_then_lapse)
    run = run_http_raters(base, sm, study_id, settings.secret_key, judge, max_hits=2)

    assert run.hits == run.submitted == 2 and run.abandoned == 1
    assert sum(a.done for a in run.annotators) == 2
    assert sum(a.abandoned for a in run.annotators) == 1
    assert "1 HITs left when their lease ran out" in run.summary()
    with sm() as session:
        status = dict(session.execute(select(Assignment.public_id, Assignment.status)).all())
    assert status.pop(lapsed[0]) is AssignmentStatus.expired
    assert sorted(status.values()) == [AssignmentStatus.submitted] * 2
    assert GodView(sm, study_id).open_slots() == 6
    # The abandoned HIT's one rating: stored and recorded, without a consistency.
    (left,) = [r for r in run.ratings if r.assignment == lapsed[0]]
    assert left.consistency is None and run.steps == 2 * 2 * 11 + 1
    stored = {(r[0], r[1]): (r[3], r[4]) for r in _stored(sm, study_id)}
    assert stored == {(r.assignment, r.position): (r.quality, r.consistency) for r in run.ratings}


def test_the_command_refuses_raters_whose_ratings_cannot_vary(live_db):
    """All four sds 0: a clear error in the options' names before anyone is recruited (the
    server is never reached: nothing listens at its address)."""
    from typer.testing import CliRunner

    from app.cli import cli

    with live_db.sm() as session, session.begin():
        make_ratings_study(session, slug="r", per_cell=10)
    zeros = ["--sd-rater", "0", "--sd-rater-kind", "0", "--sd-pair", "0", "--sd-noise", "0"]
    out = CliRunner().invoke(
        cli,
        ["simulate-http", "r", "http://127.0.0.1:9", *zeros],
        env={"EBC_ENV": "test", "DATABASE_URL": live_db.settings.database_url},
    )
    assert out.exit_code == 1, out.output
    assert "--sd-rater, --sd-rater-kind, --sd-pair and --sd-noise are all 0" in out.stderr
    assert "give one of them a positive value" in out.stderr
    with live_db.sm() as session:
        assert session.scalars(select(Annotator.id)).all() == []
