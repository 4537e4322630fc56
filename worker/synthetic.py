"""Synthetic EB-C (the papers' synthetic setting): a second model P_D plays the data distribution.

For every item that is not skipped, `reference_records` compares P_D with the studied model P_M
after the item's context (the very token ids P_M's choices were computed from) and returns the
item's ``items.reference`` record (the contract: the lead's ``reference.md``; the column's
comment in `app.models.items`):

- ``token``: exact divergences over the full next-token distributions p = P_M(.|context) and
  q = P_D(.|context), computed in float64 on the model's device:
  ``d_TV = 1/2 sum_x |p(x) - q(x)|``;
  ``d_JS = 1/2 KL(p || m) + 1/2 KL(q || m)`` with ``m = (p + q) / 2``, in bits (log base 2,
  so 0 <= d_JS <= 1, and 0 log 0 = 0);
  ``d_GD = 1[argmax p != argmax q]``, a tie going to the lowest token id;
  ``vocab``: the number of token ids compared.
- ``word_gd = 1[reference_top_word != the item's top-1 choice]``: the word-level d_GD a person
  is asked about, with ``reference_top_word`` P_D's most probable next word under the same word
  search and settings as the choices (`worker.words.top_words`, the study's top-k, special-token
  policy, expansion budget and word length limit).
- ``choice_probs``: P_D's probability of each of the item's choices (model rank order), under
  `worker.words`' word definition (`worker.word_probs` for a word outside P_D's own top k), and
  ``none_prob = max(0, 1 - sum(choice_probs))``.  ``reference_top_word`` is the most probable
  of P_D's top-k words and the choices, so it is the first choice by ``choice_probs`` whenever
  it is a choice.  Under the ``renormalise`` special-token policy P_D's word probabilities are
  divided by 1 - P_D(special tokens), as P_M's are; ``special_top1``/``special_mass`` record
  P_D's special tokens (under ``skip`` P_M's items are skipped, never P_D's).
- ``method`` says how the two vocabularies were compared and how the words were found;
  ``exact`` is false when a word search ran out of its budget.

Vocabularies (`check_pair`): the same tokenizer (the same id -> token mapping and special ids)
compares ids directly; a different output size (padded embedding rows) compares the
tokenizer's ids, each distribution renormalised over them; two word-level vocabularies over the
same token strings in another order compare after mapping P_D's ids to P_M's by string.  Any
other pair is refused (`IncompatibleReference`) before an item is made: token-level divergences
need one vocabulary.  Two translation models compare P(.|source, target prefix) the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from worker.models import DEFAULT_BATCH_SIZE
from worker.prefixes import PrefixItem, PrefixSpec, get_token_classes
from worker.word_probs import word_level, word_probabilities
from worker.words import search_words


class IncompatibleReference(ValueError):
    """The reference model cannot be compared with the studied model (shown on the shard)."""


@dataclass(frozen=True)
class Pair:
    """How P_D's distributions line up with P_M's.

    ``n``: P_M's ids 0..n-1 are compared; ``gather``: P_D's id of each of them (None: the same
    ids); ``to_reference``: P_D's id of every P_M id a context may hold (None: the same ids).
    """

    model: str
    reference: str
    n: int
    gather: tuple[int, ...] | None
    to_reference: tuple[int, ...] | None
    token_method: str


def _tokens(model) -> list[str | None]:
    tok = model.tokenizer
    return tok.convert_ids_to_tokens(list(range(len(tok))))


def _special_strings(model, tokens: list[str | None]) -> set[str | None]:
    ids = set(model.tokenizer.all_special_ids or [])
    return {tokens[i] for i in ids if 0 <= i < len(tokens)}


def check_pair(model, reference) -> Pair:
    """How to compare ``reference`` (P_D) with ``model`` (P_M); raises `IncompatibleReference`
    with the reason when they cannot be compared (see the module docstring)."""

    def refuse(reason: str) -> IncompatibleReference:
        return IncompatibleReference(
            f"synthetic EB-C cannot compare model {model.name!r} with reference model "
            f"{reference.name!r}: {reason}. Token-level divergences need one vocabulary: use a "
            "reference model with the model's tokenizer, or two word-level models over the same "
            "words."
        )

    if model.task != reference.task:
        raise refuse(f"a {model.task} model and a {reference.task} reference model")
    mine, theirs = _tokens(model), _tokens(reference)
    sizes = (model.vocab_size, reference.vocab_size)
    special = set(model.tokenizer.all_special_ids or [])
    if mine == theirs and special == set(reference.tokenizer.all_special_ids or []):
        if sizes[0] == sizes[1]:
            n = sizes[0]
            how = f"token-level over a shared vocabulary of {n} tokens"
        else:
            n = min(len(mine), *sizes)
            how = (
                f"token-level over the tokenizer's {n} ids (output sizes {sizes[0]} and "
                f"{sizes[1]}), each distribution renormalised over them"
            )
        return Pair(model.name, reference.name, n, None, None, how)
    word_level_pair = (
        get_token_classes(model).word_level and get_token_classes(reference).word_level
    )
    if not word_level_pair:
        raise refuse(f"their tokenizers differ ({_difference(mine, theirs, model, reference)})")
    where = {tok: i for i, tok in enumerate(theirs)}
    if (
        len(where) != len(theirs)
        or len(set(mine)) != len(mine)
        or set(mine) != set(where)
        or _special_strings(model, mine) != _special_strings(reference, theirs)
    ):
        raise refuse(
            "their word-level tokenizers are not over the same words "
            f"({_difference(mine, theirs, model, reference)})"
        )
    n = min(len(mine), *sizes)
    gather = tuple(where[tok] for tok in mine[:n])
    to_reference = tuple(where[tok] for tok in mine)
    how = f"token-level over a shared word-level vocabulary of {n} tokens (ids mapped by string)"
    if max(sizes) > n:
        how += f", each distribution renormalised over them (output sizes {sizes[0]}, {sizes[1]})"
    return Pair(model.name, reference.name, n, gather, to_reference, how)


def _difference(mine: list, theirs: list, model, reference) -> str:
    if set(mine) != set(theirs):
        missing = sorted(str(t) for t in set(mine) - set(theirs))
        extra = sorted(str(t) for t in set(theirs) - set(mine))
        return (
            f"{len(mine)} and {len(theirs)} tokens; {len(missing)} of the model's are not the "
            f"reference's (e.g. {missing[:3]}), {len(extra)} the other way (e.g. {extra[:3]})"
        )
    if mine != theirs:
        i = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b)
        return f"the same tokens in another order: id {i} is {mine[i]!r} and {theirs[i]!r}"
    return (
        f"special ids {sorted(model.tokenizer.all_special_ids or [])} and "
        f"{sorted(reference.tokenizer.all_special_ids or [])}"
    )


def token_divergences(
    p_logprobs: torch.Tensor, q_logprobs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row-wise d_TV, d_JS (bits) and d_GD between two batches of distributions [B, V] given as
    log-probabilities over the same ids (module docstring).  Each row is renormalised over the
    given ids in float64 (``softmax`` of log-probabilities), on the tensors' device."""
    p = torch.softmax(p_logprobs.double(), dim=-1)
    q = torch.softmax(q_logprobs.double(), dim=-1)
    tv = 0.5 * (p - q).abs().sum(dim=-1)
    m = 0.5 * (p + q)
    kl_pm = (torch.xlogy(p, p) - torch.xlogy(p, m)).sum(dim=-1)
    kl_qm = (torch.xlogy(q, q) - torch.xlogy(q, m)).sum(dim=-1)
    js = (0.5 * (kl_pm + kl_qm) / math.log(2)).clamp(0.0, 1.0)
    # torch.argmax returns the first maximal index: ties go to the lowest token id.
    gd = (p.argmax(dim=-1) != q.argmax(dim=-1)).long()
    return tv, js, gd


