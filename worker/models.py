"""The model interface of the worker, its backends, and `load_model` that picks one by name.

Two protocols, one per task.  Both speak token ids and return next-token **log-probabilities**
as float32 tensors of shape [batch, vocab_size] on the model's device; batching, padding,
attention masks and the KV cache stay inside the implementation, in a state the callers treat
as opaque.  Everything runs under ``torch.inference_mode()``.

- `CausalLM` (language modelling): ``start`` reads a batch of contexts and ``extend`` scores
  continuations of chosen rows without changing the state (text prefixes of a reference model,
  `worker.synthetic`), ``select`` takes some rows.  The sampler and the word search run in
  *slots* (``open_slots``, ``feed``, ``clear_slots``, ``swap_slots``, ``resize_slots``): each
  row of a KV cache holds one text, which takes one token per step (a context token, a sampled
  token, or a partial word scored as a tree node after the context) and leaves its slot to the
  next text when it is over, so no cache is copied between sampling and search.
- `Seq2SeqLM` (translation): ``start`` reads sources and target prefixes, ``extend`` as above,
  ``beam_search`` decodes sources.

`worker.prefixes`, `worker.sampler` and `worker.words` use nothing else.  Backends: `worker.hf`
(any Hugging Face hub name or local directory) and `worker.fake.FakeCausalLM` (the name ``fake``
or ``fake:<seed>``), a seeded toy that needs no weights; `load_model` picks one by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # torch loads with a backend, not with the interface
    import torch

# The most rows per batch on a CPU, where a one-token step of GPT-2 small over 256 rows runs at
# about 0.9 of the tokens per second of one large forward (1.64 against 1.51 ms per token on the
# 2-core CPU, 2026-11-24; over 128 rows at 0.83) and more rows only cost memory; a GPU keeps
# gaining to about a thousand.  Below these caps `auto_batch_size` picks the rows that fit in
# memory.  Shards hold 256 items by default (`app.precompute.service`).
DEFAULT_BATCH_SIZE = 256
MAX_ROWS = {"cpu": DEFAULT_BATCH_SIZE, "cuda": 1024}
# Share of the device's free memory a batch may take (a CPU is shared with other processes).
MEMORY_FRACTION = {"cpu": 0.5, "cuda": 0.8}
# Float32 [rows, vocabulary] buffers alive in one step: the logits, their log-softmax, and the
# sampling's probabilities and CDF.
LOGIT_BUFFERS = 4

# Parents of the tokens fed to slots (`CausalLM.feed`).
APPEND = -1  # the token joins the slot's context
CONTEXT = -2  # the token is the first of a partial word, right after the context


@runtime_checkable
class CausalLM(Protocol):
    """A causal language model as the worker sees it.

    Attributes:
        name: model name or path, recorded with every item.
        task: ``"lm"``.
        tokenizer: a `Tokenizer`.
        device: where tensors live.
        vocab_size: size of the output distribution (may exceed ``len(tokenizer)``).
        start_token_id: the token every text starts after (BOS, else end of text).
        max_positions: the longest context the model accepts, or None.
        eos_token_ids: end-of-text ids besides the tokenizer's own (e.g. a generation config's).
    """

    name: str
    task: str
    tokenizer: Tokenizer
    device: torch.device
    vocab_size: int
    start_token_id: int
    max_positions: int | None
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        ...

    def start(self, contexts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Any]:
        """Read a batch of contexts (lists of ids, lengths may differ, at least one id each).

        Returns the next-token log-probabilities after each context [B, V] and an opaque state
        holding the KV cache, the attention mask and each row's length.
        """
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

    kv_bytes_per_token: int
    """Bytes one token takes in the KV cache (`auto_batch_size`)."""

    def open_slots(self, rows: int, columns: int) -> Any:
        """An empty batch of ``rows`` slots with room for ``columns`` tokens each (it grows
        when a slot needs more)."""
        ...

    def feed(
        self,
        slots: Any,
        rows: Sequence[int],
        tokens: Sequence[int],
        parents: Sequence[int],
        want: Sequence[bool],
    ) -> tuple[torch.Tensor, list[int]]:
        """One forward: token ``tokens[i]`` goes into slot ``rows[i]`` (a slot may take several
        tokens, all of them tree nodes).  ``parents[i]`` is `APPEND` (the token joins the slot's
        context, which must hold no tree nodes), `CONTEXT` (a tree node right after the
        context) or the handle of an earlier tree node of the slot (its parent).  A tree node
        attends to the context, its ancestors and itself, at position context length + depth -
        1.  Returns the log-probs [n, V] after each token whose ``want`` is true (in order) and
        a handle per token."""
        ...

    def clear_slots(self, slots: Any, rows: Sequence[int]) -> None:
        """Empty the slots ``rows`` (no context, no tree nodes)."""
        ...

    def swap_slots(self, slots: Any, a: int, b: int) -> None:
        """Exchange the contents (and handles) of slots ``a`` and ``b`` (either may be empty)."""
        ...

    def resize_slots(self, slots: Any, rows: int, columns: int | None = None) -> None:
        """Keep the first ``rows`` slots (adding empty ones if more), with room for ``columns``
        tokens each (None: as now; never fewer than a slot holds)."""
        ...

    def slot_columns(self, slots: Any) -> int:
        """Tokens each slot has room for now (``feed`` widens the slots when one needs more;
        the cache then takes rows x columns x `kv_bytes_per_token`)."""
        ...

    def slot_bytes(self, slots: Any) -> int:
        """Memory the slots' cache takes now."""
        ...


