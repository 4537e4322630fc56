"""The synthetic table of the results (``synthetic``) from items written in the worker's
``items.reference`` shape, checked against a hand computation, on both databases.

The hand-made items (one length, 10):

    data   tv 0.2, 0.4        js 0.1, 0.3      gd 0, 1    word_gd 0, 0
           one more data item, token null (word_gd 1): token metrics skip it
    model  tv 0.6, 0.3, 0.5   js 0.5, 0.2, 0.4 gd 1, 1, 1 word_gd 1, 0, 1
    left out: a skipped data item and an attention item (with values that would move the
    means), and a model item without divergences yet (pending)

    CGD(data):  tv 0.3, js 0.2, gd 0.5, word_gd 1/3
    CGD(model): tv 1.4/3, js 1.1/3, gd 1, word_gd 2/3
    EB-C:       tv (1.4/3)/0.3, js (1.1/3)/0.2, gd 2, word_gd 2
"""

from __future__ import annotations

import math

import pytest

from app.results.schemas import ResultQuery
from app.results.service import study_results
from tests.factories import StudyFactory

FAST = ResultQuery(b=300, seed=4)
METHOD = "token-level over a shared vocabulary of 64 tokens (tests)"


def _reference(tv, js, gd, word_gd, *, model="fake:2", token=True) -> dict:
    """An items.reference value in the worker's contract shape."""
    return {
        "reference_model": model,
        "token": {"tv": tv, "js": js, "gd": gd, "vocab": 64} if token else None,
        "word_gd": word_gd,
        "reference_top_word": "w0" if word_gd == 0 else "w3",
        "choice_probs": [0.3, 0.2, 0.1, 0.1, 0.05],
        "none_prob": 0.25,
        "method": METHOD,
    }


def _study(session, slug="syn", reference="fake:2"):
    f = StudyFactory(session, slug, reference={"model": reference} if reference else {})
    for kind, values in (
        ("data", [(0.2, 0.1, 0, 0), (0.4, 0.3, 1, 0)]),
        ("model", [(0.6, 0.5, 1, 1), (0.3, 0.2, 1, 0), (0.5, 0.4, 1, 1)]),
    ):
        for v in values:
            f.item(kind).reference = _reference(*v)
    f.item("data").reference = _reference(None, None, None, 1, token=False)
    f.item("data", skip_reason="special_top1").reference = _reference(1.0, 1.0, 1, 1)
    f.item("data", attention=True).reference = _reference(1.0, 1.0, 1, 1)
    f.item("model")  # no divergences yet
    session.flush()
    return f.study


def test_synthetic_table_against_a_hand_computation(session):
    study = _study(session)
    syn = study_results(session, study, FAST).synthetic
    assert syn is not None and syn.reference_model == "fake:2"
    assert syn.item_models == ["fake:2"] and syn.methods == [METHOD]
    assert syn.n_items == 6 and syn.n_items_pending == 1
    assert any("1 of 7 items have no divergences" in w for w in syn.warnings)
    assert (syn.b, syn.seed, syn.level) == (300, 4, 0.95)
    cells = {c.kind: c for c in syn.cells}
    assert set(cells) == {"data", "model"} and cells["data"].n_items == 3
    want = {
        "data": {"tv": 0.3, "js": 0.2, "gd": 0.5, "word_gd": 1 / 3},
        "model": {"tv": 1.4 / 3, "js": 1.1 / 3, "gd": 1.0, "word_gd": 2 / 3},
    }
    for kind, metrics in want.items():
        for metric, value in metrics.items():
            fig = cells[kind].cgd[metric]
            assert fig.estimate == pytest.approx(value), (kind, metric)
            assert fig.length == 10 and fig.kind == kind and fig.name == "cgd"
    assert cells["data"].cgd["tv"].n_items == 2 and cells["data"].cgd["word_gd"].n_items == 3
    # Word-level next to token-level d_GD: they agree on 1 of 2 data items, 2 of 3 model.
    assert cells["data"].gd_agreement == pytest.approx(0.5)
    assert cells["model"].gd_agreement == pytest.approx(2 / 3)
    (row,) = syn.ebc
    assert row.length == 10 and set(row.ebc) == {"tv", "js", "gd", "word_gd"}
    assert row.ebc["tv"].estimate == pytest.approx((1.4 / 3) / 0.3)
    assert row.ebc["js"].estimate == pytest.approx((1.1 / 3) / 0.2)
    assert row.ebc["gd"].estimate == pytest.approx(2.0)
    assert row.ebc["word_gd"].estimate == pytest.approx(2.0)
    assert row.ebc["gd"].kind == "model" and row.ebc["gd"].reference_kind == "data"
    for fig in row.ebc.values():
        assert fig.low <= fig.estimate <= fig.high and fig.n_resamples <= 300


def test_the_json_carries_the_table_and_null_for_what_is_undefined(session):
    """Data items all at d_GD 0 (the token argmax agrees): the gd EB-C is undefined."""
    f = StudyFactory(session, "zero", reference={"model": "fake:9"})
    for kind, values in (("data", [(0.1, 0.05, 0, 0)] * 3), ("model", [(0.2, 0.1, 1, 1)] * 3)):
        for v in values:
            f.item(kind).reference = _reference(*v, model="fake:9")
    session.flush()
    res = study_results(session, f.study, FAST)
    (row,) = res.synthetic.ebc
    assert math.isnan(row.ebc["gd"].estimate) and row.ebc["tv"].estimate == pytest.approx(2.0)
    doc = res.model_dump(mode="json")
    assert doc["synthetic"]["ebc"][0]["ebc"]["gd"]["estimate"] is None
    assert doc["synthetic"]["ebc"][0]["ebc"]["gd"]["low"] is None
    assert doc["synthetic"]["cells"][0]["cgd"]["gd"]["estimate"] == 0.0
    assert any("CGD(data) is 0" in w for w in res.synthetic.warnings)


def test_no_reference_model_no_synthetic_key_value(session):
    study = _study(session, "plain", reference=None)
    res = study_results(session, study, FAST)
    assert res.synthetic is None
    assert res.model_dump(mode="json")["synthetic"] is None


def test_a_reference_model_before_any_divergence(session):
    f = StudyFactory(session, "early", reference={"model": "fake:2"})
    f.item("data"), f.item("model")
    session.flush()
    syn = study_results(session, f.study, FAST).synthetic
    assert syn.cells == [] and syn.ebc == [] and syn.n_items_pending == 2
