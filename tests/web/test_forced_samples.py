"""The forced-prefix samples page, API and downloads (issue 34): owner and collaborators only,
every text escaped (HTML, LaTeX) or neutralised (CSV), BLEU for DATA and NORMAL against
sacrebleu's own values, and a study without samples says so."""

from __future__ import annotations

import csv
import io

import pytest
import sacrebleu
from sqlalchemy import select

from app.auth.service import create_api_token
from app.models import User
from app.precompute.samples import score_samples, write_samples
from app.studies.service import share_study
from tests.hits.factory import make_study
from tests.web.accounts import login, make_user

REFERENCE = "the cat sat on the mat"
ROWS = [
    # kind, prefix, continuation, source
    ("data", "the cat sat", "on the mat", "<script>alert(1)</script> die Katze"),
    ("data", "the cat sat", "on a mat today", "die Katze & der Hund"),
    ("model", "a cat sat", "on the mat", "die Katze"),
    ("unrelated", "=HYPERLINK(x)", "on the mat", "die Katze"),
    ("random", "fish <b>bold</b> tree", "mat", "die Katze"),
]


@pytest.fixture
def nmt(session):
    owner, carol, _ = (make_user(session, u, is_admin=False) for u in ("bob", "carol", "dave"))
    study = make_study(session, slug="nmt", task="seq2seq", lengths=(3,), per_cell=5)
    study.samples = {"per_kind": 2}
    study.created_by_id = owner.id
    share_study(session, study, carol, "view")
    rows = [
        {
            "length": 3,
            "kind": kind,
            "index": i,
            "source": source,
            "prompt": None,
            "prefix": prefix,
            "continuation": continuation,
            "reference": REFERENCE,
            "skip_reason": None,
            "provenance": {"line": i + 1},
        }
        for i, (kind, prefix, continuation, source) in enumerate(ROWS)
    ]
    rows.append({**rows[-1], "index": 9, "continuation": None, "skip_reason": "beam_too_short"})
    write_samples(session, study.id, rows)
    score_samples(session, study)
    empty = make_study(session, slug="plain", lengths=(3,), per_cell=5)
    empty.created_by_id = owner.id
    session.commit()
    return study


def _as(client, username):
    client.cookies.clear()
    assert login(client, username).status_code == 303
    return client


def test_the_page_shows_the_papers_table_escaped(client, nmt):
    page = _as(client, "bob").get("/dashboard/studies/nmt/samples")
    assert page.status_code == 200 and page.template.name == "forced_samples.html"
    html = page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "<u>fish &lt;b&gt;bold&lt;/b&gt; tree</u> mat" in html and "<b>bold" not in html
    assert "die Katze &amp; der Hund" in html
    for label in ("DATA (data)", "NORMAL (model)", "UNREL (unrelated)", "RAND (random)"):
        assert label in html
    assert 'id="bleu-note"' in html and "UNREL" in page.context["out"].bleu_note
    out = page.context["out"]
    assert out.made == 5 and out.skipped == 1 and out.error is None
    # BLEU: DATA and NORMAL only, sacrebleu's own values.
    bleu = {s.index: s.bleu for s in out.samples}
    whole = "the cat sat on the mat"
    assert bleu[0] == pytest.approx(100.0)  # the reference itself
    for i, text in ((1, "the cat sat on a mat today"), (2, "a cat sat on the mat")):
        expected = sacrebleu.sentence_bleu(text, [REFERENCE], tokenize="none").score
        assert bleu[i] == pytest.approx(expected) and 0 < expected < 100
    assert bleu[3] is None and bleu[4] is None  # UNREL, RAND: no BLEU
    cells = {c.kind: c for c in out.bleu}
    assert set(cells) == {"data", "model"} and cells["data"].n == 2
    expected = sacrebleu.corpus_bleu(
        [whole, "the cat sat on a mat today"], [[REFERENCE, REFERENCE]], tokenize="none"
    ).score
    assert cells["data"].bleu == pytest.approx(expected) and 0 < expected < 100


