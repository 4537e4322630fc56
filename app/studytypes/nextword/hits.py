"""A next-word study's HIT rules: a position's screen order (its choices shuffled, "None of
the above" last), which items may be attention items (an unambiguous next word: the true
next word is the model's top-1 with at least the build's probability; or a researcher's
attention file), and that file (`load_attention_items`). ``app.hits.service`` builds the
HITs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.hits.schemas import HitBuildError
from app.models import Item, Study

NONE_SLOT = "none"


def words_after_prefix(study: Study) -> int:
    """A data prefix's line needs its true next word after it."""
    return 1


def placeable(query: Select) -> Select:
    """Every shown item may go into a HIT."""
    return query


def screen_order(screen: list[int]) -> list[int | str]:
    """The stored screen order of a position: the shuffled ranks, then "none"."""
    return [*screen, NONE_SLOT]


def attention_ready(row: Any, min_prob: float) -> bool:
    """An item that may be an attention item: from a researcher's attention file, or one
    whose true next word is the model's clear top-1."""
    return (row.provenance or {}).get("source") == "attention_file" or is_clear_next_word(
        row.choices, row.true_next_word, min_prob
    )


def is_clear_next_word(choices: list, true_next_word: str | None, min_prob: float) -> bool:
    """The model's top-1 is the true next word, with probability >= `min_prob`."""
    if not choices or true_next_word is None:
        return False
    top = choices[0]
    return top.get("word") == true_next_word and float(top.get("prob") or 0) >= min_prob


def load_attention_items(
    session: Session, study: Study, rows: Iterable[Mapping[str, object]]
) -> int:
    """Add researcher-supplied attention items; returns how many.

    Each row: `words` (the context, whose word count must be one of the
    study's prefix lengths), `answer` (the unambiguous next word) and
    `distractors` (top_k - 1 other words). The answer is stored as the top-1
    choice, so "chose the top-1" means "answered the attention item right".
    """
    start = session.scalar(
        select(func.max(Item.index)).where(
            Item.study_id == study.id, Item.is_attention.is_(True), Item.kind == "attention"
        )
    )
    index = -1 if start is None else start
    n = 0
    for line, row in enumerate(rows, 1):
        words = str(row.get("words", "")).split()
        answer = str(row.get("answer", "")).strip()
        distractors = [str(w).strip() for w in row.get("distractors", [])]  # type: ignore[union-attr]
        if len(words) not in study.prefix_lengths:
            raise HitBuildError(
                f"attention row {line}: {len(words)} words; the study's lengths are "
                f"{study.prefix_lengths}"
            )
        if not answer or len(distractors) != study.top_k - 1 or answer in distractors:
            raise HitBuildError(
                f"attention row {line}: needs an answer and {study.top_k - 1} other distractors"
            )
        index += 1
        session.add(
            Item(
                study_id=study.id,
                length=len(words),
                kind="attention",
                index=index,
                is_attention=True,
                words=" ".join(words),
                source=str(row["source"]) if row.get("source") else None,
                true_next_word=answer,
                choices=[{"word": answer, "prob": None}]
                + [{"word": w, "prob": None} for w in distractors],
                provenance={"source": "attention_file"},
            )
        )
        n += 1
    session.flush()
    return n