@runtime_checkable
class Seq2SeqLM(Protocol):
    """An encoder-decoder model (translation) as the worker sees it.

    Attributes as in `CausalLM` (``task`` is ``"seq2seq"``), without ``start_token_id``: the
    implementation adds the decoder start token itself.
    """

    name: str
    task: str
    tokenizer: Tokenizer
    device: torch.device
    vocab_size: int
    eos_token_ids: tuple[int, ...]

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


@runtime_checkable
class Tokenizer(Protocol):
    """What the worker reads of a model's tokenizer (a Hugging Face tokenizer has it all).

    Optional, read when present: ``added_tokens_decoder`` (more special tokens) and
    ``backend_tokenizer`` (the ``tokenizers`` model type, for the word-boundary convention).
    """

    eos_token_id: int | None
    unk_token_id: int | None
    all_special_ids: list[int]

    def __len__(self) -> int: ...

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]: ...

    def decode(self, ids: list[int], **options: Any) -> str: ...


# Model names by the scheme they start with ("fake:3"): "module:function" taking the rest of the
# name and `load_model`'s options, imported only when a name asks for it.  Any other name is a
# Hugging Face hub name or local directory (the "hf" backend).
BACKENDS = {"fake": "worker.fake:load", "hf": "worker.hf:load"}


