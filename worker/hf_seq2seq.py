"""The Hugging Face backend of `worker.models.Seq2SeqLM` (translation): `HFSeq2SeqLM`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from worker.hf_common import fuse_gelu, generation_eos, pad_id_of


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
    The wrapper takes the model over: its written-out GELUs become one fused kernel
    (`fuse_gelu`).
    """

    task = "seq2seq"

    def __init__(self, model, tokenizer, *, name: str | None = None, max_rows: int = 512):
        self.model = model.eval()
        fuse_gelu(model)
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        start = model.config.decoder_start_token_id
        if start is None:
            start = getattr(model.generation_config, "decoder_start_token_id", None)
        if start is None:
            start = pad_id_of(tokenizer)
        self.decoder_start_id = int(start)
        self.eos_token_ids = generation_eos(model)
        self.pad_id = pad_id_of(tokenizer)
        self.max_rows = max_rows

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one target token takes in the decoder's attention (keys and values of its
        self- and cross-attention, every decoder layer, the model's dtype): what a batch's
        memory grows with (`worker.models.auto_batch_size`)."""
        cfg = self.model.config
        layers = getattr(cfg, "decoder_layers", None) or cfg.num_hidden_layers
        hidden = getattr(cfg, "d_model", None) or cfg.hidden_size
        dtype = next(self.model.parameters()).dtype
        return 4 * layers * hidden * dtype.itemsize

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

    @torch.inference_mode()
    def translate_after(
        self,
        sources: Sequence[Sequence[int]],
        prefixes: Sequence[Sequence[int]],
        *,
        num_beams: int,
        max_new_tokens: int,
    ) -> list[list[int]]:
        """Beam-search the rest of each translation after its forced target prefix (the first
        paper's forced-prefix samples; the source intact): each whole target, the
        prefix's ids and then the ones that follow it, without special tokens. Rows are
        decoded in groups of one prefix length (the decoder's inputs are not padded)."""
        special = set(self.tokenizer.all_special_ids) | {self.decoder_start_id, self.pad_id}
        out: list[list[int]] = [[] for _ in sources]
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(prefixes):
            groups.setdefault(len(p), []).append(i)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        for width, rows in groups.items():
            room = max_new_tokens if not limit else min(max_new_tokens, limit - 1 - width)
            if room < 1:
                raise ValueError(f"a forced prefix of {width} tokens fills the decoder's positions")
            ids, mask = self._pad([sources[i] for i in rows])
            forced = torch.tensor(
                [[self.decoder_start_id, *prefixes[i]] for i in rows], device=self.device
            )
            made = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                decoder_input_ids=forced,
                num_beams=num_beams,
                num_return_sequences=1,
                do_sample=False,
                max_new_tokens=room,
            )
            for i, row in zip(rows, made.tolist(), strict=True):
                out[i] = [*prefixes[i], *(t for t in row[1 + width :] if t not in special)]
        return out
