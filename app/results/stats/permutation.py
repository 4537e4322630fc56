"""Within-HIT permutation test of EB-C = 1 (docs/design.md §1, "Test of EB-C = 1")."""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from .columns import DATA_KIND, MODEL_KIND, first_index, unique_inverse, unique_rows
from .figure import Figure

PERMUTATION_LABEL = (
    "secondary: exact only under the sharp null that no annotator treats data and model "
    "prefixes differently"
)


@dataclass(frozen=True)
class PermutationTest:
    """Result for one prefix length (``length=None``: all lengths pooled).

    ``statistic = ln EB-C`` observed; ``p_value`` two-sided
    (``P[|T*| >= |T|]``), ``p_greater`` one-sided for EB-C > 1; both are
    ``(1 + #{extreme permutations}) / (1 + B)``, valid for any ``B``. ``label`` says
    what the test is, and is not (:data:`PERMUTATION_LABEL`).
    """

    length: int | None
    statistic: Figure
    ebc: Figure
    p_value: float
    p_greater: float
    n_permutations: int
    n_hits: int
    n_items: int
    label: str = PERMUTATION_LABEL


_SMALL_GROUP = 8  # HITs per group below which each HIT draws its own subset


@functools.cache
def _subsets(n: int, m: int) -> np.ndarray:
    """All m-subsets of range(n), one per row (C(n, m) x m)."""
    return np.array(list(itertools.combinations(range(n), m)), dtype=np.int64).reshape(-1, m)


_TAIL = 1e-20
"""Mass the exact null of the lattice HITs may lose to wrap-around (Hoeffding bound)."""


def _subset_sum_pmf(values: np.ndarray, m: int) -> np.ndarray:
    """``P[sum of a uniformly random m-subset of values = v]`` for ``v = 0..sum(values)``
    (non-negative integers): counts of m-subsets by sum, one item at a time (0/1
    knapsack: ``N_j(v) += N_(j-1)(v - value)``), normalised."""
    total = int(values.sum())
    counts = np.zeros((m + 1, total + 1))
    counts[0, 0] = 1.0
    for v in values.astype(np.int64):  # items of one HIT (e.g. 10), not permutations
        if v == 0:
            counts[1:] += counts[:-1].copy()
        else:
            counts[1:, v:] += counts[:-1, : total + 1 - v].copy()
    return counts[m] / counts[m].sum()


def _lattice_pmfs(rows: np.ndarray, n: int, m: int, max_enumerate: int) -> np.ndarray:
    """Per HIT signature (rows of integer item sums), the pmf of the model-labelled sum
    (``G x W``, value ``v`` at column ``v``): all ``C(n, m)`` subsets at once when
    there are at most ``max_enumerate``, else :func:`_subset_sum_pmf` per row."""
    vals = np.rint(rows[:, :n]).astype(np.int64)
    width = int(np.sort(vals, axis=1)[:, n - m :].sum(axis=1).max()) + 1 if m else 1
    if math.comb(n, m) <= max_enumerate:
        sums = vals[:, _subsets(n, m)].sum(axis=2)  # HITs x subsets
        flat = sums + (np.arange(vals.shape[0]) * width)[:, None]
        pmf = np.bincount(flat.ravel(), minlength=vals.shape[0] * width).reshape(-1, width)
        return pmf / sums.shape[1]
    out = np.zeros((vals.shape[0], width))
    for g, row in enumerate(vals):  # signatures too big to enumerate (rare)
        p = _subset_sum_pmf(row, m)
        out[g, : min(p.size, width)] = p[:width]
    return out


