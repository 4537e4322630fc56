"""The Hugging Face backends of `worker.models`: `HFCausalLM`, `HFSeq2SeqLM` and `load`."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from worker.hf_cache import (
    CausalState,
    WordTree,
    cache_tensors,
    gather_cache,
    make_cache,
)

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _pad_id(tokenizer) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if tid is not None:
            return int(tid)
    return 0


def _generation_eos(model) -> tuple[int, ...]:
    """End-of-text ids of a model's generation config (an id, a list, or none)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        return (eos,)
    return tuple(int(t) for t in eos or ())


def _cache_keyword(module) -> str:
    """The keyword that takes the KV cache: ``cache`` from transformers 5.x releases that
    renamed it (``past_key_values`` is deprecated there and removed in 5.40), the old name
    before.  Passing ``cache`` to an older model would land in ``**kwargs`` and be ignored."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


# Model types whose logits are a plain linear map of the base model's last hidden state, so that
# the head can be applied to the few positions that are read.
_PLAIN_HEAD = ("gpt2", "llama", "mistral", "qwen2")


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
        self.eos_token_ids = _generation_eos(model)
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
        cache = make_cache([])
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
                state.cache = gather_cache([(state.cache, rows, first)])
                state.mask = state.mask[:, first:]
        return logprobs

    def width(self, state: CausalState) -> int:
        return state.mask.shape[1]

    @torch.inference_mode()
    def reset_rows(self, state: CausalState, rows: Sequence[int]) -> None:
        """See `RowReset` (continuous batching)."""
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
        so far are kept in a `WordTree` on the state (a memo: the state's own cache, mask and
        lengths are not changed), so each call runs one token per new continuation; without it,
        every continuation is re-run in full on a copy of its context's cache."""
        if not self.cached_extend:
            return self._extend_uncached(state, rows, continuations)
        tree = state.tree
        if tree is None or tree.source_width != state.mask.shape[1]:
            tree = state.tree = WordTree(self, state, sorted(set(rows)))
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
        self, tree: WordTree, rows: Sequence[int], continuations: Sequence[Sequence[int]]
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
            cache = make_cache(
                [
                    (k.index_select(0, index), v.index_select(0, index))
                    for k, v in cache_tensors(state.cache)
                ]
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
        cache = gather_cache([(state.cache, list(rows), first)])
        lengths = state.lengths.index_select(0, index)
        return CausalState(cache, mask[:, first:], lengths)

    def concat(self, states: Sequence[CausalState]) -> CausalState:
        width = max(s.mask.shape[1] for s in states)

        def left_pad(t: torch.Tensor) -> torch.Tensor:
            missing = width - t.shape[1]
            return t if not missing else torch.cat([t.new_zeros((t.shape[0], missing)), t], 1)

        cache = gather_cache([(s.cache, list(range(s.mask.shape[0])), 0) for s in states])
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
        self.eos_token_ids = _generation_eos(model)
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


def load(
    name_or_path: str, *, task, device, dtype, revision, local_files_only
) -> HFCausalLM | HFSeq2SeqLM:
    """The `worker.models.BACKENDS` loader of a hub name or a local directory (the options are
    `worker.models.load_model`'s)."""
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
