"""How a slot step of `worker.hf.HFCausalLM.feed` runs: on a CPU eagerly at its own shape,
its attention in row groups (`row_groups`, `slot_attention`); on a GPU at fixed shapes,
captured and replayed as CUDA graphs (`StepGraphs`)."""

from __future__ import annotations

import contextvars
import itertools
from functools import lru_cache
from typing import Any

import torch

from worker.hf_cache import SlotState

# Attention of a slot forward in row groups (`HFCausalLM.feed`): [(first row, end, columns
# read)], or None.
SLOT_SPLIT: contextvars.ContextVar = contextvars.ContextVar("ebc_slot_split", default=None)


SLOT_ATTENTION = "ebc_slots_sdpa"


@lru_cache(maxsize=1)
def slot_attention() -> str:
    """Register (once) an attention function that runs ``transformers``' SDPA attention in the
    row groups of `SLOT_SPLIT`, each group reading only the columns its widest row needs, so that a
    few wide slots do not make every slot read their width.  Rows do not attend to each other,
    so the groups' outputs are the rows' outputs."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def attention(module, query, key, value, attention_mask, **kwargs):
        groups = SLOT_SPLIT.get()
        if groups is None:
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        parts = [
            sdpa_attention_forward(
                module,
                query[lo:hi],
                key[lo:hi, :, :width],
                value[lo:hi, :, :width],
                attention_mask[lo:hi, :, :, :width],
                **kwargs,
            )[0]
            for lo, hi, width in groups
        ]
        return torch.cat(parts), None

    AttentionInterface.register(SLOT_ATTENTION, attention)
    return SLOT_ATTENTION


def row_groups(widths: list[int], lo: int = 0, depth: int = 2) -> list[tuple[int, int, int]]:
    """Contiguous row groups that each attend over their own widest row's columns: the cut of
    rows [lo, lo + len(widths)) that reads the fewest columns, if it saves a fifth or more, and
    again inside each half (``depth`` times: at most 2 ** depth groups)."""
    n = len(widths)
    head = list(itertools.accumulate(widths, max))
    whole = [(lo, lo + n, head[-1])] if n else []
    if n < 2 or depth == 0:
        return whole
    tail = list(itertools.accumulate(reversed(widths), max))[::-1]
    cost, k = min((k * head[k - 1] + (n - k) * tail[k], k) for k in range(1, n))
    if cost > 0.8 * n * head[-1]:
        return whole
    return row_groups(widths[:k], lo, depth - 1) + row_groups(widths[k:], lo + k, depth - 1)


class StepGraphs:
    """The fixed-shape slot forward of `HFCausalLM.feed` (``static_steps``): every slot, a
    power of two of queries per slot, every column of the slots' buffers, the logits of every
    position; with ``capture`` (a GPU), captured once per shape as a CUDA graph and replayed.

    A shape's graph is captured at its first step, after that step has run eagerly on a side
    stream (PyTorch's recipe: the eager run warms the kernels up and is the step's result, the
    capture records the same step without running it).  Its inputs (token ids, positions, the
    attention mask and where each token's keys and values go) are copied into the graph's own
    tensors before each replay, and its output is read before the next step replays any graph
    (the graphs of one slot state share a memory pool).  A resize of the slots makes new
    buffers: the state's graphs are dropped (`SlotState.version`).  A capture that fails (an
    operation of the model that cannot be captured) leaves the steps eager, and says why once
    (``self.failed``)."""

    def __init__(self, lm: Any, *, capture: bool):
        # lm: the `worker.hf.HFCausalLM` whose steps these are (its ``step_logprobs``).
        self.lm, self.capture = lm, capture
        self.graphs: dict[tuple, tuple] = {}
        self.version: tuple | None = None
        self.pool = None
        self.failed: str | None = None

    def forward(self, state: SlotState, ids, positions, mask) -> torch.Tensor:
        """The log-probabilities [rows x queries, V] after every position (float32)."""
        return self.lm.step_logprobs(state, ids, positions, mask)

    def run(self, state: SlotState, inputs: tuple) -> torch.Tensor:
        ids, positions, mask = inputs[:3]
        if not self.capture or self.failed:
            return self.forward(state, ids, positions, mask)
        version = (id(state), state.version)
        if version != self.version:  # new buffers: the old graphs write into freed memory
            self.graphs, self.version = {}, version
            self.pool = torch.cuda.graph_pool_handle()
        key = (tuple(ids.shape), mask.shape[-1])
        plan = state.cache.plan
        if key in self.graphs:
            graph, static, out = self.graphs[key]
            for mine, given in zip(static, inputs, strict=True):
                mine.copy_(given)
            plan.rows, plan.cols = static[3], static[4]
            graph.replay()
            return out
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            result = self.forward(state, ids, positions, mask)
        torch.cuda.current_stream().wait_stream(side)
        static = tuple(t.clone() for t in inputs)
        plan.rows, plan.cols = static[3], static[4]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                out = self.forward(state, *static[:3])
        except RuntimeError as err:  # the model does something a graph cannot hold
            self.failed = f"{type(err).__name__}: {err}"
            self.graphs = {}
            return result
        self.graphs[key] = (graph, static, out)
        return result
