"""A ratings study's HIT rules: a pair is placed once it has a continuation (nothing to rate
before), has no choices (no screen order), and its attention pairs are the worker's (a real
continuation's words shuffled: made to be rated low, never promoted from the data), so it
takes no researcher's attention file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Select
from sqlalchemy.orm import Session

from app.hits.schemas import HitBuildError
from app.models import Item, Study
from app.studies.schemas import config_from_columns


def words_after_prefix(study: Study) -> int:
    """A data prefix's line needs its real continuation after it (l_gen words: EB-M's
    references and the attention pairs' words); a translation's reference needs one word
    after its forced prefix (its rest is the reference, however long)."""
    config = config_from_columns(study)
    return config.ratings.words_per_continuation(config) or 1


def screen_order(screen: list[int]) -> list[int | str]:
    """A pair has no choices: no screen order."""
    return []


def placeable(query: Select) -> Select:
    """Pairs with a continuation (none yet: nothing to rate)."""
    return query.where(Item.continuation.is_not(None))


def attention_ready(row: Any, min_prob: float) -> bool:
    """The worker's attention pairs qualify; nothing else is promoted."""
    return bool(row.is_attention)


def load_attention_items(
    session: Session, study: Study, rows: Iterable[Mapping[str, object]]
) -> int:
    raise HitBuildError(
        "attention files are for next-word studies; a ratings study's attention pairs "
        "(shuffled continuations) are made by the worker"
    )
