"""A fake causal LM, registered like a real backend: ``load_model("fake")`` or ``"fake:<seed>"``.

The next-token distribution is a dictionary (previous token -> {next token: probability}) drawn
from a seed over a small byte-BPE-style vocabulary (``Ġ`` starts a word; suffix pieces such as
``s`` continue one, so the word search meets multi-token words).  It needs no weights and no
``transformers``, runs on the CPU in microseconds, and gives the same items for the same seed
whatever the batch, so the prefix, word-search, shard and HIT pipeline can be tested end to end
on it.  It implements `worker.models.CausalLM`.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from worker.models import APPEND

EOS = "<|endoftext|>"
UNK = "<unk>"
WORDS = (
    "the", "cat", "dog", "sat", "ran", "on", "a", "mat", ",", ".", "and", "big", "red", "house",
    "saw", "it",
)  # fmt: skip
SUFFIXES = ("s", "ed", "er", "ing")

Table = dict[int, dict[int, float]]
"""Previous token id -> {next token id: probability} (the probabilities of a row sum to 1)."""


class FakeTokenizer:
    """The part of a Hugging Face tokenizer the worker reads, over a fixed list of pieces."""

    def __init__(self, pieces: Sequence[str]):
        self.pieces = list(pieces)
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.eos_token_id = self.bos_token_id = self.ids[EOS]
        self.unk_token_id = self.ids[UNK]
        self.pad_token_id = None
        self.all_special_ids = [self.eos_token_id, self.unk_token_id]

    def __len__(self) -> int:
        return len(self.pieces)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self.pieces[i] for i in ids]

    def encode_word(self, word: str) -> list[int]:
        """One word's ids: the whole word, else a stem and a suffix piece, else ``<unk>``."""
        whole = self.ids.get("Ġ" + word)
        if whole is not None:
            return [whole]
        for suffix in SUFFIXES:
            stem = self.ids.get("Ġ" + word.removesuffix(suffix))
            if word.endswith(suffix) and stem is not None:
                return [stem, self.ids[suffix]]
        return [self.unk_token_id]

    def decode(self, ids: Sequence[int], **_options) -> str:
        return "".join(self.pieces[i] for i in ids).replace("Ġ", " ")


def random_table(
    n_tokens: int,
    words: Sequence[int],
    stems: Sequence[int],
    suffixes: Sequence[int],
    eos: int,
    seed: int,
) -> Table:
    """A seeded table: after any token, a few words (and after a stem, sometimes a suffix piece)
    with random weights, and the end of text with a small probability except at the start."""
    rng = random.Random(seed)
    table: Table = {}
    for prev in range(n_tokens):
        nxt = rng.sample(list(words), 6)
        if prev in stems and rng.random() < 0.5:
            nxt.append(rng.choice(list(suffixes)))
        weights = [rng.random() ** 2 + 0.01 for _ in nxt]
        if prev != eos:
            nxt.append(eos)
            weights.append(0.02 * sum(weights))
        total = sum(weights)
        table[prev] = {t: w / total for t, w in zip(nxt, weights, strict=True)}
    return table


@dataclass
class FakeState:
    """Each row's tokens so far (its context and what was appended)."""

    rows: list[list[int]]


@dataclass
class FakeSlots:
    """Each slot's context and how many tokens it was fed (a partial word's handle)."""

    contexts: list[list[int]]
    fed: list[int]
    columns: int


