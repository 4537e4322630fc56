"""Prefix kinds, determinism, seq2seq beam prefixes, and items end to end."""

from __future__ import annotations

import hashlib
import math
from collections import Counter

import pytest
import torch

from app.precompute.datasets import DatasetError
from app.studies.kinds import parse_kind
from worker.prefixes import (
    PrefixSpec,
    get_token_classes,
    item_seed,
    make_items,
    stable_seed,
)
from worker.sampling import sample_tokens
from worker.tokens import decode_word, segment_words

SPEC = PrefixSpec(batch_size=8)


def row_words(dataset, item):
    (row,) = [r for r in dataset.rows if r.line == item.provenance["line"]]
    return list(row.words)


def special_names(lm):
    cl = get_token_classes(lm)
    return set(lm.tokenizer.convert_ids_to_tokens(cl.special.nonzero().flatten().tolist()))


def test_parse_kind():
    assert parse_kind("data") == ("data", None)
    assert parse_kind("model_corrupted@0.25") == ("model_corrupted", 0.25)
    for bad in ("data@0.1", "data_corrupted", "model_corrupted@2", "beam"):
        with pytest.raises(ValueError):
            parse_kind(bad)


def test_seeds_are_stable_hashes():
    expected = (
        int.from_bytes(hashlib.sha256(b"shard\x1f7\x1f10\x1fdata\x1f3").digest()[:8], "big") >> 1
    )
    assert stable_seed("shard", 7, 10, "data", 3) == expected
    assert len({stable_seed("shard", 7, 10, "data", i) for i in range(50)}) == 50
    assert item_seed(7, 10, "model", 0) != item_seed(7, 10, "model", 0, attempt=1)
    assert item_seed(7, 10, "model", 0) != item_seed(8, 10, "model", 0)


def test_data_prefixes_cut_at_l_words_with_true_next_word(word_lm, text_dataset):
    items = make_items(word_lm, text_dataset, SPEC, 6, "data", 0, 20, seed=1)
    assert [i.index for i in items] == list(range(20))
    assert len({i.provenance["line"] for i in items}) == 20  # distinct lines
    for item in items:
        words = row_words(text_dataset, item)
        assert len(words) >= 7
        assert item.words == words[:6] and item.true_next_word == words[6]
        assert len(item.choices) == 5 and not item.skipped
        probs = [p for _, p in item.choices]
        assert probs == sorted(probs, reverse=True)
        assert not {w for w, _ in item.choices} & {"<unk>", "<eos>"}
        assert item.provenance["choices"]["method"] == "word-level-topk"
        assert item.provenance["dataset"]["sha256"] == text_dataset.sha256


def test_prompt_precedes_data_and_model_prefixes(bpe_lm, text_dataset):
    spec = PrefixSpec(batch_size=8, prompt_words=3)
    for item in make_items(bpe_lm, text_dataset, spec, 2, "data", 0, 6, seed=1):
        words = row_words(text_dataset, item)
        assert item.prompt_words == words[:3] and item.words == words[3:5]
        assert item.true_next_word == words[5]
    for item in make_items(bpe_lm, text_dataset, spec, 3, "model", 0, 6, seed=1):
        assert item.prompt_words == row_words(text_dataset, item)[:3]
        assert len(item.words) == 3 or item.skipped


def test_same_seed_same_items_and_shards_independent(sp_lm, text_dataset):
    def key(items):
        return [(i.index, i.words, [w for w, _ in i.choices]) for i in items]

    for kind in ("data", "model", "data_corrupted@0.5", "random"):
        a = make_items(sp_lm, text_dataset, SPEC, 4, kind, 0, 10, seed=5)
        b = make_items(sp_lm, text_dataset, SPEC, 4, kind, 0, 10, seed=5)
        assert key(a) == key(b)
        assert [i.provenance for i in a] == [i.provenance for i in b]
        assert [i.choices for i in a] == [i.choices for i in b]
        split = make_items(sp_lm, text_dataset, SPEC, 4, kind, 0, 4, seed=5) + make_items(
            sp_lm, text_dataset, SPEC, 4, kind, 4, 10, seed=5
        )
        assert key(split) == key(a)
        other = make_items(sp_lm, text_dataset, SPEC, 4, kind, 0, 10, seed=6)
        assert key(other) != key(a)


