"""The results page's Diagnostics section and its downloads."""

from __future__ import annotations

import re

from sqlalchemy import event, select

from app.models import AuditEvent, Item
from app.results.schemas import ResultQuery
from app.results.stats import MODEL_KIND
from app.studytypes.nextword import diagnostics, queries
from app.studytypes.nextword.diagnostics import study_diagnostics
from tests.factories import StudyFactory
from tests.results.diagnostic_study import diagnostic_study

Q = "b=200&seed=2"


def test_the_section_shows_the_table_plot_and_synthetic_figures(logged_in, session):
    study = diagnostic_study(session, "dgr", reference="<b>fake:3</b>")
    session.commit()
    r = logged_in.get(f"/dashboard/studies/dgr/results?{Q}")
    assert r.status_code == 200 and r.template.name == "nextword/results.html"
    diag = r.context["diagnostics"]
    assert diag.shown and diag.options.b == 200 and r.context["diagnostics_plot"]
    assert r.context["res"].synthetic.reference_model == "<b>fake:3</b>"
    page = r.text
    assert '<section id="diagnostics">' in page and "<h2>Diagnostics</h2>" in page
    assert 'id="diagnostics-plot"' in page and 'id="diagnostics-table"' in page
    assert 'id="synthetic-cells"' in page and 'id="synthetic-ebc"' in page
    assert "model_corrupted@0.5" in page and "synthetic:word_gd" in page
    # The study file's reference model name is text from a researcher: escaped.
    assert "&lt;b&gt;fake:3&lt;/b&gt;" in page and "<b>fake:3</b>" not in page
    first = diag.rows[0]
    assert f"{first.cgd:.3f}" in page
    assert {"diagnostics.csv", "diagnostics.svg"} <= set(r.context["downloads"])
    assert f"/dashboard/studies/dgr/results/diagnostics.csv?{Q}" in page.replace("&amp;", "&")
    base = "/dashboard/studies/dgr/results"
    csv = logged_in.get(f"{base}/diagnostics.csv?{Q}")
    assert csv.status_code == 200 and csv.text.startswith("study,source,kind,")
    svg = logged_in.get(f"{base}/diagnostics.svg?{Q}")
    assert svg.headers["content-security-policy"].startswith("default-src 'none'")
    session.expire_all()
    exports = session.scalars(
        select(AuditEvent.detail).where(
            AuditEvent.study_id == study.id, AuditEvent.action == "export"
        )
    ).all()
    assert [e["what"] for e in exports] == ["diagnostics.csv", "diagnostics.svg"]


def test_reference_model_without_judgments_still_shows_the_section(logged_in, session):
    diagnostic_study(session, "quiet", kinds=("data", "model"), reference="fake:1", annotators=0)
    session.commit()
    r = logged_in.get(f"/dashboard/studies/quiet/results?{Q}")
    assert r.status_code == 200 and r.context["res"].results is None
    diag = r.context["diagnostics"]
    assert diag.rows and {row.source for row in diag.rows} != {"people"}
    assert "<h2>Diagnostics</h2>" in r.text and "no judgments yet: no people rows" in r.text


def test_no_diagnostics_no_empty_section(logged_in, session):
    f = StudyFactory(session, "plain", lengths=(10,))
    items = [f.item("data") for _ in range(2)] + [f.item("model") for _ in range(2)]
    f.answer(f.annotator("a"), f.hit(items), [0, 1, None, 0])
    session.commit()
    r = logged_in.get(f"/dashboard/studies/plain/results?{Q}")
    assert r.status_code == 200 and r.context["diagnostics"] is None
    assert r.context["diagnostics_plot"] is None and r.context["res"].synthetic is None
    assert 'id="diagnostics"' not in r.text and "Diagnostics</h2>" not in r.text
    assert not [n for n in r.context["downloads"] if n.startswith("diagnostics.")]
    assert "Synthetic EB-C" not in r.text


def _page_loads(connection, monkeypatch, client, url: str):
    """Open `url`; return the response, the statements that read the judgments table
    through SQLAlchemy, the judgment loads, and the keyword arguments of each estimate the
    diagnostics made. The loads and estimates are counted by wrappers that call the real
    functions (PostgreSQL's judgment load sends its packed query through the driver,
    where no SQLAlchemy event sees it)."""
    reads: list[str] = []
    loads: list[int] = []
    estimates: list[dict] = []

    def before(conn, cursor, statement, params, context, executemany):
        if re.search(r"\bFROM judgments\b", statement):
            reads.append(statement)

    def load(session, study):
        loads.append(study.id)
        return real_load(session, study)

    def estimate(*args, **kwargs):
        estimates.append(kwargs)
        return real_estimate(*args, **kwargs)

    real_load, real_estimate = queries.load_judgments, diagnostics.estimate_ebc
    monkeypatch.setattr(queries, "load_judgments", load)
    monkeypatch.setattr(diagnostics, "estimate_ebc", estimate)
    event.listen(connection, "before_cursor_execute", before)
    try:
        r = client.get(url)
    finally:
        event.remove(connection, "before_cursor_execute", before)
        monkeypatch.undo()
    assert r.status_code == 200
    return r, reads, loads, estimates


def test_the_page_loads_the_judgments_once_and_estimates_the_people_rows_once(
    logged_in, session, connection, monkeypatch, backend
):
    study = diagnostic_study(session, "one", reference="fake:3")
    session.commit()
    r, reads, loads, estimates = _page_loads(
        connection, monkeypatch, logged_in, f"/dashboard/studies/one/results?{Q}"
    )
    assert loads == [study.id]
    assert len(reads) == (1 if backend == "sqlite" else 0)  # PostgreSQL: see _page_loads
    # The people rows reuse the headline estimate; the one estimate left is the
    # model_corrupted gaps' (model as the reference kind), which the headline has not.
    assert [e.get("data_kind") for e in estimates] == [MODEL_KIND]
    # ... and are what the diagnostics computed on their own say.
    alone = study_diagnostics(session, study, ResultQuery(b=200, seed=2))
    assert r.context["diagnostics"].model_dump_json() == alone.model_dump_json()


def test_people_rows_that_count_other_judgments_are_estimated_on_their_own(
    logged_in, session, connection, monkeypatch
):
    """A kind the study no longer lists counts in the headline figures (as "other") but
    has no people row: the headline estimate is not theirs, so they make their own."""
    study = diagnostic_study(session, "own", kinds=("data", "model", "random"), lengths=(5,))
    item = session.scalars(
        select(Item).where(Item.study_id == study.id, Item.kind == "random").limit(1)
    ).one()
    item.kind = "retired"
    session.commit()
    r, _, loads, estimates = _page_loads(
        connection, monkeypatch, logged_in, f"/dashboard/studies/own/results?{Q}"
    )
    assert loads == [study.id] and len(estimates) == 1
    assert "data_kind" not in estimates[0]
    alone = study_diagnostics(session, study, ResultQuery(b=200, seed=2))
    assert r.context["diagnostics"].model_dump_json() == alone.model_dump_json()
