"""The worker scores a ratings study (EB-M, `app.studytypes.ratings.ebm`) when its precompute job
ends, once, from the items it wrote; a failure of the scores leaves the job and its items
done."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import sacrebleu
from sqlalchemy import select

from app.models import AuditEvent, Item, JobStatus, PrecomputeJob, Study, StudyScore
from app.precompute import service
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from app.studytypes.ratings.ebm import stored_ebm
from tests.worker.conftest import corpus_lines
from worker.runner import Worker, WorkerOptions

L_GEN, PROMPT = 4, 3


def _ratings_study(sessionmaker, tmp_path: Path, kind: str = "ratings") -> tuple[int, int]:
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(corpus_lines(300)) + "\n", encoding="utf-8")
    extra = {"type": "ratings", "ratings": {"continuation_words": L_GEN}} if kind else {}
    cfg = StudyConfig(
        slug="r",
        title="R",
        model={"name": "fake:1"},
        dataset={"path": str(dataset)},
        prefix_lengths=[2, 4],
        items_per_cell=8,
        seed=7,
        prompt_words=PROMPT,
        hits={"mix": {"data": 5, "model": 5}, "attention": 0},
        **extra,
    )
    with sessionmaker() as session, session.begin():
        study = create_study(session, cfg)
        job = service.plan_job(session, study, shard_size=4)
        return study.id, job.id


def _run(db) -> Worker:
    empty, engine, _ = db
    worker = Worker(empty.settings(), WorkerOptions(once=True), engine=engine)
    assert worker.run() == 8  # 2 lengths x 2 kinds x 8 items, 4 a shard
    return worker


def test_the_last_shard_scores_the_study_once(db, tmp_path):
    _, _, sessionmaker = db
    study_id, job_id = _ratings_study(sessionmaker, tmp_path)
    _run(db)
    with sessionmaker() as session:
        assert session.get(PrecomputeJob, job_id).status is JobStatus.done
        rows = session.scalars(select(StudyScore).where(StudyScore.study_id == study_id)).all()
        assert len(rows) == 1 and rows[0].name == "ebm"
        items = session.scalars(
            select(Item).where(Item.study_id == study_id, Item.kind == "data", Item.length == 2)
        ).all()
        hyps = [i.continuation for i in items]
        refs = [i.provenance["data_continuation"] for i in items]
        stored = stored_ebm(session, session.get(Study, study_id))
        bleu = next(
            t for t in stored.scores.scores if (t.length, t.kind, t.score) == (2, "data", "bleu")
        )
        assert bleu.value == pytest.approx(
            sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score, rel=1e-12
        )
        assert stored.provenance["items"] == 32
        by = session.scalars(select(AuditEvent.detail).where(AuditEvent.action == "score")).all()
        assert [d["by"] for d in by] == ["worker"]


def test_a_next_word_study_is_not_scored(db, tmp_path):
    _, _, sessionmaker = db
    _ratings_study(sessionmaker, tmp_path, kind="")
    _run(db)
    with sessionmaker() as session:
        assert session.scalars(select(StudyScore)).all() == []


def test_a_failed_score_is_logged_and_leaves_the_job_done(db, tmp_path, monkeypatch, caplog):
    _, _, sessionmaker = db
    study_id, job_id = _ratings_study(sessionmaker, tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("scores broke")

    monkeypatch.setattr("app.studytypes.ratings.ebm.score_study", broken)
    with caplog.at_level(logging.ERROR, logger="ebc.worker"):
        _run(db)
    assert "EB-M scores of r failed" in caplog.text and "scores broke" in caplog.text
    with sessionmaker() as session:
        assert session.get(PrecomputeJob, job_id).status is JobStatus.done
        assert session.scalars(select(StudyScore)).all() == []
        n = len(session.scalars(select(Item).where(Item.study_id == study_id)).all())
        assert n == 32


def test_every_kind_shares_the_data_items_prompts_so_every_continuation_has_a_reference(
    db, tmp_path
):
    """Item i of every kind of a length takes data item i's line (one prompt C, a prefix
    from the data or from the model), long enough for the data continuation: EB-M scores
    every continuation, and resamples the kinds' prompts together."""
    _, _, sessionmaker = db
    study_id, _ = _ratings_study(sessionmaker, tmp_path)
    _run(db)
    with sessionmaker() as session:
        items = session.scalars(select(Item).where(Item.study_id == study_id)).all()
        line = {(i.length, i.kind, i.index): i.provenance["line"] for i in items}
        prompt = {(i.length, i.kind, i.index): i.prompt for i in items}
        for (length, kind, index), value in line.items():
            assert value is not None and value == line[(length, "data", index)]
            assert prompt[(length, kind, index)] == prompt[(length, "data", index)]
        stored = stored_ebm(session, session.get(Study, study_id))
        assert stored.scores.paired_lengths == [2, 4]
        assert not [w for w in stored.scores.warnings if "reference" in w]
