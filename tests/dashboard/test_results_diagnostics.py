"""The results page's Diagnostics section and its downloads."""

from __future__ import annotations

from sqlalchemy import select

from app.models import AuditEvent
from tests.factories import StudyFactory
from tests.results.diagnostic_study import diagnostic_study

Q = "b=200&seed=2"


def test_the_section_shows_the_table_plot_and_synthetic_figures(logged_in, session):
    study = diagnostic_study(session, "dgr", reference="<b>fake:3</b>")
    session.commit()
    r = logged_in.get(f"/dashboard/studies/dgr/results?{Q}")
    assert r.status_code == 200 and r.template.name == "results.html"
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
