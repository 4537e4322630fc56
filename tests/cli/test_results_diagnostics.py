"""`ebc results diagnostics STUDY` in every format, beside `ebc results STUDY` (in-process,
on a committed SQLite database)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.db import build_engine, make_sessionmaker
from app.studytypes.nextword.diagnostics import DIAGNOSTIC_FIELDS
from tests.results.diagnostic_study import diagnostic_study

# The CLI reads the same service on both backends; SQLite is enough.
pytestmark = pytest.mark.sqlite


@pytest.fixture
def db(migrated_copy, monkeypatch):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session, session.begin():
        diagnostic_study(session, "dgr", reference="fake:3")
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", migrated_copy.url)
    monkeypatch.setenv("EBC_ENV", "test")
    return migrated_copy


def run(*args):
    return CliRunner().invoke(cli, ["results", *args])


def test_diagnostics_in_every_format(db):
    out = run("diagnostics", "dgr", "--b", "200", "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["study"] == "dgr" and doc["options"]["b"] == 200
    kinds = {(r["source"], r["kind"]) for r in doc["rows"]}
    assert ("people", "data_corrupted@0.5") in kinds and ("synthetic:gd", "random") in kinds
    out = run("diagnostics", "dgr", "--b", "200", "--format", "csv", "--exclusions", "off")
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert list(rows[0]) == DIAGNOSTIC_FIELDS and len(rows) == len(doc["rows"])
    out = run("diagnostics", "dgr", "--b", "200")
    assert (
        out.exit_code == 0
        and "synthetic:word_gd" in out.output
        and "corruption_ratio:" in out.output
    )
    # `ebc results STUDY` is what it was.
    out = run("dgr", "--b", "200", "--format", "json")
    assert out.exit_code == 0 and json.loads(out.output)["synthetic"]["reference_model"] == "fake:3"


def test_diagnostics_errors(db):
    out = run("diagnostics", "nope")
    assert out.exit_code == 1 and "no study 'nope'" in out.output
    out = run("diagnostics", "dgr", "--format", "latex")
    assert out.exit_code == 1 and "unknown format" in out.output
    out = run("diagnostics", "dgr", "--b", "5")
    assert out.exit_code == 1 and "b" in out.output
    out = run("diagnostics")
    assert out.exit_code == 2 and "Missing argument" in out.output
