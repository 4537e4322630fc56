"""The model interface of the worker, its backends, and `load_model` that picks one by name.

Two protocols, one per task.  Both speak token ids and return next-token **log-probabilities**
as float32 tensors of shape [batch, vocab_size] on the model's device; batching, padding,
attention masks and the KV cache stay inside the implementation, in a state the callers treat
as opaque.  Everything runs under ``torch.inference_mode()``.

- `CausalLM` (language modelling): ``start`` reads a batch of contexts, ``step`` appends one
  token to every row (ancestral sampling), ``extend`` scores continuations of chosen rows
  without changing the state (the word search), ``select``/``concat`` reorganise states so that
  finished rows can leave a sampling batch and join a search batch later, ``width`` says how
  many columns a state's rows are padded to.  One optional capability, `RowReset`
  (``reset_rows``), lets a new prefix take a finished row's place in a running batch.
- `Seq2SeqLM` (translation): ``start`` reads sources and target prefixes, ``extend`` as above,
  ``beam_search`` decodes sources.

`worker.prefixes`, `worker.sampler` and `worker.words` use nothing else.  Backends: `worker.hf`
(any Hugging Face hub name or local directory) and `worker.fake.FakeCausalLM` (the name ``fake``
or ``fake:<seed>``), a seeded toy that needs no weights; `load_model` picks one by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # torch loads with a backend, not with the interface
    import torch

# Rows per batch when the study does not say: 256 on a GPU and on a CPU too, where a one-token
# step of GPT-2 small over 256 rows runs at about 0.9 of the tokens per second of one large
# forward (1.64 against 1.51 ms per token on the 2-core CPU, 2026-11-24), over 128 rows at 0.83.
# Shards hold as many items by default (`app.precompute.service`).
DEFAULT_BATCH_SIZE = 256


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

    def width(self, state: Any) -> int:
        """Columns the rows of ``state`` are padded to (what a search over it pays per row)."""
        ...


@runtime_checkable
class RowReset(Protocol):
    """Optional `CausalLM` capability: continuous batching without a forward per new prefix."""

    def reset_rows(self, state: Any, rows: Sequence[int]) -> None:
        """Empty ``rows`` of ``state`` in place: they attend to nothing so far, and the next
        token ``step`` gives them is their first, at position 0."""
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
