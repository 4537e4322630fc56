"""Forced-prefix translations (`worker.forced`, issue 34) on a tiny Marian-shaped model built in
the test: after every forced-prefix kind (DATA, NORMAL, UNREL, RAND) the translation starts
with the forced words and continues from the source, which is kept intact."""

from __future__ import annotations

import pytest
import torch

from worker.forced import translate_after
from worker.prefixes import PrefixSpec, make_items
from worker.tokens import decode_word, segment_words

SPEC = PrefixSpec(batch_size=4, num_beams=3)
LABELS = {"data": "DATA", "model": "NORMAL", "unrelated": "UNREL", "random": "RAND"}


def greedy_after(marian, source_ids, prefix_ids, steps):
    """The model's greedy next tokens after a forced prefix, by plain forwards."""
    ids = list(prefix_ids)
    out = []
    for _ in range(steps):
        lp, _ = marian.start([source_ids], [ids])
        t = int(lp[0].argmax())
        if t in marian.eos_token_ids:
            break
        out.append(t)
        ids.append(t)
    return out


@pytest.mark.parametrize("kind", list(LABELS))
def test_every_forced_prefix_kind_gives_a_translation_after_its_words(marian, pair_dataset, kind):
    length = 3
    items = make_items(marian, pair_dataset, SPEC, length, kind, 0, 8, seed=1)
    translate_after(marian, items, SPEC)
    made = [i for i in items if not i.skipped]
    assert len(made) >= 2  # NORMAL: a beam shorter than l words is skipped
    written = []
    for item in made:
        (row,) = [r for r in pair_dataset.rows if r.line == item.provenance["line"]]
        assert item.source == row.source  # the source is intact
        assert item.context_ids is not None and item.continuation is not None
        assert item.provenance["translation"]["num_beams"] == 3
        # The whole target starts with the forced tokens (the decoder was given them); the
        # rest is what the model wrote, as words after the forced words.
        record = item.provenance["translation"]
        target = record["target_ids"]
        assert target[: len(item.context_ids)] == item.context_ids
        assert record["forced_tokens"] == len(item.context_ids)
        groups = segment_words(target, _classes(marian))
        forced = len(segment_words(item.context_ids, _classes(marian)))
        words = [decode_word(marian.tokenizer, g) for g in groups]
        assert item.continuation == words[forced:] and len(target) > len(item.context_ids)
        # A random tiny model may go on with the last forced word (a suffix piece): recorded.
        last = segment_words(item.context_ids, _classes(marian))[-1]
        assert record["extends_last_word"] == (groups[forced - 1] != last)
        if kind == "data":
            assert item.words == list(row.words[:length])
        written.append(item.continuation)
    assert any(written)  # some translations go on with new words
    # It continues from the source: after one forced prefix, the model's next-token
    # distribution differs from one source to another (the decoder reads the source).
    first = made[0]
    other = next(i for i in made if i.source != first.source)
    mine, _ = marian.start([first.source_ids], [first.context_ids])
    theirs, _ = marian.start([other.source_ids], [first.context_ids])
    assert not torch.allclose(mine, theirs, atol=1e-4)


def test_with_one_beam_the_translation_is_greedy(marian, pair_dataset):
    spec = PrefixSpec(batch_size=4, num_beams=1)
    items = make_items(marian, pair_dataset, spec, 2, "random", 0, 4, seed=2)
    translate_after(marian, items, spec)
    for item in items:
        target = item.provenance["translation"]["target_ids"]
        new = target[len(item.context_ids) :]
        assert new == greedy_after(marian, item.source_ids, item.context_ids, len(new))


def test_language_models_are_refused(word_lm, text_dataset):
    items = make_items(word_lm, text_dataset, SPEC, 2, "data", 0, 2, seed=1)
    with pytest.raises(ValueError, match="translation models"):
        translate_after(word_lm, items, SPEC)


def _classes(model):
    from worker.prefixes import get_token_classes

    return get_token_classes(model)


def test_samples_tables_mark_the_prefix_and_escape_text(marian, pair_dataset):
    from app.results.samples import SAMPLE_FIELDS, samples_csv, samples_html, samples_latex
    from worker.forced import samples_of

    items = []
    for kind in LABELS:
        items += make_items(marian, pair_dataset, SPEC, 3, kind, 0, 2, seed=1)
    translate_after(marian, items, SPEC)
    items[0].continuation = ["=cmd|' /C calc'!A0", "<b>&", "50%_$"]  # hostile text
    samples = samples_of(items)
    assert {s.label for s in samples} <= set(LABELS.values()) and samples[0].source
    tex = samples_latex(samples, "Forced prefixes of l = 3 words.")
    assert tex.count("\\underline{") == len(samples)
    assert "50\\%\\_\\$" in tex
    html = samples_html(samples)
    assert html.count("<u>") == len(samples) and "&lt;b&gt;&amp;" in html and "<b>" not in html
    lines = samples_csv(samples).splitlines()
    assert lines[0].split(",") == SAMPLE_FIELDS and "'=cmd" in lines[1]
