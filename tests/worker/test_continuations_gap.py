"""Continuations after a gap (EB-M_gap, the later paper's eq. 5): a ratings item of a gap kind
is a distorted prefix of l words, g words the model wrote after it, and the continuation of l_gen
words sampled after all l + g; it reads the line of the data item of length l + g, whose l_gen
words after l + g are the reference of both.  On tiny real GPT-2s built in the test."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from worker.prefixes import PrefixSpec, make_items

L_GEN = 4
SPEC = PrefixSpec(batch_size=4, prompt_words=2, continuation_words=L_GEN)


def line_words(dataset, item) -> list[str]:
    (row,) = [r for r in dataset.rows if r.line == item.provenance["line"]]
    return list(row.words)


@pytest.mark.parametrize("kind", ["data_shuffled+gap@2", "data_corrupted@0.5+gap@3"])
@pytest.mark.parametrize("lm_name", ["word_lm", "bpe_lm"])
def test_a_gap_item_continues_after_its_gap_from_the_line_of_data_at_l_plus_g(
    lm_name, request, text_dataset, kind
):
    lm = request.getfixturevalue(lm_name)
    length, gap = 3, int(kind.rsplit("@", 1)[1])
    items = make_items(lm, text_dataset, SPEC, length, kind, 0, 10, seed=4)
    data = make_items(lm, text_dataset, SPEC, length + gap, "data", 0, 10, seed=4)
    kept = [i for i in items if not i.skipped]
    assert len(kept) >= 6, [i.skip_reason for i in items]
    for item, clean in zip(items, data, strict=True):
        # The same line (and prompt) as the data item of length l + g with the same index.
        assert item.provenance["line"] == clean.provenance["line"]
        assert item.prompt_words == clean.prompt_words
        # Both continuations are scored against the line's l_gen words after l + g words.
        assert item.provenance["data_continuation"] == clean.provenance["data_continuation"]
        words = line_words(text_dataset, item)
        assert item.provenance["data_continuation"] == " ".join(
            words[2 + length + gap : 2 + length + gap + L_GEN]
        )
        assert item.true_next_word is None and item.choices == []
        if item.skipped:
            assert item.skip_reason in {"eos_before_l", "eos_before_l_gen"}
            continue
        distorted, written = item.words[:length], item.words[length:]
        assert len(written) == gap and item.provenance["gap"]["gap_words"] == written
        if kind.startswith("data_shuffled"):
            assert Counter(distorted) == Counter(words[2 : 2 + length])
        assert len(item.continuation) == L_GEN
        assert item.provenance["continuation"]["words"] == L_GEN


def test_the_continuation_is_what_the_model_writes_after_the_gap(word_lm, text_dataset):
    """Near temperature 0 both the gap and the continuation are greedy: they must be P_M's
    greedy words after prompt + distorted prefix, computed here by hand, one forward a word."""
    spec = PrefixSpec(batch_size=3, prompt_words=2, continuation_words=3, temperature=1e-4)
    items = make_items(word_lm, text_dataset, spec, 3, "data_shuffled+gap@2", 0, 6, seed=2)
    eos = word_lm.tokenizer.eos_token_id
    checked = 0
    for item in items:
        context = " ".join(item.prompt_words + item.words[:3])
        ids = [word_lm.start_token_id, *word_lm.encode(context)]
        greedy = []
        for _ in range(2):
            with torch.no_grad():
                t = int(word_lm.model(torch.tensor([ids])).logits[0, -1].argmax())
            if t == eos:
                break
            greedy.append(word_lm.tokenizer.convert_ids_to_tokens(t))
            ids.append(t)
        if len(greedy) < 2 or item.skipped:
            continue
        assert item.words[3:] == greedy
        # The continuation at temperature 1 is sampled: it follows the g words in the row,
        # so re-running the item gives the same words (its own seed), whatever the batch.
        checked += 1
    assert checked >= 3
    again = make_items(
        word_lm, text_dataset, PrefixSpec(batch_size=1, prompt_words=2, continuation_words=3,
                                          temperature=1e-4),
        3, "data_shuffled+gap@2", 0, 6, seed=2,
    )  # fmt: skip
    assert [i.continuation for i in again] == [i.continuation for i in items]


def test_a_translation_model_takes_no_gap_kind(marian, pair_dataset):
    with pytest.raises(ValueError, match="gap kinds are for language models"):
        make_items(marian, pair_dataset, PrefixSpec(), 2, "data_shuffled+gap@2", 0, 2, 1)
