"""Seeds of items and of their parts, stable across processes and machines (sha256, not
Python's ``hash``): an item draws all its randomness from seeds made here, so it does not depend
on how its cell is cut into shards or batches."""

from __future__ import annotations

import hashlib


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from the parts' text, stable across processes and machines."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def item_seed(study_seed: int, length: int, kind: str, index: int, attempt: int = 0) -> int:
    """Seed of one item (and one attempt at it) of a cell; shards use these."""
    return stable_seed("item", study_seed, length, kind, index, attempt)
