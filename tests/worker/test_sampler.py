"""The sampler's step as a device sees it: one read into host memory a step, whatever the
kind of row, and a number of operations a step that does not grow with the batch's rows."""

from __future__ import annotations

import pytest
import torch

from worker import hf, hf_cache, models, sampler
from worker.hf import HFCausalLM
from worker.opcount import OpCounter
from worker.prefixes import PrefixSpec, make_items

CONTINUED = PrefixSpec(batch_size=4, prompt_words=2, continuation_words=3)


class StepReads:
    """Counts, during the sampler's steps, the reads into host memory through
    `worker.models.host_read` and any other (``tolist``, ``item``, ``int``, ``float``, ``bool``
    of a tensor that did not come out of a ``host_read``): on a GPU each is a synchronisation.
    The tensors it returns are marked by their storage (views of them read freely)."""

    READS = ("tolist", "item", "__int__", "__float__", "__bool__", "__index__")

    def __init__(self, monkeypatch, lm):
        self.reads = self.stray = self.forwards = 0
        self.stray_at: list[str] = []
        self.host: set[int] = set()
        self.inside = False
        real_read, real_feed = sampler.host_read, lm.feed

        def host_read(parts):
            self.reads += 1
            out = real_read(parts)
            self.host.update(p.untyped_storage().data_ptr() for p in out)
            return out

        def feed(*args):
            self.forwards += 1
            return real_feed(*args)

        monkeypatch.setattr(sampler, "host_read", host_read)
        monkeypatch.setattr(lm, "feed", feed)
        for name in self.READS:
            monkeypatch.setattr(torch.Tensor, name, self._watch(name, getattr(torch.Tensor, name)))
        for name in ("_forward", "_advance"):
            monkeypatch.setattr(
                sampler.ContinuousSampler,
                name,
                self._step(getattr(sampler.ContinuousSampler, name)),
            )

    def _watch(self, name, real):
        def read(tensor, *args, **kwargs):
            if self.inside and tensor.untyped_storage().data_ptr() not in self.host:
                self.stray += 1
                self.stray_at.append(f"{name} {tuple(tensor.shape)}")
            return real(tensor, *args, **kwargs)

        return read

    def _step(self, real):
        def step(*args, **kwargs):
            self.inside = True
            try:
                return real(*args, **kwargs)
            finally:
                self.inside = False

        return step


@pytest.mark.parametrize(
    ("lm_name", "kind", "spec", "keep_roots"),
    [
        ("bpe_lm", "model", PrefixSpec(batch_size=4), False),  # subword word search
        ("bpe_lm", "data", PrefixSpec(batch_size=4, prompt_words=2), True),  # from contexts
        ("sp_lm", "model", PrefixSpec(batch_size=4, prompt_words=2), True),
        ("word_lm", "model", PrefixSpec(batch_size=4), False),  # word-level top-k
        ("bpe_lm", "model", CONTINUED, False),  # a continuation after the prefix
        ("word_lm", "data", CONTINUED, False),
    ],
    ids=["bpe-model", "bpe-data-roots", "sp-model-prompt", "word-model", "continued", "word-data"],
)
def test_a_step_reads_host_memory_once(request, monkeypatch, text_dataset, lm_name, kind, spec,
                                       keep_roots):  # fmt: skip
    lm = request.getfixturevalue(lm_name)
    expected = make_items(lm, text_dataset, spec, 3, kind, 0, 10, seed=3, keep_roots=keep_roots)
    watch = StepReads(monkeypatch, lm)
    items = make_items(lm, text_dataset, spec, 3, kind, 0, 10, seed=3, keep_roots=keep_roots)
    monkeypatch.undo()
    assert watch.stray == 0, watch.stray_at[:10]
    assert 0 < watch.reads <= watch.forwards
    # Watching changes nothing.
    assert [(i.words, i.choices, i.continuation, i.provenance) for i in items] == [
        (i.words, i.choices, i.continuation, i.provenance) for i in expected
    ]
    if keep_roots:
        for a, b in zip(items, expected, strict=True):
            assert (a.root is None) == (b.root is None)
            if a.root is not None:
                torch.testing.assert_close(a.root, b.root, rtol=0, atol=0)


