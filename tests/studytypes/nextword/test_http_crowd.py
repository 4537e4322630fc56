"""The simulated crowd over HTTP against a live server (uvicorn on 127.0.0.1), both databases:
every acknowledged answer stored once (resent posts too), the cap holds, and the results the
service computes from the judgments table equal those computed from the simulator's record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy import select

from app.models import Annotator, Assignment, AssignmentStatus, AuditEvent, Judgment, Study
from app.results.queries import kind_codes
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.results.stats import estimate_ebc
from app.simulate import http
from app.simulate.crowd import Crowd, Heterogeneity
from app.simulate.godview import GodView
from app.studytypes.nextword.http_crowd import run_http_crowd
from app.studytypes.nextword.judges import StandInJudge
from tests.hits.factory import make_study

EBC = str(Path(sys.executable).with_name("ebc"))
CAP = 3


@pytest.fixture
def live(live_db):
    """A migrated database of its own with a collecting study (HITs from build_hits: 2
    lengths x 4 HITs of 5 data + 5 model items and 1 attention item), served by uvicorn."""
    sm = live_db.sm
    with sm() as session, session.begin():
        study = make_study(session, slug="h", lengths=(10, 20), per_cell=20)
        study.per_annotator_cap = CAP
        study.min_ms_per_item = 1000
        study_id = study.id
    with live_db.serve() as base:
        yield base, sm, study_id, live_db.settings


def _stored(sm, study_id):
    with sm() as session:
        rows = session.execute(
            select(
                Assignment.public_id,
                Judgment.position,
                Judgment.option,
                Judgment.chosen_word,
                Judgment.chosen_rank,
                Judgment.client_ms,
                Judgment.too_fast,
                Judgment.d,
            )
            .join(Assignment, Assignment.id == Judgment.assignment_id)
            .join(Annotator, Annotator.id == Assignment.annotator_id)
            .where(Annotator.study_id == study_id)
        ).all()
    return [tuple(r) for r in rows]


def test_every_acknowledged_answer_is_stored_once_and_the_results_match_the_record(live):
    base, sm, study_id, settings = live
    # Busy annotators (each wants 5 or more HITs) against a cap of 3; random, first-slot and
    # too-fast clicks; half the posts sent twice.
    crowd = Crowd.parse("sampler,noisy:0.1,position:0.1,fast:0.2", Heterogeneity(activity_min=4.0))
    judge = StandInJudge.calibrated(GodView(sm, study_id).study(), crowd, true_ebc=1.1, seed=3)
    run = run_http_crowd(
        base, sm, study_id, settings.secret_key, crowd, judge, seed=3, resend_share=0.5
    )

    # Every acknowledged answer stored once, as recorded (a resent post stores nothing).
    assert run.resent > 0
    record = [
        (a.assignment, a.position, a.option, a.word, None if a.rank == 0 else a.rank - 1,
         a.client_ms, a.too_fast, a.d)
        for a in run.answers
    ]  # fmt: skip
    stored = _stored(sm, study_id)
    assert len(stored) == len(record) == 8 * 11
    assert sorted(stored, key=repr) == sorted(record, key=repr)
    assert any(a.too_fast for a in run.answers) and any(a.word is None for a in run.answers)

    # The cap holds: nobody did more than 3 HITs, and the server stopped the busy ones.
    with sm() as session:
        people = session.execute(
            select(Annotator.id, Annotator.label, Annotator.simulated).where(
                Annotator.study_id == study_id
            )
        ).all()
        done = session.execute(
            select(Assignment.annotator_id, Assignment.status)
            .join(Annotator)
            .where(Annotator.study_id == study_id)
        ).all()
    assert all(status is AssignmentStatus.submitted for _, status in done) and len(done) == 8
    per = {a.annotator_id: a.done for a in run.annotators}
    assert per == {i: sum(1 for x, _ in done if x == i) for i in per} and max(per.values()) <= CAP
    assert "cap_reached" in {a.stopped for a in run.annotators}
    assert {(i, label) for i, label, _ in people} == {
        (a.annotator_id, a.label) for a in run.annotators
    }
    assert all(sim for *_, sim in people)
    assert all(label == f"simulated-{i}" for i, label, _ in people)  # apart, whoever runs

    # The service's results (from the judgments table) equal estimate_ebc on the record.
    query = ResultQuery(b=400, exclusions="off", seed=7)
    with sm() as session:
        study = session.get(Study, study_id)
        res = study_results(session, study, query)
        kinds = kind_codes(study)
    j = run.judgments(kinds)
    mine = estimate_ebc(
        j.d, j.length, j.kind, j.annotator, j.hit, j.item, choice=j.choice,
        estimator="single", unit="annotator", b=400, ci="wild", level=0.95, seed=7,
        keep=~j.attention,
    )  # fmt: skip
    assert res.results.n_judgments == mine.n_judgments == int((~j.attention).sum()) == 80
    for length in (10, 20):
        theirs = next(q for q in res.results.ratios if q.name == "ebc" and q.length == length)
        ours = mine.ebc(length)
        for name in ("estimate", "se", "low", "high", "p_value"):
            a, b = getattr(theirs, name), getattr(ours, name)
            assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, rel=1e-9), name
    # Labelled: every counted judgment is a simulated annotator's.
    assert res.simulated_judgments == res.results.n_simulated == 80
    assert res.simulated_label == "includes 80 judgments from a simulated crowd"


def test_a_budget_leaves_work_and_a_second_run_finishes_it(live, monkeypatch):
    base, sm, study_id, settings = live
    crowd = Crowd.parse("oracle", Heterogeneity(activity_min=1.0))
    judge = StandInJudge.calibrated(GodView(sm, study_id).study(), crowd, true_ebc=1.0)
    paths, made_by_run = [], http.simulated_annotator

    def recruit(*args):  # the run's own recruiting, its links noted on the way
        made = made_by_run(*args)
        paths.append(made.path)
        return made

    monkeypatch.setattr(http, "simulated_annotator", recruit)
    first = run_http_crowd(base, sm, study_id, settings.secret_key, crowd, judge, max_hits=5)
    assert first.hits == 5 and GodView(sm, study_id).open_slots() == 3
    # The run is over: its links no longer work, though work is left; the judgments stay.
    assert len(paths) == len(first.annotators) > 0
    for path in paths:
        dead = httpx.get(f"{base}{path}")
        assert dead.status_code == 404 and "This link is no longer valid" in dead.text
    with sm() as session:
        ours = session.scalars(select(Annotator).where(Annotator.study_id == study_id)).all()
        revoked = session.scalars(
            select(AuditEvent).where(AuditEvent.action == "invite_revoked")
        ).all()
    assert all(a.invite_nonce is None and a.revoked_at is not None for a in ours)
    assert len(revoked) == len(ours) and {e.detail["by"] for e in revoked} == {"cli"}
    monkeypatch.undo()
    # Through the command, as a user runs it: the rest of the work, then nobody finds any.
    env = {**os.environ, "EBC_ENV": "test", "DATABASE_URL": settings.database_url}
    out = subprocess.run(
        [EBC, "simulate-http", "h", base, "--true-ebc", "1.1", "--seed", "2", "--parallel", "2"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "did 3 HITs, 33 judgments acknowledged" in out.stdout
    assert "no_work" in out.stdout and "true EB-C (sampler) l=10: 1.1" in out.stdout
    assert GodView(sm, study_id).open_slots() == 0
    assert len(_stored(sm, study_id)) == 8 * 11
    with sm() as session:
        live_links = session.scalars(
            select(Annotator.id).where(Annotator.invite_nonce.is_not(None))
        ).all()
    assert live_links == []  # the command's run closed its links too
    bad = subprocess.run(
        [EBC, "simulate-http", "h", base, "--crowd", "lazy"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "unknown crowd behaviour 'lazy'" in bad.stderr
    raters_only = subprocess.run(
        [EBC, "simulate-http", "h", base, "--quality", "4,1", "--sd-pair", "0.2"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert raters_only.returncode == 1
    assert "for ratings studies only: --quality, --sd-pair" in raters_only.stderr


def test_a_study_with_consent_is_agreed_to_then_annotated(live):
    """Issue 33: the link leads to the consent page first; each simulated annotator agrees
    through it (its time stored), then annotates as before."""
    base, sm, study_id, settings = live
    with sm() as session, session.begin():
        session.get(Study, study_id).participants = {"consent": "A simulated study."}
    crowd = Crowd.parse("oracle", Heterogeneity(activity_min=1.0))
    judge = StandInJudge.calibrated(GodView(sm, study_id).study(), crowd, true_ebc=1.0)
    run = run_http_crowd(base, sm, study_id, settings.secret_key, crowd, judge, max_hits=2)
    assert run.hits == 2 and len(_stored(sm, study_id)) == 2 * 11
    with sm() as session:
        people = session.scalars(select(Annotator).where(Annotator.study_id == study_id)).all()
    assert people and all(a.consented_at is not None for a in people)
