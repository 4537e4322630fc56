"""The model interface of the worker and its Hugging Face implementations.

Two protocols, one per task.  Both speak token ids and return next-token **log-probabilities**
as float32 tensors of shape [batch, vocab_size] on the model's device; batching, padding,
attention masks and the KV cache stay inside the implementation.  Everything runs under
``torch.inference_mode()``.

- `CausalLM` (language modelling): ``start`` reads a batch of contexts, ``step`` appends one
  token to every row (ancestral sampling), ``extend`` scores continuations of chosen rows
  without changing the state (the word search), ``select``/``concat`` reorganise states so that
  finished rows can leave a sampling batch and join a search batch later.
- `Seq2SeqLM` (translation): ``start`` reads sources and target prefixes, ``extend`` as above,
  ``beam_search`` decodes sources.

A test or a new backend implements the same methods; `worker.prefixes` and `worker.words` use
nothing else.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_batch_size(device: torch.device | str) -> int:
    """Rows per batch when the study does not say: 256 on a GPU and on a CPU too, where a
    one-token step of GPT-2 small over 256 rows runs at about 0.9 of the tokens per second of one
    large forward (1.64 against 1.51 ms per token on the 2-core CPU, 2026-11-24), over 128 rows
    at 0.83.  Shards hold as many items by default (`app.precompute.service`)."""
    return 256


@runtime_checkable
class CausalLM(Protocol):
    """A causal language model as the worker sees it.

    Attributes:
        name: model name or path, recorded with every item.
        task: ``"lm"``.
        tokenizer: a Hugging Face tokenizer (``encode``/``decode``/``convert_ids_to_tokens``).
        device: where tensors live.
        vocab_size: size of the output distribution (may exceed ``len(tokenizer)``).
        start_token_id: the token every text starts after (BOS, else end of text).
        max_positions: the longest context the model accepts, or None.
    """

    name: str
    task: str
    tokenizer: Any
    device: torch.device
    vocab_size: int
    start_token_id: int
    max_positions: int | None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        ...

    def start(self, contexts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Any]:
        """Read a batch of contexts (lists of ids, lengths may differ, at least one id each).

        Returns the next-token log-probabilities after each context [B, V] and an opaque state
        holding the KV cache, the attention mask and each row's length.
        """
        ...

    def step(self, state: Any, tokens: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Append ``tokens`` [B] to the rows where ``active`` [B] is true (other rows get a
        masked placeholder and keep their length).  Mutates ``state``; returns log-probs [B, V]."""
        ...

    def extend(
        self, state: Any, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """Log-probs [N, V] after context ``rows[i]`` followed by ``continuations[i]`` (one or
        more ids).  Leaves ``state`` unchanged; reuses its KV cache."""
        ...

    def select(self, state: Any, rows: Sequence[int]) -> Any:
        """A new state holding only ``rows`` (in that order)."""
        ...

    def concat(self, states: Sequence[Any]) -> Any:
        """One state holding the rows of ``states`` one after the other."""
        ...


@runtime_checkable
class Seq2SeqLM(Protocol):
    """An encoder-decoder model (translation) as the worker sees it.

    Attributes as in `CausalLM` (``task`` is ``"seq2seq"``), without ``start_token_id``: the
    implementation adds the decoder start token itself.
    """

    name: str
    task: str
    tokenizer: Any
    device: torch.device
    vocab_size: int

    def encode_source(self, text: str) -> list[int]:
        """Source token ids, with the end-of-sequence token the encoder expects."""
        ...

    def encode_target(self, text: str) -> list[int]:
        """Target token ids without special tokens (a partial translation)."""
        ...

    def start(
        self, sources: Sequence[Sequence[int]], prefixes: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, Any]:
        """Encode ``sources`` once; return log-probs [B, V] of the next target token after each
        target prefix (which may be empty) and a state for ``extend``."""
        ...

    def extend(
        self, state: Any, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """As `CausalLM.extend`: log-probs after prefix ``rows[i]`` + ``continuations[i]``."""
        ...

    def beam_search(
        self, sources: Sequence[Sequence[int]], *, num_beams: int, max_new_tokens: int
    ) -> list[list[int]]:
        """Beam-search decode each source; the best hypothesis's target ids, without special
        tokens."""
        ...


# --- Hugging Face implementations -------------------------------------------------------------


def _pad_id(tokenizer) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if tid is not None:
            return int(tid)
    return 0


def _cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def _grow_cache_classes():
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


def _cache_keyword(module) -> str:
    """The keyword that takes the KV cache: ``cache`` from transformers 5.x releases that
    renamed it (``past_key_values`` is deprecated there and removed in 5.40), the old name
    before.  Passing ``cache`` to an older model would land in ``**kwargs`` and be ignored."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _make_cache(tensors: list[tuple[torch.Tensor, torch.Tensor]], spare: int = 32):
    return _grow_cache_classes()(tensors, spare)


def _gather_cache(parts: list[tuple[Any, list[int], int]], spare: int = 32):
    """One cache holding, in order, rows ``rows`` of each part's cache from column ``first`` on,
    right-aligned (left padding zeroed), with ``spare`` free columns (two copies of each kept
    element at most: index_select, then into the buffer; a row-by-row copy is 4x slower)."""
    grow = _grow_cache_classes()
    per_part = [(_cache_tensors(c), rows, first) for c, rows, first in parts]
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


def _share_cache(cache, spare: int = 32):
    """A cache over the same buffers (no copy): appending to it writes into the spare columns of
    ``cache``, which ``cache`` itself overwrites if it is appended to later."""
    grow = _grow_cache_classes()
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
    tree: Any = None  # the word search's memo of partial words (`_Tree`), built by ``extend``


# Model types whose logits are a plain linear map of the base model's last hidden state, so that
# the head can be applied to the few positions that are read.
_PLAIN_HEAD = ("gpt2", "llama", "mistral", "qwen2")


class _Tree:
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
            self.cache = _share_cache(state.cache, spare=64)
        else:
            self.cache = _gather_cache([(state.cache, rows, 0)], spare=64)
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
        self.cache = _gather_cache([(self.cache, tree_rows, 0)], spare=64)
        self.ctx_mask = self.ctx_mask.index_select(0, index)
        self.lengths = self.lengths.index_select(0, index)
        back = {t: r for r, t in self.row_of.items()}
        self.row_of = {back[t]: i for i, t in enumerate(tree_rows)}
        self.nodes = [self.nodes[t] for t in tree_rows]


class HFCausalLM:
    """`CausalLM` over a ``transformers`` causal LM and its tokenizer.

    Contexts are left-padded; position ids are passed explicitly (the real position of every
    token), so padding and masked placeholders never shift positions.  Only the logits of the
    last position are computed (``logits_to_keep=1``) where the model supports it.
    """

    task = "lm"

    def __init__(
        self,
        model,
        tokenizer,
        *,
        name: str | None = None,
        max_rows: int = 512,
        cached_extend: bool = True,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.cached_extend = cached_extend
        self._plain_head = getattr(model.config, "model_type", None) in _PLAIN_HEAD
        start = tokenizer.bos_token_id
        if start is None:
            start = tokenizer.eos_token_id
        if start is None:
            raise ValueError("the tokenizer has neither a BOS nor an end-of-text token")
        self.start_token_id = int(start)
        self.max_positions = getattr(model.config, "n_positions", None) or getattr(
            model.config, "max_position_embeddings", None
        )
        self.pad_id = _pad_id(tokenizer)
        self.max_rows = max_rows
        params = inspect.signature(model.forward).parameters
        self._keep = "logits_to_keep" in params
        self._cache_kw = _cache_keyword(model)
        self._base_cache_kw = _cache_keyword(model.base_model)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _forward(self, ids, mask, positions, cache) -> torch.Tensor:
        kwargs = {"logits_to_keep": 1} if self._keep else {}
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: cache},
            **kwargs,
        )
        return torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)

    @torch.inference_mode()
    def start(self, contexts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, CausalState]:
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(contexts), width), dtype=torch.long)
        for i, c in enumerate(contexts):
            if not c:
                raise ValueError("empty context")
            ids[i, width - len(c) :] = torch.tensor(list(c))
            mask[i, width - len(c) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = _make_cache([])
        logprobs = self._forward(ids, mask, positions, cache)
        return logprobs, CausalState(cache, mask, mask.sum(-1))

    @torch.inference_mode()
    def step(self, state: CausalState, tokens: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        active = active.to(self.device)
        tokens = torch.where(active, tokens.to(self.device), self.pad_id)
        state.mask = torch.cat([state.mask, active.long()[:, None]], dim=1)
        positions = state.lengths[:, None].clone()
        if self.max_positions:
            positions.clamp_(max=self.max_positions - 1)
        logprobs = self._forward(tokens[:, None], state.mask, positions, state.cache)
        state.lengths = state.lengths + active.long()
        if state.mask.shape[1] >= 64:
            # Rows emptied by `reset_rows` leave columns nobody attends to at the left: drop
            # them (one copy) once they are half of the cache.
            used = state.mask.any(dim=0).nonzero()
            first = int(used[0]) if used.numel() else 0
            if first >= state.mask.shape[1] // 2:
                rows = list(range(state.mask.shape[0]))
                state.cache = _gather_cache([(state.cache, rows, first)])
                state.mask = state.mask[:, first:]
        return logprobs

    @torch.inference_mode()
    def reset_rows(self, state: CausalState, rows: Sequence[int]) -> None:
        """Empty ``rows`` in place (continuous batching): they no longer attend to any column
        so far, and the next token `step` gives them is their first, at position 0."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        state.mask[index] = 0
        state.lengths = state.lengths.clone()
        state.lengths[index] = 0
        state.tree = None

    @torch.inference_mode()
    def extend(
        self, state: CausalState, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """See `CausalLM.extend`.  With ``cached_extend`` (the default) the partial words scored
        so far are kept in a `_Tree` on the state (a memo: the state's own cache, mask and
        lengths are not changed), so each call runs one token per new continuation; without it,
        every continuation is re-run in full on a copy of its context's cache."""
        if not self.cached_extend:
            return self._extend_uncached(state, rows, continuations)
        tree = state.tree
        if tree is None or tree.source_width != state.mask.shape[1]:
            tree = state.tree = _Tree(self, state, sorted(set(rows)))
        in_tree = [r in tree.row_of for r in rows]
        called = sorted({tree.row_of[r] for r, ok in zip(rows, in_tree, strict=True) if ok})
        if called and len(called) < 0.75 * len(tree.nodes):
            # Contexts whose search has ended would cost padding columns in every forward.
            tree.keep(called)
        out: torch.Tensor | None = None
        tree_jobs = [i for i, ok in enumerate(in_tree) if ok]
        if tree_jobs:
            tree_out = self._extend_tree(
                tree, [rows[i] for i in tree_jobs], [continuations[i] for i in tree_jobs]
            )
            if len(tree_jobs) == len(rows):
                return tree_out
            out = tree_out.new_empty((len(rows), tree_out.shape[-1]))
            out[tree_jobs] = tree_out
        # Rows dropped from the tree earlier: the uncached path (correct, slower).
        rest = [i for i, ok in enumerate(in_tree) if not ok]
        rest_out = self._extend_uncached(
            state, [rows[i] for i in rest], [continuations[i] for i in rest]
        )
        if out is None:
            return rest_out
        out[rest] = rest_out
        return out

    def _extend_tree(
        self, tree: _Tree, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        width, n_rows = tree.width, len(tree.nodes)
        slots: list[list[tuple[int, ...]]] = [[] for _ in range(n_rows)]
        pending: list[dict[tuple[int, ...], int]] = [{} for _ in range(n_rows)]
        targets: list[tuple[int, int]] = []
        for r, cont in zip(rows, continuations, strict=True):
            cont = tuple(int(t) for t in cont)
            if not cont:
                raise ValueError("empty continuation")
            t = tree.row_of[r]
            for d in range(1, len(cont)):
                head = cont[:d]
                if head not in tree.nodes[t] and head not in pending[t]:
                    pending[t][head] = len(slots[t])
                    slots[t].append(head)
            # The scored continuation always gets a fresh column: its output is what is read.
            targets.append((t, len(slots[t])))
            slots[t].append(cont)
        depth = max(len(s) for s in slots)
        ids = torch.full((n_rows, depth), self.pad_id, dtype=torch.long)
        positions = torch.zeros((n_rows, depth), dtype=torch.long)
        lengths = tree.lengths.tolist()
        mr, mq, mc = [], [], []  # allowed (row, query, column) pairs beyond the context
        for t in range(n_rows):
            nodes, pend = tree.nodes[t], pending[t]
            for q in range(depth):
                mr.append(t)
                mq.append(q)
                mc.append(width + q)
                if q >= len(slots[t]):
                    continue  # padding: attends to the context and itself only
                cont = slots[t][q]
                ids[t, q] = cont[-1]
                positions[t, q] = lengths[t] + len(cont) - 1
                for d in range(1, len(cont)):
                    head = cont[:d]
                    col = nodes.get(head)
                    mr.append(t)
                    mq.append(q)
                    mc.append(col if col is not None else width + pend[head])
        if self.max_positions:
            positions.clamp_(max=self.max_positions - 1)
        ctx = tree.ctx_mask.shape[1]
        dev = self.device
        allowed = torch.zeros((n_rows, depth, width + depth), dtype=torch.bool, device=dev)
        allowed[:, :, :ctx] = tree.ctx_mask[:, None, :]
        allowed[
            torch.tensor(mr, device=dev), torch.tensor(mq, device=dev), torch.tensor(mc, device=dev)
        ] = True
        dtype = next(self.model.parameters()).dtype
        # An additive mask: a 4D mask is passed to the attention as it is.
        mask = torch.zeros(allowed.shape, dtype=dtype, device=dev).masked_fill_(
            ~allowed, torch.finfo(dtype).min
        )[:, None]
        ids, positions = ids.to(dev), positions.to(dev)
        trow = torch.tensor([t for t, _ in targets], device=self.device)
        tcol = torch.tensor([q for _, q in targets], device=self.device)
        kwargs = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
        }
        if self._plain_head:
            kwargs[self._base_cache_kw] = tree.cache
            hidden = self.model.base_model(**kwargs).last_hidden_state[trow, tcol]
            logits = self.model.get_output_embeddings()(hidden)
        else:
            kwargs[self._cache_kw] = tree.cache
            logits = self.model(**kwargs).logits[trow, tcol]
        # Every new continuation stays in the cache as a partial word.
        for t in range(n_rows):
            for head, q in pending[t].items():
                tree.nodes[t][head] = width + q
        for t, q in targets:
            tree.nodes[t].setdefault(slots[t][q], width + q)
        return torch.log_softmax(logits.float(), dim=-1)

    def _extend_uncached(
        self, state: CausalState, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        outs = []
        for lo in range(0, len(rows), self.max_rows):
            chunk_rows = list(rows[lo : lo + self.max_rows])
            chunk = continuations[lo : lo + self.max_rows]
            depth = max(len(c) for c in chunk)
            ids = torch.full((len(chunk), depth), self.pad_id, dtype=torch.long)
            cmask = torch.zeros((len(chunk), depth), dtype=torch.long)
            for i, c in enumerate(chunk):
                ids[i, depth - len(c) :] = torch.tensor(list(c))
                cmask[i, depth - len(c) :] = 1
            index = torch.tensor(chunk_rows, device=self.device)
            ids, cmask = ids.to(self.device), cmask.to(self.device)
            cache = _make_cache(
                [(k.index_select(0, index), v.index_select(0, index)) for k, v in
                 _cache_tensors(state.cache)]
            )
            mask = torch.cat([state.mask.index_select(0, index), cmask], dim=1)
            positions = state.lengths.index_select(0, index)[:, None] + (
                cmask.cumsum(-1) - 1
            ).clamp(min=0)
            outs.append(self._forward(ids, mask, positions, cache))
        return torch.cat(outs)

    def select(self, state: CausalState, rows: Sequence[int]) -> CausalState:
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        mask = state.mask.index_select(0, index)
        # Drop the columns no selected row attends to (left padding, placeholders of others).
        used = mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else mask.shape[1] - 1
        cache = _gather_cache([(state.cache, list(rows), first)])
        lengths = state.lengths.index_select(0, index)
        return CausalState(cache, mask[:, first:], lengths)

    def concat(self, states: Sequence[CausalState]) -> CausalState:
        width = max(s.mask.shape[1] for s in states)

        def left_pad(t: torch.Tensor) -> torch.Tensor:
            missing = width - t.shape[1]
            return t if not missing else torch.cat([t.new_zeros((t.shape[0], missing)), t], 1)

        cache = _gather_cache([(s.cache, list(range(s.mask.shape[0])), 0) for s in states])
        mask = torch.cat([left_pad(s.mask) for s in states])
        lengths = torch.cat([s.lengths for s in states])
        return CausalState(cache, mask, lengths)


@dataclass
class Seq2SeqState:
    """Encoder outputs [B, S, H] with their mask, and each row's target prefix (with the decoder
    start token)."""

    encoded: torch.Tensor
    source_mask: torch.Tensor
    prefixes: list[list[int]]


class HFSeq2SeqLM:
    """`Seq2SeqLM` over a ``transformers`` encoder-decoder model and its tokenizer.

    The encoder runs once per source; decoder inputs are right-padded and the log-probs are read
    at each row's last real position (absolute decoder positions stay right).  ``extend`` re-runs
    the decoder on prefix + continuation, cheap next to the encoder for sentence-length text.
    """

    task = "seq2seq"

    def __init__(self, model, tokenizer, *, name: str | None = None, max_rows: int = 512):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        start = model.config.decoder_start_token_id
        if start is None:
            start = getattr(model.generation_config, "decoder_start_token_id", None)
        if start is None:
            start = _pad_id(tokenizer)
        self.decoder_start_id = int(start)
        self.pad_id = _pad_id(tokenizer)
        self.max_rows = max_rows

    def encode_source(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def encode_target(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self.tokenizer(text_target=text, add_special_tokens=False)["input_ids"])

    def _pad(self, seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(list(s))
            mask[i, : len(s)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _decode(self, encoded, source_mask, prefixes: Sequence[Sequence[int]]) -> torch.Tensor:
        from transformers.modeling_outputs import BaseModelOutput

        ids, mask = self._pad(prefixes)
        out = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=encoded),
            attention_mask=source_mask,
            decoder_input_ids=ids,
            decoder_attention_mask=mask,
            use_cache=False,
        )
        last = mask.sum(-1) - 1
        logits = out.logits[torch.arange(len(prefixes), device=self.device), last]
        return torch.log_softmax(logits.float(), dim=-1)

    @torch.inference_mode()
    def start(
        self, sources: Sequence[Sequence[int]], prefixes: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, Seq2SeqState]:
        ids, mask = self._pad(sources)
        encoded = self.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        full = [[self.decoder_start_id, *p] for p in prefixes]
        state = Seq2SeqState(encoded, mask, full)
        return self._decode(encoded, mask, full), state

    @torch.inference_mode()
    def extend(
        self, state: Seq2SeqState, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        outs = []
        for lo in range(0, len(rows), self.max_rows):
            chunk_rows = list(rows[lo : lo + self.max_rows])
            index = torch.tensor(chunk_rows, device=self.device)
            seqs = [
                state.prefixes[r] + list(c)
                for r, c in zip(chunk_rows, continuations[lo : lo + self.max_rows], strict=True)
            ]
            outs.append(
                self._decode(
                    state.encoded.index_select(0, index),
                    state.source_mask.index_select(0, index),
                    seqs,
                )
            )
        return torch.cat(outs)

    @torch.inference_mode()
    def beam_search(
        self, sources: Sequence[Sequence[int]], *, num_beams: int, max_new_tokens: int
    ) -> list[list[int]]:
        ids, mask = self._pad(sources)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=num_beams,
            num_return_sequences=1,
            do_sample=False,
            max_new_tokens=max_new_tokens,
        )
        special = set(self.tokenizer.all_special_ids) | {self.decoder_start_id, self.pad_id}
        return [[t for t in row.tolist() if t not in special] for row in out]


def load_model(
    name_or_path: str,
    *,
    task: str = "lm",
    device: str | torch.device | None = None,
    dtype: str = "float32",
    revision: str | None = None,
    local_files_only: bool | None = None,
) -> HFCausalLM | HFSeq2SeqLM:
    """Load a model and its tokenizer from a hub name or a local directory.

    ``task`` is ``"lm"`` (AutoModelForCausalLM) or ``"seq2seq"`` (AutoModelForSeq2SeqLM).
    ``device`` defaults to `default_device`; ``dtype`` is ``float32``, ``float16``, ``bfloat16``
    or ``auto`` (the checkpoint's).  ``local_files_only`` defaults to true when the environment
    sets ``HF_HUB_OFFLINE=1``.
    """
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    if local_files_only is None:
        local_files_only = os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "TRUE", "yes")
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {[*DTYPES, 'auto']}")
    torch_dtype = "auto" if dtype == "auto" else DTYPES[dtype]
    dev = torch.device(device) if device is not None else default_device()
    common = {"revision": revision, "local_files_only": local_files_only}
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **common)
    if task == "lm":
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype, **common)
        return HFCausalLM(model.to(dev), tokenizer, name=name_or_path)
    if task == "seq2seq":
        model = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, dtype=torch_dtype, **common)
        return HFSeq2SeqLM(model.to(dev), tokenizer, name=name_or_path)
    raise ValueError("task must be 'lm' or 'seq2seq'")
