"""EB-M's automatic scores of translation continuations (issue 34): a tiny Marian-shaped model
built in the test translates after forced DATA and NORMAL prefixes (`worker.forced`), and the
EB-M job's references (the reference's rest after the first l words) and translation scores
are sacrebleu's corpus BLEU, sentence BLEU and chrF of those translations, with intervals."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

from app.results.stats.ebm import TRANSLATION_SCORES, ebm_scores
from app.studytypes.ratings.ebm import texts_by_cell
from app.studytypes.ratings.queries import Continuation
from worker.forced import translate_after
from worker.prefixes import PrefixSpec, make_items

SPEC = PrefixSpec(batch_size=4, num_beams=2)
LENGTH = 2


def _continuations(marian, dataset, kind: str) -> list[Continuation]:
    items = translate_after(marian, make_items(marian, dataset, SPEC, LENGTH, kind, 0, 24, 1), SPEC)
    out = []
    for i in items:
        if i.skipped or not i.continuation:
            continue
        text = " ".join(i.continuation)
        line = i.provenance["line"]
        prefix = i.text
        out.append(
            Continuation(i.index, LENGTH, kind, i.index, None, prefix, None, text, line, None)
        )
    return out


def test_translations_after_forced_prefixes_get_sacrebleus_scores(marian, pair_dataset):
    rows = _continuations(marian, pair_dataset, "data") + _continuations(
        marian, pair_dataset, "model"
    )
    cells = texts_by_cell(rows, pair_dataset, prompt_words=0, l_gen=None)
    words = {r.line: r.words for r in pair_dataset.rows}
    res = ebm_scores(cells, b=200, seed=0, names=TRANSLATION_SCORES)
    got = {(t.kind, t.score): t for t in res.scores}
    for kind in ("data", "model"):
        mine = [c for c in rows if c.kind == kind]
        hyps = [c.continuation for c in mine]
        refs = [" ".join(words[c.line][LENGTH:]) for c in mine]  # the reference's rest
        assert list(cells[LENGTH][kind].references) == refs
        assert got[(kind, "bleu")].value == pytest.approx(
            sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score, rel=1e-12
        )
        sentence = [
            sacrebleu.sentence_bleu(h, [r], tokenize="none").score
            for h, r in zip(hyps, refs, strict=True)
        ]
        assert got[(kind, "sentence_bleu")].value == pytest.approx(np.mean(sentence), rel=1e-12)
        assert got[(kind, "chrf")].value == pytest.approx(
            sacrebleu.corpus_chrf(hyps, [refs]).score, rel=1e-12
        )
        for name in ("bleu", "sentence_bleu", "chrf"):
            t = got[(kind, name)]
            assert t.n == len(mine) and t.method.startswith("percentile bootstrap")
            assert t.degenerate or t.low <= t.value <= t.high
    ratios = {r.score: r for r in res.ratios if r.kind == "model"}
    assert set(ratios) == set(TRANSLATION_SCORES)
    assert ratios["chrf"].value == pytest.approx(
        got[("data", "chrf")].value / got[("model", "chrf")].value
    )