def _int_power(f: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``f ** c`` row-wise for integer ``c >= 1``, by repeated squaring (a general
    complex power costs several times more)."""
    out = np.ones_like(f)
    base = f.copy()
    e = c.astype(np.int64).copy()
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        while True:
            odd = (e & 1).astype(bool)
            if odd.any():
                out[odd] *= base[odd]
            e >>= 1
            if not e.any():
                return out
            base *= base


def _draw_sums(pmf: np.ndarray, count: np.ndarray, b: int, rng: np.random.Generator):
    """``b`` independent draws of ``sum_g (X_g1 + ... + X_g,count_g)`` with independent
    ``X_gc ~ pmf[g]`` (values ``0..W-1``), drawn by inversion from the exact
    distribution of the sum.

    The distribution is the product of the groups' characteristic functions on ``N``
    points (``rfft``, an integer power per group, one ``irfft``). ``N`` covers the
    whole support when it is small; otherwise a window of ``2t`` around the mean, with
    ``t`` from Bernstein's inequality ``P[|S - E S| >= t] <= 2 exp(-t^2 / (2 (V + R t /
    3)))`` (``V`` the variance of the sum, ``R`` the largest range of one ``X``) such
    that less than ``1e-20`` of the mass lies outside (it would wrap around).
    Floating-point rounding leaves errors near 1e-16 on each probability.
    """
    values = np.arange(pmf.shape[1])
    nz = pmf > 0
    top = pmf.shape[1] - 1 - np.argmax(nz[:, ::-1], axis=1)
    low = np.argmax(nz, axis=1)
    span = int(count @ top)
    mean_g = pmf @ values
    var = float(count @ (pmf @ values**2 - mean_g**2))
    big = float((top - low).max())
    lg = math.log(2 / _TAIL)
    half = math.ceil(lg * big / 3 + math.sqrt((lg * big / 3) ** 2 + 2 * lg * max(var, 0.0)))
    size = span + 1 if span + 1 <= 2 * half + 2 else 2 * half + 2
    n = 1 << max(int(size - 1).bit_length(), 1)
    offset = 0
    if size < span + 1:  # a window centred on the mean
        offset = round(float(count @ mean_g)) - n // 2
    spec = np.ones(n // 2 + 1, dtype=complex)
    chunk = max(1, (1 << 20) // (n // 2 + 1))
    for st in range(0, pmf.shape[0], chunk):  # bounded memory; groups, not permutations
        f = np.fft.rfft(pmf[st : st + chunk], n=n, axis=1)
        with np.errstate(under="ignore"):
            spec *= np.prod(_int_power(f, count[st : st + chunk]), axis=0)
    if offset:
        turns = (np.arange(n // 2 + 1) * offset) % n
        spec *= np.exp(2j * np.pi * turns / n)
    q = np.clip(np.fft.irfft(spec, n), 0.0, None)
    cdf = np.cumsum(q)
    at = np.searchsorted(cdf, rng.random(b) * cdf[-1], side="right")
    return np.minimum(at, n - 1) + offset


@dataclass(frozen=True)
class _Strata:
    """Items (their judgment totals ``s_i``, ``n_i``, label ``model_i``, stratum ``h_i``)
    and strata, a HIT at one length (``n_h`` items, ``m_h`` of them model, length index
    ``li_h`` into ``lengths``), sorted by (HIT, length)."""

    s_i: np.ndarray
    n_i: np.ndarray
    model_i: np.ndarray
    h_i: np.ndarray
    n_h: np.ndarray
    m_h: np.ndarray
    len_h: np.ndarray
    lengths: np.ndarray
    li_h: np.ndarray

    @classmethod
    def of(cls, d, length, kind, hit, item, model_kind: int) -> _Strata:
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
        return cls(s_i, n_i, model_i, h_i, n_h, m_h, len_h, lengths, li_h)

    def groups(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Strata with the same signature (length, items, model items, the sorted item
        totals padded to ``width``) as one group: ``(groups, g_count, width)``."""
        s_i, n_i, h_i, n_h = self.s_i, self.n_i, self.h_i, self.n_h
        # Pad each stratum's (sorted) item totals into one row: its group signature.
        width = int(n_h.max())
        # Small whole-number totals (d is 0/1): each item's (sum, count) as one code, and
        # a HIT's sorted codes as the digits of one integer, so strata are sorted and
        # grouped on a few integer columns instead of 2 x width float ones.
        code = base = None
        if np.array_equal(s_i, np.rint(s_i)) and s_i.min() >= 0:
            nn = int(n_i.max()) + 1
            base = (int(s_i.max()) + 1) * nn + 1  # digit 0: padding
            if base**width < 1 << 62 and n_h.size * base < 1 << 62:
                code = s_i.astype(np.int64) * nn + n_i.astype(np.int64) + 1
        if code is not None:
            order = np.argsort(h_i * base + code, kind="stable")
        else:
            order = np.lexsort((n_i, s_i, h_i))
        start = np.concatenate([[0], np.cumsum(n_h)[:-1]])
        pos = np.arange(order.size) - start[h_i[order]]
        s_pad = np.full((n_h.size, width), -1.0)
        n_pad = np.full((n_h.size, width), -1.0)
        s_pad[h_i[order], pos] = s_i[order]
        n_pad[h_i[order], pos] = n_i[order]
        sig = np.column_stack([self.len_h, n_h, self.m_h, s_pad, n_pad])
        if code is not None:
            digits = np.zeros((n_h.size, width), dtype=np.int64)
            digits[h_i[order], pos] = code[order]
            key = digits @ (np.int64(base) ** np.arange(width, dtype=np.int64))
            _, inverse, g_count = unique_rows(np.column_stack([self.len_h, n_h, self.m_h, key]))
            return sig[first_index(inverse, g_count.size)], g_count, width
        groups, _, g_count = unique_rows(sig)
        return groups, g_count, width


