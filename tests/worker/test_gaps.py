"""The gap kinds (the later paper's self-recovery with a gap, `worker.gaps`): a shuffled or
corrupted data prefix of l words, g words sampled from P_M after it, and P_M's next words after
all l + g words, on tiny real GPT-2s built in the test."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from app.precompute.datasets import DatasetError
from worker.prefixes import PrefixSpec, get_token_classes, make_items

SPEC = PrefixSpec(batch_size=4)


def own_row(dataset, item):
    (row,) = [r for r in dataset.rows if r.line == item.provenance["line"]]
    return list(row.words)


def logprobs_after(lm, ids: list[int]) -> torch.Tensor:
    """P_M's next-token log-probabilities after ``ids``, by a plain forward of the model."""
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0, -1].float()
    return logits.log_softmax(-1)


@pytest.mark.parametrize("kind", ["data_shuffled+gap@3", "data_corrupted@0.5+gap@2"])
def test_gap_words_follow_the_distorted_prefix_and_the_choices_follow_the_gap(
    word_lm, text_dataset, kind
):
    length, gap = 4, int(kind.rsplit("@", 1)[1])
    items = make_items(word_lm, text_dataset, SPEC, length, kind, 0, 10, seed=1, keep_roots=True)
    made = [i for i in items if not i.skipped]
    assert len(made) >= 8
    for item in made:
        data = own_row(text_dataset, item)[:length]
        distorted, written = item.words[:length], item.words[length:]
        assert len(written) == gap and item.provenance["gap"]["gap_words"] == written
        assert item.provenance["gap"] == {
            "words": gap,
            "distorted_words": length,
            "gap_words": written,
        }
        if kind.startswith("data_shuffled"):
            assert Counter(distorted) == Counter(data)
        else:
            kept = set(range(length)) - set(item.provenance["corrupted_positions"])
            assert all(distorted[i] == data[i] for i in kept)
        assert item.true_next_word is None  # the next words follow the model's gap
        # The choices are read after all l + g words (word-level: one token a word).
        ids = [word_lm.start_token_id, *word_lm.encode(" ".join(item.words))]
        assert item.context_ids == ids
        expected = logprobs_after(word_lm, ids)
        assert torch.allclose(item.root.float(), expected, atol=1e-4)
        words = expected.masked_fill(get_token_classes(word_lm).special, float("-inf"))
        top = word_lm.tokenizer.convert_ids_to_tokens(words.topk(len(item.choices)).indices)
        assert [w for w, _ in item.choices] == top
    assert any(i.words[:length] != own_row(text_dataset, i)[:length] for i in made)


def test_a_gap_is_what_the_model_writes(word_lm, text_dataset):
    """At a temperature near 0 sampling is greedy: the gap must be P_M's greedy words after the
    distorted prefix, computed here by hand, one forward per word."""
    spec = PrefixSpec(batch_size=4, temperature=1e-4)
    items = make_items(word_lm, text_dataset, spec, 3, "data_shuffled+gap@4", 0, 6, seed=2)
    eos = word_lm.tokenizer.eos_token_id
    outcomes = Counter()
    for item in items:
        ids = [word_lm.start_token_id, *word_lm.encode(" ".join(item.words[:3]))]
        greedy = []
        for _ in range(4):  # every token may be sampled (<unk> is a word-level word) ...
            t = int(logprobs_after(word_lm, ids).argmax())
            if t == eos:  # ... and an end of text before g words skips a greedy item
                break
            greedy.append(word_lm.tokenizer.convert_ids_to_tokens(t))
            ids.append(t)
        if len(greedy) < 4:
            assert item.skipped and item.skip_reason == "eos_before_l"
            outcomes["eos"] += 1
        else:
            assert not item.skipped and item.words[3:] == greedy
            outcomes["made"] += 1
    assert outcomes["made"] >= 2


def test_gap_items_are_deterministic_and_do_not_depend_on_the_shard(bpe_lm, text_dataset):
    kind = "data_corrupted@0.3+gap@2"
    whole = make_items(bpe_lm, text_dataset, SPEC, 3, kind, 0, 8, seed=5)
    part = make_items(bpe_lm, text_dataset, PrefixSpec(batch_size=3), 3, kind, 4, 8, seed=5)
    for a, b in zip(whole[4:], part, strict=True):  # another batch size: float rounding aside
        assert a.words == b.words and [w for w, _ in a.choices] == [w for w, _ in b.choices]
        assert [p for _, p in a.choices] == pytest.approx([p for _, p in b.choices], rel=1e-4)
    again = make_items(bpe_lm, text_dataset, SPEC, 3, kind, 0, 8, seed=5)
    assert [(i.words, i.choices) for i in again] == [(i.words, i.choices) for i in whole]
    other = make_items(bpe_lm, text_dataset, SPEC, 3, kind, 0, 8, seed=6)
    assert [i.words for i in other] != [i.words for i in whole]
    for item in whole:
        if not item.skipped:  # subword model: l distorted words, then g sampled ones
            assert len(item.words) == 3 + 2 and item.choices


def test_gap_kinds_are_for_language_models(marian, pair_dataset, word_lm, text_dataset):
    with pytest.raises(ValueError, match="gap kinds"):
        make_items(marian, pair_dataset, SPEC, 3, "data_shuffled+gap@2", 0, 2, seed=1)
    # A ratings item of a gap kind (EB-M_gap) reads its line: it needs the dataset.
    ratings = PrefixSpec(batch_size=4, continuation_words=5)
    with pytest.raises(DatasetError, match="needs a dataset"):
        make_items(word_lm, None, ratings, 3, "data_shuffled+gap@2", 0, 2, seed=1)
    made = make_items(word_lm, text_dataset, ratings, 3, "data_shuffled+gap@2", 0, 2, seed=1)
    assert all(i.continuation or i.skipped for i in made)
    for bad in ("data+gap@2", "model_corrupted@0.5+gap@2", "data_shuffled+gap@0"):
        with pytest.raises(ValueError):
            make_items(word_lm, None, SPEC, 3, bad, 0, 2, seed=1)
