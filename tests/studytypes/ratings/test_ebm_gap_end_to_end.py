"""A ratings study with a gap kind from end to end, both databases: the worker (a tiny GPT-2
built in the test) makes its pairs, the gap pairs' continuations after the model's gap, and
scores EB-M and EB-M_gap when precompute ends; simulated raters rate every pair, the gap pairs
too, through the live server's pages; the researcher reads EB-M_gap on the results page, in
the API's JSON, in ebm.csv and ebm.tex, and as the EB-M_gap figure."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import httpx
import pytest
import sacrebleu
from sqlalchemy import select

from app.auth.service import create_api_token
from app.hits.service import build_hits
from app.models import Item, Study, StudyStatus, User
from app.precompute import service
from app.simulate.godview import GodView
from app.studies.schemas import StudyConfig
from app.studies.service import create_study
from app.studytypes.ratings.http_crowd import run_http_raters
from app.studytypes.ratings.judges import RaterJudge
from tests.web.accounts import csrf_of, login, password_hash
from tests.worker.conftest import corpus_lines, tiny_gpt2, word_tokenizer
from worker.runner import Worker, WorkerOptions

GAP = "data_shuffled+gap@2"
L_GEN, PROMPT = 4, 2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model")
    tok = word_tokenizer()
    tiny_gpt2(tok, seed=1, init=0.2).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _config(model_dir: Path, dataset: Path) -> StudyConfig:
    return StudyConfig(
        slug="gap",
        title="Gap",
        type="ratings",
        model={"name": str(model_dir)},
        dataset={"path": str(dataset)},
        prefix_lengths=[3, 5],  # EB-M_gap at l = 3 (data at 3 + 2); none at l = 5
        kinds=["data", "model", GAP],
        prompt_words=PROMPT,
        items_per_cell=12,
        seed=3,
        hits={"mix": {"data": 4, "model": 4, GAP: 2}, "attention": 0, "replicas": 1},
        ratings={"continuation_words": L_GEN},
    )


def test_a_ratings_study_with_a_gap_kind_from_the_worker_to_the_pages(live_db, model_dir, tmp_path):
    dataset = tmp_path / "lines.txt"
    dataset.write_text("\n".join(corpus_lines(400)) + "\n", encoding="utf-8")
    sm = live_db.sm
    with sm() as session, session.begin():
        study = create_study(session, _config(model_dir, dataset))
        service.plan_precompute(session, study, shard_size=6)
        study_id = study.id
    worker = Worker(live_db.settings, WorkerOptions(once=True, device="cpu"), engine=live_db.engine)
    worker.run()

    with sm() as session, session.begin():
        study = session.get(Study, study_id)
        items = session.scalars(select(Item).where(Item.study_id == study_id)).all()
        by = {(i.length, i.kind, i.index): i for i in items if not i.is_attention}
        gap_items = [i for i in by.values() if i.kind == GAP]
        assert len(gap_items) == 24
        lines = [line.split() for line in corpus_lines(400)]
        for item in gap_items:
            # The gap item's line is the data item's at l + 2; its reference, their shared one.
            if item.length == 3:
                clean = by[(5, "data", item.index)]
                assert item.provenance["line"] == clean.provenance["line"]
                assert item.prompt == clean.prompt
            words = lines[item.provenance["line"] - 1]
            start = PROMPT + item.length + 2
            assert item.provenance["data_continuation"] == " ".join(words[start : start + L_GEN])
            if item.skip_reason is None:
                assert len(item.words.split()) == item.length + 2
                assert item.provenance["gap"]["gap_words"] == item.words.split()[item.length :]
                assert len(item.continuation.split()) == L_GEN
        build_hits(session, study)
        study.status = StudyStatus.collecting
        admin = User(username="ada", password_hash=password_hash(), is_admin=True)
        session.add(admin)
        session.flush()
        token = create_api_token(session, admin, "tests").secret
        # EB-M_gap as the worker stored it: BLEU of data at 5 over BLEU of the gap kind at 3.
        kept = [i for i in items if not i.is_attention and i.skip_reason is None]

        def bleu(length, kind):
            mine = [i for i in kept if (i.length, i.kind) == (length, kind)]
            hyps = [i.continuation for i in mine]
            refs = [i.provenance["data_continuation"] for i in mine]
            return sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score

        want = bleu(5, "data") / bleu(3, GAP)

        def lines_of(length, kind):
            return {i.provenance["line"] for i in kept if (i.length, i.kind) == (length, kind)}

        # Resampled by shared prompts when no pair of either cell was skipped.
        paired = lines_of(5, "data") == lines_of(3, GAP)

    with live_db.serve() as base:
        judge = RaterJudge.calibrated(GodView(sm, study_id).study(), seed=2)
        run = run_http_raters(base, sm, study_id, live_db.settings.secret_key, judge, seed=2)
        rated = {r.kind for r in run.ratings}
        assert GAP in rated and {"data", "model"} <= rated

        api = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=api, timeout=60) as client:
            doc = client.get("/api/v1/studies/gap/results").json()
            gaps = doc["ebm"]["scores"]["gap_ratios"]
            bleu_gap = next(g for g in gaps if g["score"] == "bleu")
            assert (bleu_gap["length"], bleu_gap["l_gap"], bleu_gap["kind"]) == (3, 2, GAP)
            assert bleu_gap["reference_length"] == 5
            assert bleu_gap["value"] == pytest.approx(want, rel=1e-9)
            assert bleu_gap["paired"] is paired
            assert {g["length"] for g in gaps} == {3}  # l = 5 has no data cell at 7
            assert any("l + g = 7" in w for w in doc["ebm"]["scores"]["warnings"])
            # People's ratings of the gap pairs are in the ratings figures too.
            cells = doc["ratings"]["results"]["cells"]
            assert any(c["kind"] == GAP for c in cells)

            rows = list(
                csv.DictReader(io.StringIO(client.get("/api/v1/studies/gap/results/ebm.csv").text))
            )
            row = next(r for r in rows if r["figure"] == "ebm_gap" and r["score"] == "bleu")
            assert (row["length"], row["l_gap"], row["reference_length"]) == ("3", "2", "5")
            assert float(row["value"]) == pytest.approx(want, rel=1e-9)
            tex = client.get("/api/v1/studies/gap/results/ebm.tex").text
            assert "EB-M$_{gap}$" in tex and "data\\_shuffled & 3 & 2 & 5 &" in tex
            svg = client.get("/api/v1/studies/gap/results/ebm_gap.svg")
            assert svg.headers["content-type"].startswith("image/svg+xml")
            assert "data_shuffled, l = 3" in svg.text and "l_gap" in svg.text
            png = client.get("/api/v1/studies/gap/results/ebm_gap.png")
            assert png.content[:8] == b"\x89PNG\r\n\x1a\n"
            assert client.get("/api/v1/studies/gap/results/ebm_gap.pdf").status_code == 422

        with httpx.Client(base_url=base, timeout=60) as browser:
            assert login(browser).status_code == 303
            page = browser.get("/dashboard/studies/gap/results")
            assert page.status_code == 200 and 'id="ebm-gap-table"' in page.text
            assert 'id="ebm-gap-plot"' in page.text
            assert f"{want:.3f}" in page.text
            assert "/dashboard/studies/gap/results/ebm_gap.svg" in page.text
            assert csrf_of(page.text)