@dataclass
class _Permutations:
    """The permutations' model totals per length (``sm_b``, ``nm_b``: B x lengths), summed
    over the groups of identical HITs, each group drawn by the cheapest exact way."""

    groups: np.ndarray
    g_count: np.ndarray
    width: int
    lengths: np.ndarray
    b: int
    rng: np.random.Generator
    max_enumerate: int

    def __post_init__(self) -> None:
        self.sm_b = np.zeros((self.b, self.lengths.size))
        self.nm_b = np.zeros((self.b, self.lengths.size))

    def lattice(self) -> np.ndarray:
        """Lattice HITs: integer item sums (d is 0/1) and the same number of judgments on
        every item, so the model-labelled count is fixed (m x judgments per item) and only
        the sum varies. Their total per length is drawn from its exact distribution.
        Which groups are lattice ones."""
        groups, width, lengths = self.groups, self.width, self.lengths
        n_g, m_g = groups[:, 1].astype(np.int64), groups[:, 2].astype(np.int64)
        s_rows, n_rows = groups[:, 3 : 3 + width], groups[:, 3 + width :]
        real = np.arange(width) < n_g[:, None]
        lattice = np.all(
            ~real | ((n_rows == n_rows[:, :1]) & (s_rows == np.rint(s_rows)) & (s_rows >= 0)),
            axis=1,
        )
        li_g = np.searchsorted(lengths, groups[:, 0])
        for li in range(lengths.size):
            on = np.flatnonzero(lattice & (li_g == li))
            if on.size == 0:
                continue
            parts = []
            for n, m in sorted(set(zip(n_g[on].tolist(), m_g[on].tolist(), strict=True))):
                gs = on[(n_g[on] == n) & (m_g[on] == m)]
                parts.append((gs, _lattice_pmfs(s_rows[gs], n, m, self.max_enumerate)))
            w = max(p.shape[1] for _, p in parts)
            pmf = np.vstack([np.pad(p, ((0, 0), (0, w - p.shape[1]))) for _, p in parts])
            gs = np.concatenate([g for g, _ in parts])
            self.sm_b[:, li] += _draw_sums(pmf, self.g_count[gs].astype(np.int64), self.b, self.rng)
            self.nm_b[:, li] += float(np.sum(self.g_count[gs] * m_g[gs] * n_rows[gs, 0]))
        return lattice

    def small(self, lattice: np.ndarray) -> set[int]:
        """Small groups (one HIT, or a few: common where items have several judgments, as
        in the overlap subset) draw a uniformly random m-subset for each of their HITs per
        permutation, all such HITs of one (n, m) at once: the HIT x subset table of model
        totals, then one gather. Cheaper than a multinomial over many distinct outcomes.
        The groups drawn so."""
        groups, g_count, width, b = self.groups, self.g_count, self.width, self.b
        single: dict[tuple[int, int], list[int]] = {}
        for g, row in enumerate(groups):
            n, m = int(row[1]), int(row[2])
            if lattice[g]:
                continue
            if int(g_count[g]) <= _SMALL_GROUP and math.comb(n, m) <= self.max_enumerate:
                single.setdefault((n, m), []).extend([g] * int(g_count[g]))
        for (n, m), gs in single.items():
            combos = _subsets(n, m)
            rows = groups[gs]
            li_g = np.searchsorted(self.lengths, rows[:, 0])
            s_tab = rows[:, 3 : 3 + n][:, combos].sum(axis=2)  # HITs x subsets
            n_tab = rows[:, 3 + width : 3 + width + n][:, combos].sum(axis=2)
            # Sums and counts are whole numbers (d is 0/1): pack both into one int64 so
            # one gather serves both (sums < 2^24 per length and permutation).
            packed = (np.rint(s_tab).astype(np.int64) << 24) + np.rint(n_tab).astype(np.int64)
            exact = np.allclose(s_tab, np.rint(s_tab)) and n_tab.max() * s_tab.shape[0] < 1 << 24
            n_g, n_sub = s_tab.shape
            chunk = max(1, (1 << 22) // max(b, 1))
            for st in range(0, n_g, chunk):  # chunks of HITs, to bound memory
                sl = slice(st, min(st + chunk, n_g))
                pick = self.rng.integers(0, n_sub, size=(b, sl.stop - sl.start), dtype=np.int32)
                flat = pick + (np.arange(sl.start, sl.stop, dtype=np.int32) * n_sub)
                for li in np.unique(li_g[sl]):
                    on = np.flatnonzero(li_g[sl] == li)
                    idx = flat[:, on] if on.size < flat.shape[1] else flat
                    if exact:
                        tot = packed.ravel().take(idx).sum(axis=1)
                        self.sm_b[:, li] += tot >> 24
                        self.nm_b[:, li] += tot & ((1 << 24) - 1)
                    else:
                        self.sm_b[:, li] += s_tab.ravel().take(idx).sum(axis=1)
                        self.nm_b[:, li] += n_tab.ravel().take(idx).sum(axis=1)
        return {g for gs in single.values() for g in gs}

    def rest(self, done: set[int]) -> None:
        """The other groups: a multinomial over their enumerated outcomes, or shuffled
        directly (random keys, ``argsort``) above ``max_enumerate`` subsets."""
        groups, width, b, rng = self.groups, self.width, self.b, self.rng
        for g, row in enumerate(groups):  # groups of identical HITs, not permutations
            if g in done:
                continue
            li = int(np.searchsorted(self.lengths, row[0]))
            n, m, c = int(row[1]), int(row[2]), int(self.g_count[g])
            sv, nv = row[3 : 3 + n], row[3 + width : 3 + width + n]
            if math.comb(n, m) <= self.max_enumerate:
                combos = _subsets(n, m)
                out = np.stack([sv[combos].sum(axis=1), nv[combos].sum(axis=1)], axis=1)
                outcomes, freq = np.unique(out, axis=0, return_counts=True)
                draws = rng.multinomial(c, freq / freq.sum(), size=b).astype(float)
                self.sm_b[:, li] += draws @ outcomes[:, 0]
                self.nm_b[:, li] += draws @ outcomes[:, 1]
            else:
                block = max(1, (1 << 22) // (c * n))
                for st in range(0, b, block):
                    k = min(block, b - st)
                    chosen = np.argsort(rng.random((k, c, n)), axis=2)[:, :, :m]
                    self.sm_b[st : st + k, li] += sv[chosen].sum(axis=(1, 2))
                    self.nm_b[st : st + k, li] += nv[chosen].sum(axis=(1, 2))

    def draw(self) -> _Permutations:
        lattice = self.lattice()
        self.rest(self.small(lattice) | set(np.flatnonzero(lattice).tolist()))
        return self


def _statistic(sm, nm, st, nt):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(sm / nm) - np.log((st - sm) / (nt - nm))


def _pooled(x: np.ndarray) -> np.ndarray:
    """Per length, and one more entry (column) with the sum over lengths."""
    return np.append(x, x.sum()) if x.ndim == 1 else np.column_stack([x, x.sum(axis=1)])


def _tests(strata: _Strata, perms: _Permutations, b: int) -> list[PermutationTest]:
    """Each length's test, and the pooled one, from the observed and permuted totals."""
    n_len = strata.lengths.size
    s_i, n_i, model_i = strata.s_i, strata.n_i, strata.model_i
    li_i = strata.li_h[strata.h_i]
    s_tot = _pooled(np.bincount(li_i, weights=s_i, minlength=n_len))
    n_tot = _pooled(np.bincount(li_i, weights=n_i, minlength=n_len))
    sm_obs = _pooled(np.bincount(li_i, weights=s_i * model_i, minlength=n_len))
    nm_obs = _pooled(np.bincount(li_i, weights=n_i * model_i, minlength=n_len))
    t_obs = _statistic(sm_obs, nm_obs, s_tot, n_tot)
    t_b = _statistic(_pooled(perms.sm_b), _pooled(perms.nm_b), s_tot, n_tot)
    eps = 1e-9  # permutations equal to the observed value count as extreme
    p_two = (1 + np.sum(np.abs(t_b) >= np.abs(t_obs) - eps, axis=0)) / (b + 1)
    p_greater = (1 + np.sum(t_b >= t_obs - eps, axis=0)) / (b + 1)
    n_hits = np.append(np.bincount(strata.li_h, minlength=n_len), strata.n_h.size)
    n_items = np.append(np.bincount(li_i, minlength=n_len), s_i.size)
    labels: list[int | None] = [int(x) for x in strata.lengths] + [None]
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
    uniformly random ``m``-subset of its items, independently across HITs. HITs with
    the same multiset of item totals (and the same ``m`` and length) share that
    distribution.

    - **Lattice HITs** (the usual case): whole-number item sums (``d`` is 0/1) and the
      same number of judgments on every item. Their ``N_M`` is fixed, and the total of
      their ``S_M`` over a length has an exact distribution: the convolution of each
      group's subset-sum distribution (enumerated, ``C(n, m)`` subsets, e.g. 252 for
      5 + 5, or counted by a knapsack recursion above ``max_enumerate``), raised to
      the group's size. Each permutation's total is drawn from it by inversion
      (:func:`_draw_sums`): the same distribution as shuffling every HIT, at the cost
      of ``B`` uniform draws per length.
    - Other HITs (items with different numbers of judgments, e.g. after exclusions in
      the overlap subset): small groups draw a random m-subset per HIT and
      permutation; large ones ``counts @ outcomes`` with ``counts ~ Multinomial(c,
      outcome probs)``; groups with more than ``max_enumerate`` subsets are shuffled
      directly (random keys, ``argsort``).

    The loops run over lengths and groups, never over permutations. A seed fixes the
    permutations drawn; which random numbers make them is an implementation detail
    (p-values for one seed change within Monte Carlo error when it changes).
    """
    d = np.asarray(d, dtype=float)
    length, kind = np.asarray(length), np.asarray(kind)
    hit, item = np.asarray(hit), np.asarray(item)
    mask = (kind == data_kind) | (kind == model_kind)
    if attention is not None:
        mask &= ~np.asarray(attention, dtype=bool)
    if keep is not None:
        mask &= np.asarray(keep, dtype=bool)
    if not mask.all():
        d, length, kind, hit, item = d[mask], length[mask], kind[mask], hit[mask], item[mask]
    rng = np.random.default_rng(seed)
    strata = _Strata.of(d, length, kind, hit, item, model_kind)
    groups, g_count, width = strata.groups()
    perms = _Permutations(groups, g_count, width, strata.lengths, b, rng, max_enumerate)
    return _tests(strata, perms.draw(), b)
