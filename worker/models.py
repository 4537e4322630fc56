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
    """Rows per batch when the study does not say: large on a GPU, modest on a CPU."""
    return 256 if torch.device(device).type == "cuda" else 64


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


def _make_cache(tensors: list[tuple[torch.Tensor, torch.Tensor]]):
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=tensors)


@dataclass
class CausalState:
    """KV cache of a batch, its attention mask [B, T] and each row's real length [B]."""

    cache: Any
    mask: torch.Tensor
    lengths: torch.Tensor


class HFCausalLM:
    """`CausalLM` over a ``transformers`` causal LM and its tokenizer.

    Contexts are left-padded; position ids are passed explicitly (the real position of every
    token), so padding and masked placeholders never shift positions.  Only the logits of the
    last position are computed (``logits_to_keep=1``) where the model supports it.
    """

    task = "lm"

    def __init__(self, model, tokenizer, *, name: str | None = None, max_rows: int = 512):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
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

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _forward(self, ids, mask, positions, cache) -> torch.Tensor:
        kwargs = {"logits_to_keep": 1} if self._keep else {}
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
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
        return logprobs

    @torch.inference_mode()
    def extend(
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
        tensors = [
            (k.index_select(0, index)[:, :, first:], v.index_select(0, index)[:, :, first:])
            for k, v in _cache_tensors(state.cache)
        ]
        lengths = state.lengths.index_select(0, index)
        return CausalState(_make_cache(tensors), mask[:, first:], lengths)

    def concat(self, states: Sequence[CausalState]) -> CausalState:
        width = max(s.mask.shape[1] for s in states)

        def left_pad(t: torch.Tensor, dim: int) -> torch.Tensor:
            missing = width - t.shape[dim]
            if not missing:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        per_state = [_cache_tensors(s.cache) for s in states]
        tensors = [
            (
                torch.cat([left_pad(layers[i][0], 2) for layers in per_state]),
                torch.cat([left_pad(layers[i][1], 2) for layers in per_state]),
            )
            for i in range(len(per_state[0]))
        ]
        mask = torch.cat([left_pad(s.mask, 1) for s in states])
        lengths = torch.cat([s.lengths for s in states])
        return CausalState(_make_cache(tensors), mask, lengths)


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