def test_model_prefixes_have_exactly_l_words(word_lm, bpe_lm, sp_lm):
    for lm in (word_lm, bpe_lm, sp_lm):
        items = make_items(lm, None, SPEC, 5, "model", 0, 12, seed=3)
        cl = get_token_classes(lm)
        for item in items:
            if item.skipped:
                assert item.skip_reason == "special_top1"
            assert len(item.words) == 5 and all(item.words)
            assert 1 <= len(item.choices) <= 5
            assert not {w for w, _ in item.choices} & special_names(lm)
            assert item.provenance["sampling"]["temperature"] == 1.0
        # The words are the sampled text's words under the boundary rule.
        ids = lm.encode(" ".join(items[0].words))
        assert [decode_word(lm.tokenizer, g) for g in segment_words(ids, cl)] == items[0].words


def test_end_of_text_before_l_words_resamples_or_skips(word_lm):
    # The random word-level model ends text often: many prefixes of 8 words need re-sampling.
    items = make_items(word_lm, None, SPEC, 8, "model", 0, 30, seed=2)
    assert max(i.provenance["attempts"] for i in items) > 1
    assert all(len(i.words) == 8 for i in items if i.skip_reason != "eos_before_l")
    spec = PrefixSpec(batch_size=8, eos_policy="skip")
    skipped = [i for i in make_items(word_lm, None, spec, 8, "model", 0, 30, seed=2) if i.skipped]
    assert skipped and all(i.skip_reason == "eos_before_l" for i in skipped)
    assert all(len(i.words) < 8 for i in skipped)


def test_sampling_options_restrict_the_vocabulary(word_lm):
    spec = PrefixSpec(batch_size=8, sample_top_k=1, max_attempts=1)
    items = make_items(word_lm, None, spec, 4, "model", 0, 4, seed=1)
    # Greedy: every prefix is the same (or ends early the same way).
    assert len({tuple(i.words) for i in items}) == 1
    assert items[0].provenance["sampling"]["top_k"] == 1


def test_shuffled_keeps_the_multiset(word_lm, text_dataset):
    changed = 0
    for item in make_items(word_lm, text_dataset, SPEC, 8, "data_shuffled", 0, 20, seed=1):
        original = row_words(text_dataset, item)[:8]
        assert Counter(item.words) == Counter(original)
        changed += item.words != original
    assert changed >= 15


def test_corruption_rate_within_tolerance(word_lm, text_dataset):
    rate, length, n = 0.3, 8, 50
    items = make_items(word_lm, text_dataset, SPEC, length, f"data_corrupted@{rate}", 0, n, 1)
    vocab = set(text_dataset.vocabulary())
    drawn = 0
    for item in items:
        original = row_words(text_dataset, item)[:length]
        where = set(item.provenance["corrupted_positions"])
        drawn += len(where)
        for i, (w, o) in enumerate(zip(item.words, original, strict=True)):
            if i not in where:
                assert w == o
            assert w in vocab
    total = n * length
    sigma = math.sqrt(rate * (1 - rate) / total)
    assert abs(drawn / total - rate) < 4 * sigma


def test_model_corrupted_and_random(bpe_lm, text_dataset):
    vocab = set(text_dataset.vocabulary())
    for item in make_items(bpe_lm, text_dataset, SPEC, 4, "model_corrupted@1.0", 0, 5, seed=1):
        assert len(item.words) == 4 and set(item.words) <= vocab
        assert item.provenance["corrupted_positions"] == [0, 1, 2, 3]
    for item in make_items(bpe_lm, text_dataset, SPEC, 6, "random", 0, 5, seed=1):
        assert len(item.words) == 6 and set(item.words) <= vocab and item.choices


def test_special_top1_skip_policy_is_recorded(word_lm, text_dataset):
    spec = PrefixSpec(batch_size=8, special_policy="skip")
    items = make_items(word_lm, text_dataset, spec, 3, "data", 0, 40, seed=1)
    flagged = [i for i in items if i.provenance["choices"]["special_top1"]]
    assert all(i.skipped and i.skip_reason == "special_top1" for i in flagged)
    assert all(not i.skipped for i in items if i not in flagged)
    assert all(i.provenance["choices"]["special_policy"] == "skip" for i in items)


def test_too_few_lines(word_lm, text_dataset):
    with pytest.raises(DatasetError, match="only"):
        make_items(word_lm, text_dataset, SPEC, 15, "data", 0, 50, seed=1)


