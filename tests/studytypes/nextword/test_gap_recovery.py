"""Issue 34's known truth for EB-C_gap: a synthetic pair (P_M = fake:1, P_D = fake:4, data
prefixes sampled from P_D) precomputed by the real worker with a gap kind, an oracle crowd of
that P_D over HTTP against a live server (both databases) recovers the pair's exact EB-C_gap
within its interval; the many-study coverage (app.studytypes.nextword.gap_coverage, the
benchmark's suite) draws the same judgments offline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sqlalchemy import select

from app.models import Item, Judgment, Study
from app.precompute import service
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.simulate.crowd import Crowd, Heterogeneity
from app.simulate.design import Design
from app.studies.schemas import StudyConfig
from app.studies.service import build_and_open, create_study, get_study
from app.studytypes.nextword.gap_coverage import (
    Pool,
    coverage,
    estimate,
    simulate_pool_judgments,
)
from app.studytypes.nextword.http_crowd import run_http_crowd
from app.studytypes.nextword.judges import ModelJudge
from app.studytypes.nextword.queries import load_references
from tests.worker.test_fake_pipeline import fake_lines
from worker.runner import Worker, WorkerOptions

GAP = "data_shuffled+gap@2"
KINDS = ["data", "model", GAP]
LIGHT = Heterogeneity(activity_min=0.5, activity_tail=3.0)  # most do one HIT (the demo's)


def pair_config(slug: str, dataset, items: int, seed: int) -> StudyConfig:
    """The synthetic pair: lengths 3 and 5, so EB-C_gap at l = 3 is over data at 5."""
    return StudyConfig(
        slug=slug,
        title=slug,
        model={"name": "fake:1"},
        dataset={"path": str(dataset)},
        prefix_lengths=[3, 5],
        kinds=KINDS,
        items_per_cell=items,
        seed=seed,
        hits={"mix": {k: 3 for k in KINDS}, "attention": 0, "overlap_share": 0.0},
        annotators={"per_annotator_cap": 4},
        reference={"model": "fake:4", "data_prefixes": "reference"},
    )


@pytest.fixture
def live(live_db, tmp_path):
    """The study (60 items a cell, 40 HITs) and a pool of the same pair (1,000 items a cell,
    another seed: the population whose exact EB-C_gap is the truth), made by the worker;
    the study's HITs built and opened, served by uvicorn."""
    settings, engine, sm = live_db.settings, live_db.engine, live_db.sm
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(fake_lines(200)) + "\n", encoding="utf-8")
    with sm() as session, session.begin():
        for config in (
            pair_config("gap", dataset, 60, 7),
            pair_config("gap-pool", dataset, 1000, 8),
        ):
            service.plan_job(session, create_study(session, config), shard_size=500)
    Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine).run()
    with sm() as session, session.begin():
        study = get_study(session, "gap")
        build_and_open(session, study, by=None)
        study_id = study.id
    with live_db.serve() as base:
        yield base, sm, study_id, settings


def test_an_oracle_crowd_over_http_recovers_the_pair_s_ebc_gap(live):
    base, sm, study_id, settings = live
    crowd = Crowd.parse("oracle", LIGHT)
    run = run_http_crowd(base, sm, study_id, settings.secret_key, crowd, ModelJudge(), seed=3)
    assert run.hits == 40
    q = ResultQuery(b=999, seed=1)
    with sm() as session:
        study = session.get(Study, study_id)
        res = study_results(session, study, q)
        pool = Pool.of(load_references(session, get_study(session, "gap-pool")))
        stored = session.execute(
            select(Judgment.d, Item.reference)
            .join(Item, Item.id == Judgment.item_id)
            .where(Item.study_id == study_id)
        ).all()
    # The judgment model the offline coverage draws: each d is the item's word-level d_GD.
    assert len(stored) == 360 and {d for d, _ in stored} == {0.0, 1.0}
    assert all(d == ref["word_gd"] for d, ref in stored)
    code = KINDS.index(GAP)
    truth = pool.truth()[("ebc_gap", 3, code)]
    # The pool's truth is no trivial 1: the check could fail for a biased estimate.
    assert pool.cgd(3, code) == pytest.approx(0.745, abs=0.05) and abs(truth - 1) > 0.05
    people = next(r for r in res.results.ratios if r.name == "ebc_gap" and r.length == 3)
    assert (people.reference_length, people.n_effective > 20) == (5, True)
    # People's estimate is the study's own synthetic word-level EB-C_gap, exactly ...
    synthetic = next(f for f in res.synthetic.ebc_gap if f.metric == "word_gd" and f.length == 3)
    assert people.estimate == pytest.approx(synthetic.estimate, rel=1e-12)
    # ... and its interval covers the pair's exact EB-C_gap.
    assert people.low <= truth <= people.high, (people.low, truth, people.high)
    assert people.high / people.low < 2  # informative, not [0.7, 5e7]
    # The offline estimator on the simulator's own record is the results service's.
    mine = estimate(run.judgments(study_kinds(sm, study_id)), b=999, seed=1)
    got = next(r for r in mine.ratios if r.name == "ebc_gap" and r.length == 3)
    assert (got.estimate, got.low, got.high) == pytest.approx(
        (people.estimate, people.low, people.high), rel=1e-9
    )


