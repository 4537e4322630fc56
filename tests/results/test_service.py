"""Known answers, worked out by hand, through the database path (see conftest.py's set).

Attention items never enter CGD. Without exclusions (single estimator):

    data  d: A 0,1  C 1,1  F 0,1  B 0,1  E 0,0   -> 5/10 = 0.5
    model d: A 1,0  C 1,1  F 1,0  B 1,1  E 0,0   -> 6/10 = 0.6     EB-C = 1.2

With the exclusions (C blocked with exclude_past, E failed attention, A's D2 too fast):

    data  d: A 0  F 0,1  B 0,1                   -> 2/5 = 0.4
    model d: A 1,0  F 1,0  B 1,1                 -> 4/6            EB-C = 5/3

Plurality (per item, DESIGN.md's tie rule), without exclusions:
    D1 {0,1,0} -> 0; D2 {1,1,1} -> 1; D3 {0,0} -> 0; D4 {none,0} -> 1/2   CGD = 1.5/4
    M1 {2,1,1} -> 1; M2 {0,1,0} -> 0; M3 {none,0} -> 1/2; M4 {3,0} -> 1/2 CGD = 2/4
with exclusions:
    D1 {0,0} -> 0; D2 {1} -> 1; D3 {0} -> 0; D4 {none} -> 1                CGD = 2/4
    M1 {2,1} -> 1; M2 {0,0} -> 0; M3 {none} -> 1; M4 {3} -> 1              CGD = 3/4
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from app.results.schemas import ResultQuery, ResultsOut
from app.results.service import study_results
from app.results.stats import TEST_METHOD, agreement, finite_or_none
from app.studytypes.nextword import exports
from app.studytypes.nextword.queries import load_judgments

FAST = {"b": 200}


def _row(rs):
    (row,) = rs.table
    return row


@pytest.mark.parametrize(
    ("estimator", "exclusions", "cgd_data", "cgd_model"),
    [
        ("single", "off", 0.5, 0.6),
        ("single", "on", 0.4, 4 / 6),
        ("plurality", "off", 1.5 / 4, 2 / 4),
        ("plurality", "on", 2 / 4, 3 / 4),
    ],
)
def test_known_answers(session, handmade, estimator, exclusions, cgd_data, cgd_model):
    query = ResultQuery(estimator=estimator, exclusions=exclusions, **FAST)
    res = study_results(session, handmade.study, query)
    row = _row(res.results)
    assert row.cgd_data.estimate == pytest.approx(cgd_data)
    assert row.cgd_model.estimate == pytest.approx(cgd_model)
    assert row.ebc.estimate == pytest.approx(cgd_model / cgd_data)
    assert res.results.exclusions_applied is (exclusions == "on")
    # The other variant sits beside it.
    assert res.other.exclusions_applied is (exclusions != "on")


def test_counts_and_warnings_of_the_single_estimator(session, handmade):
    res = study_results(session, handmade.study, ResultQuery(exclusions="on", **FAST))
    row = _row(res.results)
    assert row.cgd_data.n_judgments == 5 and row.cgd_model.n_judgments == 6
    assert row.ebc.n_judgments == 11
    assert row.ebc.n_annotators == 3 and row.ebc.few_annotators
    assert res.results.n_annotators == 3
    assert any("only 3 annotators" in m for m in res.messages)
    other = _row(res.other)
    assert other.ebc.n_annotators == 5 and other.ebc.n_judgments == 20
    # Every interval contains its estimate and comes with the delta-method cross-check.
    # The handmade items are judged by several annotators: a crossed design, so (issue 32)
    # the default unit is two-way and the test follows it; the annotator-only wild test
    # is secondary.
    assert res.results.design == "crossed" and res.results.unit == "twoway"
    assert "crossed" in res.results.design_reason
    assert row.test.method != TEST_METHOD and res.results.secondary_tests[0].method == TEST_METHOD
    for q in (row.cgd_data, row.cgd_model, row.ebc):
        high = finite_or_none(q.high)  # as JSON has it
        assert high is not None or q.name == "ebc"
        assert q.low <= q.estimate and (high is None or q.estimate <= high)
        assert q.method == "cgm"
        assert finite_or_none(q.delta_low) is not None and q.iid_se > 0
    # The annotator unit, asked for: EB-C by the inverted wild cluster bootstrap test, CGD
    # by the jackknife t interval (issue 11). With 3 annotators (8 sign patterns) the EB-C
    # interval may have no finite upper end: JSON null.
    annot = study_results(
        session, handmade.study, ResultQuery(exclusions="on", unit="annotator", **FAST)
    )
    arow = _row(annot.results)
    assert [q.method for q in (arow.cgd_data, arow.ebc)] == ["jackknife-t", "wild"]
    assert arow.test.method == TEST_METHOD and not annot.results.secondary_tests
    assert any("the design is crossed" in w for w in annot.results.warnings)
    # Few annotators by their effective number (3 annotators: at most 3).
    assert row.ebc.n_effective <= 3 and row.test.few_annotators
    assert 0 < row.test.p_value <= 1 and row.test.p_value == row.ebc.p_value


def test_quality_sanity_position_and_none(session, handmade):
    res = study_results(session, handmade.study, ResultQuery(exclusions="off", **FAST))
    rs = res.results
    # None share per cell: B chose none once on a data and once on a model item.
    shares = {(r.kind, r.length): (r.share_none, r.n_judgments) for r in rs.none_share}
    assert shares == {("data", 10): (0.1, 10), ("model", 10): (0.1, 10)}
    # Sanity on data items: D1, D3 top-1 true; D2 true at rank 2; D4 not shown.
    assert rs.sanity.n_items == 4
    assert rs.sanity.top1_is_true == 0.5 and rs.sanity.true_shown == 0.75
    assert rs.sanity.people_pick_true == pytest.approx(7 / 8)
    assert rs.position_bias.counts and sum(rs.position_bias.counts) == 18  # 20 - 2 nones
    assert rs.position_bias.share_none == pytest.approx(2 / 20)
    quality = {q.label: q for q in res.quality}
    assert quality["E"].attention_accuracy == 0.0 and quality["E"].excluded
    assert quality["C"].excluded and not quality["A"].excluded
    assert quality["A"].n_hits == 1 and quality["A"].n_judgments == 5
    assert quality["B"].share_none == 0.5  # 2 of B's 4 regular judgments
    assert quality["E"].top1_rate == {"data": 1.0, "model": 1.0}


def test_agreement_on_the_model_rank(session, handmade):
    res = study_results(session, handmade.study, ResultQuery(exclusions="off", **FAST))
    agr = res.results.agreement
    assert agr.n_items == 8 and agr.min_judgments_per_item == 2
    assert agr.max_judgments_per_item == 3 and agr.fleiss_kappa is None
    j = load_judgments(session, handmade.study)
    reg = ~j.attention
    direct = agreement(
        j.item[reg], j.choice[reg], categories=np.array([1, 2, 3, 4, 5, 0]), b=200, seed=0
    )
    assert agr.krippendorff_alpha.estimate == pytest.approx(direct.krippendorff_alpha.estimate)
    # D1 {1,2,1}: 1/3 of ordered pairs agree; D2 {2,2,2}: 1; ... mean over 8 items.
    per_item = [1 / 3, 1, 1 / 3, 1 / 3, 1, 0, 0, 0]
    assert agr.percent_agreement.estimate == pytest.approx(np.mean(per_item))


def test_permutation_paper_and_trend_over_two_lengths(session):
    from tests.factories import StudyFactory

    f = StudyFactory(session, "two", lengths=(10, 20))
    rng = np.random.default_rng(3)
    annotators = [f.annotator() for _ in range(6)]
    for length in (10, 20):
        for h in range(6):
            items = [f.item("data", length) for _ in range(3)]
            items += [f.item("model", length) for _ in range(3)]
            hit = f.hit(items)
            ranks = [int(r) for r in rng.integers(0, 3, size=6)]
            f.answer(annotators[h], hit, ranks)
    res = study_results(session, f.study, ResultQuery(**FAST))
    rs = res.results
    assert [r.length for r in rs.table] == [10, 20]
    assert rs.trend is not None and rs.trend.name == "trend"
    pooled = [p for p in rs.permutation if p.length is None]
    assert len(pooled) == 1 and 0 < pooled[0].p_value <= 1
    for row in rs.table:
        assert row.permutation.n_hits == 6 and row.permutation.n_permutations == 200
        assert set(row.paper) == {"cgd_data", "cgd_model", "ebc"}
        assert len(row.paper["ebc"].parts) == 5
    assert res.plan is not None and res.plan.design_effect_measured


def test_units_and_bca_run_through_the_service(session, handmade):
    for unit in ("hit", "item", "twoway"):
        res = study_results(session, handmade.study, ResultQuery(unit=unit, **FAST))
        assert res.results.unit == unit
        # The p-value follows the interval's unit (issue 32).
        assert res.results.tests[0].p_value == res.results.table[0].ebc.p_value
        if unit != "twoway":
            assert f"clustered by {unit}" in res.results.tests[0].method
    # A crossed design's default is two-way, which has no bootstrap: bca by annotator.
    query = ResultQuery(ci="bca", unit="annotator", **FAST)
    res = study_results(session, handmade.study, query)
    assert res.results.ci == "bca"


def test_results_json_round_trips(session, handmade):
    res = study_results(session, handmade.study, ResultQuery(**FAST))
    again = ResultsOut.model_validate_json(res.model_dump_json())
    assert again.results.table[0].ebc.estimate == res.results.table[0].ebc.estimate


def test_terminal_table_lists_both_variants(session, handmade):
    res = study_results(session, handmade.study, ResultQuery(**FAST))
    text = exports.results_table(res)
    assert "with exclusions" in text and "without exclusions" in text
    assert "1.667" in text and "1.200" in text


def test_when_nothing_is_excluded_both_variants_agree(session, handmade):
    handmade.study.exclusions = {
        "blocked": False,
        "attention_min_accuracy": None,
        "too_fast": False,
    }
    session.flush()
    res = study_results(session, handmade.study, ResultQuery(**FAST))
    assert res.exclusions.n_kept == 25
    assert res.results.exclusions_applied and not res.other.exclusions_applied
    assert res.results.table == res.other.table
    assert _row(res.results).ebc.estimate == pytest.approx(1.2)


def test_headline_test_and_secondary_permutation_in_json_and_csv(session):
    from tests.factories import StudyFactory

    f = StudyFactory(session, "heads", lengths=(10, 20))
    rng = np.random.default_rng(5)
    annotators = [f.annotator() for _ in range(8)]
    for length in (10, 20):
        for h in range(16):
            items = [f.item("data", length) for _ in range(3)]
            items += [f.item("model", length) for _ in range(3)]
            f.answer(annotators[h % 8], f.hit(items), [int(r) for r in rng.integers(0, 3, 6)])
    res = study_results(session, f.study, ResultQuery(**FAST))
    data = res.model_dump(mode="json")["results"]
    assert data["ci"] == "wild" and "jackknife" in data["interval"]
    assert data["n_annotators"] == 8 and 0 < data["n_effective"] <= 8
    tests = data["tests"]
    assert [t["length"] for t in tests] == [10, 20, None]
    assert {t["null"] for t in tests} == {"population EB-C = 1, annotators as the sampled unit"}
    assert all("wild cluster bootstrap" in t["method"] for t in tests)
    assert all(p["label"].startswith("secondary: exact only") for p in data["permutation"])
    row = data["table"][0]
    assert row["test"]["p_value"] == row["ebc"]["p_value"]
    assert row["test"]["low"] == row["ebc"]["low"] and row["ebc"]["method"] == "wild"
    # CSV: p_value is the headline test's; the permutation test has its own columns.
    rows = list(csv.DictReader(io.StringIO(exports.results_csv(res))))
    ebc = next(r for r in rows if r["name"] == "ebc" and r["length"] == "10")
    assert float(ebc["p_value"]) == pytest.approx(row["test"]["p_value"])
    assert float(ebc["permutation_p_value"]) == pytest.approx(row["permutation"]["p_value"])
    assert "population EB-C = 1" in ebc["test"] and float(ebc["n_effective"]) > 0
