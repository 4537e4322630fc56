"""An oracle crowd whose P_D is a known model, over HTTP against a live server (both
databases): on a study with a `[reference]` model precomputed by the real worker, each
judgment's d equals the item's word-level d_GD (`items.reference["word_gd"]`), and the human
CGD of every cell equals the synthetic word-level CGD, exactly."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.models import Assignment, Item, Judgment, Study
from app.precompute import service
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.simulate.crowd import Crowd
from app.simulate.godview import GodView
from app.studies.schemas import StudyConfig
from app.studies.service import build_and_open, create_study
from app.studytypes.nextword.http_crowd import run_http_crowd
from app.studytypes.nextword.judges import ModelJudge
from tests.worker.test_fake_pipeline import fake_lines
from worker.runner import Worker, WorkerOptions


@pytest.fixture
def live(live_db, tmp_path):
    """P_M = fake:1, P_D = fake:4 (worker.fake), items made by the worker, HITs built and
    opened, served by uvicorn."""
    settings, engine, sm = live_db.settings, live_db.engine, live_db.sm
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(fake_lines(200)) + "\n", encoding="utf-8")
    config = StudyConfig(
        slug="oracle",
        title="Oracle",
        model={"name": "fake:1"},
        dataset={"path": str(dataset)},
        prefix_lengths=[3, 5],
        items_per_cell=10,
        seed=7,
        hits={"mix": {"data": 5, "model": 5}, "attention": 0},
        reference={"model": "fake:4"},  # argmaxes agree after 4 of 22 tokens
    )
    with sm() as session, session.begin():
        study = create_study(session, config)
        service.plan_job(session, study, shard_size=8)
        study_id = study.id
    Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine).run()
    with sm() as session, session.begin():
        build_and_open(session, session.get(Study, study_id), by=None)
    with live_db.serve() as base:
        yield base, sm, study_id, settings


def test_an_oracle_crowd_with_a_model_p_d_measures_the_word_level_d_gd(live):
    base, sm, study_id, settings = live
    run = run_http_crowd(
        base, sm, study_id, settings.secret_key, Crowd.parse("oracle"), ModelJudge(), seed=1
    )
    assert GodView(sm, study_id).open_slots() == 0 and run.hits > 0
    with sm() as session:
        rows = session.execute(
            select(Judgment.item_id, Judgment.d, Item.reference, Item.length, Item.kind)
            .join(Item, Item.id == Judgment.item_id)
            .join(Assignment, Assignment.id == Judgment.assignment_id)
        ).all()
        shown = session.execute(
            select(Item.id, Item.reference, Item.length, Item.kind).where(
                Item.study_id == study_id, Item.skip_reason.is_(None)
            )
        ).all()
        res = study_results(session, session.get(Study, study_id), ResultQuery(b=200))
    # Item by item: the human pipeline's d is the worker's word-level d_GD.
    assert len(rows) == len(shown) == len({r.item_id for r in rows})  # every item once
    assert {r.d for r in rows} == {0.0, 1.0}  # both outcomes occur: the check can fail
    for r in rows:
        assert r.d == r.reference["word_gd"], r.item_id
    # Per cell: the human CGD is the synthetic word-level CGD (mean word_gd over the items).
    cells = {(r.length, r.kind) for r in shown}
    synthetic = {
        cell: sum(r.reference["word_gd"] for r in shown if (r.length, r.kind) == cell)
        / sum(1 for r in shown if (r.length, r.kind) == cell)
        for cell in cells
    }
    human = {(q.length, q.kind): q.estimate for q in res.results.cgd}
    assert human == synthetic
    # ... and what the results' synthetic table reports for it.
    table = {(c.length, c.kind): c.cgd["word_gd"].estimate for c in res.synthetic.cells}
    assert table == pytest.approx(synthetic, abs=1e-12)
