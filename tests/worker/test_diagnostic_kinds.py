"""Diagnostic kinds of translation studies (the first paper's DATA / NORMAL / UNREL / RAND and
the corrupted and shuffled kinds) on a tiny real Marian model, and data prefixes sampled from a
reference model (synthetic EB-C with ``reference.data_prefixes = "reference"``)."""

from __future__ import annotations

from collections import Counter

import pytest

from app.precompute.datasets import DatasetError
from tests.worker.conftest import tiny_gpt2, word_tokenizer
from worker.hf import HFCausalLM
from worker.prefixes import PrefixSpec, get_token_classes, make_items
from worker.tokens import decode_word

SPEC = PrefixSpec(batch_size=4)


def own_row(dataset, item):
    (row,) = [r for r in dataset.rows if r.line == item.provenance["line"]]
    return row


def test_unrelated_is_another_rows_reference_with_the_own_source(marian, pair_dataset):
    length = 3
    items = make_items(marian, pair_dataset, SPEC, length, "unrelated", 0, 12, seed=1)
    again = make_items(marian, pair_dataset, SPEC, length, "unrelated", 0, 12, seed=1)
    assert [i.words for i in items] == [i.words for i in again]  # deterministic
    others = set()
    for item in items:
        row = own_row(pair_dataset, item)
        assert item.source == row.source  # the item keeps its own source ...
        (other,) = [r for r in pair_dataset.rows if r.line == item.provenance["unrelated_line"]]
        assert other.line != row.line  # ... and takes another row's reference
        assert len(other.words) >= length and item.words == list(other.words[:length])
        assert item.true_next_word is None
        assert item.choices and not item.skipped
        others.add(other.line)
    assert len(others) > 6  # drawn per item, not one fixed row


