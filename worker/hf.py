"""The Hugging Face backends of `worker.models`: `HFCausalLM` here, `HFSeq2SeqLM` in
`worker.hf_seq2seq`, and `load`, which picks one by the task."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence

import torch

from worker.hf_cache import (
    CausalState,
    SlotState,
    WordTree,
    cache_tensors,
    gather_cache,
    make_cache,
)
from worker.hf_common import (
    DTYPES,
    cache_keyword,
    default_device,
    fuse_gelu,
    generation_eos,
    pad_id_of,
)
from worker.hf_seq2seq import HFSeq2SeqLM
from worker.hf_steps import SLOT_SPLIT, StepGraphs, row_groups, slot_attention
from worker.models import APPEND, CONTEXT, grown_columns, keep_buffers_on_heap, upload

# Model types whose logits are a plain linear map of the base model's last hidden state, so that
# the head can be applied to the few positions that are read.
_PLAIN_HEAD = ("gpt2", "llama", "mistral", "qwen2")


class HFCausalLM:
    """`CausalLM` over a ``transformers`` causal LM and its tokenizer.

    Contexts are left-padded; position ids are passed explicitly (the real position of every
    token), so padding and masked placeholders never shift positions.  Only the logits of the
    last position are computed (``logits_to_keep=1``) where the model supports it.  The
    wrapper takes the model over: its written-out GELUs become one fused kernel (`fuse_gelu`).
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
        static_steps: bool | None = None,
        graphs: bool | None = None,
    ):
        self.model = model.eval()
        fuse_gelu(model)
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        if self.device.type == "cpu":
            keep_buffers_on_heap()
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.cached_extend = cached_extend
        self._plain_head = getattr(model.config, "model_type", None) in _PLAIN_HEAD
        # A copy of the output layer's weight padded to a multiple of 64 rows: MKL's GEMM is
        # 20-30% faster on 50,304 rows than on GPT-2's 50,257 (0.24 against 0.33 s for 256 rows
        # on the 2-core CPU, 2026-11-25), and the LM head is a third of a step.
        # Slot forwards may split their attention in two row groups (`slot_attention`): with
        # SDPA attention on the architectures whose attention goes through transformers'
        # attention functions.
        self._split_attention = (
            self._plain_head and getattr(model.config, "_attn_implementation", None) == "sdpa"
        )
        self._head_weight = None
        head = model.get_output_embeddings()
        pad = -head.weight.shape[0] % 64
        # CPU only: a GPU's GEMM gains nothing measured here, and the copy would double the
        # head's device memory (half a GB for a 7B model in half precision).
        if (
            self.device.type == "cpu"
            and self._plain_head
            and pad
            and getattr(head, "bias", None) is None
        ):
            with torch.no_grad():
                w = head.weight.detach()
                self._head_weight = torch.cat([w, w.new_zeros((pad, w.shape[1]))])
        start = tokenizer.bos_token_id
        if start is None:
            start = tokenizer.eos_token_id
        if start is None:
            raise ValueError("the tokenizer has neither a BOS nor an end-of-text token")
        self.start_token_id = int(start)
        self.max_positions = getattr(model.config, "n_positions", None) or getattr(
            model.config, "max_position_embeddings", None
        )
        self.eos_token_ids = generation_eos(model)
        self.pad_id = pad_id_of(tokenizer)
        self.max_rows = max_rows
        params = inspect.signature(model.forward).parameters
        self._keep = "logits_to_keep" in params
        self._cache_kw = cache_keyword(model)
        self._base_cache_kw = cache_keyword(model.base_model)
        # Slot steps of fixed shapes (`feed`), captured and replayed as CUDA graphs: the
        # default on a GPU, where a step's kernel launches would otherwise be the host's work;
        # a CPU runs each step eagerly at its own shape (fewer rows and columns to compute).
        cuda = self.device.type == "cuda"
        self.static_steps = cuda if static_steps is None else static_steps
        self._graphs = StepGraphs(self, capture=cuda if graphs is None else graphs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The logits of some last hidden states (models with a plain linear head)."""
        if self._head_weight is None:
            return self.model.get_output_embeddings()(hidden)
        return torch.nn.functional.linear(hidden, self._head_weight)[..., : self.vocab_size]

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

    def step_logprobs(self, state: SlotState, ids, positions, mask) -> torch.Tensor:
        """A slot forward's log-probabilities [rows x queries, V] after every position
        (float32): the fixed-shape step (`worker.hf_steps.StepGraphs`) computes them all."""
        kwargs = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
        }
        if self._plain_head:
            kwargs[self._base_cache_kw] = state.cache
            hidden = self.model.base_model(**kwargs).last_hidden_state
            logits = self._head(hidden.reshape(ids.numel(), -1))
        else:
            kwargs[self._cache_kw] = state.cache
            logits = self.model(**kwargs).logits.reshape(ids.numel(), -1)
        return torch.log_softmax(logits.float(), dim=-1)

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
        ids, mask = upload(ids.numpy(), mask.numpy(), device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = make_cache([])
        logprobs = self._forward(ids, mask, positions, cache)
        return logprobs, CausalState(cache, mask, mask.sum(-1))

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token takes in the KV cache: 2 (keys and values) x layers x key-value
        heads x head dim x the bytes of the model's dtype."""
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = next(self.model.parameters()).dtype
        return 2 * cfg.num_hidden_layers * heads * head_dim * dtype.itemsize

    def open_slots(self, rows: int, columns: int) -> SlotState:
        """See `worker.models.CausalLM.open_slots`."""
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        return SlotState.open(rows, max(1, columns), cfg.num_hidden_layers)

    def clear_slots(self, state: SlotState, slots: Sequence[int]) -> None:
        for s in slots:
            state.lengths[s] = state.fills[s] = 0
            state.nodes[s] = {}

    def swap_slots(self, state: SlotState, a: int, b: int) -> None:
        state.swap(a, b)

    @torch.inference_mode()
    def resize_slots(self, state: SlotState, rows: int, columns: int | None = None) -> None:
        if columns is not None and columns < max(state.fills[:rows], default=0):
            raise ValueError(f"a slot holds {max(state.fills[:rows])} tokens, not {columns}")
        state.resize(rows, state.capacity if columns is None else columns)

    def slot_columns(self, state: SlotState) -> int:
        return state.capacity

    def slot_bytes(self, state: SlotState) -> int:
        return state.nbytes()

    @torch.inference_mode()
    def feed(
        self,
        state: SlotState,
        slots: Sequence[int],
        tokens: Sequence[int],
        parents: Sequence[int],
        want: Sequence[bool],
    ) -> tuple[torch.Tensor, list[int]]:
        """See `worker.models.CausalLM.feed`.  One forward over slots 0..max(slots) with Q
        query positions per slot (the most tokens any slot gets; the others are padded): each
        token is written at its own column of its slot and attends, through a 4-D mask, to its
        slot's context (an appended token also to itself and the tokens appended before it), to
        its partial word's earlier tokens and to itself.  A refused feed (ValueError: a slot
        past the state's, an unknown parent, a position past the model's) changes no slot."""
        n = max(slots) + 1
        if n > state.rows:
            raise ValueError(f"slot {n - 1} of {state.rows}")
        counts = [0] * n
        for s in slots:
            counts[s] += 1
        q = max(counts)
        if self.static_steps:
            # Every slot, the queries a slot takes rounded up to a power of two, every column:
            # the shapes of a step change only when the slots are resized (`StepGraphs`).
            n, q = state.rows, 1 << (q - 1).bit_length()
        need = max(state.fills[:n]) + q
        size = n * q
        ids, pos, cols, ctx = [self.pad_id] * size, [0] * size, [0] * size, [0] * size
        see_at, see_col = [], []  # (flat token, column) pairs visible beyond the context
        handles, wanted = [], []
        used = [0] * n
        # The slots' counters and partial words as this forward leaves them, written to the
        # state only once every token is known to be valid: a refused feed changes nothing.
        lengths, fills = state.lengths[:n], state.fills[:n]
        added: dict[tuple[int, int], tuple[int, int]] = {}
        for s, t, p, w in zip(slots, tokens, parents, want, strict=True):
            f = s * q + used[s]
            used[s] += 1
            ids[f] = int(t)
            if p == APPEND:
                if fills[s] != lengths[s]:
                    raise ValueError(f"slot {s} holds partial words: it takes no context token")
                col = lengths[s]
                pos[f] = col
                ctx[f] = col + 1
                lengths[s] += 1
            else:
                col = fills[s]
                nodes = state.nodes[s]
                depth = 1
                if p != CONTEXT:
                    parent = added.get((s, p), nodes.get(p))
                    if parent is None:
                        raise ValueError(f"slot {s} holds no partial word {p}")
                    depth = parent[1] + 1
                    a = p
                    while a != CONTEXT:
                        see_at.append(f)
                        see_col.append(a)
                        a = added.get((s, a), nodes.get(a))[0]
                added[s, col] = (p, depth)
                pos[f] = lengths[s] + depth - 1
                ctx[f] = lengths[s]
                see_at.append(f)
                see_col.append(col)
            fills[s] += 1
            cols[f] = col
            handles.append(col)
            if w:
                wanted.append(f)
        if self.max_positions and max(pos) >= self.max_positions:
            # The sampler leaves room (prefix caps, the word search's depth): a position past
            # the model's context would read an embedding it does not have.
            raise ValueError(f"position {max(pos)} is past the model's {self.max_positions}")
        if need > state.capacity:
            state.resize(state.rows, grown_columns(state.capacity, need))
        state.lengths[:n], state.fills[:n] = lengths, fills
        for (s, col), node in added.items():
            state.nodes[s][col] = node
        for i in range(n):
            for j in range(used[i], q):
                # Padding writes into free columns after the slot's own and sees itself only.
                f = i * q + j
                cols[f] = fills[i] + j - used[i]
                see_at.append(f)
                see_col.append(cols[f])
        # The step's slot moves (in one copy a buffer) and its host data, which travels with
        # the moves' indices in one host-to-device copy (`worker.models.upload`).
        dev = self.device
        ctx, pos, cols, ids, see_at, see_col, index = state.settle(
            ctx, pos, cols, ids, see_at, see_col, wanted, device=dev
        )
        width = state.capacity if self.static_steps else need
        visible = torch.arange(width, device=dev)[None, :] < ctx[:, None]
        if see_at.numel():
            visible[see_at, see_col] = True
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros((size, width), dtype=dtype, device=dev)
        mask = mask.masked_fill_(~visible, torch.finfo(dtype).min).view(n, 1, q, width)
        positions = pos.view(n, q)
        plan = state.cache.plan
        plan.rows = torch.arange(n, device=dev).repeat_interleave(q)
        plan.cols = cols
        plan.width, plan.query = width, q
        kwargs = {
            "input_ids": ids.view(n, q),
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
        }
        if self.static_steps:
            inputs = (kwargs["input_ids"], positions, mask, plan.rows, plan.cols)
            return self._graphs.run(state, inputs).index_select(0, index), handles
        split = None
        if self._split_attention:
            split = row_groups([fills[i] + q - used[i] for i in range(n)])
            split = split if len(split) > 1 else None
        config = self.model.config
        before = config._attn_implementation
        token = SLOT_SPLIT.set(split)
        try:
            if split is not None:
                config._attn_implementation = slot_attention()
            if self._plain_head:
                kwargs[self._base_cache_kw] = state.cache
                hidden = self.model.base_model(**kwargs).last_hidden_state
                logits = self._head(hidden.reshape(size, -1)[index])
            else:
                kwargs[self._cache_kw] = state.cache
                logits = self.model(**kwargs).logits.reshape(size, -1)[index]
        finally:
            SLOT_SPLIT.reset(token)
            if config._attn_implementation != before:
                config._attn_implementation = before
        return torch.log_softmax(logits.float(), dim=-1), handles

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
            tree = state.tree = WordTree(state, sorted(set(rows)))
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
        if self.max_positions and int(positions.max()) >= self.max_positions:
            # The searches leave such words out (`worker.words.top_words`' ``depths``).
            raise ValueError(
                f"position {int(positions.max())} is past the model's {self.max_positions}"
            )
        ctx = tree.ctx_mask.shape[1]
        dev = self.device
        trow = [t for t, _ in targets]
        tcol = [q for _, q in targets]
        mr, mq, mc, ids, positions, trow, tcol = upload(
            mr, mq, mc, ids.numpy(), positions.numpy(), trow, tcol, device=dev
        )
        allowed = torch.zeros((n_rows, depth, width + depth), dtype=torch.bool, device=dev)
        allowed[:, :, :ctx] = tree.ctx_mask[:, None, :]
        allowed[mr, mq, mc] = True
        dtype = next(self.model.parameters()).dtype
        # An additive mask: a 4D mask is passed to the attention as it is.
        mask = torch.zeros(allowed.shape, dtype=dtype, device=dev).masked_fill_(
            ~allowed, torch.finfo(dtype).min
        )[:, None]
        kwargs = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
            "use_cache": True,
        }
        if self._plain_head:
            kwargs[self._base_cache_kw] = tree.cache
            hidden = self.model.base_model(**kwargs).last_hidden_state[trow, tcol]
            logits = self._head(hidden)
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
            index, ids, cmask = upload(chunk_rows, ids.numpy(), cmask.numpy(), device=self.device)
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
        (index,) = upload(list(rows), device=self.device)
        mask = state.mask.index_select(0, index)
        # Drop the columns no selected row attends to (left padding, placeholders of others).
        used = mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else mask.shape[1] - 1
        cache = gather_cache([(state.cache, list(rows), first)])
        lengths = state.lengths.index_select(0, index)
        return CausalState(cache, mask[:, first:], lengths)


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