def test_the_watch_sees_a_stray_read(monkeypatch, bpe_lm, text_dataset):
    """The check above can fail: a step that reads a tensor of the device on its own (here
    each sampled token, as the sampler once did) is counted."""
    real = sampler.ContinuousSampler._sample

    def one_by_one(self, logprobs, rows, **kwargs):
        tokens = real(self, logprobs, rows, **kwargs)
        _ = [int(t) for t in tokens]
        return tokens

    monkeypatch.setattr(sampler.ContinuousSampler, "_sample", one_by_one)
    watch = StepReads(monkeypatch, bpe_lm)
    make_items(bpe_lm, text_dataset, PrefixSpec(batch_size=4), 3, "model", 0, 6, seed=3)
    assert watch.stray > 0


def _ops_per_forward(lm, rows: int, kind: str, dataset, length: int) -> tuple[float, int]:
    """ATen operations a forward of a sampler run with ``rows`` slots (as many items), and the
    forwards."""
    forwards = 0
    real = lm.feed

    def feed(*args):
        nonlocal forwards
        forwards += 1
        return real(*args)

    lm.feed = feed
    try:
        with OpCounter() as ops:
            make_items(lm, dataset, PrefixSpec(batch_size=rows), length, kind, 0, rows, seed=1)
    finally:
        del lm.feed
    return ops.total / forwards, forwards


@pytest.mark.parametrize("kind", ["model", "data"])
def test_a_steps_operations_do_not_grow_with_its_rows(bpe_lm, text_dataset, kind):
    """The same study's items at 4 and at 32 rows a batch: a forward issues about as many ATen
    operations at 32 rows as at 4 (slot moves, sampling, the searches' roots and expansions are
    batched operations, not one per row).  Before batched slot moves a forward of 256 rows
    issued 7.8 times the operations of one of 32 (GPT-2 small's shape)."""
    small, n_small = _ops_per_forward(bpe_lm, 4, kind, text_dataset, 4)
    large, n_large = _ops_per_forward(bpe_lm, 32, kind, text_dataset, 4)
    assert n_small > 10 and n_large > 10
    assert large <= 1.3 * small, (small, large)


@pytest.fixture(scope="module")
def static_lm(bpe_lm):
    """`bpe_lm`'s model with the GPU's fixed-shape steps, run eagerly (no capture on a CPU)."""
    return HFCausalLM(
        bpe_lm.model, bpe_lm.tokenizer, name=bpe_lm.name, static_steps=True, graphs=False
    )


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("model", PrefixSpec(batch_size=4)),
        ("model", PrefixSpec(batch_size=16, prompt_words=2)),  # the tail speculates
        ("data", PrefixSpec(batch_size=8)),
        ("model", CONTINUED),
    ],
    ids=["model-4", "model-16-prompt", "data-8", "continued"],
)
def test_fixed_shape_steps_make_the_same_items(bpe_lm, static_lm, text_dataset, kind, spec):
    """The GPU's step (every slot, a power of two of queries a slot, every column, the logits
    of every position: the shapes a CUDA graph replays) makes the items of the eager step, up
    to float rounding of the other shapes; and its shapes change only when the slots are
    resized, so that a few graphs cover a run."""
    shapes: dict[tuple, set] = {}
    steps = 0
    real = static_lm._graphs.run

    def run(state, inputs):
        nonlocal steps
        steps += 1
        ids, _, mask = inputs[:3]
        assert mask.shape[-1] == state.capacity  # every column
        shapes.setdefault((id(state), state.version), set()).add((*ids.shape, mask.shape[-1]))
        return real(state, inputs)

    static_lm._graphs.run = run
    try:
        fixed = make_items(static_lm, text_dataset, spec, 3, kind, 0, 24, seed=2)
    finally:
        del static_lm._graphs.run
    eager = make_items(bpe_lm, text_dataset, spec, 3, kind, 0, 24, seed=2)
    for a, b in zip(fixed, eager, strict=True):
        assert (a.words, a.continuation, a.skip_reason) == (b.words, b.continuation, b.skip_reason)
        assert [w for w, _ in a.choices] == [w for w, _ in b.choices]
        assert [p for _, p in a.choices] == pytest.approx([p for _, p in b.choices], abs=1e-5)
    # One shape a slot state (its rows and columns), a few with speculation (the queries):
    # a shape's graph is captured once and replayed until the slots are resized.
    assert shapes and all(len(s) <= 3 for s in shapes.values()), shapes
    assert sum(len(s) for s in shapes.values()) < steps / 3, (steps, shapes)


