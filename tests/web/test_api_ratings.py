"""/api/v1 for a ratings study: its results document (ratings figures beside the EB-M), its
ratings downloads (Table 3 as CSV and LaTeX, every rating streamed), and the 404s of the
downloads a study of the other type does not have."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import select

from app.auth.service import create_api_token
from app.models import AuditEvent, User
from app.results.schemas import ResultsOut
from app.studytypes.ratings.annotation import CONSISTENCY
from app.studytypes.ratings.exports import RATING_FIELDS, TABLE_FIELDS
from tests.factories import StudyFactory
from tests.results.ratings_study import FORMULA, MODEL_NAME, make_rated_study

API = "/api/v1/studies"


@pytest.fixture
def auth(session):
    user = User(username="api", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    token = create_api_token(session, user, "tests")
    session.commit()
    return {"Authorization": f"Bearer {token.secret}"}


@pytest.fixture
def rated(session):
    made = make_rated_study(session)
    StudyFactory(session, "nw")
    session.commit()
    return made


def test_the_results_document_holds_the_ratings_figures(client, rated, auth):
    r = client.get(f"{API}/rated/results?b=200&seed=4", headers=auth)
    assert r.status_code == 200
    doc = r.json()
    assert doc["results"] is None and doc["quality"] == [] and doc["ebm"] is None
    ratings = doc["ratings"]
    main, other = ratings["results"], ratings["other"]
    assert main["exclusions_applied"] and not other["exclusions_applied"]
    assert (main["b"], main["seed"]) == (200, 4)
    assert [row["length"] for row in main["table"]] == [10, 20]
    cell = main["table"][0]["quality"]["data"]
    assert set(cell) >= {
        "length", "kind", "step", "mean", "ci_low", "ci_high", "n_ratings", "n_pairs",
        "n_annotators", "effective_annotators",
    }  # fmt: skip
    assert cell["mean"] == pytest.approx(
        rated.mean(10, "data", "quality", drop=("blocked", "careless"), fast=False)
    )
    assert doc["exclusions"]["n_judgments"] == len(rated.posted)  # counted in ratings
    assert doc["simulated_judgments"] == ratings["simulated_ratings"] > 0
    assert {q["label"] for q in ratings["quality"]} == set(rated.annotators)
    ResultsOut.model_validate_json(r.text)  # what the schema says it is
    nw = client.get(f"{API}/nw/results?b=200", headers=auth).json()
    assert nw["ratings"] is None


def test_the_table_downloads(client, rated, auth):
    r = client.get(f"{API}/rated/results/ratings_table.csv?b=200", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert list(rows[0]) == TABLE_FIELDS
    doc = client.get(f"{API}/rated/results?b=200", headers=auth).json()["ratings"]
    mean = next(
        x
        for x in rows
        if (x["exclusions"], x["figure"], x["length"], x["step"], x["kind"])
        == ("off", "mean", "20", "consistency", "model")
    )
    want = next(
        c
        for c in doc["other"]["cells"]
        if (c["length"], c["step"], c["kind"]) == (20, "consistency", "model")
    )
    assert float(mean["estimate"]) == pytest.approx(want["mean"])
    assert float(mean["low"]) == pytest.approx(want["ci_low"]) and mean["paper_runs"] == "5"
    assert {x["figure"] for x in rows} >= {"mean", "gap", "ratio", "trend", "within_point"}
    tex = client.get(f"{API}/rated/results/ratings_table.tex?b=200", headers=auth)
    assert tex.headers["content-type"].startswith("application/x-tex")
    assert "LM, lab\\_model\\#1\\&co & 10 &" in tex.text and MODEL_NAME not in tex.text
    assert "\\multicolumn{4}{c}{Quality}" in tex.text and "G\\_eff" in tex.text
    paper = client.get(f"{API}/rated/results/ratings_table.tex?b=200&paper=true", headers=auth)
    assert "\\pm" in paper.text and "paper-comparable" in paper.text


def test_every_rating_streamed(client, session, rated, auth):
    r = client.get(f"{API}/rated/ratings.csv", headers=auth)
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert list(rows[0]) == RATING_FIELDS and len(rows) == len(rated.posted)
    assert "worker_id" not in rows[0] and "annotator_label" not in rows[0]  # opaque ids
    formula = [x for x in rows if x["continuation"].startswith("'")]
    assert formula and {x["continuation"] for x in formula} == {"'" + FORMULA}
    sim = str(rated.annotators["sim"].id)
    assert {x["simulated"] for x in rows if x["annotator_id"] == sim} == {"true"}
    assert {x["simulated"] for x in rows if x["annotator_id"] != sim} == {"false"}
    lines = client.get(f"{API}/rated/ratings.jsonl", headers=auth).text.splitlines()
    records = [json.loads(x) for x in lines]
    assert len(records) == len(rated.posted) and FORMULA in {x["continuation"] for x in records}
    assert {type(x["quality"]) for x in records} == {float}
    session.expire_all()
    what = session.scalars(select(AuditEvent.detail).where(AuditEvent.action == "export")).all()
    assert [d["what"] for d in what] == ["ratings.csv", "ratings.jsonl"]


@pytest.mark.parametrize(
    "url",
    [
        "/nw/ratings.csv",
        "/nw/ratings.jsonl",
        "/nw/results/ratings_table.csv",
        "/nw/results/ratings_table.tex",
        "/nw/results/ebm.tex",
        "/nw/samples.jsonl",
    ],
)
def test_a_next_word_study_has_no_ratings_downloads(client, rated, auth, url):
    r = client.get(API + url, headers=auth)
    assert r.status_code == 404
    assert r.json()["detail"].startswith("nw is a next-word study: it has no ")


@pytest.mark.parametrize(
    "url", ["/rated/results.csv", "/rated/results.tex", "/rated/plot.svg", "/rated/judgments.csv"]
)
def test_a_ratings_study_has_no_next_word_downloads(client, rated, auth, url):
    r = client.get(API + url, headers=auth)
    assert r.status_code == 404 and "ratings study" in r.json()["detail"]


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_the_openapi_document_names_the_ratings(client):
    spec = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/studies/{slug}/ratings.{fmt}" in spec["paths"]
    assert "/api/v1/studies/{slug}/results/ratings_table.{fmt}" in spec["paths"]
    mean = spec["components"]["schemas"]["CellMeanOut"]["properties"]["mean"]
    assert {"type": "null"} in mean["anyOf"]  # a figure that cannot be computed is null


@pytest.mark.parametrize("url", ["/rated/results/diagnostics", "/rated/plan"])
def test_a_ratings_study_has_no_next_word_figures(client, rated, auth, url):
    r = client.get(API + url, headers=auth)
    assert r.status_code == 404
    assert r.json()["detail"].startswith("rated is a ratings study: it has no ")
    assert client.get(API + url.replace("rated", "nw"), headers=auth).status_code == 200


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("unit=twoway", ["unit"]),
        ("estimator=plurality", ["estimator"]),
        ("ci=bca&unit=item", ["unit", "ci"]),
    ],
)
@pytest.mark.parametrize("path", ["/rated/results", "/rated/results/ratings_table.csv"])
def test_next_word_options_are_refused_for_a_ratings_study(
    client, rated, auth, path, query, fields
):
    r = client.get(f"{API}{path}?b=200&{query}", headers=auth)
    assert r.status_code == 422
    errors = r.json()["errors"]
    assert [e["loc"] for e in errors] == [["query", f] for f in fields]
    assert all("next-word option" in e["msg"] for e in errors)
    nw = client.get(f"{API}{path.replace('rated', 'nw')}?b=200&{query}", headers=auth)
    assert nw.status_code == (200 if path.endswith("/results") else 404)


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_the_openapi_document_says_which_options_a_ratings_study_refuses(client):
    """The document per study type: the options a ratings study refuses say so (in words
    and as x-refused-by-study-types) on every route that takes them; the others do not."""
    doc = client.get("/api/v1/openapi.json").json()
    marked: dict[str, set[str]] = {}
    for path, operations in doc["paths"].items():
        for parameter in operations.get("get", {}).get("parameters", []):
            if "x-refused-by-study-types" in parameter:
                assert parameter["x-refused-by-study-types"] == ["ratings"]
                assert "Refused by a ratings study (422 naming it)" in parameter["description"]
                marked.setdefault(parameter["name"], set()).add(path)
    assert set(marked) == {"estimator", "unit", "ci"}
    assert f"{API}/{{slug}}/results" in marked["estimator"]
    results = doc["paths"][f"{API}/{{slug}}/results"]["get"]["parameters"]
    others = [p for p in results if p["name"] in ("b", "seed", "level", "exclusions")]
    assert len(others) == 4 and not any("x-refused-by-study-types" in p for p in others)


def test_a_ratings_document_echoes_only_its_own_options(client, rated, auth):
    doc = client.get(f"{API}/rated/results?b=200&seed=4&exclusions=off", headers=auth).json()
    assert doc["options"] == {"b": 200, "seed": 4, "exclusions": "off", "level": 0.95}
    assert ResultsOut.model_validate(doc).options.model_dump() == doc["options"]
    nw = client.get(f"{API}/nw/results?b=200", headers=auth).json()
    assert {"estimator", "unit", "ci"} <= set(nw["options"])


def test_unfinished_hits_are_reported_not_counted(client, session, auth):
    from app.annotation.leases import next_assignment
    from app.studytypes.ratings.annotation import QUALITY, RatingPost, rate
    from tests.hits.factory import annotator
    from tests.hits.ratings_factory import make_ratings_study

    study = make_ratings_study(session, slug="part", per_cell=10, replicas=1)
    done, late = annotator(session, study, "done"), annotator(session, study, "late")
    finished = next_assignment(session, done, serve=True).assignment
    for position in range(11):
        for step in (QUALITY, CONSISTENCY):
            rate(session, done, RatingPost(finished.public_id, position, step, "3", 4000))
    begun = next_assignment(session, late, serve=True).assignment
    rate(session, late, RatingPost(begun.public_id, 0, QUALITY, "5", 4000))
    session.commit()
    doc = client.get(f"{API}/part/results?b=200", headers=auth).json()
    ratings = doc["ratings"]
    assert (ratings["unfinished_ratings"], ratings["unfinished_hits"]) == (1, 1)
    assert ratings["n_ratings"] == doc["exclusions"]["n_judgments"] == 11
    assert ratings["results"]["n_annotators"] == 1
    assert [q["label"] for q in ratings["quality"]] == ["done"]
    assert "1 rating in 1 unfinished HIT, not counted" in " ".join(doc["messages"])
    export = client.get(f"{API}/part/ratings.csv", headers=auth).text
    rows = list(csv.DictReader(io.StringIO(export)))
    assert len(rows) == 12
    status = {x["assignment_status"] for x in rows if x["quality"] == "5.0"}
    assert status == {"leased"}
