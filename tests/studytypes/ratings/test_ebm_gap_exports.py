"""EB-M_gap and translation scores in a ratings study's EB-M surfaces: the references a gap
kind and a translation are scored against, and the stored document's CSV rows, LaTeX table,
terminal table, page rows and figure."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import numpy as np
import pytest

from app.precompute.datasets import Dataset, Row
from app.results.schemas import EBMOut
from app.results.stats.ebm import SCORES, TRANSLATION_SCORES, KindTexts, ebm_scores
from app.studytypes.ratings import ebm_exports
from app.studytypes.ratings.ebm import ScoreError, reference_of, texts_by_cell
from app.studytypes.ratings.queries import Continuation

GAP = "data_corrupted@0.3+gap@2"
KINDS = ("data", "model")
WORDS = ["the", "of", "a", "and", "to", "in", "was", "he", "it", "on"]


def _cont(item_id, length, kind, line, continuation="a b c", recorded=None):
    return Continuation(item_id, length, kind, 0, None, "x", None, continuation, line, recorded)


def test_a_gap_kinds_reference_is_the_clean_l_plus_g_prefixs():
    words = {7: tuple(f"w{i}" for i in range(20))}
    # prompt 2, l = 3, g = 2, l_gen 4: the line's words [7, 11), as the data item at l = 5's.
    gap = _cont(1, 3, GAP, 7, recorded="w7 w8 w9 w10")
    assert reference_of(gap, words, 2, 4) == "w7 w8 w9 w10"
    assert reference_of(_cont(2, 5, "data", 7), words, 2, 4) == "w7 w8 w9 w10"
    assert reference_of(_cont(3, 3, "data_corrupted@0.3", 7), words, 2, 4) == "w5 w6 w7 w8"
    with pytest.raises(ScoreError, match="does not continue"):
        reference_of(_cont(4, 3, GAP, 7, recorded="w5 w6 w7 w8"), words, 2, 4)
    assert reference_of(_cont(5, 15, GAP, 7), words, 2, 4) is None  # the line ends first
    # A translation (l_gen None): the reference's rest after its first l words.
    assert reference_of(_cont(6, 17, "data", 7), words, 0, None) == "w17 w18 w19"
    assert reference_of(_cont(7, 20, "data", 7), words, 0, None) is None


def test_translation_cells_are_the_references_rest():
    rows = [Row(i + 1, tuple(f"t{i}_{j}" for j in range(6)), source=f"s{i}") for i in range(3)]
    data = Dataset("pairs.tsv", "tsv", rows, "0" * 64)
    conts = [_cont(i, 2, "data", i + 1, continuation=f"t{i}_2 t{i}_3 x") for i in range(3)]
    cells = texts_by_cell(conts, data, prompt_words=0, l_gen=None)
    assert list(cells[2]["data"].references) == [f"t{i}_2 t{i}_3 t{i}_4 t{i}_5" for i in range(3)]


def _stored(names=SCORES, with_gap=True) -> EBMOut:
    rng = np.random.default_rng(0)

    def text(n=8):
        return " ".join(rng.choice(WORDS, size=n))

    n = 30
    refs = {ln: [text() for _ in range(n)] for ln in (3, 5)}
    prompts = {ln: [f"line:{ln}:{i}" for i in range(n)] for ln in (3, 5)}
    cells = {
        ln: {
            k: KindTexts([text() for _ in range(n)], refs[ln], prompts[ln])
            for k in ("data", "model")
        }
        for ln in (3, 5)
    }
    gaps = {}
    if with_gap:
        cells[3][GAP] = KindTexts([text() for _ in range(n)], refs[5], prompts[5])
        gaps = {GAP: 2}
    doc = ebm_scores(cells, b=50, seed=0, names=names, gaps=gaps)
    return EBMOut(computed_at=datetime(2026, 11, 28, tzinfo=UTC), provenance={}, scores=doc)


def test_the_csv_has_an_ebm_gap_row_per_score():
    stored = _stored()
    rows = list(csv.DictReader(io.StringIO(ebm_exports.ebm_csv("s", stored))))
    gap_rows = [r for r in rows if r["figure"] == "ebm_gap"]
    assert [r["score"] for r in gap_rows] == list(SCORES)
    for r, g in zip(gap_rows, stored.scores.gap_ratios, strict=True):
        assert (r["length"], r["kind"], r["l_gap"], r["reference_length"]) == ("3", GAP, "2", "5")
        assert float(r["value"]) == pytest.approx(g.value)
    assert all(r["l_gap"] == "" for r in rows if r["figure"] != "ebm_gap")


def test_latex_table_view_and_figure_show_ebm_gap():
    stored = _stored()
    tex = ebm_exports.ebm_latex("s", stored, "LM, gpt2")
    g = next(x for x in stored.scores.gap_ratios if x.score == "bleu")
    assert "data\\_corrupted@0.3 & 3 & 2 & 5 &" in tex
    assert f"${g.value:.3f} \\pm {g.se:.3f}$" in tex
    table = ebm_exports.ebm_table("s", stored)
    assert "EB-M_gap after data_corrupted@0.3" in table and "l_gap 2" in table
    (row,) = ebm_exports.ebm_gap_view(stored)
    assert (row["distorted"], row["length"], row["l_gap"], row["reference_length"]) == (
        "data_corrupted@0.3", 3, 2, 5,
    )  # fmt: skip
    assert row["cells"][0]["value"] == pytest.approx(g.value)
    svg = ebm_exports.ebm_gap_plot("s", stored, "svg").decode()
    assert "data_corrupted@0.3, l = 3" in svg and "EB-M_gap (BLEU)" in svg
    none = ebm_exports.ebm_gap_plot("s", _stored(with_gap=False), "svg").decode()
    assert "no gap kind" in none
    assert "EB-M_gap" not in ebm_exports.ebm_latex("s", _stored(with_gap=False), "LM")


def test_a_translation_studys_surfaces_name_its_scores():
    stored = _stored(names=TRANSLATION_SCORES, with_gap=False)
    tex = ebm_exports.ebm_latex("s", stored, "NMT, marian")
    assert "BLEU & sentence BLEU & chrF & entropy (4-grams) & EB-bleu" in tex
    assert "NIST" not in tex
    table = ebm_exports.ebm_table("s", stored)
    assert "chrF" in table and "METEOR" not in table
    (first, _) = ebm_exports.ebm_view(stored)
    assert len(first["ebm"]) == len(TRANSLATION_SCORES)