def test_seq2seq_data_prefix_keeps_source(marian, pair_dataset):
    for item in make_items(marian, pair_dataset, SPEC, 3, "data", 0, 6, seed=1):
        (row,) = [r for r in pair_dataset.rows if r.line == item.provenance["line"]]
        assert item.source == row.source
        assert item.words == list(row.words[:3]) and item.true_next_word == row.words[3]
        assert item.choices and item.provenance["choices"]["method"].startswith("best-first")


def test_seq2seq_model_prefix_is_truncated_beam_search(marian, pair_dataset):
    length = 3
    items = make_items(marian, pair_dataset, PrefixSpec(batch_size=4), length, "model", 0, 4, 1)
    cl = get_token_classes(marian)
    for item in items:
        assert item.provenance["beam"]["num_beams"] == 10
        ids = torch.tensor([marian.encode_source(item.source)])
        with torch.inference_mode():
            out = marian.model.generate(
                input_ids=ids,
                num_beams=10,
                do_sample=False,
                max_new_tokens=item.provenance["beam"]["max_new_tokens"],
            )[0].tolist()
        special = set(marian.tokenizer.all_special_ids)
        full = [
            decode_word(marian.tokenizer, g)
            for g in segment_words([t for t in out if t not in special], cl)
        ]
        if len(full) < length:
            assert item.skipped and item.skip_reason == "beam_too_short"
        else:
            assert item.words == full[:length]
            assert item.true_next_word is None and item.choices


@pytest.mark.parametrize("lm_name", ["word_lm", "bpe_lm", "sp_lm"])
def test_continuous_batching_gives_the_same_items_as_one_batch(lm_name, request):
    """Batch 3 refills its places many times (and searches in several groups); batch 64 samples
    and searches all 20 prefixes together.  Each prefix has its own random stream, so the items
    are the same."""
    lm = request.getfixturevalue(lm_name)
    one = make_items(lm, None, PrefixSpec(batch_size=64), 5, "model", 0, 20, seed=11)
    refilled = make_items(lm, None, PrefixSpec(batch_size=3), 5, "model", 0, 20, seed=11)
    assert [i.words for i in refilled] == [i.words for i in one]
    assert [i.provenance["attempts"] for i in refilled] == [i.provenance["attempts"] for i in one]
    assert [i.skip_reason for i in refilled] == [i.skip_reason for i in one]
    for a, b in zip(refilled, one, strict=True):
        assert [w for w, _ in a.choices] == [w for w, _ in b.choices]
        for (_, p), (_, q) in zip(a.choices, b.choices, strict=True):
            assert p == pytest.approx(q, rel=1e-4)
    if lm_name != "word_lm":  # subword prefixes end at different steps
        assert len({i.provenance.get("context_tokens") for i in one}) > 1


def test_continuous_batching_with_a_prompt_and_resampling(bpe_lm, text_dataset):
    spec = PrefixSpec(batch_size=2, prompt_words=3)
    a = make_items(bpe_lm, text_dataset, spec, 3, "model", 0, 9, seed=2)
    b = make_items(
        bpe_lm, text_dataset, PrefixSpec(batch_size=32, prompt_words=3), 3, "model", 0, 9, seed=2
    )
    assert [(i.words, i.skip_reason) for i in a] == [(i.words, i.skip_reason) for i in b]
    assert [[w for w, _ in i.choices] for i in a] == [[w for w, _ in i.choices] for i in b]


def test_continuous_batching_over_many_steps(bpe_lm):
    """Two places for ten long prefixes: places are emptied and refilled many times and the
    cache drops its dead columns; the items are those of one batch."""
    one = make_items(bpe_lm, None, PrefixSpec(batch_size=64), 12, "model", 0, 10, seed=4)
    two = make_items(bpe_lm, None, PrefixSpec(batch_size=2), 12, "model", 0, 10, seed=4)
    assert [(i.words, i.skip_reason) for i in two] == [(i.words, i.skip_reason) for i in one]
    assert [[w for w, _ in i.choices] for i in two] == [[w for w, _ in i.choices] for i in one]
    assert sum(i.provenance["context_tokens"] for i in one) > 64 * 2


