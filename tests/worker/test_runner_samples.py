"""Forced-prefix samples made by the worker (issue 34) against a real database: a study that asks
for them (`[samples]`) gets them when its items are done, for a tiny GPT-2-shaped language model
(continuations after data, model, random and shuffled prefixes) and a tiny Marian-shaped
translation model (translations after DATA, NORMAL, UNREL and RAND prefixes, the source intact,
BLEU for DATA and NORMAL only); a re-run stores nothing twice and makes the same samples."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select

from app.annotation.identities import invite_token
from app.main import create_app
from app.models import ForcedSample, Item, Rating, Study, StudyScore, User
from app.precompute import service
from app.precompute.samples import SCORE_NAME
from app.studies.schemas import StudyConfig
from app.studies.service import build_and_open, create_study, share_study
from tests.hits.factory import annotator
from tests.web.accounts import csrf_of, login, make_user
from tests.worker.conftest import corpus_lines
from worker import runner
from worker.runner import Worker, WorkerOptions

WORDS = 4
EBC = str(Path(sys.executable).with_name("ebc"))


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


def _rerun_samples(database, engine, sm, study_id) -> tuple[int, str | None]:
    worker = Worker(database.settings(), WorkerOptions(device="cpu"), engine=engine)
    with sm() as session:
        study = session.get(Study, study_id)
        job = service.latest_job(session, study)
        session.expunge_all()
    return worker.samples_when_done(study, job.id)


def test_a_language_model_study_gets_its_samples_once(db, model_dir, dataset_file, monkeypatch):
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
    assert _rerun_samples(database, engine, sm, study_id) == (0, None)
    assert len(_samples(sm, study_id)) == 12
    with sm() as session, session.begin():
        session.execute(delete(ForcedSample).where(ForcedSample.kind == "model"))
    assert _rerun_samples(database, engine, sm, study_id) == (3, None)
    after = {(s.kind, s.index): (s.prefix, s.continuation) for s in _samples(sm, study_id)}
    assert after == before
    # A failure after the first cell keeps the first cell's samples (each cell is stored as
    # it is made): a fault injected around the real maker, after its first cell.
    with sm() as session, session.begin():
        session.execute(delete(ForcedSample))
    real = runner.make_samples

    def first_cell_only(model, dataset, config, spec, cells):
        if cells != [(3, "data")]:
            raise RuntimeError("out of memory")
        return real(model, dataset, config, spec, cells)

    monkeypatch.setattr(runner, "make_samples", first_cell_only)
    assert _rerun_samples(database, engine, sm, study_id) == (3, "RuntimeError: out of memory")
    kept = {(s.kind, s.index): (s.prefix, s.continuation) for s in _samples(sm, study_id)}
    assert kept == {k: v for k, v in before.items() if k[0] == "data"}


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


def test_people_rate_the_samples_through_a_ratings_study(db, model_dir, dataset_file):
    """The whole path: samples made by the worker, a ratings study made from them on the
    samples page, its items made by the worker (the very same continuations), HITs built, and
    a person's ratings stored through the annotator pages."""

    database, engine, sm = db
    with sm() as session:
        owner = make_user(session, "bob", is_admin=False)
        viewer = make_user(session, "carol", is_admin=False)
        owner_id, viewer_id = owner.id, viewer.id
    config = _lm_config(model_dir, dataset_file, per_kind=4)
    study_id = _run(database, engine, sm, config)
    with sm() as session, session.begin():
        study = session.get(Study, study_id)
        study.created_by_id = owner_id
        share_study(session, study, session.get(User, viewer_id), "view")
    samples = {(s.kind, s.index): s for s in _samples(sm, study_id)}
    settings = database.settings()
    with TestClient(create_app(settings), base_url="http://testserver") as client:
        # A viewer sees the samples but cannot make a study of them.
        assert login(client, "carol").status_code == 303
        page = client.get("/dashboard/studies/lm-samples/samples")
        assert page.status_code == 200 and "Make the ratings study" not in page.text
        csrf = csrf_of(client.get("/dashboard").text)
        refused = client.post(
            "/dashboard/studies/lm-samples/samples/ratings",
            data={"csrf_token": csrf, "new_slug": "rated"},
            follow_redirects=False,
        )
        assert refused.status_code in (403, 404)
        client.cookies.clear()
        assert login(client, "bob").status_code == 303
        page = client.get("/dashboard/studies/lm-samples/samples")
        assert "Make the ratings study" in page.text
        csrf = csrf_of(page.text)
        bad = client.post(
            "/dashboard/studies/lm-samples/samples/ratings",
            data={"csrf_token": csrf, "new_slug": "Not A Slug"},
            follow_redirects=False,
        )
        assert bad.status_code == 400 and 'id="rate-error"' in bad.text
        made = client.post(
            "/dashboard/studies/lm-samples/samples/ratings",
            data={"csrf_token": csrf, "new_slug": "rated"},
            follow_redirects=False,
        )
        assert made.status_code == 303 and made.headers["location"] == "/dashboard/studies/rated"
        again = client.post(
            "/dashboard/studies/lm-samples/samples/ratings",
            data={"csrf_token": csrf, "new_slug": "rated"},
            follow_redirects=False,
        )
        assert again.status_code == 400 and "already exists" in again.text
    with sm() as session, session.begin():
        rated = session.scalar(select(Study).where(Study.slug == "rated"))
        assert rated.study_type.value == "ratings" and rated.created_by_id == owner_id
        assert rated.kinds == ["data", "model", "random", "data_shuffled"]
        service.plan_precompute(session, rated, shard_size=4)
        rated_id = rated.id
    Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine).run()
    with sm() as session:
        items = session.scalars(
            select(Item).where(Item.study_id == rated_id, Item.is_attention.is_(False))
        ).all()
    # The ratings study's items are the samples: same prefixes, same continuations.
    assert len(items) == len(samples) == 16
    for item in items:
        sample = samples[(item.kind, item.index)]
        assert (item.prompt, item.words) == (sample.prompt, sample.prefix)
        assert item.continuation == sample.continuation
    with sm() as session, session.begin():
        rated = session.get(Study, rated_id)
        rated.min_ms_per_item = 0
        report = build_and_open(session, rated)
        assert report.hits >= 1
        link = f"/a/{invite_token(settings.secret_key, annotator(session, rated))}"
    with TestClient(create_app(settings), base_url="http://testserver") as client:
        r = client.get(link)
        for _ in range(40):  # two steps a pair, up to the end of the first HIT
            assert r.status_code == 200 and r.template.name == "ratings/rate.html", r.text
            fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', r.text))
            value = "3" if fields["step"] == "quality" else "4"
            post = client.post(
                f"{link}/submit", data={**fields, "rating": value}, follow_redirects=False
            )
            assert post.status_code == 303
            r = client.get(post.headers["location"])
            if "n=" in post.headers["location"]:
                break
    with sm() as session:
        ratings = session.scalars(select(Rating)).all()
        rated_items = {session.get(Item, x.item_id) for x in ratings}
    assert ratings and all(x.quality == 3 and x.consistency == 4 for x in ratings)
    shown = [i for i in rated_items if not i.is_attention]
    assert shown and all((i.kind, i.index) in samples for i in shown)


def test_ebc_samples_makes_what_is_missing_and_says_why_it_cannot(db, model_dir, dataset_file):
    database, engine, sm = db
    study_id = _run(database, engine, sm, _lm_config(model_dir, dataset_file))
    with sm() as session, session.begin():
        session.execute(delete(ForcedSample).where(ForcedSample.kind == "random"))
    env = {**os.environ, "DATABASE_URL": database.url, "EBC_ENV": "test", "OMP_NUM_THREADS": "1"}

    def ebc(*args):
        return subprocess.run(
            [EBC, *args], env=env, capture_output=True, text=True, timeout=300, check=False
        )

    done = ebc("samples", "lm-samples", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "lm-samples: 3 forced-prefix samples stored" in done.stdout
    assert len(_samples(sm, study_id)) == 12
    with sm() as session, session.begin():
        config = _lm_config(model_dir, dataset_file).model_copy(update={"slug": "new"})
        create_study(session, config)
    refused = ebc("samples", "new")
    assert refused.returncode != 0 and "items are not done" in refused.stderr
