"""The causal LM's cache machinery: cached word expansion, select, slots and their tree nodes."""

from __future__ import annotations

import copy
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    GPT2LMHeadModel,
    MarianConfig,
    MarianMTModel,
    OpenAIGPTConfig,
    OpenAIGPTLMHeadModel,
    activations,
)
from transformers.activations import (
    FastGELUActivation,
    GELUActivation,
    GELUTanh,
    NewGELUActivation,
)
from transformers.models.openai import modeling_openai

from tests.worker.conftest import bpe_tokenizer, sp_tokenizer, tiny_gpt2
from worker import hf_cache
from worker.hf import HFCausalLM
from worker.hf_cache import slot_cache_classes, slot_zeros
from worker.hf_common import fuse_gelu
from worker.hf_seq2seq import HFSeq2SeqLM
from worker.models import (
    APPEND,
    CONTEXT,
    LOGIT_BUFFERS,
    MAX_ROWS,
    MEMORY_FRACTION,
    auto_batch_size,
    free_memory,
    grown_columns,
    keep_buffers_on_heap,
    memory_budget,
    row_bytes,
    upload,
)
from worker.opcount import OpCounter


def full_logprobs(lm, seqs):
    """Reference: one plain forward per sequence, no cache, no padding."""
    out = []
    with torch.no_grad():
        for s in seqs:
            out.append(torch.log_softmax(lm.model(torch.tensor([s])).logits[0, -1].float(), -1))
    return torch.stack(out)


def contexts_of(lm):
    return [[lm.start_token_id, *lm.encode(t)] for t in ["the cat", "a", "the dog at the", "th"]]