@pytest.mark.parametrize("masked", [False, True])
def test_inverse_cdf_sampling_draws_the_model_distribution(masked):
    """Uniforms on a fine grid land on each token in proportion to its probability (the
    disallowed ones renormalised away), and the plain path (no softmax) agrees with the general
    one (temperature, top-k, top-p) wherever the two define the same distribution."""
    torch.manual_seed(0)
    vocab, n = 50, 20_000
    logprobs = torch.log_softmax(torch.randn(vocab) * 2, -1)
    allowed = torch.ones(vocab, dtype=torch.bool)
    if masked:
        allowed[::7] = False
    u = (torch.arange(n, dtype=torch.float32) + 0.5) / n
    rows = logprobs.expand(n, vocab)
    mask = allowed[None, :] if masked else None
    plain = sample_tokens(rows, u, PrefixSpec(), mask)
    general = sample_tokens(rows, u, PrefixSpec(sample_top_k=vocab), mask)
    p = logprobs.exp() * allowed
    p = p / p.sum()
    freq = torch.bincount(plain, minlength=vocab).double() / n
    assert (freq - p.double()).abs().max() < 2.0 / n + 1e-5
    assert not plain[~allowed[plain]].numel()
    assert (plain != general).sum() <= 2  # float rounding at a bucket's edge, at most


def long_words_lm():
    """A tiny GPT-2 whose continuation piece "s" is likely everywhere: some prefixes grow words
    of many tokens ("thsthss"), several times wider than the median."""
    from tests.worker.conftest import bpe_tokenizer, tiny_gpt2
    from worker.hf import HFCausalLM

    tok = bpe_tokenizer()
    model = tiny_gpt2(tok, seed=2)
    with torch.no_grad():
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.clone())
        model.transformer.ln_f.bias[0] += 3.0
        model.lm_head.weight[tok.convert_tokens_to_ids("s"), 0] = 2.0
    return HFCausalLM(model, tok, name="long-words")


class FeedLog:
    """Each forward of ``lm``'s slots: the slots it covered and the cache's bytes after it."""

    def __init__(self, monkeypatch, lm):
        self.rows: list[int] = []
        self.fed: list[int] = []  # the slots it fed: fewer than it covered if one was free
        self.cache: list[int] = []
        real = lm.feed

        def feed(state, slots, *rest):
            self.rows.append(max(slots) + 1)
            self.fed.append(len(set(slots)))
            out = real(state, slots, *rest)
            self.cache.append(lm.slot_bytes(state))
            return out

        monkeypatch.setattr(lm, "feed", feed)

    def clear(self) -> None:
        self.rows.clear()
        self.fed.clear()
        self.cache.clear()


def impose_budget(monkeypatch, cache_bytes: int, rows: int = 64) -> None:
    """The automatic batch size picks ``rows``, and the slots' cache gets ``cache_bytes`` (the
    device's budget is that plus the rows' logit buffers, `worker.prefixes.make_items`)."""
    import worker.prefixes as prefixes
    from worker.models import LOGIT_BUFFERS

    monkeypatch.setattr(
        prefixes,
        "memory_budget",
        lambda model: cache_bytes + rows * LOGIT_BUFFERS * 4 * model.vocab_size,
    )
    monkeypatch.setattr(prefixes, "auto_batch_size", lambda *args, **kwargs: rows)


