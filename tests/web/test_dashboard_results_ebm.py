"""A ratings study's EB-M on the results page, in the downloads (dashboard and API) and in
the results JSON: the stored scores as the results job left them."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest
from sqlalchemy import select

from app.audit.service import CLI
from app.auth.service import create_api_token
from app.models import AuditEvent, User
from app.studytypes.ratings.ebm import score_study, stored_ebm
from tests.factories import StudyFactory
from tests.results.ebm_study import INJECTION, make_ebm_study, write_corpus


@pytest.fixture
def made(session, tmp_path):
    made = make_ebm_study(session, write_corpus(tmp_path / "corpus.txt"))
    session.commit()
    return made


@pytest.fixture
def auth(session):
    user = User(username="api", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    token = create_api_token(session, user, "tests")
    session.commit()
    return {"Authorization": f"Bearer {token.secret}"}


def _scored(session, made):
    score_study(session, made.study, b=200, seed=0, by=CLI)
    session.commit()
    return stored_ebm(session, made.study)


def test_the_page_says_none_yet_then_shows_the_table(logged_in, session, made):
    r = logged_in.get("/dashboard/studies/ebm/results")
    assert r.status_code == 200 and r.context["ebm"] is None
    assert "No EB-M scores yet" in r.text and "ebc results score ebm" in r.text
    stored = _scored(session, made)
    r = logged_in.get("/dashboard/studies/ebm/results")
    assert r.context["ebm"] == stored
    table = re.search(r'<table class="grid compact" id="ebm-table">.*?</table>', r.text, re.S)
    assert table is not None
    ebm = next(
        x for x in stored.scores.ratios if (x.length, x.score, x.kind) == (6, "meteor", "model")
    )
    assert f"{ebm.value:.3f} <span" in table.group(0)
    assert f"[{ebm.low:.3f}, {ebm.high:.3f}]" in table.group(0)
    assert "exact + Porter stem" in r.text
    for name in ("ebm.csv", "ebm.tex", "samples.csv", "samples.jsonl"):
        assert f"/dashboard/studies/ebm/results/{name}" in r.text


def test_a_next_word_results_page_lists_no_ratings_downloads(logged_in, session):
    StudyFactory(session, "nw")
    session.commit()
    r = logged_in.get("/dashboard/studies/nw/results?b=1000")
    assert r.status_code == 200
    # forced_samples.csv (both types) is not the ratings type's samples.csv
    assert "/ebm.csv" not in r.text and "/samples.csv" not in r.text


def test_score_downloads_csv_and_latex(logged_in, session, made):
    base = "/dashboard/studies/ebm/results"
    empty = logged_in.get(f"{base}/ebm.csv")
    assert empty.status_code == 200 and empty.text.count("\n") == 1  # the header alone
    stored = _scored(session, made)
    r = logged_in.get(f"{base}/ebm.csv")
    assert r.headers["content-type"].startswith("text/csv")
    assert 'filename="ebm-ebm.csv"' in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    s = stored.scores
    assert len(rows) == len(s.scores) + len(s.ratios) + len(s.eb_bleu)
    ebm = next(
        row
        for row in rows
        if (row["figure"], row["length"], row["score"], row["kind"])
        == ("ebm", "4", "nist", "model")
    )
    want = next(x for x in s.ratios if (x.length, x.score, x.kind) == (4, "nist", "model"))
    assert float(ebm["value"]) == pytest.approx(want.value)
    assert float(ebm["low"]) == pytest.approx(want.low) and ebm["b"] == "200"
    tex = logged_in.get(f"{base}/ebm.tex").text
    assert "\\begin{tabular}{llcccccc}" in tex and "backward-BLEU & entropy" in tex
    assert "LM, gpt2 & 4 &" in tex and "LM, gpt2 & 6 &" in tex
    assert f"${want.value:.3f} \\pm {want.se:.3f}$" in tex
    session.expire_all()
    what = session.scalars(select(AuditEvent.detail).where(AuditEvent.action == "export")).all()
    assert [d["what"] for d in what] == ["ebm.csv", "ebm.csv", "ebm.tex"]


def test_samples_are_every_continuation_with_its_context_neutralised(logged_in, session, made):
    base = "/dashboard/studies/ebm/results"
    rows = list(csv.DictReader(io.StringIO(logged_in.get(f"{base}/samples.csv").text)))
    assert len(rows) == 52  # 48 scored, and per length a skipped item and an attention pair
    assert {r["kind"] for r in rows} == {"data", "model"}
    attention = [r for r in rows if r["is_attention"] == "true"]
    assert {r["prompt"] for r in attention} == {"'" + INJECTION}  # no formula in a spreadsheet
    assert {r["skip_reason"] for r in rows} == {"", "too_long"}
    lines = logged_in.get(f"{base}/samples.jsonl").text.splitlines()
    first = json.loads(lines[0])
    assert set(first) == {
        "study", "item_id", "kind", "length", "index", "is_attention", "skip_reason",
        "prompt", "prefix", "continuation",
    }  # fmt: skip
    jsonl_attention = [json.loads(x) for x in lines if json.loads(x)["is_attention"]]
    assert {x["prompt"] for x in jsonl_attention} == {INJECTION}  # JSON keeps the text


def test_the_api_results_json_downloads_and_none_for_a_next_word_study(client, session, made, auth):
    r = client.get("/api/v1/studies/ebm/results?b=200", headers=auth)
    assert r.status_code == 200 and r.json()["ebm"] is None
    stored = _scored(session, made)
    doc = client.get("/api/v1/studies/ebm/results?b=200", headers=auth).json()["ebm"]
    assert doc["computed_at"] and doc["provenance"]["b"] == 200
    assert json.loads(stored.model_dump_json())["scores"] == doc["scores"]
    csv_text = client.get("/api/v1/studies/ebm/results/ebm.csv", headers=auth)
    assert csv_text.status_code == 200 and "eb_bleu" in csv_text.text
    tex = client.get("/api/v1/studies/ebm/results/ebm.tex", headers=auth)
    assert tex.headers["content-type"].startswith("application/x-tex")
    samples = client.get("/api/v1/studies/ebm/samples.jsonl", headers=auth)
    assert samples.status_code == 200 and len(samples.text.splitlines()) == 52
    assert client.get("/api/v1/studies/ebm/results/ebm.xml", headers=auth).status_code == 422
    StudyFactory(session, "nw")
    session.commit()
    nw = client.get("/api/v1/studies/nw/results?b=200", headers=auth).json()
    assert nw["ebm"] is None
    # A next-word study has no continuations: its ratings downloads do not exist.
    for url in ("/api/v1/studies/nw/samples.csv", "/api/v1/studies/nw/results/ebm.csv"):
        gone = client.get(url, headers=auth)
        assert gone.status_code == 404 and "next-word study" in gone.json()["detail"]
    assert client.get("/api/v1/studies/ebm/results/ebm.csv").status_code == 401


def test_a_degenerate_entropy_is_flagged_not_printed_as_one_one(logged_in, session, made):
    """12 continuations of 5 words a kind: every 4-gram distinct, the entropy at its bound
    (ln 24) whichever prompts a subsample draws, its ratio exactly 1 with no spread."""
    stored = _scored(session, made)
    entropy = [r for r in stored.scores.ratios if r.score == "entropy" and r.kind == "model"]
    # The case at hand: the statistics flag it (and drop its interval).
    assert entropy and all(r.degenerate and r.degenerate_reason for r in entropy)
    bleu = next(r for r in stored.scores.ratios if r.score == "bleu" and r.kind == "model")
    assert bleu.low < bleu.high
    r = logged_in.get("/dashboard/studies/ebm/results")
    table = re.search(r'<table class="grid compact" id="ebm-table">.*?</table>', r.text, re.S)
    assert table.group(0).count("(flagged: no interval)") == len(entropy)
    assert "[1.000, 1.000]" not in r.text
    # A score with spread keeps its interval.
    assert f"[{bleu.low:.3f}, {bleu.high:.3f}]" in table.group(0)
    said = re.search(r'<p class="error" id="ebm-degenerate" role="status">(.*?)</p>', r.text, re.S)
    assert said and html.escape(entropy[0].degenerate_reason, quote=False) in said.group(1)
