"""Counting the ATen operations a block dispatches (`OpCounter`): how many kernels a step
issues, whatever the device.  On a GPU each operation is at least one kernel launch, so a step
whose count grows with its rows is host-bound there; the count is deterministic, so it can be
compared on a noisy CPU and asserted in tests (`benchmarks/precompute.py`, `tests/worker`)."""

from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """``with OpCounter() as ops: ...``: ``ops.total`` operations dispatched inside the block,
    ``ops.counts`` by operation name (``aten.slice``'s overloads counted as ``slice``).  Views
    and in-place operations count like any other: each is one dispatch."""

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())
