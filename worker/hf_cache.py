"""The KV caches of `worker.hf.HFCausalLM`: the slots of the sampler (`SlotState`: one text per
row from column 0, each token written at its own row and column, partial words as tree nodes
after the context), and for ``start``/``extend`` buffers that grow in place, row gathering and
the tree of partial words the word search extends."""

from __future__ import annotations

import math
import mmap
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from worker.models import upload

# Where ``MADV_DONTNEED`` gives a mapping's pages back to the system and they read as zeros
# after (Linux), fewer slots keep their buffers as views (`SlotLayer`); elsewhere a resize
# copies.
_GIVES_BACK_ZEROS = sys.platform.startswith("linux")


def slot_zeros(like: torch.Tensor, shape: tuple[int, ...]) -> tuple[torch.Tensor, Any]:
    """A zeroed buffer of ``shape`` with ``like``'s dtype and device for the slots' keys and
    values, and on a CPU its mapping (for `zero_bytes`; None elsewhere, and for no elements).

    On a CPU it is anonymous memory mapped for this buffer alone: the kernel zeroes each page
    when it is first written, and only pages written are resident (not the rows no slot has
    used, nor the columns past a row's own width).  Freed, the buffer goes back to the system
    at once (no heap trim needed).  From glibc's heap, which keeps freed memory for the step
    buffers (`worker.models.keep_buffers_on_heap`), a resize's old buffers could not be reused
    by the larger new ones and stayed until the heap was trimmed: a 1,000-item run at l = 100
    (GPT-2 small's shape, 2026-11-26; largest cache 8.4 GiB, the process 1.0 GiB before it,
    memory budget 10.9 GiB) peaked at 13.0 and 13.5 GiB resident from the heap and at 8.4 GiB
    mapped."""
    n = math.prod(shape)
    if like.device.type != "cpu" or n == 0:
        return like.new_zeros(shape), None
    area = mmap.mmap(-1, n * like.element_size(), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    # The tensor's storage holds a reference to the mapping; the last view freed unmaps it.
    return torch.frombuffer(area, dtype=like.dtype, count=n).view(shape), area


def zero_bytes(whole: torch.Tensor, area: mmap.mmap, start: int, end: int) -> None:
    """Zero bytes [start, end) of a mapped buffer (`slot_zeros`): the pages wholly inside are
    given back to the system (they read as zeros after, `_GIVES_BACK_ZEROS`), the parts of
    the two pages at the edges are written."""
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, end // page * page
    flat = whole.view(-1).view(torch.uint8)
    if hi <= lo:
        flat[start:end].zero_()
        return
    area.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    flat[start:lo].zero_()
    flat[hi:end].zero_()


def cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def grow_cache_classes():
    """A ``DynamicCache`` whose layers write into preallocated buffers (built on first use, so
    that importing this module does not import ``transformers``)."""
    global _GROW
    if _GROW is not None:
        return _GROW
    from transformers import DynamicCache
    from transformers.cache_utils import Cache, DynamicLayer

    class GrowLayer(DynamicLayer):
        """Keys and values [B, H, T, D] as views of buffers with spare columns: appending a
        token writes in place instead of ``torch.cat`` copying the whole cache every step
        (quadratic in the sequence length).  Capacity grows by half when full."""

        def __init__(self, keys=None, values=None, spare: int = 32):
            super().__init__()
            self.spare = spare
            self.n = 0
            if keys is not None:
                self._alloc(keys, values, keys.shape[-2] + spare)

        def _alloc(self, keys, values, capacity):
            b, h, t, d = keys.shape
            kbuf = keys.new_empty((b, h, capacity, d))
            vbuf = values.new_empty((b, h, capacity, values.shape[-1]))
            kbuf[:, :, :t] = keys
            vbuf[:, :, :t] = values
            self.kbuf, self.vbuf, self.n = kbuf, vbuf, t
            self.dtype, self.device = keys.dtype, keys.device
            self.keys, self.values = kbuf[:, :, :t], vbuf[:, :, :t]
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            q = key_states.shape[-2]
            if not self.is_initialized:
                self._alloc(key_states, value_states, q + self.spare)
                return self.keys, self.values
            if self.n + q > self.kbuf.shape[-2]:
                # Grow by half (at least ``spare``): a doubled buffer of a large batch's cache
                # is gigabytes, most of it never used by the few rounds a word search has left.
                cap = self.kbuf.shape[-2]
                grown = max(cap + max(cap // 2, self.spare), self.n + q)
                self._alloc(self.keys, self.values, grown)
            self.kbuf[:, :, self.n : self.n + q] = key_states
            self.vbuf[:, :, self.n : self.n + q] = value_states
            self.n += q
            self.keys, self.values = self.kbuf[:, :, : self.n], self.vbuf[:, :, : self.n]
            return self.keys, self.values

        @classmethod
        def from_buffers(cls, kbuf, vbuf, n: int, spare: int = 32):
            layer = cls(spare=spare)
            layer.kbuf, layer.vbuf, layer.n = kbuf, vbuf, n
            layer.dtype, layer.device = kbuf.dtype, kbuf.device
            layer.keys, layer.values = kbuf[:, :, :n], vbuf[:, :, :n]
            layer.is_initialized = True
            return layer

        def get_seq_length(self) -> int:
            return self.n

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError

    class GrowCache(DynamicCache):
        layer_class = GrowLayer

        def __init__(self, tensors=(), spare: int = 32, layers=None):
            layers = layers or [GrowLayer(k, v, spare) for k, v in tensors]
            if layers:
                Cache.__init__(self, layers=layers)
            else:
                Cache.__init__(self, layer_class_to_replicate=lambda: GrowLayer(spare=spare))

    _GROW = GrowCache
    return _GROW


_GROW = None


def make_cache(tensors: list[tuple[torch.Tensor, torch.Tensor]], spare: int = 32):
    return grow_cache_classes()(tensors, spare)


def gather_cache(parts: list[tuple[Any, list[int], int]], spare: int = 32):
    """One cache holding, in order, rows ``rows`` of each part's cache from column ``first`` on,
    right-aligned (left padding zeroed), with ``spare`` free columns (two copies of each kept
    element at most: index_select, then into the buffer; a row-by-row copy is 4x slower)."""
    grow = grow_cache_classes()
    per_part = [(cache_tensors(c), rows, first) for c, rows, first in parts]
    width = max(layers[0][0].shape[2] - first for layers, _, first in per_part)
    n_rows = sum(len(rows) for _, rows, _ in per_part)
    out_layers = []
    for li in range(len(per_part[0][0])):
        k0, v0 = per_part[0][0][li]
        _, h, _, d = k0.shape
        kbuf = k0.new_empty((n_rows, h, width + spare, d))
        vbuf = v0.new_empty((n_rows, h, width + spare, v0.shape[-1]))
        i = 0
        for layers, rows, first in per_part:
            k, v = layers[li]
            w = k.shape[2] - first
            if w < width:
                kbuf[i : i + len(rows), :, : width - w] = 0
                vbuf[i : i + len(rows), :, : width - w] = 0
            if rows != list(range(k.shape[0])):
                (index,) = upload(rows, device=k.device)
                k, v = k.index_select(0, index), v.index_select(0, index)
            kbuf[i : i + len(rows), :, width - w : width] = k[:, :, first:]
            vbuf[i : i + len(rows), :, width - w : width] = v[:, :, first:]
            i += len(rows)
        out_layers.append(grow.layer_class.from_buffers(kbuf, vbuf, width, spare))
    return grow(layers=out_layers, spare=spare)


def share_cache(cache, spare: int = 32):
    """A cache over the same buffers (no copy): appending to it writes into the spare columns of
    ``cache``, which ``cache`` itself overwrites if it is appended to later."""
    grow = grow_cache_classes()
    layers = [
        grow.layer_class.from_buffers(layer.kbuf, layer.vbuf, layer.n, spare)
        for layer in cache.layers
    ]
    return grow(layers=layers, spare=spare)


@dataclass
class CausalState:
    """KV cache of a batch, its attention mask [B, T] and each row's real length [B]."""

    cache: Any
    mask: torch.Tensor
    lengths: torch.Tensor
    tree: Any = None  # the word search's memo of partial words (`WordTree`), built by ``extend``


class WordTree:
    """KV cache of partial words on top of the contexts of some rows of a `CausalState`.

    Each row's cache holds its context's columns (a copy) followed by one column per partial word
    (a continuation) scored so far; a continuation's token attends to the context, to the columns
    of its own prefixes and to itself (a tree attention mask), at position context length + depth
    - 1.  Expanding a partial word is then one token, whatever its length, instead of re-running
    the whole continuation on a fresh copy of the context's cache.
    """

    def __init__(self, state: CausalState, rows: list[int]):
        self.source_width = state.mask.shape[1]
        (index,) = upload(rows, device=state.mask.device)
        if rows == list(range(state.mask.shape[0])) and hasattr(state.cache.layers[0], "kbuf"):
            # Extending the state afterwards changes its width, which discards this tree.
            self.cache = share_cache(state.cache, spare=64)
        else:
            self.cache = gather_cache([(state.cache, rows, 0)], spare=64)
        self.ctx_mask = state.mask.index_select(0, index).bool()
        self.lengths = state.lengths.index_select(0, index)
        self.row_of = {r: i for i, r in enumerate(rows)}
        self.nodes: list[dict[tuple[int, ...], int]] = [{} for _ in rows]

    @property
    def width(self) -> int:
        return self.cache.get_seq_length()

    def keep(self, tree_rows: list[int]) -> None:
        """Drop the other rows (their partial words are forgotten)."""
        (index,) = upload(tree_rows, device=self.ctx_mask.device)
        self.cache = gather_cache([(self.cache, tree_rows, 0)], spare=64)
        self.ctx_mask = self.ctx_mask.index_select(0, index)
        self.lengths = self.lengths.index_select(0, index)
        back = {t: r for r, t in self.row_of.items()}
        self.row_of = {back[t]: i for i, t in enumerate(tree_rows)}
        self.nodes = [self.nodes[t] for t in tree_rows]


class _Plan:
    """Where the tokens of one forward go: slot rows [N*Q] and columns [N*Q] of each token (row
    major), and the columns every row attends over."""

    rows: torch.Tensor
    cols: torch.Tensor
    width: int
    query: int


def slot_cache_classes():
    """The cache of `SlotState` (built on first use, so that importing this module does not
    import ``transformers``)."""
    global _SLOTS
    if _SLOTS is not None:
        return _SLOTS
    from transformers.cache_utils import Cache, DynamicLayer

    class SlotLayer(DynamicLayer):
        """Keys and values of every slot, [rows, heads, capacity, head dim], allocated on the
        first forward (the model says its heads and dims).  A forward writes each token at its
        own (row, column) of the plan and attends over the first ``plan.width`` columns.

        On a CPU ``kbuf`` and ``vbuf`` are views of mapped buffers (`slot_zeros`) with room
        for at least as many rows as the slots ever had.  On Linux (`_GIVES_BACK_ZEROS`) a
        change of rows alone moves no data (rows are the outer dimension), and fewer rows give
        their pages back (`zero_bytes`), so that the resident cache stays within rows x columns,
        which the memory budget counts (`worker.sampler`).  A change of columns copies the cache
        once.  Columns reserved ahead (no copy when rows widen) were tried: every step's
        attention then read each (row, head)'s keys far apart from the next one's, and a
        1,000-item run at l = 20 lost in attention what it saved in copies (attention modules
        31-32 against 34-36 CPU s, widenings 2.6 against 0.1 CPU s; GPT-2 small's shape,
        2026-11-26)."""

        def __init__(self, plan: _Plan, rows: int, capacity: int):
            super().__init__()
            self.plan, self.n_rows, self.capacity = plan, rows, capacity
            self.kbuf = self.vbuf = None
            # Per buffer (keys, values): the whole mapped buffer and its mapping, on a CPU.
            self.maps: list[tuple[torch.Tensor, mmap.mmap]] = []

        def update(self, key_states, value_states, *args, **kwargs):
            plan = self.plan
            n, h, q, d = key_states.shape
            if self.kbuf is None:
                self.dtype, self.device = key_states.dtype, key_states.device
                self._allocate(self.n_rows, self.capacity, None, (key_states, value_states))
                self.is_initialized = True
            flat = (n * q, h)
            self.kbuf[plan.rows, :, plan.cols] = key_states.transpose(1, 2).reshape(*flat, d)
            self.vbuf[plan.rows, :, plan.cols] = value_states.transpose(1, 2).reshape(*flat, -1)
            self.keys = self.kbuf[:n, :, : plan.width]
            self.values = self.vbuf[:n, :, : plan.width]
            return self.keys, self.values

        def _allocate(self, rows: int, capacity: int, keep, likes=None) -> None:
            """New keys and values buffers of ``rows`` x ``capacity`` (zeros, not garbage: a
            masked column still multiplies a zero weight, and a NaN there would spread), shaped
            like ``likes`` (default: the present buffers), the first ``keep`` = (rows, columns)
            of the present buffers copied; one buffer at a time, the old one let go before the
            next is made, so that memory grows by one buffer at most meanwhile."""
            olds = [self.kbuf, self.vbuf]
            likes = list(likes) if likes is not None else olds
            self.kbuf = self.vbuf = None
            self.maps = []
            bufs, maps = [], []
            for i in range(2):
                shape = (rows, likes[i].shape[1], capacity, likes[i].shape[-1])
                if likes[i].device.type == "cpu":
                    new, area = slot_zeros(likes[i], shape)
                else:  # one pass over the buffer, not two (zeros, then the copy)
                    make = likes[i].new_zeros if keep is None else likes[i].new_empty
                    new, area = make(shape), None
                if keep is not None:
                    kr, kc = keep
                    new[:kr, :, :kc] = olds[i][:kr, :, :kc]
                    if area is None:
                        new[:kr, :, kc:] = 0
                        new[kr:] = 0
                olds[i] = likes[i] = None  # the old keys go before the new values are made
                bufs.append(new)
                if area is not None:
                    maps.append((new, area))
            self.kbuf, self.vbuf = (b[: self.n_rows] for b in bufs)
            self.maps = maps

        def resize(self, rows: int, capacity: int) -> None:
            """Keep the first ``rows`` rows and ``capacity`` columns: on a Linux CPU a change of
            rows alone (within the buffers' rows) moves no data, otherwise one copy of this
            layer."""
            # The views of the last forward would keep the old buffers alive through a copy.
            self.keys = self.values = None
            old_rows, old_cols = self.n_rows, self.capacity
            self.n_rows, self.capacity = rows, capacity
            if self.kbuf is not None:
                in_place = _GIVES_BACK_ZEROS and self.maps and capacity == old_cols
                if in_place and rows <= self.maps[0][0].shape[0]:
                    for whole, area in self.maps:
                        if rows < old_rows:
                            row = whole.stride(0) * whole.element_size()
                            zero_bytes(whole, area, rows * row, old_rows * row)
                    self.kbuf, self.vbuf = (whole[:rows] for whole, _ in self.maps)
                else:
                    # Room for the rows the slots have now or had before this resize, no more
                    # (the address space a wide buffer maps grows with its rows).
                    keep = (min(rows, old_rows), min(capacity, old_cols))
                    self._allocate(max(rows, old_rows), capacity, keep)

        def gather(self, src: torch.Tensor, width: int) -> tuple[torch.Tensor, ...]:
            """Copies of the first ``width`` columns of rows ``src``, keys and values (for
            `scatter`: `SlotState.settle` reads every source before it writes)."""
            if self.kbuf is None:
                return ()
            # Indexing, not index_select on the narrowed view: on a mapped buffer
            # (`slot_zeros`) that took 4-8 ms a buffer against 0.07 (10 rows of GPT-2 small's
            # shape, 40 of 64 columns; it reads far more than the rows).
            return tuple(buf[src, :, :width] for buf in (self.kbuf, self.vbuf))

        def scatter(self, dst: torch.Tensor, parts: tuple[torch.Tensor, ...]) -> None:
            """Rows ``dst`` take `gather`'s copies in their first columns."""
            for buf, part in zip((self.kbuf, self.vbuf), parts, strict=False):
                buf[:, :, : part.shape[2]].index_copy_(0, dst, part)

        def nbytes(self) -> int:
            """What the rows and columns in use take (a mapped buffer's rows past them take no
            memory: their pages are given back or never written)."""
            if self.kbuf is None:
                return 0
            return self.kbuf.numel() * self.kbuf.element_size() * 2

        def get_seq_length(self) -> int:
            return self.plan.width - self.plan.query

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError

    class SlotCache(Cache):
        def __init__(self, rows: int, capacity: int, n_layers: int):
            self.plan = _Plan()
            Cache.__init__(
                self, layers=[SlotLayer(self.plan, rows, capacity) for _ in range(n_layers)]
            )

    _SLOTS = SlotCache
    return _SLOTS


_SLOTS = None


@dataclass
class SlotState:
    """Slots of `HFCausalLM.open_slots`: the KV cache, and per slot its context length, its used
    columns and its partial words (column -> (parent column or `CONTEXT`, depth)).  A slot's
    context fills its columns from 0 (no padding: the column of a context token is its
    position); partial words take the columns after it."""

    cache: Any
    rows: int
    capacity: int
    lengths: list[int]
    fills: list[int]
    nodes: list[dict[int, tuple[int, int]]]

    # Where each slot's keys and values are (a row of the buffers) since the last `settle`:
    # `swap` exchanges two entries, and the rows move in one batched copy when the buffers are
    # next read or resized.
    where: list[int] = field(default_factory=list)
    # Changes whenever the buffers are made anew (a resize): what refers to them (a step
    # captured as a graph, `worker.hf_steps.StepGraphs`) is then stale.
    version: int = 0

    @classmethod
    def open(cls, rows: int, capacity: int, n_layers: int) -> SlotState:
        cache = slot_cache_classes()(rows, capacity, n_layers)
        state = cls(cache, rows, capacity, [0] * rows, [0] * rows, [{} for _ in range(rows)])
        state.where = list(range(rows))
        return state

    def swap(self, a: int, b: int) -> None:
        """Slots ``a`` and ``b`` change places, their cache, counters and partial words; the
        cache's rows move at the next `settle` (all of a step's moves in one copy a buffer)."""
        for field_ in (self.where, self.lengths, self.fills, self.nodes):
            field_[a], field_[b] = field_[b], field_[a]

    @torch.inference_mode()
    def settle(self, *parts, device=None) -> list[torch.Tensor]:
        """Move the cache's rows to their slots (`swap`): every slot that holds tokens and is
        not in its own row takes its row's columns in use.  The slots moved are grouped by
        their columns in use, rounded up to a power of two (a few groups, whatever the rows),
        and each group is one gather and one scatter per buffer as wide as its widest slot
        (every group gathered before any is scattered: the moves may form cycles):
        one group as wide as the widest of all copied 1.7 times the columns in use and took
        twice the time of copying each slot's own columns (1,000 items at l = 20, GPT-2
        small's shape, 2026-11-28).

        ``parts`` (host data of the caller's step, on ``device``) travel to the device in the
        same copy as the moves' indices (`worker.models.upload`: a step's one host-to-device
        copy); they are returned there."""
        where, fills = self.where, self.fills
        moved = [i for i, w in enumerate(where) if w != i and fills[i]]
        layers = self.cache.layers
        groups: dict[int, list[int]] = {}
        if moved and layers[0].kbuf is not None:
            device = layers[0].kbuf.device
            for i in moved:
                groups.setdefault((fills[i] - 1).bit_length(), []).append(i)
        indices = [x for group in groups.values() for x in (group, [where[i] for i in group])]
        uploaded = upload(*indices, *parts, device=device) if indices or parts else []
        copies = []  # every source is read before any row is written (moves cycle)
        for j, group in enumerate(groups.values()):
            width = max(fills[i] for i in group)
            dst, src = uploaded[2 * j], uploaded[2 * j + 1]
            copies.append((dst, [layer.gather(src, width) for layer in layers]))
        for dst, moves in copies:
            for layer, part in zip(layers, moves, strict=True):
                layer.scatter(dst, part)
        self.where = list(range(self.rows))
        return uploaded[len(indices) :]

    def resize(self, rows: int, capacity: int) -> None:
        """Keep the first ``rows`` slots, with ``capacity`` columns (layer by layer: one layer's
        buffers are copied at a time, so memory grows by one layer at most meanwhile)."""
        self.settle()
        self.version += 1
        for layer in self.cache.layers:
            layer.resize(rows, capacity)
        if rows < self.rows:
            del self.lengths[rows:], self.fills[rows:], self.nodes[rows:]
        else:
            extra = rows - self.rows
            self.lengths += [0] * extra
            self.fills += [0] * extra
            self.nodes += [{} for _ in range(extra)]
        self.rows, self.capacity = rows, capacity
        self.where = list(range(rows))

    def nbytes(self) -> int:
        return sum(layer.nbytes() for layer in self.cache.layers)
