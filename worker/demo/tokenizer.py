"""The demo tokenizer: lower-cased, wiki-103-style words, a word-level vocabulary (see
`worker.demo`, step 2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

UNK = "<unk>"
EOS = "<eos>"
# One match per word, applied after lower-casing: a word's stem before "n't", "n't", the
# clitics 's 're 've 'll 'd 'm, runs of letters/digits, runs of dashes, any other single
# character.  Idempotent: re-tokenising the space-joined words gives the same words.
WORD_PATTERN = (
    r"[\p{L}\p{N}]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|[\p{L}\p{N}]+|-+|[^\s\p{L}\p{N}]"
)


def _normalizer():
    from tokenizers import Regex, normalizers

    # Gutenberg marks italics with underscores: drop them.
    return normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Replace(Regex("_"), ""), normalizers.Lowercase()]
    )


def _pre_tokenizer():
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated"),
        ]
    )


_WORDS: tuple[Any, Any] | None = None


def tokenize_words(text: str) -> list[str]:
    """The words of ``text`` as the demo tokenizer sees them (normalised and pre-tokenised, before
    the vocabulary lookup): lower-cased, "don't" -> ``do``, ``n't``, punctuation split off."""
    global _WORDS
    if _WORDS is None:
        _WORDS = (_normalizer(), _pre_tokenizer())
    normalizer, pre_tokenizer = _WORDS
    return [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]


def train_tokenizer(lines: Sequence[str], vocab_size: int = 8000):
    """A word-level ``PreTrainedTokenizerFast`` over ``lines``: the ``vocab_size`` most frequent
    words (``<unk>`` and ``<eos>`` included), the normaliser and pre-tokenizer of
    `tokenize_words`, decoding that joins tokens with single spaces."""
    from tokenizers import Tokenizer, decoders, models, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.normalizer = _normalizer()
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with spaces
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, special_tokens=[UNK, EOS], show_progress=False
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        eos_token=EOS,
        clean_up_tokenization_spaces=False,
    )
