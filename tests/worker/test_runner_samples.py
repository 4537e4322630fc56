"""Forced-prefix samples made by the worker (issue 34) against a real database: a study that asks
for them (`[samples]`) gets them when its items are done, for a tiny GPT-2-shaped language model
(continuations after data, model, random and shuffled prefixes) and a tiny Marian-shaped
translation model (translations after DATA, NORMAL, UNREL and RAND prefixes, the source intact,
BLEU for DATA and NORMAL only); a re-run stores nothing twice and makes the same samples."""

from __future__ import annotations

from collections import Counter

import pytest
import sacrebleu
from sqlalchemy import delete, func, select

from app.models import ForcedSample, Item, Study, StudyScore
from app.precompute import service
from app.precompute.samples import SCORE_NAME
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from tests.worker.conftest import corpus_lines
from worker.runner import Worker, WorkerOptions

WORDS = 4


def _lm_config(model_dir, dataset_file, **kw) -> StudyConfig:
    return StudyConfig(
        slug="lm-samples",
        title="Samples",
        model={"name": str(model_dir)},
        dataset={"path": str(dataset_file)},
        prefix_lengths=[3],
        items_per_cell=4,
        prompt_words=2,
        seed=5,
        samples={"per_kind": 3, "words": WORDS, **kw},
    )


def _run(database, engine, sm, config) -> int:
    with sm() as session, session.begin():
        study = create_study(session, config)
        service.plan_precompute(session, study, shard_size=4)
        study_id = study.id
    Worker(database.settings(), WorkerOptions(once=True, device="cpu"), engine=engine).run()
    return study_id


def _samples(sm, study_id) -> list[ForcedSample]:
    with sm() as session:
        return session.scalars(
            select(ForcedSample).where(ForcedSample.study_id == study_id).order_by(ForcedSample.id)
        ).all()


def _rerun_samples(database, engine, sm, study_id) -> None:
    worker = Worker(database.settings(), WorkerOptions(device="cpu"), engine=engine)
    with sm() as session:
        study = session.get(Study, study_id)
        job = service.latest_job(session, study)
        session.expunge_all()
    worker._samples_when_done(study, job.id)


def test_a_language_model_study_gets_its_samples_once(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id = _run(database, engine, sm, _lm_config(model_dir, dataset_file))
    samples = _samples(sm, study_id)
    kinds = ("data", "model", "random", "data_shuffled")  # the paper's, by default
    assert Counter((s.length, s.kind) for s in samples) == {(3, k): 3 for k in kinds}
    lines = [line.split() for line in corpus_lines(400)]
    made = [s for s in samples if s.skip_reason is None]
    assert len(made) >= 9
    for s in made:
        assert len(s.prefix.split()) == 3 and len(s.continuation.split()) == WORDS
        assert len(s.prompt.split()) == 2 and s.source is None and s.reference is None
        assert s.scores is None  # no BLEU for a language model's continuations
        assert s.provenance["continuation"]["sampling"]["top_k"] is None  # ancestral
        if s.kind == "data":
            line = lines[s.provenance["line"] - 1]
            assert s.prompt.split() + s.prefix.split() == line[:5]
        if s.kind == "data_shuffled":
            line = lines[s.provenance["line"] - 1]
            assert Counter(s.prefix.split()) == Counter(line[2:5])
    with sm() as session:  # the study's own items are next-word items, untouched
        items = session.scalars(select(Item).where(Item.study_id == study_id)).all()
        assert items and all(i.continuation is None for i in items)
    # Again: nothing is stored twice.  Removed, then made again: the same samples.
    before = {(s.kind, s.index): (s.prefix, s.continuation) for s in samples}
    _rerun_samples(database, engine, sm, study_id)
    assert len(_samples(sm, study_id)) == 12
    with sm() as session, session.begin():
        session.execute(delete(ForcedSample).where(ForcedSample.kind == "model"))
    _rerun_samples(database, engine, sm, study_id)
    after = {(s.kind, s.index): (s.prefix, s.continuation) for s in _samples(sm, study_id)}
    assert after == before


def test_a_study_without_samples_gets_none(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id = _run(database, engine, sm, _lm_config(model_dir, dataset_file, per_kind=0))
    assert _samples(sm, study_id) == []


def test_a_failure_is_recorded_for_the_page(db, model_dir, dataset_file):
    database, engine, sm = db
    # Lines of 2 + 30 + 4 words: the corpus has none, so the samples cannot be made.
    study_id = _run(database, engine, sm, _lm_config(model_dir, dataset_file, lengths=[30]))
    assert _samples(sm, study_id) == []
    with sm() as session:
        (score,) = session.scalars(select(StudyScore).where(StudyScore.study_id == study_id))
        assert score.name == SCORE_NAME and "long enough" in score.scores["error"]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory, marian):
    path = tmp_path_factory.mktemp("marian")
    marian.model.save_pretrained(path)
    marian.tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.tsv"
    rows = [f"{line}\t{corpus_lines()[(i + 3) % 80]}" for i, line in enumerate(corpus_lines(40))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_a_translation_study_gets_translations_after_forced_prefixes(db, marian_dir, pairs_file):
    database, engine, sm = db
    config = StudyConfig(
        slug="nmt-samples",
        title="Forced prefixes",
        task="seq2seq",
        model={"name": str(marian_dir)},
        dataset={"path": str(pairs_file), "format": "tsv"},
        prefix_lengths=[2],
        items_per_cell=4,
        decoding={"beam_width": 2},
        seed=7,
        samples={"per_kind": 4},
    )
    study_id = _run(database, engine, sm, config)
    samples = _samples(sm, study_id)
    kinds = ("data", "model", "unrelated", "random")
    assert Counter((s.length, s.kind) for s in samples) == {(3, k): 4 for k in kinds}
    rows = {i + 1: line.split("\t") for i, line in enumerate(pairs_file.read_text().splitlines())}
    made = [s for s in samples if s.skip_reason is None]
    assert {s.kind for s in made} == set(kinds)
    for s in made:
        source, reference = rows[s.provenance["line"]]
        assert s.source == source and s.reference == reference  # the source intact
        assert len(s.prefix.split()) == 3 and s.prompt is None
        assert s.provenance["translation"]["num_beams"] == 2
        if s.kind == "data":
            assert s.prefix.split() == reference.split()[:3]
        hypothesis = " ".join(p for p in (s.prefix, s.continuation) if p)
        if s.kind in ("data", "model"):  # BLEU for DATA and NORMAL only
            expected = sacrebleu.sentence_bleu(hypothesis, [reference], tokenize="none").score
            assert s.scores["bleu"] == pytest.approx(expected)
        else:
            assert s.scores is None
    with sm() as session:
        (score,) = session.scalars(select(StudyScore).where(StudyScore.study_id == study_id))
        cells = {c["kind"]: c for c in score.scores["bleu"]}
        assert set(cells) == {"data", "model"}
        data = [s for s in made if s.kind == "data"]
        hyps = [" ".join(p for p in (s.prefix, s.continuation) if p) for s in data]
        expected = sacrebleu.corpus_bleu(hyps, [[s.reference for s in data]], tokenize="none")
        assert cells["data"]["bleu"] == pytest.approx(expected.score)
        assert cells["data"]["n"] == len(data)
        n = session.scalar(select(func.count()).select_from(ForcedSample))
        assert n == 16
