"""Forced-prefix samples of translation models (the first paper's Tables 1, 5, 8, 9; issue 34):
what a model translates after a forced target prefix of l words, the source kept intact.

The prefixes are `worker.prefixes.make_items`' seq2seq items of each kind: ``data`` (DATA: the
reference's first l words), ``model`` (NORMAL: the model's own beam search, so nothing is forced
and the sample is its plain translation), ``unrelated`` (UNREL: another row's reference) and
``random`` (RAND: l words of the dataset's vocabulary). `translate_after` continues each item's
target prefix (the very token ids its next words were read after) by a beam search of
``spec.num_beams`` (the study's beam width) up to ``spec.prefix_tokens_per_word`` tokens a word for
twice the source's words (8 at least), and records the translation's words after the prefix in
``item.continuation`` and ``provenance["translation"]``. A language model's samples after forced
prefixes are a ratings study's continuations (`worker.continuations`).
"""

from __future__ import annotations

from app.results.samples import Sample
from app.studies.kinds import KINDS, kind_parts
from worker.tokens import decode_word, get_token_classes, segment_words
from worker.translation import chunks

MIN_NEW_WORDS = 8  # room after the prefix, in words, at least


def translate_after(model, items: list, spec, batch: int | None = None) -> list:
    """Continue the translation after each seq2seq item's target prefix (module docstring);
    skipped items are left alone.  Returns ``items``."""
    if model.task != "seq2seq":
        raise ValueError("forced-prefix translations are for translation models")
    classes = get_token_classes(model, spec.punctuation_splits)
    todo = [i for i in items if not i.skipped]
    missing = [i.index for i in todo if i.context_ids is None or i.source_ids is None]
    if missing:
        raise ValueError(f"items {missing[:5]} carry no token ids (made by make_items?)")
    for chunk in chunks(todo, batch or spec.batch_size or 16):
        # Room for a translation as long as the longest source, and more.
        room = max(MIN_NEW_WORDS, 2 * max(len((i.source or "").split()) for i in chunk))
        max_new = spec.prefix_tokens_per_word * room
        made = model.translate_after(
            [i.source_ids for i in chunk],
            [i.context_ids for i in chunk],
            num_beams=spec.num_beams,
            max_new_tokens=max_new,
        )
        for item, ids in zip(chunk, made, strict=True):
            groups = segment_words(ids, classes)
            forced = segment_words(item.context_ids, classes)
            words = [decode_word(model.tokenizer, g) for g in groups]
            item.continuation = words[len(forced) :]
            item.provenance["translation"] = {
                "method": "beam search after the forced target prefix, the source intact",
                "num_beams": spec.num_beams,
                "max_new_tokens": max_new,
                "target_ids": list(ids),
                "forced_tokens": len(item.context_ids),
                # The model may go on with the prefix's last word (a suffix piece).
                "extends_last_word": bool(forced) and groups[len(forced) - 1] != forced[-1],
                "words": len(item.continuation),
            }
    return items


def samples_of(items: list) -> list[Sample]:
    """The papers' sample rows (`app.results.samples`) of items with a continuation: a
    translation after its forced prefix (`translate_after`), or a ratings study's continuation
    of a language model's prompt and prefix.  Skipped items are left out."""
    out = []
    for item in items:
        if item.skipped or item.continuation is None:
            continue
        out.append(
            Sample(
                kind=item.kind,
                label=KINDS[kind_parts(item.kind).base].paper_label if item.source else None,
                length=item.length,
                index=item.index,
                source=item.source,
                prompt=" ".join(item.prompt_words),
                prefix=" ".join(item.words),
                continuation=" ".join(item.continuation),
            )
        )
    return out
