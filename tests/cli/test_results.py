"""`ebc results STUDY` in every format (in-process, on a committed SQLite database)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.db import build_engine, make_sessionmaker
from tests.factories import StudyFactory, make_handmade

# The CLI reads the same service on both backends; SQLite is enough.
pytestmark = pytest.mark.sqlite


@pytest.fixture
def db(migrated_copy, monkeypatch):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        make_handmade(session)
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    return migrated_copy


def run(*args):
    return CliRunner().invoke(cli, ["results", *args])


def test_results_in_every_format(db):
    out = run("hand", "--b", "200")
    assert out.exit_code == 0, out.output
    assert "with exclusions" in out.output and "1.667" in out.output
    out = run("hand", "--b", "200", "--format", "json", "--exclusions", "off")
    data = json.loads(out.output)
    assert data["results"]["table"][0]["ebc"]["estimate"] == pytest.approx(1.2)
    out = run("hand", "--b", "200", "--format", "csv", "--estimator", "plurality")
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert {r["estimator"] for r in rows} == {"plurality"}
    out = run("hand", "--b", "200", "--format", "latex", "--unit", "hit")
    assert "\\begin{tabular}{llccc}" in out.output and "resampling unit: hit" in out.output


def test_results_errors(db):
    out = run("nope")
    assert out.exit_code == 1 and "no study 'nope'" in out.output
    out = run("hand", "--unit", "worker")
    assert out.exit_code == 1 and "unit" in out.output
    out = run("hand", "--format", "xml")
    assert out.exit_code == 1 and "unknown format" in out.output


def test_a_nan_figure_is_null_in_the_json_output(migrated_copy, monkeypatch):
    """One annotator: the CGD's interval and every test are undefined (NaN), written null."""
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        f = StudyFactory(session, "solo")
        items = [f.item("data") for _ in range(2)] + [f.item("model") for _ in range(2)]
        f.answer(f.annotator("only"), f.hit(items), [0, 1, None, 0])
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    out = run("solo", "--b", "200", "--format", "json")
    assert out.exit_code == 0, out.output
    assert "NaN" not in out.output and "Infinity" not in out.output
    cgd = json.loads(out.output)["results"]["cgd"][0]
    assert cgd["estimate"] == 0.5 and cgd["se"] is None and cgd["p_value"] is None
