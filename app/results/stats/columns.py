"""Shared column helpers of the statistics: dense codes, uniques and cells.

The judgment columns have a million entries, so these replace ``np.unique`` by O(n)
presence tables where the integers' range allows. Used by every estimator module.
"""

from __future__ import annotations

import numpy as np

DATA_KIND = 0
MODEL_KIND = 1

Kind = int | str
"""A prefix kind in a result: the code the columns use (:data:`DATA_KIND`,
:data:`MODEL_KIND`, the study's other kinds after them), or its name once the caller has
named the codes for a reader (``app.results.service`` does, for the API)."""


def cells(length: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cells present, as rows ``(length, kind)`` sorted, and each row's cell index."""
    lengths, li = unique_inverse(length)
    kinds, ki = unique_inverse(kind)
    keys, cell = unique_inverse(li * kinds.size + ki)
    cells = np.stack([lengths[keys // kinds.size], kinds[keys % kinds.size]], axis=1)
    return cells.astype(np.int64), cell


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` (flat inverse). Integers whose range is not
    much larger than their number (database ids, lengths, kind and choice codes) take a
    presence table, O(n) instead of a sort: these columns have a million entries."""
    x = np.asarray(x).reshape(-1)
    if x.size and np.issubdtype(x.dtype, np.integer):
        lo = int(x.min())
        span = int(x.max()) - lo
        if span < 16 * x.size + (1 << 16):
            shifted = x - lo if lo else x
            present = np.zeros(span + 1, dtype=bool)  # a byte per possible value
            present[shifted] = True
            uniq = (np.flatnonzero(present) + lo).astype(x.dtype)
            rank = np.cumsum(present, dtype=np.int32 if span < 1 << 31 else np.int64)
            return uniq, (rank - 1)[shifted].astype(np.int64)
    uniq, inv = np.unique(x, return_inverse=True)
    return uniq, inv.reshape(-1)


def unique_values(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` for integers by a table of the values present (a byte per value
    of the range) when the range is at most 64 times their number, else by a sort."""
    x = np.asarray(x).reshape(-1)
    if x.size and np.issubdtype(x.dtype, np.integer):
        lo = int(x.min())
        span = int(x.max()) - lo
        if span < 64 * x.size + (1 << 16):
            present = np.zeros(span + 1, dtype=bool)
            present[x - lo if lo else x] = True
            return (np.flatnonzero(present) + lo).astype(x.dtype)
    return np.unique(x)


def first_index(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """Index of the first row of each code ``0..n_codes-1`` (as ``return_index``)."""
    first = np.empty(n_codes, dtype=np.int64)
    first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)
    return first


def codes(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes ``0..G-1`` in sorted order of the values, and ``G``."""
    uniq, inv = unique_inverse(x)
    return inv, int(uniq.size)


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_inverse=True, return_counts=True)`` by a lexsort of
    the columns (numeric order; several times faster than sorting rows as bytes)."""
    if a.shape[0] == 0:
        return a, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(a.T[::-1])
    sa = a[order]
    new = np.ones(a.shape[0], dtype=bool)
    new[1:] = (sa[1:] != sa[:-1]).any(axis=1)
    gid = np.cumsum(new) - 1
    inverse = np.empty(a.shape[0], dtype=np.int64)
    inverse[order] = gid
    return sa[new], inverse, np.bincount(gid)
