"""`ebc results STUDY` for a ratings study: its Table 3 in the terminal, as CSV, LaTeX and
JSON (in-process, on a committed database)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.db import build_engine, make_sessionmaker
from app.migrate import upgrade
from tests.results.ratings_study import make_rated_study

# The CLI calls the service tested on both backends (tests/results/test_ratings_service.py).
pytestmark = pytest.mark.sqlite


@pytest.fixture
def db(empty_db, monkeypatch):
    engine = build_engine(empty_db.settings())
    with engine.begin() as conn:
        upgrade(conn)
    with make_sessionmaker(engine)() as session, session.begin():
        made = make_rated_study(session)
    engine.dispose()
    monkeypatch.setenv("DATABASE_URL", empty_db.url)
    monkeypatch.setenv("EBC_ENV", "test")
    return made


def run(*args):
    return CliRunner().invoke(cli, ["results", *args])


def test_table_3_in_every_format(db):
    out = run("rated", "--b", "200", "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)["ratings"]
    main = doc["results"]
    row = main["table"][1]  # l = 20
    q = row["quality"]
    table = run("rated", "--b", "200")
    assert table.exit_code == 0, table.output
    text = table.output
    assert "rated: with exclusions" in text and "rated: without exclusions" in text
    assert "SIMULATED: includes" in text and "two-way" in text
    line = next(x for x in text.splitlines() if x.split()[:2] == ["20", "quality"])
    data = q["data"]
    assert f"{data['mean']:.2f} [{data['ci_low']:.2f}, {data['ci_high']:.2f}]" in line
    c = q["contrast"]
    assert f"{c['ratio']:.3f} [{c['ratio_low']:.3f}, {c['ratio_high']:.3f}]" in line
    assert "agreement on quality" in text and "within one point" in text
    assert "paper-comparable (mean +- std over 5 runs)" in text
    rows = list(csv.DictReader(io.StringIO(run("rated", "--b", "200", "-f", "csv").output)))
    assert {r["exclusions"] for r in rows} == {"on", "off"}
    tex = run("rated", "--b", "200", "-f", "latex", "--paper").output
    assert "\\begin{tabular}{llcccccccc}" in tex and "paper-comparable" in tex
    off = json.loads(run("rated", "--b", "200", "-f", "json", "--exclusions", "off").output)
    assert off["ratings"]["results"]["n_ratings"] > main["n_ratings"]