def test_cached_extend_equals_uncached_and_plain_forwards(bpe_lm):
    contexts = contexts_of(bpe_lm)
    rng = random.Random(0)
    vocab = bpe_lm.vocab_size
    cached = HFCausalLM(bpe_lm.model, bpe_lm.tokenizer, cached_extend=True)
    uncached = HFCausalLM(bpe_lm.model, bpe_lm.tokenizer, cached_extend=False)
    _, s_cached = cached.start(contexts)
    _, s_plain = uncached.start(contexts)
    known: list[tuple[int, tuple[int, ...]]] = [(r, ()) for r in range(len(contexts))]
    for round_ in range(6):
        # Grow some known continuations by one token (as the word search does), re-score an
        # old one, and add one whose prefixes were never scored (the tree must fill them in).
        jobs = []
        for r, cont in rng.sample(known, min(len(known), 5)):
            jobs.append((r, (*cont, rng.randrange(1, vocab))))
        jobs.append(jobs[0])
        fresh = tuple(rng.randrange(1, vocab) for _ in range(3))
        jobs.append((rng.randrange(len(contexts)), fresh))
        if round_ == 3:
            jobs = [j for j in jobs if j[0] == 1]  # one row left: the tree drops the others
        rows, conts = [j[0] for j in jobs], [list(j[1]) for j in jobs]
        a = cached.extend(s_cached, rows, conts)
        b = uncached.extend(s_plain, rows, conts)
        ref = full_logprobs(bpe_lm, [contexts[r] + c for r, c in zip(rows, conts, strict=True)])
        torch.testing.assert_close(a, ref, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(b, ref, atol=1e-4, rtol=1e-4)
        known += [(r, tuple(c)) for r, c in zip(rows, conts, strict=True)]
    assert s_cached.tree is not None and s_plain.tree is None
    # The state itself is unchanged by the memo: it still steps and scores like a fresh one.
    assert s_cached.cache.get_seq_length() == s_cached.mask.shape[1]


def test_select_keeps_the_cache_right(bpe_lm):
    contexts = contexts_of(bpe_lm)
    _, state = bpe_lm.start(contexts)
    picked = bpe_lm.select(state, [2, 0])
    out = bpe_lm.extend(picked, [0, 1], [[5], [6, 7]])
    ref = full_logprobs(bpe_lm, [contexts[2] + [5], contexts[0] + [6, 7]])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_slots_score_like_plain_forwards(bpe_lm):
    """Contexts fed token by token (some slots pausing), partial words as tree nodes at several
    depths (several per slot and step), slots moved, cleared and shrunk, the cache grown past
    its first width: every distribution is that of a plain forward of the same tokens."""
    rng = random.Random(1)
    vocab = bpe_lm.vocab_size
    slots = bpe_lm.open_slots(4, 3)
    texts = [[] for _ in range(4)]
    for step in range(14):
        rows = [s for s in range(4) if step == 0 or rng.random() < 0.7]
        toks = [bpe_lm.start_token_id if step == 0 else rng.randrange(1, vocab) for _ in rows]
        out, _ = bpe_lm.feed(slots, rows, toks, [APPEND] * len(rows), [True] * len(rows))
        for r, t in zip(rows, toks, strict=True):
            texts[r].append(t)
        ref = full_logprobs(bpe_lm, [texts[r] for r in rows])
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert slots.capacity > 3  # it grew
    handles = {1: {(): CONTEXT}, 3: {(): CONTEXT}}
    for _ in range(5):
        rows, toks, parents, words = [], [], [], []
        for r in (1, 3):
            for _ in range(rng.randrange(1, 4)):
                head = rng.choice(sorted(handles[r]))
                t = rng.randrange(1, vocab)
                rows.append(r)
                toks.append(t)
                parents.append(handles[r][head])
                words.append((r, (*head, t)))
        want = [i % 2 == 0 for i in range(len(rows))]
        out, got = bpe_lm.feed(slots, rows, toks, parents, want)
        read = [texts[r] + list(w) for (r, w), keep in zip(words, want, strict=True) if keep]
        torch.testing.assert_close(out, full_logprobs(bpe_lm, read), atol=1e-4, rtol=1e-4)
        for (r, w), h in zip(words, got, strict=True):
            handles[r].setdefault(w, h)
    with pytest.raises(ValueError, match="partial words"):
        bpe_lm.feed(slots, [1], [5], [APPEND], [True])
    # Slots 3 and 0 change places, partial words and all; slot 2 starts again; then one stays.
    bpe_lm.swap_slots(slots, 3, 0)
    deep = max(handles[3], key=len)
    bpe_lm.clear_slots(slots, [2])
    out, _ = bpe_lm.feed(
        slots, [0, 2, 2, 3], [9, bpe_lm.start_token_id, 4, 6],
        [handles[3][deep], APPEND, APPEND, APPEND], [True, False, True, True],
    )  # fmt: skip
    ref = full_logprobs(bpe_lm, [texts[3] + [*deep, 9], [bpe_lm.start_token_id, 4], texts[0] + [6]])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    bpe_lm.resize_slots(slots, 1)
    out, _ = bpe_lm.feed(slots, [0], [7], [handles[3][deep]], [True])
    torch.testing.assert_close(
        out, full_logprobs(bpe_lm, [texts[3] + [*deep, 7]]), atol=1e-4, rtol=1e-4
    )
    assert bpe_lm.slot_bytes(slots) == slots.capacity * bpe_lm.kv_bytes_per_token


def _filled_slots(lm, rows: int, texts: list[list[int]]):
    """``rows`` slots, slot i holding ``texts[i]`` (fed token by token; an empty text leaves
    its slot empty)."""
    slots = lm.open_slots(rows, 8)
    for step in range(max(len(t) for t in texts)):
        fed = [i for i, t in enumerate(texts) if step < len(t)]
        toks = [texts[i][step] for i in fed]
        lm.feed(slots, fed, toks, [APPEND] * len(fed), [False] * len(fed))
    return slots


def test_a_steps_slot_moves_are_a_few_copies_a_buffer_whatever_the_rows(bpe_lm):
    """Slots moved within a step (a three-cycle, a move into an empty slot, a swap undone)
    hold their texts at the next forward, and the moves cost one gather and one scatter per
    buffer and layer for each power of two of the moved slots' widths, however many slots
    move."""
    start, enc = bpe_lm.start_token_id, bpe_lm.encode
    texts = [[start, *enc(t)] for t in ["the cat", "a dog", "the dog at the", "th", "cat"]]
    texts.append([])  # slot 5 is empty
    layers = bpe_lm.model.config.n_layer

    def moved_ops(swaps: list[tuple[int, int]]) -> tuple[list[list[int]], OpCounter, int]:
        slots = _filled_slots(bpe_lm, 6, texts)
        order = list(range(6))
        for a, b in swaps:
            bpe_lm.swap_slots(slots, a, b)
            order[a], order[b] = order[b], order[a]
        with OpCounter() as ops:
            slots.settle()
        now = [texts[i] for i in order]
        live = [s for s in range(6) if now[s]]
        out, _ = bpe_lm.feed(slots, live, [7] * len(live), [APPEND] * len(live), [True] * len(live))
        ref = full_logprobs(bpe_lm, [now[s] + [7] for s in live])
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        widths = {(len(now[s]) - 1).bit_length() for s in live if order[s] != s}
        return now, ops, len(widths)

    one, ops_one, groups = moved_ops([(0, 5)])  # into the empty slot
    assert one[5] == texts[0] and not one[0] and groups == 1
    assert ops_one.counts["index"] == ops_one.counts["index_copy_"] == 2 * layers
    many, ops_many, groups = moved_ops([(0, 1), (1, 2), (3, 5), (4, 0), (2, 4), (2, 4)])
    assert many != texts and groups > 1
    assert ops_many.counts["index"] == ops_many.counts["index_copy_"] == 2 * layers * groups
    # Two slots of one width class cost what one does.
    same = [
        (i, j)
        for i in range(5)
        for j in range(i + 1, 5)
        if (len(texts[i]) - 1).bit_length() == (len(texts[j]) - 1).bit_length()
    ]
    assert same
    _, ops_two, groups = moved_ops([same[0]])
    assert groups == 1 and ops_two.counts == ops_one.counts
    # Nothing moved: nothing copied.
    slots = _filled_slots(bpe_lm, 6, texts)
    bpe_lm.swap_slots(slots, 1, 2)
    bpe_lm.swap_slots(slots, 1, 2)
    with OpCounter() as ops:
        slots.settle()
    assert ops.total == 0


@pytest.mark.parametrize("views", [True, False], ids=["row-views", "copies"])
def test_a_resized_slot_cache_keeps_what_it_held_and_is_zero_elsewhere(bpe_lm, monkeypatch, views):
    # Row views: fewer rows keep the buffers (Linux); copies: every resize makes new buffers.
    monkeypatch.setattr(hf_cache, "_GIVES_BACK_ZEROS", views)
    slots = bpe_lm.open_slots(3, 4)
    start = bpe_lm.start_token_id
    bpe_lm.feed(slots, [0, 1, 2], [start] * 3, [APPEND] * 3, [True] * 3)
    bpe_lm.feed(slots, [0, 2], [5, 6], [APPEND] * 2, [True] * 2)
    held = [(layer.kbuf.clone(), layer.vbuf.clone()) for layer in slots.cache.layers]
    columns = held[0][0].shape[2]
    bpe_lm.resize_slots(slots, 5, columns + 20)
    for layer, kept in zip(slots.cache.layers, held, strict=True):
        for buf, before in zip((layer.kbuf, layer.vbuf), kept, strict=True):
            assert buf.shape[0] == 5 and buf.shape[2] == columns + 20
            assert torch.equal(buf[:3, :, :columns], before)
            assert not buf[:3, :, columns:].any() and not buf[3:].any()
    bpe_lm.resize_slots(slots, 1)  # fewer rows, then as many again: the others are zeros
    bpe_lm.resize_slots(slots, 5)
    for layer, kept in zip(slots.cache.layers, held, strict=True):
        for buf, before in zip((layer.kbuf, layer.vbuf), kept, strict=True):
            assert torch.equal(buf[:1, :, :columns], before[:1]) and not buf[1:].any()
            assert not buf[:1, :, columns:].any()
    bpe_lm.resize_slots(slots, 2, 2)  # narrower: the first rows and columns stay
    for layer, (k, v) in zip(slots.cache.layers, held, strict=True):
        assert torch.equal(layer.kbuf[:1], k[:1, :, :2]) and not layer.kbuf[1:].any()
        assert torch.equal(layer.vbuf[:1], v[:1, :, :2]) and not layer.vbuf[1:].any()


def _fill_slots(cache, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Write keys and values [rows, heads, columns, dim]: ``columns`` tokens into each slot."""
    rows, _, columns, _ = keys.shape
    plan = cache.plan
    plan.rows = torch.arange(rows).repeat_interleave(columns)
    plan.cols = torch.arange(columns).repeat(rows)
    plan.width = plan.query = columns
    cache.layers[0].update(keys, values)


@pytest.mark.skipif(
    not hf_cache._GIVES_BACK_ZEROS or not Path("/proc/self/smaps_rollup").exists(),
    reason="mapped slot buffers: Linux",
)
def test_fewer_slots_give_their_pages_back_without_moving_the_rest():
    """A change of rows alone moves no data: fewer rows give the pages of the others back to
    the system (the resident cache stays within rows x columns, what the memory budget
    counts), and rows added again within the mapping are zero and take no memory until
    written.  A change of columns copies once, keeping what the slots held."""
    keep_buffers_on_heap()
    # About 64 MiB a buffer, keys and values 128 MiB; a row is not a whole number of pages.
    rows, heads, dim, columns = 32, 8, 64, 1023
    keys, values = (torch.randn(rows, heads, columns, dim) for _ in range(2))
    cache = slot_cache_classes()(rows, columns, 1)
    layer = cache.layers[0]
    base = _resident_mib()
    _fill_slots(cache, keys, values)
    assert _resident_mib() - base >= 120  # the two buffers, written
    keys, values = keys[:7].clone(), values[:7].clone()
    start = layer.kbuf.data_ptr()
    before = _resident_mib()
    layer.resize(7, columns)  # 7 rows: the cut falls inside a page
    assert layer.kbuf.data_ptr() == start  # in place
    assert before - _resident_mib() >= 90  # 100 MiB of the 128 given back
    assert torch.equal(layer.kbuf, keys) and torch.equal(layer.vbuf, values)
    before = _resident_mib()
    layer.resize(rows, columns)
    assert layer.kbuf.data_ptr() == start and _resident_mib() - before < 8
    assert torch.equal(layer.kbuf[:7], keys) and not layer.kbuf[7:].any()
    assert torch.equal(layer.vbuf[:7], values) and not layer.vbuf[7:].any()
    layer.resize(7, columns)
    before = _resident_mib()
    layer.resize(7, columns + 16)  # wider: one copy
    assert layer.kbuf.data_ptr() != start and layer.kbuf.shape == (7, heads, columns + 16, dim)
    for buf, kept in ((layer.kbuf, keys), (layer.vbuf, values)):
        assert torch.equal(buf[:, :, :columns], kept) and not buf[:, :, columns:].any()
    assert layer.nbytes() == 2 * 7 * heads * (columns + 16) * dim * 4
    # The old buffers are unmapped: as much is resident as before (the 7 rows, 28 MiB).
    assert abs(_resident_mib() - before) < 8


def _resident_mib() -> int:
    # smaps_rollup walks the page tables (exact); VmRSS may read per-CPU counters.
    with open("/proc/self/smaps_rollup") as f:
        return int(re.search(r"^Rss:\s+(\d+)", f.read(), re.M).group(1)) // 1024


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="reads Linux's /proc")
def test_a_slot_buffer_is_zeroed_and_goes_back_to_the_system_when_freed():
    keep_buffers_on_heap()  # a CPU worker's heap, which keeps what is freed on it
    # 256 MiB: far above what the rest of the test moves.
    like = torch.zeros(1)
    base = _resident_mib()
    buf = slot_zeros(like, (64, 1024, 1024))[0]  # the mapping itself is not kept
    assert buf.dtype == torch.float32 and not buf[::7, ::97, ::89].any()
    buf.fill_(1.0)
    assert _resident_mib() - base >= 240
    view = buf[3:5]
    del buf
    assert _resident_mib() - base >= 240  # a view keeps the mapping
    del view
    assert _resident_mib() - base < 64
    half = slot_zeros(torch.zeros(1, dtype=torch.bfloat16), (3, 4))[0]
    assert half.dtype == torch.bfloat16 and not half.any()


def test_slots_widen_by_a_quarter_in_steps_of_16_within_a_cap():
    assert grown_columns(17, 18) == 48  # at least 16 more, rounded up to 16
    assert grown_columns(256, 257) == 320  # a quarter more
    assert grown_columns(64, 200) == 208  # what the step needs, when that is more
    assert grown_columns(256, 257, most=300) == 300  # a memory budget caps the growth
    assert grown_columns(256, 400, most=300) == 400  # but never below the need


def test_a_refused_feed_changes_no_slot(bpe_lm):
    """A feed that would pass the model's positions, or names a partial word its slot does not
    hold, raises ValueError and leaves every slot as it was (counters, partial words, width):
    the next forward scores as if it had never been tried."""
    limit = bpe_lm.max_positions
    rng = random.Random(3)
    start = bpe_lm.start_token_id
    text = [start] + [rng.randrange(1, bpe_lm.vocab_size) for _ in range(limit - 1)]
    slots = bpe_lm.open_slots(2, 4)
    bpe_lm.feed(slots, [1, 1], [start, 5], [APPEND, APPEND], [False, True])
    last = [False] * (limit - 1) + [True]
    full, _ = bpe_lm.feed(slots, [0] * limit, text, [APPEND] * limit, last)
    torch.testing.assert_close(full, full_logprobs(bpe_lm, [text]), atol=1e-4, rtol=1e-4)
    assert slots.capacity == limit  # full: one more column would widen the slots

    def kept():
        return slots.lengths[:], slots.fills[:], copy.deepcopy(slots.nodes), slots.capacity

    before = kept()
    # Slot 1 takes a valid token first; slot 0's partial word would sit at position ``limit``.
    with pytest.raises(ValueError, match="past the model"):
        bpe_lm.feed(slots, [1, 0], [7, 9], [APPEND, CONTEXT], [True, True])
    assert kept() == before
    # Slot 1 holds a partial word; a feed extends it and names one it does not hold.
    _, (word,) = bpe_lm.feed(slots, [1], [8], [CONTEXT], [True])
    before = kept()
    with pytest.raises(ValueError, match="no partial word"):
        bpe_lm.feed(slots, [1, 1, 1], [9, 4, 6], [CONTEXT, word, 1234], [True] * 3)
    assert kept() == before
    out, _ = bpe_lm.feed(slots, [1], [4], [word], [True])
    torch.testing.assert_close(out, full_logprobs(bpe_lm, [[start, 5, 8, 4]]), atol=1e-4, rtol=1e-4)


GELUS = (NewGELUActivation, FastGELUActivation, GELUTanh, GELUActivation)


def _acts(model):
    return [type(m).__name__ for m in model.modules() if type(m) in GELUS]


def _same_logits(model, plain, ids, **kwargs) -> bool:
    with torch.inference_mode():
        return torch.allclose(
            model(ids, **kwargs).logits, plain(ids, **kwargs).logits, atol=1e-5, rtol=0
        )


@pytest.mark.parametrize(
    ("activation", "before", "after"),
    [
        ("gelu_new", "NewGELUActivation", "GELUTanh"),  # GPT-2's default
        ("gelu_fast", "FastGELUActivation", "GELUTanh"),
        ("gelu", "GELUActivation", "GELUActivation"),  # the exact GELU: another function
    ],
)
def test_written_out_gelus_run_as_one_kernel_and_compute_the_same(activation, before, after):
    tok = bpe_tokenizer()
    config = tiny_gpt2(tok, seed=2).config
    config.activation_function = activation
    torch.manual_seed(2)
    model = GPT2LMHeadModel(config).eval()
    plain = copy.deepcopy(model)  # as transformers builds it
    assert _acts(plain) == [before] * 2
    lm = HFCausalLM(model, tok)
    assert lm.model is model and _acts(model) == [after] * 2
    assert not any(m.training for m in model.modules())
    for text in ["the cat at", "a dog ."]:
        ids = torch.tensor([[lm.start_token_id, *lm.encode(text)]])
        assert _same_logits(model, plain, ids)
    assert fuse_gelu(model) == 0  # nothing left to replace


def test_a_gelu_shared_by_every_layer_is_replaced_in_each_and_left_alone_where_it_lives():
    # OpenAI GPT puts one module-level gelu_new object into every MLP.
    shared = modeling_openai.ACT_FNS["gelu"]
    torch.manual_seed(5)
    model = OpenAIGPTLMHeadModel(
        OpenAIGPTConfig(vocab_size=40, n_positions=16, n_embd=16, n_layer=3, n_head=2)
    ).eval()
    plain = copy.deepcopy(model)
    assert sum(m is shared for m in model.modules()) == 1  # modules() lists it once
    assert fuse_gelu(model) == 3 and _acts(model) == ["GELUTanh"] * 3
    assert type(shared) is NewGELUActivation and modeling_openai.ACT_FNS["gelu"] is shared
    assert type(activations.gelu_new) is NewGELUActivation
    assert _same_logits(model, plain, torch.randint(0, 40, (2, 9)))


def test_an_encoder_decoder_gets_the_fused_gelu_in_both_stacks():
    sp = sp_tokenizer()
    torch.manual_seed(6)
    model = MarianMTModel(
        MarianConfig(
            vocab_size=len(sp), d_model=16, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
            decoder_ffn_dim=32, activation_function="gelu_new", pad_token_id=sp.pad_token_id,
            eos_token_id=sp.eos_token_id, decoder_start_token_id=sp.pad_token_id, init_std=0.3,
        )
    ).eval()  # fmt: skip
    plain = copy.deepcopy(model)
    assert _acts(model) == ["NewGELUActivation"] * 2
    lm = HFSeq2SeqLM(model, sp)
    assert lm.model is model and _acts(model) == ["GELUTanh"] * 2
    source = torch.tensor([sp("the cat sat")["input_ids"]])
    target = torch.tensor([[sp.pad_token_id, *sp("a dog", add_special_tokens=False)["input_ids"]]])
    assert _same_logits(model, plain, source, decoder_input_ids=target)


def test_the_batch_size_follows_free_memory_and_the_model(bpe_lm):
    cfg = bpe_lm.model.config
    # 2 (keys, values) x layers x heads x head dim x 4 bytes (float32); a float16 copy halves it.
    assert bpe_lm.kv_bytes_per_token == 2 * cfg.n_layer * cfg.n_embd * 4
    half = HFCausalLM(copy.deepcopy(bpe_lm.model).half(), bpe_lm.tokenizer)
    assert half.kv_bytes_per_token == bpe_lm.kv_bytes_per_token // 2
    per_row = row_bytes(bpe_lm, 40)
    assert per_row == 40 * bpe_lm.kv_bytes_per_token + LOGIT_BUFFERS * 4 * bpe_lm.vocab_size
    sizes = [auto_batch_size(bpe_lm, 40, budget=n * per_row) for n in (1, 2, 7, 100, 10**6)]
    assert sizes == [1, 2, 7, 100, MAX_ROWS["cpu"]]  # grows with memory, capped on a CPU
    assert auto_batch_size(bpe_lm, 400, budget=100 * per_row) < 100  # longer rows, fewer
    assert auto_batch_size(half, 40, budget=100 * per_row) > 100  # a smaller cache, more
    assert auto_batch_size(bpe_lm, 40, budget=10**12, max_rows=12) == 12
    with pytest.raises(MemoryError, match="one row of 40 tokens"):
        auto_batch_size(bpe_lm, 40, budget=per_row - 1)
    assert memory_budget(bpe_lm, free=1000, fraction=0.5) == 500
    assert memory_budget(bpe_lm, free=1000) == 1000 * MEMORY_FRACTION["cpu"]
    assert free_memory("cpu") > 0 and free_memory(torch.device("cpu")) > 2**20


@pytest.mark.parametrize("wide", [0, 5])
def test_a_wide_slot_splits_the_attention_and_changes_no_distribution(wide, bpe_lm, monkeypatch):
    """One slot far wider than the others: the forward's attention runs in two row groups, each
    reading its own group's width, and every distribution is still a plain forward's."""
    import worker.hf as hf

    splits = []
    real = hf.row_groups

    def spy(widths, *inner):
        groups = real(widths, *inner)
        if not inner:
            splits.append(groups)
        return groups

    monkeypatch.setattr(hf, "row_groups", spy)
    rng = random.Random(2)
    slots = bpe_lm.open_slots(6, 8)
    texts = [[bpe_lm.start_token_id] for _ in range(6)]
    bpe_lm.feed(slots, list(range(6)), [bpe_lm.start_token_id] * 6, [APPEND] * 6, [False] * 6)
    for _ in range(40):
        t = rng.randrange(1, bpe_lm.vocab_size)
        bpe_lm.feed(slots, [wide], [t], [APPEND], [False])
        texts[wide].append(t)
    toks = [rng.randrange(1, bpe_lm.vocab_size) for _ in range(6)]
    out, _ = bpe_lm.feed(slots, list(range(6)), toks, [APPEND] * 6, [True] * 6)
    ref = full_logprobs(bpe_lm, [[*text, t] for text, t in zip(texts, toks, strict=True)])
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    assert splits[-1] == ([(0, 1, 42), (1, 6, 2)] if wide == 0 else [(0, 5, 2), (5, 6, 42)])


def test_row_groups_read_fewer_columns():
    from worker.hf import row_groups

    bands = [2] * 10 + [10] * 10 + [40] * 2
    assert row_groups(bands) == [(0, 10, 2), (10, 20, 10), (20, 22, 40)]
    assert row_groups([3] * 8) == [(0, 8, 3)]  # nothing to gain: one group
    assert row_groups([9, 10, 8, 10]) == [(0, 4, 10)]  # less than a fifth: one group


def test_large_buffers_stay_on_the_heap_on_glibc():
    """A CPU model turns glibc's mmap threshold up once (`keep_buffers_on_heap`), so that the
    [rows, vocabulary] tensors of each step reuse heap pages instead of faulting in fresh ones:
    after a 51 MB tensor is freed, the next one takes its pages without new page faults."""
    import resource

    from worker.models import keep_buffers_on_heap, release_heap

    assert keep_buffers_on_heap() is True  # Linux with glibc (CI and the worker image)
    assert keep_buffers_on_heap() is True  # idempotent
    for _ in range(2):
        torch.empty(256, 50_257).fill_(1.0)  # the heap grows

    def faults_of_five() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            torch.empty(256, 50_257).fill_(1.0)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    # 51 MB are 12,564 pages: mapped afresh each time, five tensors would fault ~63,000 times.
    # The best of three tries: a small allocation of the interpreter's can split the freed
    # chunk once (one tensor's faults, seen in about a third of runs alone), which says
    # nothing about the setting.
    assert min(faults_of_five() for _ in range(3)) < 2_000

    def resident() -> int:
        with open("/proc/self/status") as f:
            return int(next(line.split()[1] for line in f if line.startswith("VmRSS:")))

    held = [torch.ones(1_000, 100_000) for _ in range(4)]  # 1.6 GB on the heap
    before = resident()
    del held
    release_heap()  # what the sampler does at the end of a run
    assert before - resident() > 1_000_000  # KiB: the 1.6 GB went back to the system


@pytest.mark.parametrize("pack", [False, True], ids=["cpu", "packed"])
def test_upload_gives_the_tensors_torch_tensor_gives(pack):
    """Each part as ``torch.tensor`` makes it (sequences as int64, numpy arrays as their own
    dtype and shape), whether packed into one buffer, as on a GPU (a float32 part of odd
    length before an int64 part: the parts sit at 8-byte boundaries), or not."""
    u = np.array([0.25, 1 / 3, 0.999999], dtype=np.float32)
    fresh = np.array([True, False, True])
    grid = np.arange(6, dtype=np.int64).reshape(2, 3)
    parts = [[3, 1, 2**40], u, [], [7], fresh, grid, (5, 6)]
    got = upload(*parts, device="cpu", pack=pack)
    expected = [
        torch.tensor([3, 1, 2**40]),
        torch.tensor(u.tolist(), dtype=torch.float32),
        torch.tensor([], dtype=torch.long),
        torch.tensor([7]),
        torch.tensor([True, False, True]),
        torch.tensor(grid.tolist()),
        torch.tensor([5, 6]),
    ]
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype and a.device == b.device
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert upload(device="cpu", pack=pack) == []


@pytest.mark.parametrize("pack", [False, True], ids=["apart", "packed"])
def test_upload_puts_every_part_on_the_device_asked_for(pack):
    """Packed or not, each part lands on ``device`` (not left on the CPU), as its own dtype
    and shape; the meta device stands in for an accelerator."""
    parts = [[3, 1], np.array([0.5], dtype=np.float32), np.arange(6).reshape(2, 3)]
    got = upload(*parts, device="meta", pack=pack)
    assert [t.device.type for t in got] == ["meta"] * 3
    assert [(t.dtype, tuple(t.shape)) for t in got] == [
        (torch.int64, (2,)),
        (torch.float32, (1,)),
        (torch.int64, (2, 3)),
    ]
