"""A HIT's content as built (texts, options, screen orders) and the per-process cache of it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy.orm import Session

from app.annotation.queries import PAGE
from app.annotation.schemas import PositionView

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Slot:
    """What a submit needs of one position: the screen order and the words by model rank."""

    item_id: int
    choice_order: tuple[int | str, ...]
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HitContent:
    """A HIT as built: what its page shows and how its answers resolve. Immutable."""

    positions: tuple[PositionView, ...]
    slots: dict[int, Slot]


class HitCache(Generic[V]):
    """A bounded, thread-safe, least-recently-used cache by HIT id, for one database.

    A HIT's positions, their screen orders and their items' words never change
    once built (app.hits writes them once; nothing updates or deletes them), so
    a web process may keep them, and whatever is made from them alone: correctness never
    depends on the cache, which only saves reading and decoding the same ten items on
    every page and submit. Whatever is mutable (counters, leases, the study's settings) is
    always read. A HIT's content is about 15 KB (and so is its rendered HTML, which the web
    layer keeps in a cache of its own): the default bound keeps each under ~15 MB.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._data: OrderedDict[int, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, hit_id: int) -> V | None:
        with self._lock:
            value = self._data.get(hit_id)
            if value is not None:
                self._data.move_to_end(hit_id)
            return value

    def put(self, hit_id: int, value: V) -> None:
        with self._lock:
            self._data[hit_id] = value
            self._data.move_to_end(hit_id)
            while len(self._data) > self.size:
                self._data.popitem(last=False)


HIT_CACHE = "ebc_hit_cache"  # key of a session's `info` (set by the web app's sessionmaker)


def hit_content(session: Session, hit_id: int) -> HitContent:
    """The HIT's positions, from the session's cache when it has one (see HitCache)."""
    cache: HitCache[HitContent] | None = session.info.get(HIT_CACHE)
    content = cache.get(hit_id) if cache is not None else None
    if content is not None:
        return content
    positions, slots = [], {}
    for r in session.execute(PAGE, {"hit_id": hit_id}):
        words = tuple(choice["word"] for choice in r.choices)
        positions.append(
            PositionView(
                number=r.position,
                prompt=r.prompt,
                words=r.words,
                source=r.source,
                options=[words[rank] for rank in r.choice_order if rank != "none"],
                continuation=r.continuation,
            )
        )
        slots[r.position] = Slot(r.item_id, tuple(r.choice_order), words)
    content = HitContent(tuple(positions), slots)
    if cache is not None and slots:
        cache.put(hit_id, content)
    return content
