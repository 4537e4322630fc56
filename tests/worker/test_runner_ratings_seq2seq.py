"""A ratings study of a translation model (issue 34), end to end against a real database and a
tiny Marian-shaped model: the study file accepts the first paper's forced-prefix kinds and
refuses the rest; the worker's items are translations after DATA, NORMAL, UNREL and RAND target
prefixes (the samples' very translations, when the study is made on the samples page); a person
rates a HIT through the pages, which show the source (escaped) beside the marked prefix; the
results API's EB-M holds sacrebleu's BLEU and chrF of the stored texts."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import sacrebleu
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from app.annotation.identities import invite_token
from app.auth.service import create_api_token
from app.main import create_app
from app.models import ForcedSample, Item, Rating, Study, User
from app.precompute import service
from app.results.stats.textscores import BLEU_SETTINGS, CHRF_SETTINGS
from app.studies.schemas import StudyConfig
from app.studies.service import build_and_open, create_study
from tests.hits.factory import annotator
from tests.web.accounts import csrf_of, login, make_user
from tests.worker.conftest import corpus_lines
from worker.runner import Worker, WorkerOptions

KINDS = ["data", "model", "unrelated", "random"]  # DATA, NORMAL, UNREL, RAND


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory, marian):
    path = tmp_path_factory.mktemp("marian")
    marian.model.save_pretrained(path)
    marian.tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def pairs_file(tmp_path):
    """Sources with markup in them (shown escaped), references of other corpus lines."""
    path = tmp_path / "pairs.tsv"
    rows = [
        f"<i>{line}</i> & co\t{corpus_lines()[(i + 3) % 80]}"
        for i, line in enumerate(corpus_lines(40))
    ]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _config(marian_dir, pairs_file, **kw) -> StudyConfig:
    return StudyConfig(
        **{
            "slug": "nmt",
            "title": "Translations",
            "task": "seq2seq",
            "model": {"name": str(marian_dir)},
            "dataset": {"path": str(pairs_file), "format": "tsv"},
            "prefix_lengths": [2],
            "items_per_cell": 4,
            "decoding": {"beam_width": 2},
            "seed": 7,
            **kw,
        }
    )


def test_the_study_file_takes_the_forced_prefix_kinds_and_says_why_not_others(
    marian_dir, pairs_file
):
    config = _config(marian_dir, pairs_file, type="ratings", kinds=KINDS)
    assert config.kinds == KINDS and config.task.value == "seq2seq"
    for kind in ("data_shuffled", "data_corrupted@0.3", "model_corrupted@0.3"):
        with pytest.raises(ValidationError) as refused:
            _config(marian_dir, pairs_file, type="ratings", kinds=["data", "model", kind])
        message = str(refused.value)
        assert kind in message and "forced target prefixes" in message
        assert "language-model diagnostics" in message
    # A next-word translation study still takes them (only the ratings type refuses).
    assert _config(marian_dir, pairs_file, kinds=["data", "model", "data_corrupted@0.3"])


def _samples(sm, study_id) -> dict:
    with sm() as session:
        rows = session.scalars(select(ForcedSample).where(ForcedSample.study_id == study_id))
        return {(s.kind, s.index): s for s in rows}


def test_people_rate_translations_after_forced_prefixes(db, marian_dir, pairs_file):
    database, engine, sm = db
    settings = database.settings()
    with sm() as session:
        owner_id = make_user(session, "bob", is_admin=False).id
    with sm() as session, session.begin():
        study = create_study(session, _config(marian_dir, pairs_file, samples={"per_kind": 8}))
        study.created_by_id = owner_id
        service.plan_precompute(session, study, shard_size=4)
        study_id = study.id
    Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine).run()
    samples = _samples(sm, study_id)
    assert Counter(k for k, _ in samples) == dict.fromkeys(KINDS, 8)
    # Every kind's sample i translates the same source (a ratings study's pairing).
    for index in range(8):
        assert len({samples[(k, index)].source for k in KINDS}) == 1
    with TestClient(create_app(settings), base_url="http://testserver") as client:
        assert login(client, "bob").status_code == 303
        page = client.get("/dashboard/studies/nmt/samples")
        assert "Make the ratings study" in page.text
        made = client.post(
            "/dashboard/studies/nmt/samples/ratings",
            data={"csrf_token": csrf_of(page.text), "new_slug": "nmt-rated"},
            follow_redirects=False,
        )
        assert made.status_code == 303, made.text
    with sm() as session, session.begin():
        rated = session.scalar(select(Study).where(Study.slug == "nmt-rated"))
        assert rated.study_type.value == "ratings" and rated.task.value == "seq2seq"
        assert rated.kinds == KINDS
        service.plan_precompute(session, rated, shard_size=4)
        rated_id = rated.id
    Worker(settings, WorkerOptions(once=True, device="cpu"), engine=engine).run()
    with sm() as session:
        items = session.scalars(select(Item).where(Item.study_id == rated_id)).all()
    shown = [i for i in items if not i.is_attention]
    rows = {i + 1: line.split("\t") for i, line in enumerate(pairs_file.read_text().splitlines())}
    # The ratings study's items are the samples: same source, prefix and translation.
    assert len(shown) == 32
    for item in shown:
        sample = samples[(item.kind, item.index)]
        assert (item.source, item.words) == (sample.source, sample.prefix)
        assert item.skip_reason == sample.skip_reason and item.choices == []
        source, reference = rows[item.provenance["line"]]
        assert item.source == source  # the source intact
        if item.skip_reason is not None:
            assert item.skip_reason in {"beam_too_short", "translation_ends_at_prefix"}
            continue
        assert item.continuation == sample.continuation
        assert item.continuation and item.provenance["translation"]["num_beams"] == 2
        if item.kind == "data":
            assert item.words.split() == reference.split()[:3]
            assert item.provenance["data_continuation"] == " ".join(reference.split()[3:])
    made_kinds = {i.kind for i in shown if i.skip_reason is None}
    assert made_kinds >= {"data", "model"}
    attention = [i for i in items if i.is_attention]
    assert attention and all(i.continuation and i.source for i in attention)

    # EB-M, scored by the worker as the job ended: BLEU and chrF as sacrebleu computes them on
    # the stored texts (each continuation against its reference's rest).
    with sm() as session, session.begin():
        admin = User(username="api", password_hash="unused", is_admin=True)
        session.add(admin)
        session.flush()
        auth = {"Authorization": f"Bearer {create_api_token(session, admin, 't').secret}"}
    with TestClient(create_app(settings), base_url="http://testserver") as client:
        doc = client.get("/api/v1/studies/nmt-rated/results", headers=auth).json()
    ebm = doc["ebm"]
    assert ebm is not None, doc
    assert set(ebm["scores"]["names"]) >= {"bleu", "chrf"}
    values = {(s["kind"], s["score"]): s for s in ebm["scores"]["scores"] if s["length"] == 3}
    for kind in made_kinds:
        done = [i for i in shown if i.kind == kind and i.skip_reason is None]
        refs = [" ".join(rows[i.provenance["line"]][1].split()[3:]) for i in done]
        hyps = [i.continuation for i in done]
        bleu = sacrebleu.metrics.BLEU(tokenize=BLEU_SETTINGS["tokenize"]).corpus_score(hyps, [refs])
        chrf = sacrebleu.metrics.CHRF(**CHRF_SETTINGS).corpus_score(hyps, [refs])
        assert values[(kind, "bleu")]["value"] == pytest.approx(bleu.score)
        assert values[(kind, "chrf")]["value"] == pytest.approx(chrf.score)
        assert values[(kind, "chrf")]["n"] == len(done)
        cell = values[(kind, "chrf")]  # EB-M's intervals (none where they say nothing)
        assert cell["method"] == values[(kind, "bleu")]["method"]
        if cell["degenerate"]:
            assert cell["degenerate_reason"] and cell["low"] is None
        else:
            assert cell["low"] <= cell["value"] <= cell["high"]
    assert any(r["score"] == "chrf" for r in ebm["scores"]["ratios"])

    # A person rates a HIT through the pages: the source (escaped) beside the marked prefix.
    with sm() as session, session.begin():
        rated = session.get(Study, rated_id)
        rated.min_ms_per_item = 0
        assert build_and_open(session, rated).hits >= 1
        link = f"/a/{invite_token(settings.secret_key, annotator(session, rated))}"
    sources_seen = 0
    with TestClient(create_app(settings), base_url="http://testserver") as client:
        r = client.get(link)
        for _ in range(40):  # two steps a pair, up to the end of the first HIT
            assert r.status_code == 200 and r.template.name == "ratings/rate.html", r.text
            fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', r.text))
            if fields["step"] == "consistency":
                assert 'id="source"' in r.text and '<mark class="prefix"' in r.text
                assert "&lt;i&gt;" in r.text and "&amp; co" in r.text and "<i>" not in r.text
                sources_seen += 1
            else:
                assert 'id="source"' not in r.text  # the quality step: the text alone
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
        assert ratings and len(ratings) == sources_seen
        assert all(x.quality == 3 and x.consistency == 4 for x in ratings)
        attention_rated = [x for x in ratings if session.get(Item, x.item_id).is_attention]
    with TestClient(create_app(settings), base_url="http://testserver") as client:
        r = client.get("/api/v1/studies/nmt-rated/results?b=200", headers=auth)
    assert r.status_code == 200, r.text
    # Human ratings' EB-M as for a language model (a 3 on an attention pair fails it: the
    # figures are shown without exclusions, and say so).
    main = r.json()["ratings"]["results"]
    assert [row["length"] for row in main["table"]] == [3]
    assert main["n_ratings"] == len(ratings) - len(attention_rated)