def _map(ids: Sequence[int], table: tuple[int, ...] | None) -> list[int]:
    return list(ids) if table is None else [table[i] for i in ids]


def _model_roots(model, chunk: list[PrefixItem]) -> torch.Tensor:
    """P_M's log-probs after each item's context: kept by `make_items`, else one forward."""
    if all(item.root is not None for item in chunk):
        return torch.stack([item.root for item in chunk]).to(model.device)  # kept on the host
    if model.task == "seq2seq":
        root, _ = model.start([i.source_ids for i in chunk], [i.context_ids for i in chunk])
    else:
        root, _ = model.start([i.context_ids for i in chunk])
    return root


@torch.inference_mode()
def reference_records(
    model, reference, items: Sequence[PrefixItem], spec: PrefixSpec, pair: Pair | None = None
) -> list[dict | None]:
    """The ``items.reference`` record of each item (None for a skipped one), in batches of
    ``spec.batch_size``; ``pair`` defaults to `check_pair` (which may raise)."""
    pair = pair or check_pair(model, reference)
    classes = get_token_classes(reference, spec.punctuation_splits)
    records: list[dict | None] = [None] * len(items)
    todo = [i for i, item in enumerate(items) if not item.skipped]
    missing = [items[i].index for i in todo if items[i].context_ids is None]
    if missing:
        raise ValueError(f"items {missing[:5]} carry no context ids (made by make_items?)")
    batch = spec.batch_size or DEFAULT_BATCH_SIZE
    for lo in range(0, len(todo), batch):
        where = todo[lo : lo + batch]
        chunk = [items[i] for i in where]
        contexts = [_map(item.context_ids, pair.to_reference) for item in chunk]
        if reference.task == "seq2seq":
            sources = [_map(item.source_ids, pair.to_reference) for item in chunk]
            depths = None  # the decoder's own positions: not the word search's business here
            q_root, state = reference.start(sources, contexts)
        else:
            depths = _room(reference, chunk, contexts)
            q_root, state = reference.start(contexts)
        p_root = _model_roots(model, chunk)
        q_cmp = q_root[:, : pair.n] if pair.gather is None else q_root[:, list(pair.gather)]
        tv, js, gd = token_divergences(p_root[:, : pair.n], q_cmp.to(p_root.device))
        tv, js, gd = tv.tolist(), js.tolist(), gd.tolist()
        found = search_words(reference, state, q_root, classes, spec, depths)
        probs, exact = _choice_probs(reference, state, q_root, classes, spec, chunk, found, depths)
        for j, (i, item, res) in enumerate(zip(where, chunk, found, strict=True)):
            records[i] = _record(
                item, res, probs[j], exact[j], pair, (tv[j], js[j], gd[j]), classes.word_level
            )
    return records