def grown_columns(columns: int, need: int, most: int | None = None) -> int:
    """Columns to widen slots of ``columns`` to when a forward needs ``need``: by a quarter at
    least (each widening copies the whole cache once, so growing by what one step needs would
    copy it every few steps), in steps of 16, at most ``most`` unless ``need`` is more (a
    single row wider than a memory budget: no cap helps)."""
    grown = -(-max(need, columns + max(16, columns // 4)) // 16) * 16
    if most is None or most < need:
        return grown
    return min(grown, most)


def load_model(
    name_or_path: str,
    *,
    task: str = "lm",
    device: str | torch.device | None = None,
    dtype: str = "float32",
    revision: str | None = None,
    local_files_only: bool | None = None,
) -> CausalLM | Seq2SeqLM:
    """Load a model and its tokenizer by name: a registered backend's (`BACKENDS`, e.g.
    ``fake`` or ``fake:<seed>``), else a Hugging Face hub name or local directory.

    ``task`` is ``"lm"`` (AutoModelForCausalLM) or ``"seq2seq"`` (AutoModelForSeq2SeqLM).
    ``device`` defaults to ``cuda`` when a GPU is present, else ``cpu``; ``dtype`` is
    ``float32``, ``float16``, ``bfloat16`` or ``auto`` (the checkpoint's).
    ``local_files_only`` (Hugging Face) defaults to true when the environment sets
    ``HF_HUB_OFFLINE=1``.
    """
    scheme, _, rest = name_or_path.partition(":")
    if scheme not in BACKENDS:
        scheme, rest = "hf", name_or_path
    module, _, function = BACKENDS[scheme].partition(":")
    loader = getattr(importlib.import_module(module), function)
    return loader(
        rest,
        task=task,
        device=device,
        dtype=dtype,
        revision=revision,
        local_files_only=local_files_only,
    )


def free_memory(device) -> int:
    """Bytes free on ``device``: ``torch.cuda.mem_get_info`` on a GPU; on a CPU the available
    RAM (``MemAvailable`` of /proc/meminfo, else psutil's, else free pages)."""
    if getattr(device, "type", str(device).split(":")[0]) == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def row_bytes(model, columns: int) -> int:
    """Memory one row of a batch takes with ``columns`` cached tokens: ``columns *
    model.kv_bytes_per_token`` (2 x layers x key-value heads x head dim x dtype bytes) plus
    ``LOGIT_BUFFERS`` float32 rows of the vocabulary."""
    return columns * model.kv_bytes_per_token + LOGIT_BUFFERS * 4 * model.vocab_size


def memory_budget(model, *, free: int | None = None, fraction: float | None = None) -> int:
    """Bytes a batch may take on the model's device: ``fraction`` (default `MEMORY_FRACTION`
    of the device type) of its free memory (``free``, default `free_memory`), measured after the
    model is loaded, so the weights are not in it."""
    kind = getattr(model.device, "type", "cpu")
    free = free_memory(model.device) if free is None else free
    share = fraction if fraction is not None else MEMORY_FRACTION.get(kind, 0.5)
    return int(share * free)


def auto_batch_size(
    model, columns: int, *, budget: int | None = None, max_rows: int | None = None
) -> int:
    """Rows per batch from the model's size and the device's free memory.

    ``rows = min(max_rows, floor(budget / row_bytes(model, columns)))`` where ``budget`` is
    `memory_budget` (a share of the free memory), ``row_bytes`` is ``columns x 2 x layers x
    key-value heads x head dim x dtype bytes + LOGIT_BUFFERS x 4 x vocabulary`` and ``columns``
    the tokens a row is expected to hold (context, prefix, continuation and the word search's
    partial words); ``max_rows`` defaults to `MAX_ROWS` of the device type (256 on a CPU).  The
    rows grow with the free memory and shrink with the model and the prefix length.  Raises
    `MemoryError` when not even one row fits.
    """
    budget = memory_budget(model) if budget is None else budget
    per_row = row_bytes(model, columns)
    rows = budget // per_row
    if rows < 1:
        raise MemoryError(
            f"one row of {columns} tokens needs {per_row / 2**20:.1f} MiB; the batch may take "
            f"{budget / 2**20:.1f} MiB of the device's free memory"
        )
    cap = max_rows or MAX_ROWS.get(getattr(model.device, "type", "cpu"), DEFAULT_BATCH_SIZE)
    return int(min(rows, cap))


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_BYTES = 1 << 30
_heap_tuned = False


def keep_buffers_on_heap() -> bool:
    """Let glibc serve allocations up to 1 GiB from its heap and keep freed memory there, once
    per process (a CPU worker).  A step allocates several float32 [rows, vocabulary] tensors
    (51 MB each at 256 rows of GPT-2) that glibc would otherwise map and unmap every time,
    faulting in and zeroing fresh pages: measured on the 2-core CPU (2026-11-25, 256 items at
    l = 10), page faults fell from 1.35 M to 0.17 M and system time from 4.5 to 0.6 s of about
    39 s.  Freed memory then stays with the process until `release_heap` (the sampler's end of
    a run).  No effect (False) off glibc.  ``mallopt`` takes a C int, hence 1 GiB and not
    more."""
    global _heap_tuned
    if _heap_tuned:
        return True
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols: glibc's mallopt on Linux
        ok = libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_BYTES) and libc.mallopt(
            _M_TRIM_THRESHOLD, _HEAP_BYTES
        )
    except (OSError, AttributeError, TypeError):
        return False
    _heap_tuned = bool(ok)
    return _heap_tuned


def host_copy(tensor):
    """``tensor`` in host memory (itself on the CPU).  What a run keeps per item until the run
    ends (the synthetic pass's next-token roots: a vocabulary-sized row per item, 0.5 GB for
    a four-shard claim at a 128k vocabulary) lives there, outside the device memory that
    `auto_batch_size` measured for the slots; its user moves each chunk back."""
    return tensor if tensor.device.type == "cpu" else tensor.to("cpu")


def upload(*parts, device, pack: bool | None = None) -> list:
    """``parts`` (sequences of ints, as int64, or numpy arrays, as their own dtype) as tensors
    on ``device``, in one host-to-device copy where the device is not the CPU.

    A ``torch.tensor(values, device=cuda)`` copies from pageable memory, which blocks the host
    until the GPU's queue has drained: with ~10 such copies a step, the host never ran ahead of
    the GPU (H200, 2026-11-28: 752 synchronisations in 74 sampler steps).  Here a step's host
    data is packed into one pinned buffer (each part at an 8-byte boundary, so that it can be
    viewed as its own dtype) and copied with ``non_blocking=True``: the host goes on at once.
    The buffer may be dropped right away: PyTorch's caching host allocator records an event on
    the copy's stream and hands the pinned block out again only once the copy is done
    (``CachingHostAllocator``, ``record_event`` in aten/src/ATen/native/cuda/Copy.cu).  On the
    CPU each part becomes its own tensor, as ``torch.tensor`` makes it (nothing pinned or
    packed: no copy to save); ``pack=True`` packs there too (the tests' check of the packing).
    Another device gets a packed, blocking copy (pinning is CUDA's); ``pack=False`` there
    copies each part on its own.
    """
    import numpy as np
    import torch

    if not parts:
        return []
    device = torch.device(device)
    if pack is None:
        pack = device.type != "cpu"
    if not pack:
        return [
            (
                torch.from_numpy(p)
                if isinstance(p, np.ndarray)
                else torch.tensor(p, dtype=torch.long)
            ).to(device)
            for p in parts
        ]
    arrays = [p.reshape(-1) if isinstance(p, np.ndarray) else p for p in parts]
    dtypes = [a.dtype if isinstance(a, np.ndarray) else np.dtype(np.int64) for a in arrays]
    sizes = [len(a) * d.itemsize for a, d in zip(arrays, dtypes, strict=True)]
    starts, total = [], 0
    for size in sizes:
        starts.append(total)
        total += -(-size // 8) * 8
    host = torch.empty(max(total, 8), dtype=torch.uint8, pin_memory=device.type == "cuda")
    packed = host.numpy()
    for a, d, at, size in zip(arrays, dtypes, starts, sizes, strict=True):
        packed[at : at + size].view(d)[:] = a
    # Asynchronous only from pinned memory (CUDA's): another accelerator's non-blocking copy
    # from a pageable buffer dropped at once could read it after it is reused.
    copied = host.to(device, non_blocking=device.type == "cuda")
    out = []
    for p, d, at, size in zip(parts, dtypes, starts, sizes, strict=True):
        shape = p.shape if isinstance(p, np.ndarray) else (len(p),)
        out.append(copied[at : at + size].view(_torch_dtypes()[d]).view(shape))
    return out


@functools.cache
def _torch_dtypes() -> dict:
    """The torch dtype of each numpy dtype `upload` takes (built at first use: this module
    does not import torch at import time)."""
    import numpy as np
    import torch

    return {
        np.dtype(np.int64): torch.int64,
        np.dtype(np.int32): torch.int32,
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float64): torch.float64,
        np.dtype(np.bool_): torch.bool,
    }


# Integer parts travel as float32 in `host_read`: exact below this.
HOST_READ_EXACT = 2**24


def host_read(parts):
    """The tensors ``parts`` (of one device) in host memory, read at once: on a GPU one
    device-to-host copy, the one synchronisation of a sampler step (its sampled tokens, the
    roots of the word searches that begin and the expansions of those under way), instead of
    one for each.  Floating parts come back as float32, integer ones as int64 (they travel as
    float32: ids must be below `HOST_READ_EXACT`).  On a CPU the parts are returned as they are.
    """
    import torch

    if not parts or all(p.device.type == "cpu" for p in parts):
        return list(parts)
    flat = torch.cat([p.reshape(-1).to(torch.float32) for p in parts]).to("cpu")
    out, at = [], 0
    for p in parts:
        n = p.numel()
        piece = flat[at : at + n].view(p.shape)
        at += n
        out.append(piece if p.is_floating_point() else piece.to(torch.int64))
    return out


def release_heap(device=None) -> None:
    """Give the free memory of glibc's heap back to the system (``malloc_trim``), so that a
    worker between batches holds what it uses, not its peak; nothing off glibc.  On a GPU
    ``device``, PyTorch's cached blocks go back too (``torch.cuda.empty_cache``): the next
    batch's `memory_budget` reads ``mem_get_info``, which counts them as used."""
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.empty_cache()
    if _heap_tuned:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).malloc_trim(0)
