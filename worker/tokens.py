"""What each token of a vocabulary is to the word search, and words from token ids.

Definitions (docs/design.md §1, "Next words from subword models"):

- Every token of the vocabulary is classified once per tokenizer (`TokenClasses`):
  ``starts`` -- the token begins a new word, i.e. a word boundary lies before it;
  ``blank`` -- the token is whitespace only (a separator, never part of a word);
  ``special`` -- end of text, unknown, padding and other special/added tokens, and ids the
  tokenizer does not know (embedding padding rows); ``ends`` -- end-of-text tokens.
- Boundary rule: a token starts a new word when its text begins with whitespace (the GPT-2
  ``Ġ``/``Ċ`` byte convention, the SentencePiece ``▁`` convention, or a WordPiece token without
  ``##``).  **Punctuation rule** (``punctuation_splits=True``, the default): a token whose text
  begins with a punctuation or symbol character (Unicode categories P* and S*) also starts a
  new word, as wiki-103 tokenisation separates punctuation ("said ," and "do n't" are two
  words each).  With ``punctuation_splits=False`` only whitespace separates words.

The words themselves, and their search: `worker.words`.
"""

from __future__ import annotations

import json
import unicodedata
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """Inverse of the byte-level BPE alphabet: printable latin-1 bytes stand for themselves,
    the other bytes are shifted to code points 256 and up, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return {ch: b for b, ch in mapping.items()}


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """Per-token masks of one tokenizer (boolean tensors of length ``vocab_size``)."""

    convention: str  # "word", "byte_bpe", "metaspace", "wordpiece"
    punctuation_splits: bool
    starts: torch.Tensor
    blank: torch.Tensor
    special: torch.Tensor
    ends: torch.Tensor
    special_names: dict[int, str] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.starts.numel())

    @property
    def word_level(self) -> bool:
        return self.convention == "word"

    def to(self, device: torch.device | str) -> TokenClasses:
        return TokenClasses(
            self.convention,
            self.punctuation_splits,
            self.starts.to(device),
            self.blank.to(device),
            self.special.to(device),
            self.ends.to(device),
            self.special_names,
        )


def detect_convention(tokenizer, tokens: Sequence[str | None]) -> str:
    """Guess the word-boundary convention of a tokenizer from its model type or its tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        try:
            model_type = json.loads(backend.to_str())["model"]["type"]
        except (ValueError, KeyError, TypeError):
            model_type = None
        if model_type == "WordLevel":
            return "word"
        if model_type == "WordPiece":
            return "wordpiece"
    present = [t for t in tokens if t]
    counts = {
        "byte_bpe": sum(t.startswith("Ġ") for t in present),
        "metaspace": sum(t.startswith("▁") for t in present),
        "wordpiece": sum(t.startswith("##") for t in present),
    }
    best = max(counts, key=counts.__getitem__)
    if counts[best] >= max(1, len(present) // 20):
        return best
    if any(t.endswith("</w>") for t in present):
        raise NotImplementedError("end-of-word (</w>) BPE vocabularies are not supported")
    return "word"


def _classify(token: str, convention: str, punctuation_splits: bool) -> tuple[bool, bool]:
    """(starts, blank) for one token string."""
    if convention == "word":
        return True, token.strip() == ""
    if convention == "byte_bpe":
        decoder = byte_decoder()
        raw = bytes(decoder.get(ch, 0x3F) for ch in token)
        text = raw.decode("utf-8", errors="replace")
        if not text:
            return False, False
        first = text[0]
        blank = text.strip() == ""
        if first.isspace():
            return True, blank
        return punctuation_splits and first != "\ufffd" and _is_punct(first), False
    if convention == "metaspace":
        if token.startswith("<0x") and token.endswith(">") and len(token) == 6:
            ch = chr(int(token[3:5], 16))  # SentencePiece byte fallback
            return ch.isspace(), ch.isspace()
        if token.startswith("▁"):
            return True, token.replace("▁", "").strip() == ""
        return bool(token) and punctuation_splits and _is_punct(token[0]), False
    if convention == "wordpiece":
        if token.startswith("##"):
            return False, False
        return True, token.strip() == ""
    raise ValueError(f"unknown convention {convention!r}")


def token_classes(
    tokenizer,
    vocab_size: int | None = None,
    *,
    punctuation_splits: bool = True,
    convention: str | None = None,
    eos_token_ids: Sequence[int] = (),
) -> TokenClasses:
    """Classify every token of ``tokenizer`` once (see the module docstring for the rules).

    ``vocab_size`` is the model's output size; ids the tokenizer does not know count as special.
    ``eos_token_ids`` adds end-of-text ids (e.g. from a generation config) to the tokenizer's.
    """
    known = len(tokenizer)
    size = vocab_size if vocab_size is not None else known
    ids = list(range(min(known, size)))
    tokens = tokenizer.convert_ids_to_tokens(ids)
    conv = convention or detect_convention(tokenizer, tokens)
    starts = torch.zeros(size, dtype=torch.bool)
    blank = torch.zeros(size, dtype=torch.bool)
    special = torch.zeros(size, dtype=torch.bool)
    ends = torch.zeros(size, dtype=torch.bool)
    for i, tok in enumerate(tokens):
        if tok is None:
            special[i] = True
            continue
        s, b = _classify(tok, conv, punctuation_splits)
        starts[i] = s
        blank[i] = b
    special[len(ids) :] = True
    special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for idx, added in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(added, "special", False):
            special_ids.add(int(idx))
    for idx in special_ids:
        if 0 <= idx < size:
            special[idx] = True
    end_ids = set(eos_token_ids)
    if tokenizer.eos_token_id is not None:
        end_ids.add(int(tokenizer.eos_token_id))
    for idx in end_ids:
        if 0 <= idx < size:
            ends[idx] = True
            special[idx] = True
    names = {i: tokens[i] if i < len(tokens) and tokens[i] else f"<{i}>" for i in special_ids}
    names.update({i: tokens[i] if i < len(tokens) and tokens[i] else f"<{i}>" for i in end_ids})
    return TokenClasses(conv, punctuation_splits, starts, blank, special, ends, names)


# Texts `WordTexts` keeps per tokenizer before it starts afresh: a 1,024-item run at l = 20
# decodes some 20,000 distinct words, ~100 bytes of memo each.
WORD_MEMO = 1 << 16


class WordTexts:
    """The text of a word's tokens for one tokenizer (``texts(ids)``), remembered by token ids.

    A word search asks for the text of the same partial words again and again (whether a word
    in the heap can still spell one of the best k words, `worker.words.WordSearch`): on an H200
    run of 1,024 items at l = 20, 74k decodes took 1.1 s of the 3.9 s the run spent on the
    host, most of it in ``transformers``' Python wrapper (``to_py_obj`` over the ids).  Decoding
    is a pure function of the ids for a given vocabulary, so each text is decoded once, by the
    ``tokenizers`` backend directly where the wrapper would only pass the ids on to it (a
    `TokenizersBackend` whose decoding no subclass changes), else by ``tokenizer.decode``.  The
    memo holds at most `WORD_MEMO` texts (then starts afresh) and is dropped when the
    vocabulary grows (``len(tokenizer)``, checked by `word_texts`)."""

    def __init__(self, tokenizer):
        self.size = len(tokenizer)
        self.memo: dict[tuple[int, ...], str] = {}
        backend = _plain_backend(tokenizer)
        if backend is not None:
            self._decode = lambda ids: backend.decode(ids, skip_special_tokens=False)
        else:
            self._decode = lambda ids: tokenizer.decode(
                ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )

    def __call__(self, ids: Sequence[int]) -> str:
        key = tuple(ids)
        text = self.memo.get(key)
        if text is None:
            if len(self.memo) >= WORD_MEMO:
                self.memo.clear()
            text = self.memo[key] = self._decode(list(key)).strip()
        return text


def _plain_backend(tokenizer):
    """The ``tokenizers.Tokenizer`` that ``tokenizer.decode`` would call with the ids and
    nothing else (no clean-up asked for): a ``transformers`` fast tokenizer whose ``decode``
    and ``_decode`` are `TokenizersBackend`'s own; None for any other tokenizer."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "decode"):
        return None
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    kind = type(tokenizer)
    if not isinstance(tokenizer, TokenizersBackend):
        return None
    if kind.decode is not PreTrainedTokenizerBase.decode:
        return None
    if kind._decode is not TokenizersBackend._decode:
        return None
    return backend


_WORD_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def word_texts(tokenizer) -> WordTexts:
    """The `WordTexts` of ``tokenizer`` (one per tokenizer and vocabulary size)."""
    try:
        texts = _WORD_TEXTS.get(tokenizer)
    except TypeError:  # a tokenizer that cannot be weakly referenced: a memo of its own
        return WordTexts(tokenizer)
    if texts is None or texts.size != len(tokenizer):
        texts = _WORD_TEXTS[tokenizer] = WordTexts(tokenizer)
    return texts


def decode_word(tokenizer, ids: Sequence[int]) -> str:
    """The text of one word's tokens, without surrounding whitespace (`WordTexts`)."""
    return word_texts(tokenizer)(ids)


def segment_words(
    ids: Sequence[int], classes: TokenClasses, *, in_word: bool = False
) -> list[list[int]]:
    """Split a token sequence into words (lists of token ids) with the boundary rule.

    ``in_word``: the sequence continues a word already begun (tokens before the first word start
    are then dropped).  Blank tokens separate words and belong to none.
    """
    starts = classes.starts.tolist()
    blank = classes.blank.tolist()
    words: list[list[int]] = []
    current: list[int] | None = None
    open_word = in_word
    for t in ids:
        if blank[t]:
            open_word = False
            current = None
            continue
        if starts[t] or not open_word:
            current = [t]
            words.append(current)
        elif current is not None:
            current.append(t)
        open_word = True
    return words


# Token classes per model, computed once; kept here rather than on the model object, and
# dropped with the model.
_CLASSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def get_token_classes(model, punctuation_splits: bool = True) -> TokenClasses:
    """The model's token classes (its tokenizer's, plus its ``eos_token_ids``), computed once."""
    cache = _CLASSES.setdefault(model, {})
    if punctuation_splits not in cache:
        classes = token_classes(
            model.tokenizer,
            model.vocab_size,
            punctuation_splits=punctuation_splits,
            eos_token_ids=model.eos_token_ids,
        )
        cache[punctuation_splits] = classes.to(model.device)
    return cache[punctuation_splits]