def _room(reference, chunk, contexts) -> list[int | None] | None:
    """Tokens a word may have after each context: the positions the reference has left (a
    partial word of d tokens is scored at position context + d - 1), or None if unbounded.
    Raises when a context fills the reference's positions."""
    if not reference.max_positions:
        return None
    room = [reference.max_positions - len(c) for c in contexts]
    for item, left in zip(chunk, room, strict=True):
        if left < 1:
            raise ValueError(
                f"item {item.index}: its context leaves no position of the reference's "
                f"{reference.max_positions} for a next word"
            )
    return room


def _choice_probs(reference, state, q_root, classes, spec, chunk, found, depths=None):
    """P_D's probability of each item's choices: its search's value for a word among its top k,
    else `worker.word_probs`' (renormalised as the search's are)."""
    wanted = [
        [w for w, _ in item.choices if w not in res.words]
        for item, res in zip(chunk, found, strict=True)
    ]
    if classes.word_level:
        raw = word_level(q_root, reference.tokenizer, classes, wanted)
        extra = [[(p, True) for p in row] for row in raw]
    else:
        if reference.task == "lm":
            # A fresh state over the same cache: the search above may have left contexts out
            # of what the backend memoises for ``extend`` (`worker.hf`'s tree of partial
            # words), and those would be re-run from scratch on every call.
            state = reference.select(state, list(range(len(chunk))))
        extra = word_probabilities(
            q_root,
            lambda rows, conts: reference.extend(state, rows, conts),
            classes,
            reference.tokenizer,
            wanted,
            max_expansions=spec.max_expansions,
            max_word_tokens=spec.max_word_tokens,
            depths=depths,
        )
    probs, exact = [], []
    for item, res, words, got in zip(chunk, found, wanted, extra, strict=True):
        scale = 1.0 / (1.0 - res.special_mass) if res.renormalised else 1.0
        value = dict(zip(res.words, res.probs, strict=True))
        value.update({w: p * scale for w, (p, _) in zip(words, got, strict=True)})
        probs.append([float(value[w]) for w, _ in item.choices])
        exact.append(res.exact and all(ok for _, ok in got))
    return probs, exact


def _record(item, res, choice_probs, exact, pair, token, word_level_vocab) -> dict:
    ranked = [*zip(res.words, res.probs, strict=True)]
    ranked += [(w, p) for (w, _), p in zip(item.choices, choice_probs, strict=True)]
    # The most probable word; at equal probability P_D's own rank, then the choices' order.
    top_word, top_prob = "", 0.0
    for w, p in ranked:
        if p > top_prob:
            top_word, top_prob = w, p
    top1 = item.choices[0][0] if item.choices else None
    words = (
        "word-level d_GD: the vocabulary's words compare directly"
        if word_level_vocab
        else f"word-level d_GD from the word search ({res.method}); choice probabilities sum "
        "each word's tokenisations within merge_tail of its best"
    )
    tv, js, gd = token
    return {
        "reference_model": pair.reference,
        "token": {"tv": float(tv), "js": float(js), "gd": int(gd), "vocab": pair.n},
        "word_gd": int(top_word != top1),
        "reference_top_word": top_word,
        "choice_probs": choice_probs,
        "none_prob": max(0.0, 1.0 - sum(choice_probs)),
        "method": f"{pair.token_method}; {words}",
        "exact": bool(exact),
        "special_top1": bool(res.special_top1),
        "special_mass": float(res.special_mass),
    }