def test_wide_rows_batch_sizes_and_a_memory_budget_change_no_item(monkeypatch):
    """Prefixes of very different widths share the slots; a batch of 64, a batch of 5 (slots
    refilled many times, the tail packed and shrunk) and a batch of 64 whose KV cache must keep
    within a budget of a few rows' worth (fewer rows live while a wide one lives; the cache never
    passes the budget, not even while a row widens it) make the same items.  Probabilities move
    in float32 rounding only."""
    lm = long_words_lm()
    spec = PrefixSpec(batch_size=64, prefix_tokens_per_word=40)
    log = FeedLog(monkeypatch, lm)
    wide = make_items(lm, None, spec, 4, "model", 0, 48, seed=5)
    widths = [i.provenance["context_tokens"] for i in wide if not i.skipped]
    assert max(widths) > 2 * sorted(widths)[len(widths) // 2]
    assert max(log.rows) == 48
    small = make_items(lm, None, PrefixSpec(batch_size=5, prefix_tokens_per_word=40), 4, "model",
                       0, 48, seed=5)  # fmt: skip
    impose_budget(monkeypatch, 6 * 48 * lm.kv_bytes_per_token)  # six rows 48 tokens wide
    log.clear()
    tight = make_items(lm, None, PrefixSpec(prefix_tokens_per_word=40), 4, "model", 0, 48, seed=5)
    assert max(log.rows) < 48  # the budget held rows back
    assert max(log.cache) <= 6 * 48 * lm.kv_bytes_per_token  # ... and the cache within it
    for run in (small, tight):
        assert [(i.words, [w for w, _ in i.choices], i.skip_reason) for i in run] == [
            (i.words, [w for w, _ in i.choices], i.skip_reason) for i in wide
        ]
        for x, y in zip(run, wide, strict=True):
            # float32 rounding differs between batch shapes (about 1e-5 relative here)
            assert [p for _, p in x.choices] == pytest.approx([p for _, p in y.choices], rel=1e-4)


def test_one_long_context_does_not_hold_the_rows_back_after_it(monkeypatch, bpe_lm, tmp_path):
    """Data prefixes searched under a memory budget of about eight ordinary rows: one line of
    very long words (a context several times the others') narrows the slots while it lives, and
    the rows grow back after it: the forwards stay near those of eight rows without a budget,
    and the items are the same."""
    from app.precompute.datasets import load_dataset
    from tests.worker.conftest import corpus_lines

    lines = corpus_lines(40)
    lines[3] = " ".join(["s" * 30] * 8)  # 8 words of 30 tokens each
    path = tmp_path / "long.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = load_dataset(path)
    log = FeedLog(monkeypatch, bpe_lm)
    eight = make_items(bpe_lm, dataset, PrefixSpec(batch_size=8), 4, "data", 0, 40, seed=1)
    n_eight = len(log.rows)
    contexts = sorted(i.provenance["context_tokens"] for i in eight)
    assert contexts[-1] > 8 * contexts[len(contexts) // 2]  # the long line is in the shard
    budget = 8 * 32 * bpe_lm.kv_bytes_per_token  # eight rows 32 tokens wide
    impose_budget(monkeypatch, budget)
    log.clear()
    tight = make_items(bpe_lm, dataset, PrefixSpec(), 4, "data", 0, 40, seed=1)
    assert max(log.cache) <= budget
    assert len(log.rows) < 1.5 * n_eight  # not a row at a time after the long one
    assert [[w for w, _ in i.choices] for i in tight] == [[w for w, _ in i.choices] for i in eight]


@pytest.mark.parametrize("budget", [False, True])
def test_the_tail_s_forwards_cover_only_live_rows(monkeypatch, bpe_lm, budget):
    """Once nothing waits, rows finish one by one; each forward covers only the slots it feeds
    (the live rows are packed to the front every step that leaves a slot free), never a free
    slot below a live one, which would be a padded row of the forward.  Also through `_fit`,
    the path of a run with a memory budget (here one that does not bind; pausing and rows
    sent back to the queue: `test_a_memory_budget_bounds_the_cache_at_every_step`).  The
    items are those of one batch."""
    one = make_items(bpe_lm, None, PrefixSpec(batch_size=64), 6, "model", 0, 40, seed=3)
    if budget:
        impose_budget(monkeypatch, 16 * 64 * bpe_lm.kv_bytes_per_token, rows=16)
    log = FeedLog(monkeypatch, bpe_lm)
    spec = PrefixSpec() if budget else PrefixSpec(batch_size=16)
    packed = make_items(bpe_lm, None, spec, 6, "model", 0, 40, seed=3)
    assert max(log.rows) == 16 and min(log.rows) < 8  # a full batch, then a tail
    # (step, slots covered, slots fed) of every forward that covered a free slot
    pairs = enumerate(zip(log.rows, log.fed, strict=True))
    assert [(i, c, f) for i, (c, f) in pairs if c != f] == []
    assert [[w for w, _ in i.choices] for i in packed] == [[w for w, _ in i.choices] for i in one]


@pytest.mark.parametrize("columns", [400, 150])
def test_a_memory_budget_bounds_the_cache_at_every_step(monkeypatch, tmp_path, columns):
    """Data prefixes of many widths (half the lines of long words) searched under a budget of
    ``columns`` columns in all (slots x columns): after every forward the cache is within it
    (rows that would widen it pause, placed after the fed rows, and at 150 some rows go back to
    the queue and start again), and the items are those of an unbudgeted batch of 64."""
    import random

    from app.precompute.datasets import load_dataset
    from tests.worker.conftest import corpus_lines

    lm = long_words_lm()
    rng = random.Random(0)
    lines = [
        " ".join(["s" * rng.randint(3, 20)] * 8) if rng.random() < 0.5 else line
        for line in corpus_lines(40)
    ]
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = load_dataset(path)
    budget = columns * lm.kv_bytes_per_token
    log = FeedLog(monkeypatch, lm)
    free = make_items(lm, dataset, PrefixSpec(batch_size=64), 4, "data", 0, 40, seed=1)
    assert max(log.cache) > budget  # the budget binds: unbudgeted, the cache passes it
    impose_budget(monkeypatch, budget)
    log.clear()
    tight = make_items(lm, dataset, PrefixSpec(), 4, "data", 0, 40, seed=1)
    assert max(log.cache) <= budget
    # Paused rows sit after the fed ones, and free slots (rows that finished, or went back to
    # the queue) are packed away: no forward covers a slot it does not feed.
    assert log.rows == log.fed
    assert [(i.words, [w for w, _ in i.choices], i.skip_reason) for i in tight] == [
        (i.words, [w for w, _ in i.choices], i.skip_reason) for i in free
    ]


@pytest.mark.parametrize("continuation_words", [0, 3])
def test_a_row_sent_back_to_the_queue_makes_the_same_item(monkeypatch, continuation_words):
    """When the budget sends rows back to the queue (`ContinuousSampler._evict`), each starts
    its phase again from the same random stream: forcing that once on every row of every kind
    (a prefix, its search, a continuation in place and from its context) changes no item, and
    leaves each draft's generator where a run without it leaves it."""
    import worker.sampler as sampler

    lm = long_words_lm()
    spec = {"prefix_tokens_per_word": 10, "continuation_words": continuation_words}
    generators: dict[int, object] = {}
    real_run, real_fit = sampler.ContinuousSampler.run, sampler.ContinuousSampler._fit

    def run(self, drafts, **kwargs):
        out = real_run(self, drafts, **kwargs)
        generators.update({d.index: d.rng.bit_generator.state for d in drafts})
        return out

    def key(items):
        return [
            (i.words, [w for w, _ in i.choices], i.skip_reason, i.continuation,
             {k: v for k, v in i.provenance.items() if k not in ("spec", "choices")},
             i.provenance.get("choices", {}).get("expansions"))
            for i in items
        ]  # fmt: skip

    monkeypatch.setattr(sampler.ContinuousSampler, "run", run)
    free = make_items(lm, None, PrefixSpec(batch_size=64, **spec), 4, "model", 0, 24, seed=5)
    free_generators = dict(generators)
    sent: set[tuple] = set()

    def fit(self):
        for r in [r for r in self.rows if r is not None]:
            what = (r.draft.index, r.phase, r.search is not None, r.start > 0)
            if what not in sent and self._used(r) > 3 and sum(x is not None for x in self.rows) > 1:
                sent.add(what)
                self._evict(r)
        return real_fit(self)

    monkeypatch.setattr(sampler.ContinuousSampler, "_fit", fit)
    impose_budget(monkeypatch, 10**6 * lm.kv_bytes_per_token, rows=8)  # does not bind
    generators.clear()
    again = make_items(lm, None, PrefixSpec(**spec), 4, "model", 0, 24, seed=5)
    kinds = {(phase, search, in_place) for _, phase, search, in_place in sent}
    assert kinds >= ({(0, False, False), (1, False, True)} if continuation_words else
                     {(0, False, False), (0, True, False)})  # fmt: skip
    assert key(again) == key(free)
    for x, y in zip(again, free, strict=True):
        # float32 rounding differs between batch shapes
        assert [p for _, p in x.choices] == pytest.approx([p for _, p in y.choices], rel=1e-4)
    assert generators == free_generators


@pytest.mark.parametrize("length, tokens, room", [(3, 84, 3), (2, 127, 1)])
def test_the_word_search_stays_within_the_model_s_context(tmp_path, length, tokens, room):
    """A data prefix that leaves ``room`` of the model's 256 positions: its partial words are
    fed at positions context + depth - 1, so the search keeps to words of at most ``room``
    tokens (flagged inexact if a longer one could rank), instead of feeding positions the model
    has no embedding for (the forward refuses those)."""
    from app.precompute.datasets import load_dataset
    from tests.worker.conftest import corpus_lines

    lm = long_words_lm()
    word = "s" * tokens  # "Ġs" and then "s" pieces: one token a letter
    assert len(lm.encode(" " + word)) == tokens
    lines = corpus_lines(6)
    lines[0] = " ".join([word] * (length + 1))
    path = tmp_path / "edge.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = load_dataset(path)
    items = make_items(lm, dataset, PrefixSpec(batch_size=4), length, "data", 0, 6, seed=1)
    edge = next(i for i in items if i.words == [word] * length)
    assert lm.max_positions - edge.provenance["context_tokens"] == room
    assert edge.choices
    # A word's tokens: with its space, or alone (punctuation that ends the word before it).
    assert all(min(len(lm.encode(" " + w)), len(lm.encode(w))) <= room for w, _ in edge.choices)
    if room == 1:
        assert not edge.provenance["choices"]["exact"]  # "Ġs" goes on as "ss", "sss", ...


@pytest.mark.parametrize("kind", ["data", "random"])
def test_text_prefixes_do_not_depend_on_the_batch(kind, bpe_lm, text_dataset):
    """Text prefixes are fed to slots token by token and searched there: batch 3 and batch 64
    give the same choices."""
    one = make_items(bpe_lm, text_dataset, PrefixSpec(batch_size=64), 5, kind, 0, 20, seed=3)
    three = make_items(bpe_lm, text_dataset, PrefixSpec(batch_size=3), 5, kind, 0, 20, seed=3)
    assert [[w for w, _ in i.choices] for i in three] == [[w for w, _ in i.choices] for i in one]
    for a, b in zip(three, one, strict=True):
        assert [p for _, p in a.choices] == pytest.approx([p for _, p in b.choices], rel=1e-4)
        assert a.provenance["choices"]["expansions"] == b.provenance["choices"]["expansions"]
    assert any(len(i.choices) == 5 for i in one)


def test_the_batch_size_is_the_formula_s_unless_the_spec_says(monkeypatch, bpe_lm):
    import worker.prefixes as prefixes
    from worker.sampler import expected_columns

    asked: list[int] = []
    opened: list[int] = []

    def formula(model, columns, *, budget):
        asked.append(columns)
        return 3

    real_open = bpe_lm.open_slots

    def open_slots(rows, columns):
        opened.append(rows)
        return real_open(rows, columns)

    monkeypatch.setattr(prefixes, "auto_batch_size", formula)
    monkeypatch.setattr(bpe_lm, "open_slots", open_slots)
    auto = make_items(bpe_lm, None, PrefixSpec(), 5, "model", 0, 10, seed=1)
    assert asked == [expected_columns(PrefixSpec(), 5)] and opened == [3]
    given = make_items(bpe_lm, None, PrefixSpec(batch_size=4), 5, "model", 0, 10, seed=1)
    assert len(asked) == 1 and opened[-1] == 4
    assert [i.words for i in auto] == [i.words for i in given]


@pytest.mark.parametrize("top_k", [None, 3])
def test_a_uniform_that_rounds_to_one_still_draws_an_allowed_token(top_k):
    """`rng.random()` < 1, but cast to float32 a value above 1 - 2**-25 is 1.0: the draw must
    still be a token of positive probability (the last allowed one), never a masked id at the
    vocabulary's end (GPT-2's end of text, a reserved special token on other tokenizers)."""
    logprobs = torch.log_softmax(torch.tensor([[0.5, 1.0, 2.0, 0.1, 0.3, 0.2]] * 3), dim=-1)
    allowed = torch.tensor([True, True, True, True, False, False])
    u = torch.tensor([1 - 2.0**-40, 0.0, 0.999999], dtype=torch.float64).float()
    assert float(u[0]) == 1.0  # the case itself
    drawn = sample_tokens(logprobs, u, PrefixSpec(sample_top_k=top_k), allowed[None, :])
    assert drawn.tolist()[0] == (3 if top_k is None else 2)  # the last token it may draw
    assert all(allowed[t] for t in drawn.tolist())
    assert drawn.tolist()[1] == 0  # u = 0: the first token of positive probability
