"""Results that include a simulated crowd say so: the page's banner, the results JSON, the
CSV and LaTeX downloads, the terminal table, the plots, the judgment exports and the
diagnostics; people-only results say nothing of it."""

from __future__ import annotations

import base64
import csv
import io
import json

from sqlalchemy import event, func, select

from app.auth.service import create_api_token
from app.models import Annotator, Assignment, Item, Judgment
from app.results.schemas import ResultQuery, simulated_label
from app.results.service import study_results
from app.studytypes.nextword.diagnostics import DIAGNOSTIC_FIELDS
from app.studytypes.nextword.exports import JUDGMENT_FIELDS, results_table
from tests.factories import StudyFactory
from tests.results.diagnostic_study import diagnostic_study

BASE = "/dashboard/studies/r1/results"


def _study(session, *, simulated: int):
    """4 annotators, each 2 HITs of 2 data + 2 model items; the first `simulated` of them
    are a simulated crowd's."""
    f = StudyFactory(session, "r1", lengths=(10, 20))
    for a in range(4):
        who = f.annotator(f"simulated-{a + 1}" if a < simulated else f"person{a}")
        who.simulated = a < simulated
        for length in (10, 20):
            items = [f.item("data", length) for _ in range(2)] + [
                f.item("model", length) for _ in range(2)
            ]
            f.answer(who, f.hit(items), [0, (a + 1) % 5, None, a % 5])
    session.commit()
    return f.study


def test_a_simulated_crowd_is_labelled_everywhere(logged_in, session, admin):
    study = _study(session, simulated=2)
    label = "includes 16 judgments from a simulated crowd"
    page = logged_in.get(f"{BASE}?b=200")
    assert page.status_code == 200 and page.context["res"].simulated_judgments == 16
    assert 'id="simulated"' in page.text and label in page.text
    assert page.context["res"].results.n_simulated == 16

    token = create_api_token(session, admin, "tests")
    session.commit()
    auth = {"Authorization": f"Bearer {token.secret}"}
    doc = logged_in.get("/api/v1/studies/r1/results?b=200", headers=auth).json()
    assert doc["simulated_judgments"] == 16 and doc["results"]["n_simulated"] == 16

    rows = list(csv.DictReader(io.StringIO(logged_in.get(f"{BASE}/results.csv?b=200").text)))
    assert rows and {(r["n_simulated"], r["simulated"]) for r in rows} == {("16", label)}
    tex = logged_in.get(f"{BASE}/results.tex?b=200").text
    assert "Human and simulated EB-C" in tex and f"{label}, not people" in tex

    text = results_table(study_results(session, study, ResultQuery(b=200)))
    assert f"SIMULATED: {label}, not people" in text


def test_a_wholly_simulated_crowd_is_not_called_human(logged_in, session):
    _study(session, simulated=4)
    tex = logged_in.get(f"{BASE}/results.tex?b=200").text
    assert "Simulated-crowd EB-C" in tex and "Human" not in tex
    assert "includes 32 judgments from a simulated crowd" in tex


def test_people_only_results_say_nothing_of_a_simulated_crowd(logged_in, session):
    _study(session, simulated=0)
    page = logged_in.get(f"{BASE}?b=200")
    assert page.context["res"].simulated_judgments == 0 and 'id="simulated"' not in page.text
    assert "simulated crowd" not in page.text
    rows = list(csv.DictReader(io.StringIO(logged_in.get(f"{BASE}/results.csv?b=200").text)))
    assert {(r["n_simulated"], r["simulated"]) for r in rows} == {("0", "")}
    tex = logged_in.get(f"{BASE}/results.tex?b=200").text
    assert "Human EB-C" in tex and "simulated" not in tex


def _statements(connection, run) -> list[str]:
    """The SQL statements `run()` sends through SQLAlchemy on the test's connection (which
    the app shares), whitespace collapsed."""
    seen: list[str] = []

    def before(conn, cursor, statement, params, context, executemany):
        seen.append(" ".join(statement.split()))

    event.listen(connection, "before_cursor_execute", before)
    try:
        run()
    finally:
        event.remove(connection, "before_cursor_execute", before)
    return seen