def test_unrelated_needs_two_rows_and_a_translation_model(word_lm, marian, text_dataset, tmp_path):
    from app.precompute.datasets import load_dataset

    with pytest.raises(ValueError, match="for translation"):
        make_items(word_lm, text_dataset, SPEC, 3, "unrelated", 0, 2, seed=1)
    path = tmp_path / "one.tsv"
    path.write_text("a b c d e\tthe cat sat on the mat\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="two rows"):
        make_items(marian, load_dataset(path), SPEC, 3, "unrelated", 0, 1, seed=1)


@pytest.mark.parametrize("kind", ["data_shuffled", "random", "data_corrupted@0.5"])
def test_translation_text_kinds(marian, pair_dataset, kind):
    length = 5
    vocab = set(pair_dataset.vocabulary())
    items = make_items(marian, pair_dataset, SPEC, length, kind, 0, 8, seed=2)
    for item in items:
        row = own_row(pair_dataset, item)
        assert item.source == row.source and len(item.words) == length
        assert item.choices and item.provenance["choices"]["method"].startswith("best-first")
        reference = list(row.words[:length])
        if kind == "data_shuffled":
            assert Counter(item.words) == Counter(reference)
        elif kind == "random":
            assert set(item.words) <= vocab
        else:
            where = set(item.provenance["corrupted_positions"])
            assert all(
                w == r
                for i, (w, r) in enumerate(zip(item.words, reference, strict=True))
                if i not in where
            )
    if kind != "random":
        assert any(i.words != list(own_row(pair_dataset, i).words[:length]) for i in items)


@pytest.mark.parametrize("rate", ["0.5", "1"])
def test_translation_model_corrupted(marian, pair_dataset, rate):
    length = 3
    plain = make_items(marian, pair_dataset, SPEC, length, "model", 0, 6, seed=3)
    items = make_items(marian, pair_dataset, SPEC, length, f"model_corrupted@{rate}", 0, 6, 3)
    vocab = set(pair_dataset.vocabulary())
    for item in items:
        assert item.provenance["beam"]["num_beams"] == 10
        if item.skipped:
            assert item.skip_reason == "beam_too_short"
            continue
        where = item.provenance["corrupted_positions"]
        if rate == "1":
            assert where == list(range(length)) and set(item.words) <= vocab
        # The choices follow the corrupted text: its encoding is the context.
        assert item.context_ids == marian.encode_target(item.text)
        assert item.choices
    # The corrupted prefixes start from the `model` kind's beam prefixes of the same rows.
    by_line = {i.provenance["line"]: i for i in plain}
    for item in items:
        if not item.skipped and item.provenance["line"] in by_line and rate == "0.5":
            base = by_line[item.provenance["line"]].words
            where = set(item.provenance["corrupted_positions"])
            assert all(
                w == b
                for k, (w, b) in enumerate(zip(item.words, base, strict=True))
                if k not in where
            )


def test_data_prefixes_sampled_from_the_reference(word_lm, text_dataset):
    """`data_from`: the data kinds start from a prefix sampled from P_D.  Greedy sampling makes
    it recognisable: P_D's greedy text, not P_M's, and no dataset line."""
    greedy = PrefixSpec(batch_size=4, sample_top_k=1, max_attempts=1, eos_policy="skip")
    tok = word_tokenizer()
    reference = HFCausalLM(tiny_gpt2(tok, seed=22, init=0.2), tok, name="p_d")
    mine = make_items(word_lm, None, greedy, 4, "model", 0, 1, seed=1)[0]
    theirs = make_items(reference, None, greedy, 4, "model", 0, 1, seed=1)[0]
    assert mine.words != theirs.words and not theirs.skipped
    items = make_items(word_lm, text_dataset, greedy, 4, "data", 0, 3, seed=1, data_from=reference)
    for item in items:
        assert item.words == theirs.words
        assert item.true_next_word is None and item.provenance["line"] is None
        assert item.provenance["data_prefix_model"] == "p_d"
        assert item.context_ids == [word_lm.start_token_id, *word_lm.encode(item.text)]
        # P_M's choices after P_D's text: P_M's top tokens there (a word-level vocabulary)
        root, _ = word_lm.start([item.context_ids])
        special = get_token_classes(word_lm).special
        top = root[0].masked_fill(special, float("-inf")).topk(5).indices.tolist()
        assert [w for w, _ in item.choices] == [decode_word(tok, [i]) for i in top]


def test_sampled_data_kinds_are_deterministic_and_transformed(word_lm, text_dataset):
    tok = word_tokenizer()
    reference = HFCausalLM(tiny_gpt2(tok, seed=12, init=0.2), tok, name="p_d")
    spec = PrefixSpec(batch_size=4)

    def make(kind, **kw):
        return make_items(word_lm, text_dataset, spec, 5, kind, 0, 8, seed=4, **kw)

    data = make("data", data_from=reference)
    assert [i.words for i in data] == [i.words for i in make("data", data_from=reference)]
    lines = {tuple(r.words[:5]) for r in text_dataset.rows}
    assert sum(tuple(i.words) in lines for i in data if not i.skipped) <= 1
    shuffled = make("data_shuffled", data_from=reference)
    corrupted = make("data_corrupted@0.4", data_from=reference)
    for item in shuffled + corrupted:
        assert item.provenance["data_prefix_model"] == "p_d" and item.true_next_word is None
    assert any(i.provenance.get("corrupted_positions") for i in corrupted)
    # With a prompt: the prompt is the dataset line's, the prefix P_D's continuation of it.
    prompted = make_items(
        word_lm,
        text_dataset,
        PrefixSpec(batch_size=4, prompt_words=2),
        3,
        "data",
        0,
        4,
        seed=1,
        data_from=reference,
    )
    for item in prompted:
        assert item.prompt_words == list(own_row(text_dataset, item).words[:2])


def test_sampled_data_prefixes_are_for_language_models(marian, pair_dataset):
    with pytest.raises(ValueError, match="language models only"):
        make_items(marian, pair_dataset, SPEC, 3, "data", 0, 2, seed=1, data_from=marian)
