"""The forced-prefix sample tables (app.results.samples) as LaTeX: one column per cell."""

from __future__ import annotations

import re

import pytest
import sacrebleu

from app.results.samples import (
    Sample,
    cell_bleu,
    corpus_bleu,
    samples_html,
    samples_latex,
    scored,
    sentence_bleu,
)


def _sample(source: str | None) -> Sample:
    return Sample(
        kind="random", label="RAND", length=3, index=0, source=source,
        prompt="", prefix="Le chat noir", continuation="dort sur le tapis.",
    )  # fmt: skip


def _columns(spec: str) -> int:
    """The columns a tabular's spec declares (l, c, r, p{...})."""
    return len(_one_line(spec)) + len(re.findall(r"p\{[^}]*\}", spec))


def _one_line(spec: str) -> list[str]:
    """The spec's columns that do not wrap (l, c, r)."""
    return re.findall(r"[lcr]", re.sub(r"p\{[^}]*\}", "", spec))


def test_every_row_fills_the_columns_it_declares_and_long_text_wraps():
    for source in ("The black cat sleeps on the rug, " * 4, None):
        tex = samples_latex([_sample(source)], "Samples.")
        spec = re.search(r"\\begin\{tabular\}\{(.*)\}\n", tex).group(1)
        body = [line for line in tex.splitlines() if line.endswith("\\\\")]
        cells = {line.count(" & ") + 1 for line in body}
        assert cells == {_columns(spec)}, (spec, cells)
        # only the kind is a one-line column: the source and the text wrap
        assert _one_line(spec) == ["l"] and spec.startswith("l")


# -- BLEU (issue 34): sacrebleu's own values, DATA and NORMAL only ---------------------------

REF = "the quick brown fox jumps over the lazy dog"


def test_bleu_is_sacrebleus_on_known_strings():
    assert sentence_bleu(REF, REF) == pytest.approx(100.0)
    assert sentence_bleu("cats sleep", REF) == pytest.approx(0.0, abs=1e-9)
    hyp = "the quick brown fox jumped over a lazy dog"
    # By hand: 1-4-gram precisions 7/9, 4/8, 2/7, 1/6 (nothing smoothed), no brevity penalty.
    by_hand = 100 * (7 / 9 * 4 / 8 * 2 / 7 * 1 / 6) ** 0.25
    assert sentence_bleu(hyp, REF) == pytest.approx(by_hand)
    assert sentence_bleu(hyp, REF) == pytest.approx(
        sacrebleu.sentence_bleu(hyp, [REF], tokenize="none").score
    )
    hyps, refs = [hyp, "a fox"], [REF, "a brown fox"]
    expected = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score
    assert corpus_bleu(hyps, refs) == pytest.approx(expected) and 0 < expected < 100
    with pytest.raises(ValueError, match="2 hypotheses and 1 references"):
        corpus_bleu(hyps, refs[:1])


def test_only_data_and_normal_translations_get_a_bleu():
    assert scored("data", REF) and scored("model", REF)
    assert not scored("unrelated", REF) and not scored("random", REF)
    assert not scored("data_shuffled", REF) and not scored("data", None)  # no reference: LM
    rows = [
        Sample("data", "DATA", 3, 0, "src", "", "the quick brown", "fox jumps", REF),
        Sample("model", "NORMAL", 3, 0, "src", "", "a quick brown", "dog", REF),
        Sample("random", "RAND", 3, 0, "src", "", "x y z", "fox", REF),
    ]
    cells = cell_bleu(rows)
    assert [(c["kind"], c["n"]) for c in cells] == [("data", 1), ("model", 1)]
    assert cells[0]["bleu"] == pytest.approx(corpus_bleu_of("the quick brown fox jumps"))


def corpus_bleu_of(hyp: str) -> float:
    return sacrebleu.corpus_bleu([hyp], [[REF]], tokenize="none").score


def test_the_html_table_escapes_and_shows_bleu_where_there_is_one():
    rows = [
        Sample("data", "DATA", 3, 0, "<i>src</i>", "", "a <b>", "c & d", REF, bleu=12.345),
        Sample("random", "RAND", 3, 1, "src", "", "x", "y", REF),
    ]
    html = samples_html(rows)
    assert "<td>&lt;i&gt;src&lt;/i&gt;</td>" in html and "<u>a &lt;b&gt;</u> c &amp; d" in html
    assert "<td>12.3</td>" in html and html.count("<tr>") == 2
