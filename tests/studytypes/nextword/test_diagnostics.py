"""The diagnostics table (app.studytypes.nextword.diagnostics) on studies built as production builds
them (HITs from build_hits, answers through the annotation service), on both databases:
people rows against the judgments and the headline figures, synthetic rows against the
items' stored divergences, the corruption ratios, the translation labels."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import select

from app.models import Annotator
from app.results.schemas import DiagnosticRow, DiagnosticsOut, ResultQuery
from app.results.service import study_results
from app.studytypes.nextword.diagnostics import (
    RATIO_DEFINITIONS,
    compute_diagnostics,
    diagnostics_csv,
    diagnostics_table,
    shows_diagnostics,
    study_diagnostics,
)
from app.studytypes.nextword.plot import diagnostics_plot
from app.studytypes.nextword.queries import load_judgments, load_references
from app.studytypes.nextword.synthetic import synthetic_results
from tests.factories import StudyFactory
from tests.results.diagnostic_study import (
    MT_KINDS,
    cell_means,
    diagnostic_study,
    reference_means,
)

FAST = ResultQuery(b=200, seed=2)


def _people(diag):
    return {(r.length, r.kind): r for r in diag.rows if r.source == "people"}


def test_people_rows_are_the_judgments_cells_with_the_headline_estimator(session):
    study = diagnostic_study(session)
    assert shows_diagnostics(study)
    diag = study_diagnostics(session, study, FAST)
    assert diag.shown and diag.reference_model is None and diag.exclusions_applied is True
    assert {r.source for r in diag.rows} == {"people"}  # no reference model: no synthetic
    people = _people(diag)
    means = cell_means(session, study)
    assert set(people) == set(means)  # every kind of the study at every length
    for (length, kind), row in people.items():
        assert row.cgd == pytest.approx(means[(length, kind)]), (length, kind)
        assert row.n == 8 and row.n_unit == "judgments" and row.n_annotators >= 2
        base, _, rate = kind.partition("@")
        assert row.base_kind == base and row.c == (float(rate) if rate else None)
        assert row.paper_label is None  # a language model study
    # The corruption ratios: each corrupted kind over the kind it corrupts, at its length.
    for length in (5, 10):
        for kind, over in (("data_corrupted@0.5", "data"), ("model_corrupted@0.5", "model")):
            row = people[(length, kind)]
            assert row.ratio_name == "corruption_ratio" and row.ratio_reference == over
            assert row.ratio_reference_length == length and row.l_gap is None
            assert row.ratio == pytest.approx(means[(length, kind)] / means[(length, over)])
            if not math.isnan(row.ratio_low):
                assert row.ratio_low <= row.ratio <= row.ratio_high
        for kind in ("data", "model", "random"):
            row = people[(length, kind)]
            assert row.ratio_reference is None and math.isnan(row.ratio)
    # The same estimator, options and intervals as the headline table.
    res = study_results(session, study, FAST)
    for line in res.results.table:
        for kind, q in (("data", line.cgd_data), ("model", line.cgd_model)):
            row = people[(line.length, kind)]
            assert (row.cgd, row.cgd_low, row.cgd_high) == (q.estimate, q.low, q.high)
            assert row.method == q.method and row.n_annotators == q.n_annotators
    assert diag.ratio_definitions == RATIO_DEFINITIONS
    assert "eq. 9" in RATIO_DEFINITIONS["ebc_gap"] and "Not the paper's gap" in str(
        RATIO_DEFINITIONS["corruption_ratio"]
    )


def test_synthetic_rows_from_the_items_divergences(session):
    study = diagnostic_study(session, "dgr", reference="fake:3")
    diag = study_diagnostics(session, study, FAST)
    assert diag.reference_model == "fake:3"
    sources = [r.source for r in diag.rows]
    assert sources.index("synthetic:tv") > sources.index("people")  # people first
    assert {s for s in sources if s != "people"} == {
        "synthetic:tv",
        "synthetic:js",
        "synthetic:gd",
        "synthetic:word_gd",
    }
    want = reference_means(session, study)
    syn = {(r.length, r.kind, r.source.split(":")[1]): r for r in diag.rows if r.source != "people"}
    assert set(syn) == set(want)
    for key, row in syn.items():
        assert row.cgd == pytest.approx(want[key]) and row.n_unit == "items" and row.n == 8
        assert row.n_annotators is None
    for length in (5, 10):
        for kind, over in (("data_corrupted@0.5", "data"), ("model_corrupted@0.5", "model")):
            for metric in ("tv", "gd", "word_gd"):
                row = syn[(length, kind, metric)]
                ratio = want[(length, kind, metric)] / want[(length, over, metric)]
                assert row.ratio_reference == over and row.ratio == pytest.approx(ratio)
    # The results document's synthetic table gives the same numbers (same seed).
    res = study_results(session, study, FAST)
    cell = next(c for c in res.synthetic.cells if (c.length, c.kind) == (10, "random"))
    row = syn[(10, "random", "js")]
    assert (row.cgd, row.cgd_low, row.cgd_high) == (
        cell.cgd["js"].estimate,
        cell.cgd["js"].low,
        cell.cgd["js"].high,
    )
    # CSV and plot of the same table.
    text = diagnostics_csv(diag)
    assert text.count("\n") == len(diag.rows) + 1 and "synthetic:word_gd" in text
    assert diagnostics_plot(diag, "svg").lstrip().startswith(b"<?xml")
    assert diagnostics_plot(diag, "png").startswith(b"\x89PNG")
    assert "synthetic:gd" in diagnostics_table(diag)


def test_translation_rows_carry_the_first_papers_labels(session):
    study = diagnostic_study(session, "mt", task="seq2seq", kinds=MT_KINDS, lengths=(5,))
    diag = study_diagnostics(session, study, FAST)
    labels = {r.kind: r.paper_label for r in diag.rows}
    assert labels == {"data": "DATA", "model": "NORMAL", "unrelated": "UNREL", "random": "RAND"}
    assert diag.paper_labels["unrelated"] == "UNREL" and diag.task == "seq2seq"
    assert "unrelated (UNREL)" in diagnostics_table(diag)


def test_a_study_without_diagnostic_kinds_or_reference_shows_none(session):
    f = StudyFactory(session, "plain")
    items = [f.item("data") for _ in range(2)] + [f.item("model") for _ in range(2)]
    f.answer(f.annotator("a"), f.hit(items), [0, 1, None, 0])
    assert not shows_diagnostics(f.study)
    diag = study_diagnostics(session, f.study, FAST)
    assert not diag.shown and {r.kind for r in diag.rows} == {"data", "model"}


def test_no_judgments_yet_only_synthetic_rows(session):
    study = diagnostic_study(session, "quiet", reference="fake:1", annotators=1)
    j = load_judgments(session, study)
    nobody = j.take(j.d < -1)  # no judgment
    synthetic = synthetic_results(study, load_references(session, study), FAST)
    diag = compute_diagnostics(study, nobody, synthetic, FAST)
    assert diag.rows and all(r.source != "people" for r in diag.rows)
    assert "no judgments yet: no people rows" in diag.messages
    assert diag.exclusions_applied is None and diag.people_interval


def test_csv_neutralises_formula_text():
    """Every text cell goes through the export's rule (a formula gets a leading ')."""
    row = DiagnosticRow(
        source="=HYPERLINK(1)",
        kind="@SUM(A1)",
        base_kind="-A1",
        c=None,
        paper_label="+1",
        length=5,
        cgd=0.5,
        cgd_se=math.nan,
        cgd_low=math.nan,
        cgd_high=math.nan,
        method="m",
        ratio=math.nan,
        ratio_se=math.nan,
        ratio_low=math.nan,
        ratio_high=math.nan,
        ratio_p_value=math.nan,
        n=1,
        n_unit="items",
        n_annotators=None,
        n_effective=math.nan,
        few_annotators=None,
    )
    diag = DiagnosticsOut(
        study="s",
        task="lm",
        kinds=["data", "model"],
        shown=True,
        reference_model=None,
        options=FAST,
        exclusions_applied=None,
        people_interval="",
        synthetic_interval="",
        ratio_definitions={},
        paper_labels={},
        rows=[row],
        messages=[],
    )
    line = diagnostics_csv(diag).splitlines()[1]
    assert line.startswith("s,'=HYPERLINK(1),'@SUM(A1),'-A1,,,'+1,5,0.5,,,,m,")


def test_exclusions_off_and_everything_excluded(session):
    study = diagnostic_study(session, "ex", kinds=("data", "model", "random"), lengths=(5,))
    on = study_diagnostics(session, study, FAST)
    off = study_diagnostics(session, study, FAST.model_copy(update={"exclusions": "off"}))
    assert on.exclusions_applied is True and off.exclusions_applied is False
    assert [r.cgd for r in on.rows] == [r.cgd for r in off.rows]  # nothing to exclude
    for person in session.scalars(select(Annotator).where(Annotator.study_id == study.id)):
        person.blocked = person.exclude_past = True
    session.flush()
    diag = study_diagnostics(session, study, FAST)
    assert diag.exclusions_applied is False
    assert any("every judgment is excluded" in m for m in diag.messages)
    assert [r.cgd for r in diag.rows] == [r.cgd for r in off.rows]


def test_judgments_of_a_simulated_crowd_are_said_so(session):
    study = diagnostic_study(session, "sim", kinds=("data", "model", "random"), lengths=(5,))
    assert not any("simulated" in m for m in study_diagnostics(session, study, FAST).messages)
    person = session.scalars(select(Annotator).where(Annotator.study_id == study.id)).first()
    person.simulated = True
    session.flush()
    messages = study_diagnostics(session, study, FAST).messages
    assert any(m.startswith("people rows: includes") and "simulated crowd" in m for m in messages)
