"""The KV cache of `worker.hf.HFCausalLM`: buffers that grow in place, row gathering, and the
tree of partial words the word search extends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from worker.hf import HFCausalLM


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
                index = torch.tensor(rows, dtype=torch.long, device=k.device)
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

    def __init__(self, lm: HFCausalLM, state: CausalState, rows: list[int]):
        self.source_width = state.mask.shape[1]
        index = torch.tensor(rows, dtype=torch.long, device=lm.device)
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
        index = torch.tensor(tree_rows, dtype=torch.long, device=self.ctx_mask.device)
        self.cache = gather_cache([(self.cache, tree_rows, 0)], spare=64)
        self.ctx_mask = self.ctx_mask.index_select(0, index)
        self.lengths = self.lengths.index_select(0, index)
        back = {t: r for r, t in self.row_of.items()}
        self.row_of = {back[t]: i for i, t in enumerate(tree_rows)}
        self.nodes = [self.nodes[t] for t in tree_rows]