class FakeCausalLM:
    """A `CausalLM` whose next token depends on the previous one only, through ``table``."""

    task = "lm"
    max_positions = 1024
    eos_token_ids: tuple[int, ...] = ()

    def __init__(self, seed: int = 0, *, table: Table | None = None, name: str | None = None):
        pieces = [EOS, UNK, *("Ġ" + w for w in WORDS), *SUFFIXES]
        self.tokenizer = FakeTokenizer(pieces)
        self.name = name or f"fake:{seed}"
        self.device = torch.device("cpu")
        self.vocab_size = len(pieces)
        self.start_token_id = self.tokenizer.eos_token_id
        ids = self.tokenizer.ids
        words = [ids["Ġ" + w] for w in WORDS]
        stems = [ids["Ġ" + w] for w in WORDS if w.isalpha()]
        suffixes = [ids[s] for s in SUFFIXES]
        self.table = table or random_table(
            len(pieces), words, stems, suffixes, self.start_token_id, seed
        )
        probs = torch.zeros((self.vocab_size, self.vocab_size), dtype=torch.float64)
        for prev, nxt in self.table.items():
            for t, p in nxt.items():
                probs[prev, t] = p
        self._logprobs = probs.log().float()

    def encode(self, text: str) -> list[int]:
        return [i for word in text.split() for i in self.tokenizer.encode_word(word)]

    def _after(self, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        last = [s[-1] if s else self.start_token_id for s in seqs]
        return self._logprobs[torch.tensor(last, dtype=torch.long)]

    def start(self, contexts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, FakeState]:
        if any(not c for c in contexts):
            raise ValueError("empty context")
        state = FakeState([list(c) for c in contexts])
        return self._after(state.rows), state

    def extend(
        self, state: FakeState, rows: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        if any(not c for c in continuations):
            raise ValueError("empty continuation")
        seqs = [state.rows[r] + list(c) for r, c in zip(rows, continuations, strict=True)]
        return self._after(seqs)

    def select(self, state: FakeState, rows: Sequence[int]) -> FakeState:
        return FakeState([list(state.rows[r]) for r in rows])

    # Slots (`worker.models.CausalLM.open_slots`): the next token depends on the fed one only.
    kv_bytes_per_token = 64  # nominal: the fake keeps no cache

    def open_slots(self, rows: int, columns: int) -> FakeSlots:
        """See `worker.models.CausalLM.open_slots` (and the methods below)."""
        return FakeSlots([[] for _ in range(rows)], [0] * rows, columns)

    def feed(self, state, slots, tokens, parents, want) -> tuple[torch.Tensor, list[int]]:
        q = max(Counter(slots).values())
        state.columns = max(state.columns, max(state.fed[: max(slots) + 1]) + q)
        handles = []
        for s, t, p in zip(slots, tokens, parents, strict=True):
            if p == APPEND:
                state.contexts[s].append(int(t))
            handles.append(state.fed[s])
            state.fed[s] += 1
        picked = [int(t) for t, w in zip(tokens, want, strict=True) if w]
        return self._logprobs[torch.tensor(picked, dtype=torch.long)], handles

    def clear_slots(self, state: FakeSlots, slots: Sequence[int]) -> None:
        for s in slots:
            state.contexts[s], state.fed[s] = [], 0

    def swap_slots(self, state: FakeSlots, a: int, b: int) -> None:
        for field in (state.contexts, state.fed):
            field[a], field[b] = field[b], field[a]

    def resize_slots(self, state: FakeSlots, rows: int, columns: int | None = None) -> None:
        del state.contexts[rows:], state.fed[rows:]
        extra = rows - len(state.fed)
        state.contexts += [[] for _ in range(extra)]
        state.fed += [0] * extra
        if columns is not None:
            if columns < max(state.fed, default=0):
                raise ValueError("a slot holds more tokens than that")
            state.columns = columns

    def slot_columns(self, state: FakeSlots) -> int:
        return state.columns

    def slot_bytes(self, state: FakeSlots) -> int:
        """What a cache of these slots would take (the fake keeps none)."""
        return len(state.fed) * state.columns * self.kv_bytes_per_token


def load(rest: str, *, task: str = "lm", **_options) -> FakeCausalLM:
    """The `worker.models.BACKENDS` loader: ``rest`` is the seed (empty: 0); device, dtype and
    revision do not apply."""
    if task != "lm":
        raise ValueError("the fake backend is a causal LM only (task 'lm')")
    try:
        seed = int(rest or 0)
    except ValueError:
        raise ValueError(
            f"fake model names are 'fake' or 'fake:<seed>', not 'fake:{rest}'"
        ) from None
    return FakeCausalLM(seed)
