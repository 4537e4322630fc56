"""Results that include a simulated crowd say so: the page's banner, the results JSON, the
CSV and LaTeX downloads and the terminal table; people-only results say nothing of it."""

from __future__ import annotations

import csv
import io

from app.auth.service import create_api_token
from app.results.exports import results_table
from app.results.schemas import ResultQuery
from app.results.service import study_results
from tests.factories import StudyFactory

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
