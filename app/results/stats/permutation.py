"""Within-HIT permutation test of EB-C = 1 (DESIGN.md §1, "Test of EB-C = 1")."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

from .ebc import DATA_KIND, MODEL_KIND, first_index, unique_inverse


@dataclass(frozen=True)
class PermutationTest:
    """Result for one prefix length (``length=None``: all lengths pooled).

    ``statistic = ln EB-C`` observed; ``p_value`` two-sided
    (``P[|T*| >= |T|]``), ``p_greater`` one-sided for EB-C > 1; both are
    ``(1 + #{extreme permutations}) / (1 + B)``, valid for any ``B``.
    """

    length: int | None
    statistic: float
    ebc: float
    p_value: float
    p_greater: float
    n_permutations: int
    n_hits: int
    n_items: int

    def as_dict(self) -> dict:
        return asdict(self)


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_inverse=True, return_counts=True)`` by a lexsort of
    the columns (numeric order; several times faster than sorting rows as bytes)."""
    order = np.lexsort(a.T[::-1])
    sa = a[order]
    new = np.ones(a.shape[0], dtype=bool)
    new[1:] = (sa[1:] != sa[:-1]).any(axis=1)
    gid = np.cumsum(new) - 1
    inverse = np.empty(a.shape[0], dtype=np.int64)
    inverse[order] = gid
    return sa[new], inverse, np.bincount(gid)


_SMALL_GROUP = 8  # HITs per group below which each HIT draws its own subset


@functools.cache
def _subsets(n: int, m: int) -> np.ndarray:
    """All m-subsets of range(n), one per row (C(n, m) x m)."""
    return np.array(list(itertools.combinations(range(n), m)), dtype=np.int64).reshape(-1, m)


def permutation_test(
    d: np.ndarray,
    length: np.ndarray,
    kind: np.ndarray,
    hit: np.ndarray,
    item: np.ndarray,
    *,
    b: int = 10_000,
    seed: int | None = 0,
    data_kind: int = DATA_KIND,
    model_kind: int = MODEL_KIND,
    attention: np.ndarray | None = None,
    keep: np.ndarray | None = None,
    max_enumerate: int = 20_000,
) -> list[PermutationTest]:
    """Permutation test of ``H0: EB-C_l = 1`` that shuffles the ``data``/``model`` labels
    among the items of each HIT.

    Statistic: ``T = ln(S_M / N_M) - ln(S_D / N_D)``, where ``S`` sums ``d`` and ``N``
    counts judgments over the items labelled model (M) or data (D) at one length.
    Under H0 the labels are exchangeable among a HIT's data and model items (the design
    assigns them at random within the HIT), so permuting them within each HIT gives
    the exact null distribution while keeping every annotator's and HIT's judgments
    together; items of other kinds and attention items are left out.

    Vectorised by grouping: a HIT enters ``T*`` only through
    ``(sum of S_i, sum of N_i)`` over the ``m`` items that get the model label, a
    uniformly random ``m``-subset of its items. HITs with the same multiset of item
    totals (and the same ``m`` and length) share that distribution, which is enumerated
    once (``C(n, m)`` subsets, e.g. 252 for 5 + 5); the ``c`` HITs of a group then
    contribute ``counts @ outcomes`` with ``counts ~ Multinomial(c, outcome probs)`` per
    permutation. Groups with more than ``max_enumerate`` subsets are shuffled directly
    (random keys, ``argsort``). The loops run over groups, never over permutations.
    """
    d = np.asarray(d, dtype=float)
    length, kind = np.asarray(length), np.asarray(kind)
    hit, item = np.asarray(hit), np.asarray(item)
    mask = (kind == data_kind) | (kind == model_kind)
    if attention is not None:
        mask &= ~np.asarray(attention, dtype=bool)
    if keep is not None:
        mask &= np.asarray(keep, dtype=bool)
    d, length, kind, hit, item = d[mask], length[mask], kind[mask], hit[mask], item[mask]
    rng = np.random.default_rng(seed)

    # Items: judgment totals, label, stratum (HIT x length).
    item_ids, ii = unique_inverse(item)
    first = first_index(ii, item_ids.size)
    s_i = np.bincount(ii, weights=d)
    n_i = np.bincount(ii).astype(float)
    model_i = kind[first] == model_kind
    len_i = length[first].astype(np.int64)
    # Strata sorted by (HIT, length), as one integer key.
    _, hit_c = unique_inverse(hit[first])
    len_ids, len_c = unique_inverse(len_i)
    _, h_i = unique_inverse(hit_c.astype(np.int64) * len_ids.size + len_c)
    n_h = np.bincount(h_i)
    m_h = np.bincount(h_i, weights=model_i).astype(np.int64)
    len_h = np.empty(n_h.size, dtype=np.int64)
    len_h[h_i] = len_i
    lengths = np.unique(len_h)
    li_h = np.searchsorted(lengths, len_h)

    # Pad each stratum's (sorted) item totals into one row: its group signature.
    order = np.lexsort((n_i, s_i, h_i))
    start = np.concatenate([[0], np.cumsum(n_h)[:-1]])
    pos = np.arange(order.size) - start[h_i[order]]
    width = int(n_h.max())
    s_pad = np.full((n_h.size, width), -1.0)
    n_pad = np.full((n_h.size, width), -1.0)
    s_pad[h_i[order], pos] = s_i[order]
    n_pad[h_i[order], pos] = n_i[order]
    sig = np.column_stack([len_h, n_h, m_h, s_pad, n_pad])
    groups, _, g_count = _unique_rows(sig)

    n_len = lengths.size
    sm_b = np.zeros((b, n_len))
    nm_b = np.zeros((b, n_len))
    # Small groups (one HIT, or a few: common where items have several judgments, as in
    # the overlap subset) draw a uniformly random m-subset for each of their HITs per
    # permutation, all such HITs of one (n, m) at once: the HIT x subset table of model
    # totals, then one gather. Cheaper than a multinomial over many distinct outcomes.
    single: dict[tuple[int, int], list[int]] = {}
    for g, row in enumerate(groups):
        n, m = int(row[1]), int(row[2])
        if int(g_count[g]) <= _SMALL_GROUP and math.comb(n, m) <= max_enumerate:
            single.setdefault((n, m), []).extend([g] * int(g_count[g]))
    for (n, m), gs in single.items():
        combos = _subsets(n, m)
        rows = groups[gs]
        li_g = np.searchsorted(lengths, rows[:, 0])
        s_tab = rows[:, 3 : 3 + n][:, combos].sum(axis=2)  # HITs x subsets
        n_tab = rows[:, 3 + width : 3 + width + n][:, combos].sum(axis=2)
        # Sums and counts are whole numbers (d is 0/1): pack both into one int64 so one
        # gather serves both (sums < 2^24 per length and permutation).
        packed = (np.rint(s_tab).astype(np.int64) << 24) + np.rint(n_tab).astype(np.int64)
        exact = np.allclose(s_tab, np.rint(s_tab)) and n_tab.max() * s_tab.shape[0] < 1 << 24
        n_g, n_sub = s_tab.shape
        chunk = max(1, (1 << 22) // max(b, 1))
        for st in range(0, n_g, chunk):  # chunks of HITs, to bound memory
            sl = slice(st, min(st + chunk, n_g))
            pick = rng.integers(0, n_sub, size=(b, sl.stop - sl.start), dtype=np.int32)
            flat = pick + (np.arange(sl.start, sl.stop, dtype=np.int32) * n_sub)
            for li in np.unique(li_g[sl]):
                on = np.flatnonzero(li_g[sl] == li)
                idx = flat[:, on] if on.size < flat.shape[1] else flat
                if exact:
                    tot = packed.ravel().take(idx).sum(axis=1)
                    sm_b[:, li] += tot >> 24
                    nm_b[:, li] += tot & ((1 << 24) - 1)
                else:
                    sm_b[:, li] += s_tab.ravel().take(idx).sum(axis=1)
                    nm_b[:, li] += n_tab.ravel().take(idx).sum(axis=1)
    done = {g for gs in single.values() for g in gs}

    for g, row in enumerate(groups):  # groups of identical HITs, not permutations
        if g in done:
            continue
        li = int(np.searchsorted(lengths, row[0]))
        n, m, c = int(row[1]), int(row[2]), int(g_count[g])
        sv, nv = row[3 : 3 + n], row[3 + width : 3 + width + n]
        if math.comb(n, m) <= max_enumerate:
            combos = _subsets(n, m)
            out = np.stack([sv[combos].sum(axis=1), nv[combos].sum(axis=1)], axis=1)
            outcomes, freq = np.unique(out, axis=0, return_counts=True)
            draws = rng.multinomial(c, freq / freq.sum(), size=b).astype(float)
            sm_b[:, li] += draws @ outcomes[:, 0]
            nm_b[:, li] += draws @ outcomes[:, 1]
        else:
            block = max(1, (1 << 22) // (c * n))
            for st in range(0, b, block):
                k = min(block, b - st)
                chosen = np.argsort(rng.random((k, c, n)), axis=2)[:, :, :m]
                sm_b[st : st + k, li] += sv[chosen].sum(axis=(1, 2))
                nm_b[st : st + k, li] += nv[chosen].sum(axis=(1, 2))

    li_i = li_h[h_i]
    s_tot = np.bincount(li_i, weights=s_i, minlength=n_len)
    n_tot = np.bincount(li_i, weights=n_i, minlength=n_len)
    sm_obs = np.bincount(li_i, weights=s_i * model_i, minlength=n_len)
    nm_obs = np.bincount(li_i, weights=n_i * model_i, minlength=n_len)

    def stat(sm, nm, st, nt):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log(sm / nm) - np.log((st - sm) / (nt - nm))

    # Pooled over lengths: one more column with the sums over lengths.
    sm_b = np.column_stack([sm_b, sm_b.sum(axis=1)])
    nm_b = np.column_stack([nm_b, nm_b.sum(axis=1)])
    s_tot, n_tot = np.append(s_tot, s_tot.sum()), np.append(n_tot, n_tot.sum())
    sm_obs, nm_obs = np.append(sm_obs, sm_obs.sum()), np.append(nm_obs, nm_obs.sum())
    t_obs = stat(sm_obs, nm_obs, s_tot, n_tot)
    t_b = stat(sm_b, nm_b, s_tot, n_tot)
    eps = 1e-9  # permutations equal to the observed value count as extreme
    p_two = (1 + np.sum(np.abs(t_b) >= np.abs(t_obs) - eps, axis=0)) / (b + 1)
    p_greater = (1 + np.sum(t_b >= t_obs - eps, axis=0)) / (b + 1)

    n_hits = np.append(np.bincount(li_h, minlength=n_len), n_h.size)
    n_items = np.append(np.bincount(li_i, minlength=n_len), s_i.size)
    labels: list[int | None] = [int(x) for x in lengths] + [None]
    return [
        PermutationTest(
            length=labels[k],
            statistic=float(t_obs[k]),
            ebc=float(np.exp(t_obs[k])),
            p_value=float(p_two[k]),
            p_greater=float(p_greater[k]),
            n_permutations=b,
            n_hits=int(n_hits[k]),
            n_items=int(n_items[k]),
        )
        for k in range(n_len + 1)
    ]