def test_downloads_are_neutralised_and_escaped(client, nmt):
    c = _as(client, "carol")  # a collaborator (view)
    body = c.get("/dashboard/studies/nmt/results/forced_samples.csv")
    assert body.status_code == 200 and body.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(body.text)))
    assert len(rows) == 5
    unrel = next(r for r in rows if r["kind"] == "unrelated")
    assert unrel["prefix"] == "'=HYPERLINK(x)" and unrel["label"] == "UNREL"
    assert rows[0]["bleu"] and not unrel["bleu"]
    tex = c.get("/dashboard/studies/nmt/results/forced_samples.tex").text
    assert "\\underline{the cat sat}" in tex and "die Katze \\& der Hund" in tex


def test_others_get_a_404_and_a_study_without_samples_says_so(client, nmt):
    c = _as(client, "dave")
    assert c.get("/dashboard/studies/nmt/samples").status_code == 404
    assert c.get("/dashboard/studies/nmt/results/forced_samples.csv").status_code == 404
    client.cookies.clear()
    anonymous = client.get("/dashboard/studies/nmt/samples", follow_redirects=False)
    assert anonymous.status_code in (303, 401)
    page = _as(client, "bob").get("/dashboard/studies/plain/samples")
    assert 'id="no-samples"' in page.text and "asks for no forced-prefix samples" in page.text


def test_the_api_gives_json_and_files_to_those_who_may_see(client, session, nmt):
    tokens = {
        u.username: create_api_token(session, u, "t").secret
        for u in session.scalars(select(User)).all()
    }
    session.commit()

    def get(user, path):
        return client.get(path, headers={"Authorization": f"Bearer {tokens[user]}"})

    doc = get("carol", "/api/v1/studies/nmt/forced_samples").json()
    assert doc["per_kind"] == 2 and doc["made"] == 5 and doc["skipped"] == 1
    assert doc["kinds"] == ["data", "model", "unrelated", "random"]
    assert [s["label"] for s in doc["samples"]] == ["DATA", "DATA", "NORMAL", "UNREL", "RAND"]
    assert {c["kind"] for c in doc["bleu"]} == {"data", "model"}
    assert get("bob", "/api/v1/studies/nmt/forced_samples.tex").status_code == 200
    assert get("bob", "/api/v1/studies/nmt/forced_samples.csv").text.startswith("kind,")
    assert get("dave", "/api/v1/studies/nmt/forced_samples").status_code == 404
    assert get("dave", "/api/v1/studies/nmt/forced_samples.csv").status_code == 404
    assert get("bob", "/api/v1/studies/nmt/forced_samples.pdf").status_code == 422
    plain = get("bob", "/api/v1/studies/plain/forced_samples").json()
    assert plain["per_kind"] == 0 and plain["samples"] == [] and plain["bleu"] == []


def test_only_managers_read_why_the_samples_failed(client, session, nmt):
    score_samples(session, nmt, error="OSError: /srv/models/secret-path missing")
    session.commit()
    page = _as(client, "bob").get("/dashboard/studies/nmt/samples")
    assert 'id="samples-error"' in page.text and "/srv/models/secret-path" in page.text
    page = _as(client, "carol").get("/dashboard/studies/nmt/samples")
    assert page.status_code == 200 and 'id="samples-error"' in page.text
    assert "The samples could not be made." in page.text and "/srv/models" not in page.text
    tokens = {
        u: create_api_token(session, session.scalar(select(User).filter_by(username=u)), "t")
        for u in ("bob", "carol")
    }
    session.commit()

    def error_of(user):
        headers = {"Authorization": f"Bearer {tokens[user].secret}"}
        return client.get("/api/v1/studies/nmt/forced_samples", headers=headers).json()["error"]

    assert "/srv/models/secret-path" in error_of("bob")
    assert error_of("carol") == "the samples could not be made"
