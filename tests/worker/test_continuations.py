"""Continuations of ratings studies: determinism, lengths, data and model prefixes, sampling,
the end-of-text policy and attention pairs, on the fake model and tiny real GPT-2s."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from app.precompute.datasets import DatasetError
from worker.continuations import attention_pairs, continue_texts
from worker.fake import SUFFIXES
from worker.models import load_model
from worker.prefixes import PrefixItem, PrefixSpec, _Draft, get_token_classes, make_items

L_GEN = 5
SPEC = PrefixSpec(batch_size=8, prompt_words=2, continuation_words=L_GEN)
KINDS = ("data", "model", "data_shuffled", "random", "data_corrupted@0.5", "model_corrupted@0.5")


@pytest.fixture(scope="module")
def fake():
    return load_model("fake")


def line_words(dataset, item) -> list[str]:
    (row,) = [r for r in dataset.rows if r.line == item.provenance["line"]]
    return list(row.words)


def key(items):
    return [(i.index, i.prompt_words, i.words, i.continuation, i.skip_reason) for i in items]


@pytest.mark.parametrize("lm_name", ["fake", "word_lm", "bpe_lm", "sp_lm"])
def test_every_kind_continues_by_exactly_l_gen_words(lm_name, request, text_dataset):
    lm = request.getfixturevalue(lm_name)
    for kind in KINDS:
        items = make_items(lm, text_dataset, SPEC, 3, kind, 0, 10, seed=1)
        kept = [i for i in items if not i.skipped]
        assert len(kept) >= 5, (kind, [i.skip_reason for i in items])
        for item in items:
            assert item.choices == []  # no word search for ratings items
            if item.skipped:
                assert item.skip_reason in {"eos_before_l", "eos_before_l_gen"}
                continue
            assert len(item.words) == 3 and len(item.continuation) == L_GEN
            assert all(w and not any(c.isspace() for c in w) for w in item.continuation)
            if lm_name == "fake":
                # A suffix piece never starts a word: the continuation does not extend the
                # prefix's last word.
                assert not set(item.continuation) & set(SUFFIXES)
            record = item.provenance["continuation"]
            assert record["words"] == L_GEN and record["attempts"] >= 1
            assert record["sampling"] == {
                "temperature": 1.0,
                "top_k": None,
                "top_p": None,
                "eos_policy": "resample",
            }


@pytest.mark.parametrize("lm_name", ["fake", "bpe_lm"])
def test_same_seed_same_items_whatever_the_shards_and_batches(lm_name, request, text_dataset):
    lm = request.getfixturevalue(lm_name)
    for kind in ("data", "model", "random"):
        one = make_items(lm, text_dataset, SPEC, 3, kind, 0, 10, seed=5)
        again = make_items(lm, text_dataset, SPEC, 3, kind, 0, 10, seed=5)
        assert key(again) == key(one)
        assert [i.provenance for i in again] == [i.provenance for i in one]
        small = PrefixSpec(batch_size=2, prompt_words=2, continuation_words=L_GEN)
        split = make_items(lm, text_dataset, small, 3, kind, 0, 4, seed=5) + make_items(
            lm, text_dataset, small, 3, kind, 4, 10, seed=5
        )
        assert key(split) == key(one)
        other = make_items(lm, text_dataset, SPEC, 3, kind, 0, 10, seed=6)
        assert [i.continuation for i in other] != [i.continuation for i in one]


def test_data_prefixes_keep_their_line_and_its_real_continuation(word_lm, text_dataset):
    items = make_items(word_lm, text_dataset, SPEC, 3, "data", 0, 12, seed=2)
    assert len({i.provenance["line"] for i in items}) == 12
    for item in items:
        words = line_words(text_dataset, item)
        assert len(words) >= 2 + 3 + L_GEN  # the line holds the real continuation
        assert item.prompt_words == words[:2] and item.words == words[2:5]
        assert item.true_next_word == words[5]
        assert item.provenance["data_continuation"] == " ".join(words[5 : 5 + L_GEN])
        # The continuation is sampled after prompt + prefix, encoded after the start token.
        context = [word_lm.start_token_id, *word_lm.encode(" ".join(words[:5]))]
        assert item.provenance["continuation"]["context_tokens"] == len(context)


def test_model_prefixes_are_a_next_word_studys_and_continue_on_their_own_rows(word_lm):
    """The prefix is the one a next-word study samples with the same seed, and continuing it on
    its sampling row's KV cache gives the continuation that sampling from the re-encoded text
    gives with the same seeds (word-level: the text encodes to the sampled tokens)."""
    spec = PrefixSpec(batch_size=4, continuation_words=L_GEN)
    items = make_items(word_lm, None, spec, 4, "model", 0, 16, seed=3)
    nextword = make_items(word_lm, None, PrefixSpec(batch_size=4), 4, "model", 0, 16, seed=3)
    assert [i.words for i in items] == [i.words for i in nextword]
    assert all(i.continuation is None for i in nextword)
    kept = [i for i in items if i.skip_reason != "eos_before_l"]
    assert len(kept) >= 8
    drafts = [_Draft(i.index, None, words=list(i.words), prompt=list(i.prompt_words)) for i in kept]
    classes = get_token_classes(word_lm)
    continue_texts(word_lm, classes, drafts, spec, 3, 4, "model", 4)
    assert [d.continuation for d in drafts] == [i.continuation for i in kept]
    assert [d.skip for d in drafts] == [i.skip_reason for i in kept]
    assert [d.info["continuation"]["attempts"] for d in drafts] == [
        i.provenance["continuation"]["attempts"] for i in kept
    ]


def test_an_early_end_of_text_resamples_the_continuation_or_skips_the_item(word_lm):
    # The random word-level model ends text often: many continuations of 8 words need another go.
    spec = PrefixSpec(batch_size=4, continuation_words=8)
    items = make_items(word_lm, None, spec, 3, "model", 0, 30, seed=2)
    attempts = [i.provenance["continuation"]["attempts"] for i in items if i.words]
    assert max(attempts) > 1
    for item in items:
        if not item.skipped:
            assert len(item.continuation) == 8
    skip = PrefixSpec(batch_size=4, continuation_words=8, eos_policy="skip")
    skipping = make_items(word_lm, None, skip, 3, "model", 0, 30, seed=2)
    reasons = Counter(i.skip_reason for i in skipping)
    assert reasons["eos_before_l_gen"] >= 3, reasons
    for a, b in zip(items, skipping, strict=True):
        if b.skip_reason == "eos_before_l_gen":
            assert len(b.continuation) < 8 and len(b.words) == 3
            assert b.provenance["continuation"]["attempts"] == 1
            assert b.provenance["continuation"]["sampling"]["eos_policy"] == "skip"
            # Resampling draws the continuation again after the same prefix (the prefix is
            # not drawn again: that would favour prefixes whose continuations run long).
            assert a.words == b.words and a.provenance["attempts"] == 1
            assert a.provenance["continuation"]["attempts"] > 1


def _ranks(lm, context: list[int], words: list[str]) -> list[int]:
    """The model's rank of each continuation word (word-level: one token a word) among the
    tokens a continuation may take, step by step from ``context``."""
    classes = get_token_classes(lm)
    allowed = ~classes.special | classes.ends
    allowed[lm.tokenizer.unk_token_id] = True
    ids, ranks = list(context), []
    for word in words:
        (token,) = lm.encode(word)
        with torch.inference_mode():
            logits = lm.model(torch.tensor([ids])).logits[0, -1].float()
            logits[~allowed] = float("-inf")
            ranks.append(int((logits > logits[token]).sum()))
        ids.append(token)
    return ranks


@pytest.mark.parametrize("top_k", [1, 2, None])
def test_continuation_top_k_restricts_the_sampling_and_is_recorded(word_lm, text_dataset, top_k):
    spec = PrefixSpec(
        batch_size=8, prompt_words=2, continuation_words=L_GEN, continuation_top_k=top_k
    )
    items = make_items(word_lm, text_dataset, spec, 3, "data", 0, 12, seed=4)
    kept = [i for i in items if not i.skipped]
    assert len(kept) >= 4
    ranks = []
    for item in kept:
        assert item.provenance["continuation"]["sampling"]["top_k"] == top_k
        context = [word_lm.start_token_id, *word_lm.encode(" ".join(item.prompt_words))]
        context += word_lm.encode(" ".join(item.words))
        ranks += _ranks(word_lm, context, item.continuation)
    if top_k is None:
        assert max(ranks) >= 2  # ancestral sampling reaches past the top two
    else:
        assert max(ranks) < top_k  # top-k 1 is greedy


def test_prefix_and_continuation_sample_with_their_own_settings(word_lm):
    """A greedy prefix (decoding top-k 1) and an ancestral continuation in one batch: rows of
    both phases share the batch, each sampled by its own settings."""
    spec = PrefixSpec(batch_size=3, sample_top_k=1, max_attempts=1, continuation_words=6)
    items = make_items(word_lm, None, spec, 4, "model", 0, 12, seed=1)
    assert len({tuple(i.words) for i in items}) == 1
    assert items[0].provenance["sampling"]["top_k"] == 1
    assert items[0].provenance["continuation"]["sampling"]["top_k"] is None
    kept = [i for i in items if not i.skipped]
    assert len({tuple(i.continuation) for i in kept}) >= 3


def test_diagnostic_kinds_are_continued_after_their_own_prefix(fake, text_dataset):
    data = make_items(fake, text_dataset, SPEC, 4, "data", 0, 8, seed=7)
    shuffled = make_items(fake, text_dataset, SPEC, 4, "data_shuffled", 0, 8, seed=7)
    for item in shuffled:
        words = line_words(text_dataset, item)
        assert sorted(item.words) == sorted(words[2:6])
        assert item.provenance["data_continuation"] == " ".join(words[6 : 6 + L_GEN])
    corrupted = make_items(fake, text_dataset, SPEC, 4, "model_corrupted@1", 0, 8, seed=7)
    vocab = set(text_dataset.vocabulary())
    assert all(set(i.words) <= vocab for i in corrupted)
    assert all("data_continuation" not in i.provenance for i in corrupted)
    for items in (data, shuffled, corrupted):
        assert all(len(i.continuation) == L_GEN for i in items if not i.skipped)


def test_attention_pairs_shuffle_the_real_continuation(fake, text_dataset):
    items = make_items(fake, text_dataset, SPEC, 3, "data", 20, 30, seed=1, prefixes_only=True)
    assert all(i.continuation is None and i.choices == [] for i in items)
    pairs = attention_pairs(items, 1)
    again = attention_pairs(
        make_items(fake, text_dataset, SPEC, 3, "data", 20, 30, seed=1, prefixes_only=True), 1
    )
    assert key(again) == key(pairs)
    for item in pairs:
        real = item.provenance["data_continuation"].split()
        assert len(real) == L_GEN
        assert Counter(item.continuation) == Counter(real)
        if len(set(real)) > 1:
            assert item.continuation != real and not item.skipped
        assert item.provenance["attention"]["expected_quality_max"] == 1
        assert "shuffled" in item.provenance["attention"]["method"]
    # Words that no permutation puts out of order: no attention pair can be made of them.
    same = PrefixItem(3, "data", 0, ["a", "b", "c"], provenance={"data_continuation": "x x x"})
    (unshuffled,) = attention_pairs([same], 1)
    assert unshuffled.skipped and unshuffled.skip_reason == "attention_unshuffled"


def test_what_a_ratings_item_cannot_be(marian, pair_dataset, fake, text_dataset):
    with pytest.raises(ValueError, match="without a reference model"):
        make_items(fake, text_dataset, SPEC, 3, "data", 0, 1, seed=1, data_from=fake)
    with pytest.raises(ValueError, match="gap kinds are for language models"):
        spec = PrefixSpec(continuation_words=3)
        make_items(marian, pair_dataset, spec, 2, "data_shuffled+gap@1", 0, 2, 1)
    with pytest.raises(ValueError, match="continuation_words"):
        PrefixSpec(continuation_words=-1)
    with pytest.raises(ValueError, match="continuation_top_k"):
        PrefixSpec(continuation_words=3, continuation_top_k=0)
    # A data line must hold the real continuation: 16-word lines at most, 2 + 10 + 5 > 16.
    with pytest.raises(DatasetError, match="at least 17 words"):
        make_items(fake, text_dataset, SPEC, 10, "data", 0, 1, seed=1)
    make_items(fake, text_dataset, PrefixSpec(prompt_words=2), 10, "data", 0, 1, seed=1)
