"""/api/v1 diagnostics and the results' synthetic table: JSON, CSV, plot, audit, errors."""

from __future__ import annotations

import csv
import io

import pytest
from sqlalchemy import select

from app.auth.service import create_api_token
from app.models import AuditEvent, User
from app.results.schemas import ResultQuery
from app.studytypes.nextword.diagnostics import DIAGNOSTIC_FIELDS, study_diagnostics
from tests.factories import StudyFactory
from tests.results.diagnostic_study import diagnostic_study

B = "b=200&seed=2"
BASE = "/api/v1/studies/dgr/results/diagnostics"


@pytest.fixture
def auth(session):
    user = User(username="ada", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    return {"Authorization": f"Bearer {create_api_token(session, user, 'tests').secret}"}


@pytest.fixture
def study(session):
    made = diagnostic_study(session, "dgr", reference="fake:3")
    session.commit()
    return made


def test_diagnostics_json_is_the_service_table(client, session, study, auth):
    r = client.get(f"{BASE}?{B}", headers=auth)
    assert r.status_code == 200, r.text
    doc = r.json()
    want = study_diagnostics(session, study, ResultQuery(b=200, seed=2)).model_dump(mode="json")
    assert doc["rows"] == want["rows"] and doc["shown"] is True
    assert doc["reference_model"] == "fake:3" and doc["options"]["b"] == 200
    sources = {row["source"] for row in doc["rows"]}
    assert sources == {
        "people",
        "synthetic:tv",
        "synthetic:js",
        "synthetic:gd",
        "synthetic:word_gd",
    }
    corrupted = next(
        row
        for row in doc["rows"]
        if row["source"] == "people" and row["kind"] == "model_corrupted@0.5"
    )
    assert corrupted["ratio_name"] == "corruption_ratio" and corrupted["c"] == 0.5
    assert corrupted["ratio_reference"] == "model" and corrupted["ratio"] > 0
    plain = next(row for row in doc["rows"] if row["kind"] == "random")
    assert plain["ratio"] is None and plain["ratio_reference"] is None  # NaN -> null


def test_diagnostics_csv_and_plot_are_audited_downloads(client, session, study, auth):
    r = client.get(f"{BASE}.csv?{B}", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert 'filename="dgr-diagnostics.csv"' in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert list(rows[0]) == DIAGNOSTIC_FIELDS and {row["study"] for row in rows} == {"dgr"}
    assert len(rows) == len(client.get(f"{BASE}?{B}", headers=auth).json()["rows"])
    svg = client.get(f"{BASE}.svg?{B}", headers=auth)
    assert svg.status_code == 200 and svg.content.lstrip().startswith(b"<?xml")
    png = client.get(f"{BASE}.png?{B}", headers=auth)
    assert png.headers["content-type"] == "image/png" and png.content.startswith(b"\x89PNG")
    session.expire_all()
    what = session.scalars(
        select(AuditEvent).where(AuditEvent.study_id == study.id, AuditEvent.action == "export")
    ).all()
    assert [e.detail["what"] for e in what] == [
        "diagnostics.csv",
        "diagnostics.svg",
        "diagnostics.png",
    ]


def test_results_json_has_the_synthetic_key(client, session, study, auth):
    doc = client.get(f"/api/v1/studies/dgr/results?{B}", headers=auth).json()
    syn = doc["synthetic"]
    assert syn["reference_model"] == "fake:3" and syn["n_items"] == 80
    assert {c["kind"] for c in syn["cells"]} == set(study.kinds)
    assert [row["length"] for row in syn["ebc"]] == [5, 10]
    assert set(syn["ebc"][0]["ebc"]) == {"tv", "js", "gd", "word_gd"}
    assert {(g["kind"], g["reference_kind"]) for g in syn["corruption_ratios"]} == {
        ("data_corrupted@0.5", "data"),
        ("model_corrupted@0.5", "model"),
    }
    assert len(syn["corruption_ratios"]) == 2 * 2 * 4  # kinds x lengths x metrics
    assert syn["ebc_gap"] == []  # no gap kind
    StudyFactory(session, "plain")
    session.commit()
    assert (
        client.get(f"/api/v1/studies/plain/results?{B}", headers=auth).json()["synthetic"] is None
    )
    plain = client.get(f"/api/v1/studies/plain/results/diagnostics?{B}", headers=auth).json()
    assert plain["shown"] is False and plain["rows"] == []


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/studies/nope/results/diagnostics", 404),
        ("/api/v1/studies/nope/results/diagnostics.csv", 404),
        (f"{BASE}?b=5", 422),
        (f"{BASE}?unit=worker", 422),
        (f"{BASE}.xml", 422),
        (f"{BASE}.csv?level=2", 422),
    ],
)
def test_bad_requests_are_clear_4xx(client, study, auth, path, status):
    r = client.get(path, headers=auth)
    assert r.status_code == status and r.json()["status"] == status


def test_needs_a_token(client, study):
    assert client.get(BASE).status_code == 401
    assert client.get(f"{BASE}.csv").status_code == 401


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_openapi_documents_the_diagnostics(client):
    doc = client.get("/api/v1/openapi.json").json()
    get = doc["paths"]["/api/v1/studies/{slug}/results/diagnostics"]["get"]
    schema = get["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("DiagnosticsOut") and "404" in get["responses"]
    files = doc["paths"]["/api/v1/studies/{slug}/results/diagnostics.{fmt}"]["get"]
    assert set(files["responses"]["200"]["content"]) == {"text/csv", "image/svg+xml", "image/png"}
    schemas = doc["components"]["schemas"]
    nullable = [{"type": "number"}, {"type": "null"}]
    assert schemas["DiagnosticRow"]["properties"]["ratio"]["anyOf"] == nullable
    assert schemas["SyntheticFigure"]["properties"]["estimate"]["anyOf"] == nullable
    synthetic = schemas["ResultsOut"]["properties"]["synthetic"]
    assert {"type": "null"} in synthetic["anyOf"]
