"""Synthetic EB-C end to end: a study with a ``[reference]`` section precomputed by the real
worker on the fake model (``fake:<seed>``, no weights), then the results' synthetic table and
the diagnostics, on both databases.

- P_D = P_M (the reference named like the model): every divergence is 0, so every CGD is 0
  and every EB-C, corruption ratio and EB-C_gap is 1 (0/0: no deviation after either kind of
  prefix, issue 14), in every resample too.
- P_D != P_M: the table's cells are the means of what the worker stored, per cell and metric.
"""

from __future__ import annotations

import math

import pytest

from app.db import build_engine, make_sessionmaker
from app.precompute import service
from app.results.schemas import ResultQuery
from app.results.service import study_results
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from app.studytypes.nextword.diagnostics import study_diagnostics
from tests.results.diagnostic_study import reference_means
from tests.worker.test_fake_pipeline import fake_lines
from worker.runner import Worker, WorkerOptions

FAST = ResultQuery(b=200, seed=1)
GAP = "data_shuffled+gap@2"  # at l = 3 over data at 3 + 2 = 5 (EB-C_gap)
KINDS = ["data", "model", "data_corrupted@0.5", "model_corrupted@0.5", GAP]


@pytest.fixture
def db(migrated_copy, tmp_path):
    engine = build_engine(migrated_copy.settings())
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(fake_lines(200)) + "\n", encoding="utf-8")
    yield migrated_copy, engine, make_sessionmaker(engine), dataset
    engine.dispose()


def _precompute(db, slug: str, reference: str) -> int:
    settings, engine, sessionmaker, dataset = db[0].settings(), db[1], db[2], db[3]
    config = StudyConfig(
        slug=slug,
        title=slug,
        model={"name": "fake:3"},
        reference={"model": reference},
        dataset={"path": str(dataset)},
        prefix_lengths=[3, 5],
        kinds=KINDS,
        items_per_cell=6,
        seed=7,
        hits={"mix": dict.fromkeys(KINDS, 2), "attention": 0},
    )
    with sessionmaker() as session, session.begin():
        study = create_study(session, config)
        service.plan_job(session, study, shard_size=6)
        study_id = study.id
    Worker(settings, WorkerOptions(once=True, study_id=study_id), engine=engine).run()
    return study_id


def _load(sessionmaker, study_id):
    from app.models import Study

    session = sessionmaker()
    return session, session.get(Study, study_id)


def test_reference_equal_to_the_model_gives_zero_cgd_and_ebc_one(db):
    study_id = _precompute(db, "same", "fake:3")
    session, study = _load(db[2], study_id)
    with session:
        syn = study_results(session, study, FAST).synthetic
        assert syn.reference_model == "fake:3" and syn.item_models == ["fake:3"]
        assert syn.n_items > 0 and syn.n_items_pending == 0 and syn.methods
        assert {c.kind for c in syn.cells} == set(KINDS)
        for cell in syn.cells:
            for fig in cell.cgd.values():
                assert fig.estimate == 0 and fig.high == 0, (cell.kind, fig.metric)
            assert cell.gd_agreement == 1.0
        assert [row.length for row in syn.ebc] == [3, 5]
        for row in syn.ebc:
            for fig in row.ebc.values():
                assert (fig.estimate, fig.low, fig.high) == (1, 1, 1)
                assert fig.n_resamples == FAST.b
        assert not any("is undefined" in w for w in syn.warnings)
        doc = study_results(session, study, FAST).model_dump(mode="json")
        assert doc["synthetic"]["ebc"][0]["ebc"]["tv"]["estimate"] == 1
        diag = study_diagnostics(session, study, FAST)
        ratios = [r for r in diag.rows if r.ratio_reference is not None and r.length == 3]
        assert ratios and all(r.ratio == 1 for r in ratios)
        # EB-C_gap = 1 exactly for P_M = P_D (issue 34), at l = 3 over data at l = 5 only.
        assert {(f.length, f.reference_length) for f in syn.ebc_gap} == {(3, 5)}
        assert all((f.estimate, f.low, f.high) == (1, 1, 1) for f in syn.ebc_gap)
        gaps = [r for r in diag.rows if r.ratio_name == "ebc_gap"]
        assert {(r.length, r.l_gap, r.ratio_reference_length) for r in gaps} == {
            (3, 2, 5),
            (5, 2, 7),
        }
        assert all(r.ratio == 1 for r in gaps if r.length == 3)
        assert all(math.isnan(r.ratio) for r in gaps if r.length == 5)  # no data cell at 7
        assert all(r.cgd == 0 for r in diag.rows)


def test_a_different_reference_gives_the_means_of_what_the_worker_stored(db):
    study_id = _precompute(db, "diff", "fake:5")
    session, study = _load(db[2], study_id)
    with session:
        syn = study_results(session, study, FAST).synthetic
        want = reference_means(session, study)
        assert want and syn.n_items_pending == 0
        got = {
            (c.length, c.kind, m): f.estimate
            for c in syn.cells
            for m, f in c.cgd.items()
            if not math.isnan(f.estimate)
        }
        assert got == pytest.approx(want)
        assert any(v > 0 for v in got.values())  # two different models do differ
        for row in syn.ebc:
            for metric, fig in row.ebc.items():
                data = want[(row.length, "data", metric)]
                model = want[(row.length, "model", metric)]
                if data > 0:
                    assert fig.estimate == pytest.approx(model / data)
                else:
                    assert math.isnan(fig.estimate)
        # EB-C_gap: the gap kind's mean at l = 3 over the data cell's at l = 5.
        for fig in syn.ebc_gap:
            assert (fig.kind, fig.length, fig.reference_length) == (GAP, 3, 5)
            gap, data = want[(3, GAP, fig.metric)], want[(5, "data", fig.metric)]
            if data > 0:
                assert fig.estimate == pytest.approx(gap / data)