def study_kinds(sm, study_id: int) -> list[str]:
    from app.results.queries import kind_codes

    with sm() as session:
        return kind_codes(session.get(Study, study_id))


def _pool() -> Pool:
    """A pool with known cell means (the offline tests need no worker)."""
    rng = np.random.default_rng(0)
    means = {(3, 0): 0.6, (3, 1): 0.7, (3, 2): 0.8, (5, 0): 0.5, (5, 1): 0.65, (5, 2): 0.8}
    d = {cell: (rng.random(2000) < p).astype(float) for cell, p in means.items()}
    return Pool(kinds=[*KINDS, "attention"], d=d)


def _design(items: int = 300) -> Design:
    return Design(
        lengths=(3, 5),
        kinds=[*KINDS, "attention"],
        mix={0: 3, 1: 3, 2: 3},
        attention=1,
        items_per_cell=items,
        cap=10,
    )


@pytest.mark.sqlite
def test_a_simulated_study_draws_its_cells_from_the_pool():
    pool = _pool()
    j = simulate_pool_judgments(_design(), pool, LIGHT, np.random.default_rng(1))
    again = simulate_pool_judgments(_design(), pool, LIGHT, np.random.default_rng(1))
    assert np.array_equal(j.d, again.d) and np.array_equal(j.annotator, again.annotator)
    assert len(j) == 2 * 100 * 10 and j.attention.sum() == 200
    assert np.all(j.d[j.attention] == 0)
    for (ln, code), values in pool.d.items():
        cell = (j.length == ln) & (j.kind == code) & ~j.attention
        assert cell.sum() == 300
        assert j.d[cell].mean() == pytest.approx(values.mean(), abs=4 * math.sqrt(0.25 / 300))
    truth = pool.truth()
    assert truth[("ebc_gap", 3, 2)] == pytest.approx(pool.cgd(3, 2) / pool.cgd(5, 0))
    assert ("ebc_gap", 5, 2) not in truth  # no data cell at 7
    short = Pool(pool.kinds, {c: v for c, v in pool.d.items() if c != (5, 2)})
    with pytest.raises(ValueError, match=r"no items of the design's cells \[\(5, 2\)\]"):
        simulate_pool_judgments(_design(), short, LIGHT, np.random.default_rng(1))
    with pytest.raises(ValueError, match="kind 2"):
        bad = Design(**{**_design().__dict__, "kinds": ["data", "model", "random", "attention"]})
        simulate_pool_judgments(bad, pool, LIGHT, np.random.default_rng(1))


@pytest.mark.sqlite
def test_coverage_counts_the_intervals_that_hold_the_truth():
    """Over 200 studies the default interval of EB-C_gap covers the pool's truth within
    Monte Carlo tolerance of 95%; a truth over the wrong data cell (at l, not l + g) is
    covered far less often, so the count has teeth."""
    pool = _pool()
    rows, per = coverage(_design(), pool, LIGHT, replications=200, b=199, seed=5)
    gap = next(r for r in rows if r.name == "ebc_gap")
    assert (gap.length, gap.kind, gap.replications) == (3, GAP, 200)
    assert abs(gap.coverage - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / 200) + 0.005, gap
    assert gap.median_effective > 40 and per > 0
    wrong = {("ebc_gap", 3, 2): pool.cgd(3, 2) / pool.cgd(3, 0)}
    rows, _ = coverage(_design(), pool, LIGHT, replications=200, b=199, seed=5, truth=wrong)
    assert rows[0].coverage < 0.5 and rows[0].mean_estimate == gap.mean_estimate