def test_the_plots_say_so_in_their_title(logged_in, session):
    _study(session, simulated=2)
    line = "SIMULATED: includes 16 judgments from a simulated crowd"
    page = logged_in.get(f"{BASE}?b=200")
    # The plots keep their text as SVG text (svg.fonttype "none"), one element per line.
    assert f">{line}</text>" in base64.b64decode(page.context["plot"]).decode()
    svg = logged_in.get(f"{BASE}/plot.svg?b=200")
    assert svg.status_code == 200 and f">{line}</text>" in svg.text
    assert logged_in.get(f"{BASE}/plot.png?b=200").content.startswith(b"\x89PNG")


def test_people_only_plots_say_nothing_of_a_simulated_crowd(logged_in, session):
    _study(session, simulated=0)
    svg = logged_in.get(f"{BASE}/plot.svg?b=200").text
    assert ">r1: 32 judgments" in svg and "SIMULATED" not in svg


def test_judgment_exports_mark_each_simulated_judgment(logged_in, session, connection):
    study = _study(session, simulated=2)
    simulated = dict(
        session.execute(
            select(Annotator.id, Annotator.simulated).where(Annotator.study_id == study.id)
        ).all()
    )
    got: dict[str, str] = {}
    statements = _statements(
        connection, lambda: got.update(text=logged_in.get(f"{BASE}/judgments.csv").text)
    )
    rows = list(csv.DictReader(io.StringIO(got["text"])))
    assert len(rows) == 32 and list(rows[0]) == JUDGMENT_FIELDS
    assert [r["simulated"] for r in rows] == [
        "true" if simulated[int(r["annotator_id"])] else "false" for r in rows
    ]
    assert sum(r["simulated"] == "true" for r in rows) == 16
    # The flag comes with the export's one join, not a query per annotator or judgment.
    assert len([s for s in statements if "annotators" in s]) == 1
    lines = logged_in.get(f"{BASE}/judgments.jsonl").text.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["simulated"] for r in records] == [simulated[r["annotator_id"]] for r in records]
    assert {type(r["simulated"]) for r in records} == {bool}


def _simulated_cells(session, study) -> dict[tuple[int, str], int]:
    """Per (length, kind): judgments on regular items by simulated annotators (tables)."""
    rows = session.execute(
        select(Item.length, Item.kind, func.count(Judgment.id))
        .join(Judgment, Judgment.item_id == Item.id)
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .where(Item.study_id == study.id, Item.is_attention.is_(False), Annotator.simulated)
        .group_by(Item.length, Item.kind)
    ).all()
    return {(length, kind): n for length, kind, n in rows}


def test_diagnostics_say_so_per_row_in_the_csv_and_in_the_plot(logged_in, session):
    study = diagnostic_study(session, "dgs", kinds=("data", "model", "random"), lengths=(5,))
    first = session.scalars(
        select(Annotator).where(Annotator.study_id == study.id).order_by(Annotator.id)
    ).first()
    first.simulated = True
    session.commit()
    cells = _simulated_cells(session, study)
    total = sum(cells.values())
    assert total and len(cells) == 3
    base = "/dashboard/studies/dgs/results"
    page = logged_in.get(f"{base}?b=200&seed=2")
    diag = page.context["diagnostics"]
    assert diag.exclusions_applied and diag.n_simulated == total
    line = f"SIMULATED: {simulated_label(total)}"
    assert f">{line}</text>" in base64.b64decode(page.context["diagnostics_plot"]).decode()
    assert f">{line}</text>" in logged_in.get(f"{base}/diagnostics.svg?b=200&seed=2").text

    rows = list(csv.DictReader(io.StringIO(logged_in.get(f"{base}/diagnostics.csv?b=200").text)))
    assert rows and list(rows[0]) == DIAGNOSTIC_FIELDS
    for r in rows:
        n = cells.get((int(r["length"]), r["kind"]), 0) if r["source"] == "people" else 0
        assert int(r["n_simulated"]) == n, r
        assert r["simulated"] == (simulated_label(n) or ""), r
    assert {r["source"] for r in rows} == {"people"}


def test_people_only_diagnostics_say_nothing_of_a_simulated_crowd(logged_in, session):
    diagnostic_study(session, "dgp", kinds=("data", "model", "random"), lengths=(5,))
    session.commit()
    base = "/dashboard/studies/dgp/results"
    page = logged_in.get(f"{base}?b=200")
    assert page.context["diagnostics"].n_simulated == 0
    assert "SIMULATED" not in base64.b64decode(page.context["diagnostics_plot"]).decode()
    rows = list(csv.DictReader(io.StringIO(logged_in.get(f"{base}/diagnostics.csv?b=200").text)))
    assert rows and {(r["n_simulated"], r["simulated"]) for r in rows} == {("0", "")}
