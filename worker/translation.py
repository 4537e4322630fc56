"""The translation (sequence-to-sequence) side of `worker.prefixes.make_items`: model prefixes
from the beam search of the source, and the next words after each target prefix, the source
kept intact (docs/design.md §1, "Sequence-to-sequence")."""

from __future__ import annotations

from collections.abc import Sequence

from worker.models import host_copy
from worker.tokens import TokenClasses, decode_word, segment_words
from worker.words import NextWords, search_words


def chunks(seq: Sequence, size: int):
    for lo in range(0, len(seq), size):
        yield seq[lo : lo + size]


def keep_roots_of(chunk, root, keep_roots: bool) -> None:
    if keep_roots:
        kept = host_copy(root)
        for i, d in enumerate(chunk):
            d.root = kept[i]


def encode_prefixes(model, drafts) -> None:
    """Each draft's encoded source and target prefix (``source_ids``, ``ids``): its model
    prefix's own tokens, else its words encoded.  Skipped drafts are left alone.  What
    `seq2seq_choices` reads the next words after, and what a ratings study's translation goes
    on from (`worker.forced.translate_after`)."""
    for d in drafts:
        if d.skip is None:
            d.source_ids = model.encode_source(d.source)
            target = d.context if d.context is not None else model.encode_target(" ".join(d.words))
            d.ids = list(target)


def seq2seq_choices(model, classes, drafts, spec, batch, keep_roots) -> list[NextWords | None]:
    results: dict[int, NextWords] = {}
    todo = [d for d in drafts if d.skip is None]
    for chunk in chunks(todo, batch):
        encode_prefixes(model, chunk)
        root, state = model.start([d.source_ids for d in chunk], [d.ids for d in chunk])
        keep_roots_of(chunk, root, keep_roots)
        for d, res in zip(chunk, search_words(model, state, root, classes, spec), strict=True):
            results[d.index] = res
    return [results.get(d.index) for d in drafts]


def beam_prefixes(model, classes, drafts, length, spec, batch) -> None:
    """Seq2seq model prefixes: the first ``length`` words of a beam search of the source."""
    max_new = spec.prefix_tokens_per_word * (length + 1)
    for chunk in chunks(drafts, batch):
        outs = model.beam_search(
            [model.encode_source(d.source) for d in chunk],
            num_beams=spec.num_beams,
            max_new_tokens=max_new,
        )
        for d, ids in zip(chunk, outs, strict=True):
            d.info["beam"] = {"num_beams": spec.num_beams, "max_new_tokens": max_new}
            groups = segment_words(ids, classes)
            if len(groups) < length:
                d.skip = "beam_too_short"
                d.words = [decode_word(model.tokenizer, g) for g in groups]
                continue
            cut = cut_after_words(ids, classes, length)
            d.context = ids[:cut]
            d.words = [decode_word(model.tokenizer, g) for g in groups[:length]]


def cut_after_words(ids: Sequence[int], classes: TokenClasses, length: int) -> int:
    """Index of the token that starts word ``length + 1`` (or ``len(ids)``)."""
    starts, blank = classes.starts.tolist(), classes.blank.tolist()
    in_word, count = False, 0
    for pos, t in enumerate(ids):
        if blank[t]:
            in_word = False
            continue
        if starts[t] or not in_word:
            count += 1
            if count > length:
                return pos
        in_word = True
    return len(ids)
