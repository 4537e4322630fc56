"""The EB-M results job on both databases: scores from the stored continuations and the
dataset, stored with their provenance, read back; what it refuses, storing nothing."""

from __future__ import annotations

import math

import pytest
import sacrebleu
from sqlalchemy import func, select

from app.audit.service import CLI
from app.models import AuditEvent, Item, StudyScore, StudyType
from app.software import package_version
from app.studytypes.ratings.ebm import ScoreError, score_study, stored_ebm
from app.studytypes.registry import STUDY_TYPES, study_type_of
from tests.factories import StudyFactory
from tests.results.ebm_study import L_GEN, make_ebm_study, write_corpus


@pytest.fixture
def made(session, tmp_path):
    return make_ebm_study(session, write_corpus(tmp_path / "corpus.txt"))


def _scores(session, study) -> int:
    return session.scalar(select(func.count()).where(StudyScore.study_id == study.id))


def _score(stored, length, kind, name):
    return next(
        t for t in stored.scores.scores if (t.length, t.kind, t.score) == (length, kind, name)
    )


def test_the_job_stores_the_libraries_scores_with_their_provenance(session, made):
    assert stored_ebm(session, made.study) is None
    score_study(session, made.study, b=200, seed=3, by=CLI)
    session.commit()
    stored = stored_ebm(session, made.study)
    assert stored is not None and stored.scores.b == 200 and stored.scores.seed == 3
    for (length, kind), pairs in made.texts.items():
        hyps = [c for c, r in pairs if r is not None]
        refs = [r for _, r in pairs if r is not None]
        want = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score
        got = _score(stored, length, kind, "bleu")
        assert got.value == pytest.approx(want, rel=1e-12), (length, kind)
        assert got.n == len(refs)
    # A model prompt whose line is too short has no data continuation: left out, and said.
    assert _score(stored, 4, "model", "bleu").n < 12 == _score(stored, 4, "model", "entropy").n
    assert any("no data continuation" in w for w in stored.scores.warnings)
    for length in (4, 6):
        ebm = next(
            r
            for r in stored.scores.ratios
            if (r.length, r.score, r.kind) == (length, "bleu", "model")
        )
        data, model = (
            _score(stored, length, "data", "bleu"),
            _score(stored, length, "model", "bleu"),
        )
        assert ebm.value == pytest.approx(data.value / model.value)
        assert ebm.value > 1  # the data continuations stay closer to the data
    assert {e.length for e in stored.scores.eb_bleu} == {4, 6}
    prov = stored.provenance
    assert prov["libraries"] == {
        "sacrebleu": package_version("sacrebleu"),
        "nltk": package_version("nltk"),
    }
    assert prov["b"] == 200 and prov["seed"] == 3 and prov["continuation_words"] == L_GEN
    assert prov["dataset"]["sha256"] == made.study.dataset_sha256
    assert "no WordNet" in prov["settings"]["meteor"]["matching"]
    assert prov["items"] == 48  # 2 lengths x 2 kinds x 12; skipped and attention left out
    event = session.scalars(select(AuditEvent).where(AuditEvent.action == "score")).one()
    assert event.study_id == made.study.id and event.detail["by"] == "cli"


def test_the_newest_scores_are_current(session, made):
    score_study(session, made.study, b=100, seed=1, by=None)
    score_study(session, made.study, b=120, seed=2, by=None)
    assert _scores(session, made.study) == 2
    assert stored_ebm(session, made.study).scores.b == 120


def test_a_next_word_study_has_no_scores(session):
    """EB-M is a capability of the ratings type: a next-word study's plug-in has none, and
    says why in its own words."""
    study = StudyFactory(session, "nw").study
    plugin = study_type_of(study)
    assert plugin.scores is None
    assert plugin.refusal(study, "EB-M") == "nw is a next-word study: EB-M scores ratings studies"
    assert STUDY_TYPES[StudyType.ratings].scores is not None


def test_nothing_to_score_before_precompute(session, tmp_path):
    made = make_ebm_study(session, write_corpus(tmp_path / "c.txt"))
    session.execute(Item.__table__.delete().where(Item.study_id == made.study.id))
    with pytest.raises(ScoreError, match="no continuations yet"):
        score_study(session, made.study, by=CLI)
    assert _scores(session, made.study) == 0


def test_a_missing_or_changed_dataset_is_refused_and_nothing_stored(session, made):
    made.dataset.write_text(made.dataset.read_text() + "one more line\n")
    with pytest.raises(ScoreError, match="changed since the items were made"):
        score_study(session, made.study, by=CLI)
    made.dataset.unlink()
    with pytest.raises(ScoreError, match="is not here"):
        score_study(session, made.study, by=CLI)
    assert _scores(session, made.study) == 0
    assert session.scalar(select(func.count()).where(AuditEvent.action == "score")) == 0


def test_a_reference_that_is_not_what_the_worker_recorded_is_refused(session, made):
    item = session.scalars(
        select(Item)
        .where(Item.study_id == made.study.id, Item.kind == "data", ~Item.is_attention)
        .order_by(Item.id)
        .limit(1)
    ).one()
    item.provenance = {**item.provenance, "data_continuation": "not the line's words at all"}
    session.flush()
    with pytest.raises(ScoreError, match=f"item {item.id}"):
        score_study(session, made.study, by=CLI)
    assert _scores(session, made.study) == 0


def test_b_out_of_range_is_refused(session, made):
    with pytest.raises(ScoreError, match="resamples"):
        score_study(session, made.study, b=1, by=CLI)
    assert _scores(session, made.study) == 0


def test_a_stored_document_with_no_value_reads_back_as_nan(session, made):
    score_study(session, made.study, b=100, seed=0, by=None)
    row = session.scalars(select(StudyScore)).one()
    doc = dict(row.scores)
    doc["ratios"] = [{**doc["ratios"][0], "low": None}, *doc["ratios"][1:]]
    row.scores = doc
    session.flush()
    assert math.isnan(stored_ebm(session, made.study).scores.ratios[0].low)
