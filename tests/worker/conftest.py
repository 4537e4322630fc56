"""Tiny models and tokenizers built in code (no downloads): random weights, seeded.

- ``word_lm``: GPT-2 over a word-level vocabulary (``<unk>``, ``<eos>`` special);
- ``bpe_lm``: GPT-2 over a hand-made byte-level BPE (``Ġ`` convention);
- ``sp_lm``: GPT-2 over a SentencePiece-style Unigram/Metaspace tokenizer (``▁`` convention);
- ``marian``: a Marian encoder-decoder over the same Unigram tokenizer.

The GPT-2s use a large initializer range so their next-token distributions are peaked, as a
trained model's are, and multi-token words compete for the top ranks.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    MarianConfig,
    MarianMTModel,
    PreTrainedTokenizerFast,
)

from app.db import build_engine, make_sessionmaker
from worker.hf import HFCausalLM
from worker.hf_seq2seq import HFSeq2SeqLM

# Tiny models run fastest on one thread; several threads spin badly on a shared 2-core machine.
torch.set_num_threads(1)

WORDS = [
    "the", "cat", "dog", "sat", "ran", "on", "a", "mat", ",", ".", "and", "big", "red", "house",
    "saw", "it",
]  # fmt: skip


def word_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def bpe_tokenizer() -> PreTrainedTokenizerFast:
    # Byte-level symbols: "Ġ" is the space byte.  Words: the, cat, dog, at, a, , .
    pieces = [
        "<|endoftext|>", "Ġ", "t", "h", "e", "c", "a", "d", "o", "g", "s", ",", ".", "!",
        "Ġt", "Ġc", "Ġd", "Ġa", "Ġs", "th", "at", "og", "Ġth", "Ġthe", "Ġcat", "Ġdog",
        "Ġat", "Ġ,", "Ġ.",
    ]  # fmt: skip
    merges = [
        ("Ġ", "t"), ("Ġ", "c"), ("Ġ", "d"), ("Ġ", "a"), ("Ġ", "s"), ("t", "h"), ("a", "t"),
        ("o", "g"), ("Ġt", "h"), ("Ġth", "e"), ("Ġc", "at"), ("Ġd", "og"), ("Ġa", "t"),
        ("Ġ", ","), ("Ġ", "."),
    ]  # fmt: skip
    vocab = {p: i for i, p in enumerate(pieces)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
    )


def sp_tokenizer() -> PreTrainedTokenizerFast:
    pieces = [
        "<unk>", "</s>", "<pad>", "▁", "▁the", "▁cat", "▁dog", "▁a", "t", "h", "e", "c", "a",
        "d", "o", "g", "s", "▁s", "at", "og", ",", ".", "▁,", "▁.", "'", "▁ha", "us",
    ]  # fmt: skip
    vocab = [(p, -float(i % 7) - 1.0) for i, p in enumerate(pieces)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", eos_token="</s>", pad_token="<pad>"
    )


def tiny_gpt2(tokenizer, *, seed: int, init: float = 0.6) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    eos = tokenizer.eos_token_id
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=256,
        n_embd=32,
        n_layer=2,
        n_head=2,
        initializer_range=init,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="session")
def word_lm() -> HFCausalLM:
    tok = word_tokenizer()
    return HFCausalLM(tiny_gpt2(tok, seed=1, init=0.2), tok, name="tiny-word-gpt2")


@pytest.fixture(scope="session")
def bpe_lm() -> HFCausalLM:
    tok = bpe_tokenizer()
    return HFCausalLM(tiny_gpt2(tok, seed=2), tok, name="tiny-bpe-gpt2")


@pytest.fixture(scope="session")
def sp_lm() -> HFCausalLM:
    tok = sp_tokenizer()
    return HFCausalLM(tiny_gpt2(tok, seed=3), tok, name="tiny-sp-gpt2")


@pytest.fixture(scope="session")
def marian() -> HFSeq2SeqLM:
    tok = sp_tokenizer()
    torch.manual_seed(4)
    config = MarianConfig(
        vocab_size=len(tok),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
        forced_eos_token_id=None,
        init_std=0.3,
    )
    model = MarianMTModel(config).eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.decoder_start_token_id = tok.pad_token_id
    return HFSeq2SeqLM(model, tok, name="tiny-marian")


def corpus_lines(n: int = 80) -> list[str]:
    """Deterministic lines of 5 to 16 words over WORDS; the first three words of every line are
    distinct (the base-|WORDS| digits of its number), so short data prefixes never repeat."""
    rng = random.Random(0)
    base = len(WORDS)
    lines = []
    for i in range(n):
        head = [WORDS[(i // base**d) % base] for d in range(3)]
        tail = [rng.choice(WORDS) for _ in range(2 + i % 12)]
        lines.append(" ".join(head + tail))
    return lines


@pytest.fixture()
def text_dataset(tmp_path: Path):
    from app.precompute.datasets import load_dataset

    path = tmp_path / "wiki.txt"
    lines = [" = Title = ", ""]
    for i, line in enumerate(corpus_lines()):
        lines.append(line)
        if i % 10 == 9:
            lines += ["", " = = Section = = ", ""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_dataset(path)


@pytest.fixture()
def pair_dataset(tmp_path: Path):
    from app.precompute.datasets import load_dataset

    path = tmp_path / "pairs.tsv"
    rows = [f"{line}\t{corpus_lines()[(i + 3) % 80]}" for i, line in enumerate(corpus_lines(40))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return load_dataset(path)


# The runner tests' shared set-up: a migrated database with its engine and sessions, a tiny
# word-level GPT-2 on disk, and a dataset file.
@pytest.fixture
def db(migrated_copy):
    engine = build_engine(migrated_copy.settings())
    yield migrated_copy, engine, make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """A tiny word-level GPT-2 saved like any Hugging Face model, loaded by path (built once
    a run: the tests only read it)."""
    path = tmp_path_factory.mktemp("model")
    tok = word_tokenizer()
    tiny_gpt2(tok, seed=1, init=0.2).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture
def dataset_file(tmp_path) -> Path:
    path = tmp_path / "lines.txt"
    path.write_text("\n".join(corpus_lines(400)) + "\n", encoding="utf-8")
    return path