@pytest.mark.parametrize(
    ("lm_name", "kind", "spec"),
    [
        ("bpe_lm", "model", PrefixSpec(batch_size=4)),
        ("bpe_lm", "data", PrefixSpec(batch_size=4, prompt_words=2)),
        ("bpe_lm", "model", CONTINUED),
    ],
    ids=["bpe-model", "bpe-data", "continued"],
)
def test_a_step_uploads_its_host_data_at_most_twice(
    request, monkeypatch, text_dataset, lm_name, kind, spec
):
    """A step sends what the device needs from the host in two copies at most
    (`worker.models.upload`: the forward's, with its slot moves, and the sampler's), not one a
    tensor: on a GPU each copy from pageable memory made the host wait for the GPU.  A resize
    of the slots (when the batch's layout changes) sends its pending moves in one more."""
    lm = request.getfixturevalue(lm_name)
    steps: list[int] = []  # uploads of each step, a step from one forward to the next
    resizes: list[int] = []  # uploads of each resize of the slots
    real_upload, real_feed, real_resize = models.upload, lm.feed, hf_cache.SlotState.resize

    def counted(*parts, **kwargs):
        counts = resizes if resizing else steps
        if counts:
            counts[-1] += 1
        return real_upload(*parts, **kwargs)

    def feed(*args):
        steps.append(0)
        return real_feed(*args)

    resizing = False

    def resize(*args):
        nonlocal resizing
        resizes.append(0)
        resizing = True
        try:
            return real_resize(*args)
        finally:
            resizing = False

    for module in (sampler, hf, hf_cache):
        monkeypatch.setattr(module, "upload", counted)
    monkeypatch.setattr(lm, "feed", feed)
    monkeypatch.setattr(hf_cache.SlotState, "resize", resize)
    make_items(lm, text_dataset, spec, 3, kind, 0, 10, seed=3)
    monkeypatch.undo()
    assert steps and max(steps) <= 2, steps
    assert sum(steps) >= len(steps)  # every step's forward sends its tokens
    assert max(resizes, default=0) <= 1, resizes


def test_packed_uploads_change_no_item(monkeypatch, bpe_lm, text_dataset):
    """The GPU's way of uploading (every part a view of one packed buffer), taken on the CPU,
    gives the same items as the CPU's own tensors."""
    expected = make_items(bpe_lm, text_dataset, CONTINUED, 3, "model", 0, 10, seed=3)
    real = models.upload

    def packed(*parts, device, pack=None):
        return real(*parts, device=device, pack=True)

    for module in (sampler, hf, hf_cache):
        monkeypatch.setattr(module, "upload", packed)
    items = make_items(bpe_lm, text_dataset, CONTINUED, 3, "model", 0, 10, seed=3)
    monkeypatch.undo()
    assert [(i.words, i.choices, i.continuation, i.provenance) for i in items] == [
        (i.words, i.choices, i.continuation, i.provenance) for i in expected
    ]
