"""Synthetic CGD and EB-C: a second model P_D in place of people (the papers' synthetic
setting), from the worker's exact per-item divergences (``items.reference``).

One row of the inputs is one **item** (a prefix with its choices; attention and skipped
items left out by the caller), with its cell (``length``, ``kind`` code) and a value
per metric, NaN where the item has none:

- ``tv``: ``d_TV(P_M, P_D) = 1/2 sum_w |P_M(w|W) - P_D(w|W)|`` over the next token;
- ``js``: the Jensen-Shannon divergence of the two next-token distributions, in bits;
- ``gd``: token-level ``d_GD = 1[argmax P_M != argmax P_D]``;
- ``word_gd``: word-level ``d_GD``: 1 when P_D's most probable next word is not the
  model's top-1 word among the shown choices -- what a person is asked about, so it sits
  next to the token-level ``gd`` for comparison.

There is no annotator: the divergences are exact, so the only sampling is that of the
prefixes. Every number here is therefore a mean over items with an item bootstrap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .bootstrap import percentile_interval, resample_sums
from .columns import DATA_KIND, MODEL_KIND, Kind, cells
from .figure import Figure
from .paper import ebc_ratio

METRICS = ("tv", "js", "gd", "word_gd")
METRIC_LABELS = {
    "tv": "token d_TV",
    "js": "token d_JS (bits)",
    "gd": "token d_GD",
    "word_gd": "word-level d_GD (the top-k words people see)",
}
SYNTHETIC_INTERVAL = (
    "percentile bootstrap over prefixes: items resampled with replacement within each "
    "cell, independently across cells; ratios taken inside each resample"
)


@dataclass(frozen=True)
class SyntheticFigure:
    """One synthetic number for one metric.

    ``name`` is ``"cgd"`` (the mean of the metric over a cell's items), ``"ebc"``
    (``CGD(model) / CGD(data)`` at one length), ``"ratio"`` (``CGD(kind) /
    CGD(reference_kind)`` at one length, e.g. a corrupted kind's corruption ratio) or
    ``"ebc_gap"`` (a gap kind's ``CGD(kind, l) / CGD(data, reference_length)`` with
    ``reference_length`` = l + g: EB-C_gap). ``se`` is the sd
    of the bootstrap values, ``low``/``high`` their percentile interval at ``level``.
    ``n_items`` counts the items that enter (both cells of a ratio); ``n_resamples`` the
    resamples whose value is finite (a ratio whose denominator resamples to 0 has none).
    A ratio whose denominator CGD is 0 is undefined (NaN here, null in JSON), except 0 / 0,
    which is 1 (see `synthetic_ratio`).
    """

    name: Literal["cgd", "ebc", "ratio", "ebc_gap"]
    metric: str
    length: int
    kind: Kind
    reference_kind: Kind | None
    estimate: Figure
    se: Figure
    low: Figure
    high: Figure
    level: float
    n_items: int
    n_resamples: int
    reference_length: int | None = None


@dataclass(frozen=True)
class SyntheticCell:
    """A cell's CGD for every metric, and how often token- and word-level d_GD agree
    (the share of its items with both values where they are equal)."""

    length: int
    kind: Kind
    n_items: int
    cgd: dict[str, SyntheticFigure]
    gd_agreement: Figure


@dataclass(frozen=True)
class SyntheticTable:
    """Every cell's CGD per metric and the requested ratios per length and metric."""

    metrics: list[str]
    b: int
    seed: int | None
    level: float
    cells: list[SyntheticCell]
    ratios: list[SyntheticFigure]
    warnings: list[str]
    interval: str = SYNTHETIC_INTERVAL


def synthetic_ratio(num: float | np.ndarray, den: float | np.ndarray) -> np.ndarray:
    """``CGD(num) / CGD(den)`` (`ebc_ratio`), with ``0 / 0 = 1``.

    Synthetic divergences are exact, so both CGDs are 0 exactly when the reference model
    agrees with the model after every prefix of both kinds (P_D = P_M): no deviation
    after either kind of prefix, hence no exposure bias, EB-C = 1 (issue 14's check).
    A positive CGD over a CGD of 0 stays undefined (NaN).
    """
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    return np.where((num == 0) & (den == 0), 1.0, ebc_ratio(num, den))


def _figure(
    name, metric, length, kind, ref, est, boot, level, n_items, ref_length=None
) -> SyntheticFigure:
    ok = np.isfinite(boot)
    finite = bool(np.isfinite(est))
    if finite and ok.sum() >= 2:
        low, high = percentile_interval(boot[ok][:, None], level)
        se, low, high = float(np.std(boot[ok], ddof=1)), float(low[0]), float(high[0])
    else:
        se = low = high = float("nan")
    return SyntheticFigure(
        name=name,
        metric=metric,
        length=int(length),
        kind=kind,
        reference_kind=ref,
        estimate=float(est) if finite else float("nan"),
        se=se,
        low=low,
        high=high,
        level=level,
        n_items=int(n_items),
        n_resamples=int(ok.sum()),
        reference_length=ref_length,
    )


def synthetic_table(
    length: np.ndarray,
    kind: np.ndarray,
    values: np.ndarray,
    *,
    metrics: Sequence[str] = METRICS,
    pairs: Sequence[tuple[int, int] | tuple[int, int, int]] = ((MODEL_KIND, DATA_KIND),),
    b: int = 10_000,
    seed: int | None = 0,
    level: float = 0.95,
    kind_names: Sequence[str] | None = None,
) -> SyntheticTable:
    """Synthetic CGD per cell and metric, and ratios of cells per length, with intervals.

    ``values`` is ``n_items x len(metrics)`` (NaN: the item has no value of that metric).

    Point estimates: ``CGD_m(l, k) = mean of metric m over the items of cell (l, k) that
    have it``; for each ``(num, den)`` in ``pairs`` and each length with both cells,
    ``R_m(l) = CGD_m(l, num) / CGD_m(l, den)`` -- a ratio of means, never a mean of
    ratios. The pair ``(model, data)`` is EB-C (named ``"ebc"``); the others ``"ratio"``.
    A triple ``(num, den, g)`` is a gap kind's EB-C_gap (``"ebc_gap"``): ``CGD_m(l, num) /
    CGD_m(l + g, den)``, for each length l whose l + g has the ``den`` cell.
    A ratio over a CGD of 0 is undefined (NaN, with a warning).

    Intervals: a stratified item bootstrap. Each of ``b`` resamples draws, in every cell
    independently, as many items as the cell has with replacement (metrics missing on the
    same items share the draws) and recomputes every mean; a ratio is taken inside each
    resample. Percentile interval at ``level``; SE = sd of the resamples. Resamples whose
    ratio is not finite (the denominator cell resampled to 0) are left out, and counted.
    Cells are resampled in sorted (length, kind) order from one generator seeded with
    ``seed``, so the same seed gives the same numbers whatever ``pairs`` asks.

    Assumes the items of a cell are an iid sample of prefixes of that kind (true of the
    worker's items: each from its own data line or sample) and that cells are independent.
    ``kind_names`` (by code) only name the kinds in the warnings.
    """

    def named(code: int) -> str:
        return kind_names[code] if kind_names and 0 <= code < len(kind_names) else str(code)

    length, kind = np.asarray(length), np.asarray(kind)
    values = np.asarray(values, dtype=float).reshape(length.size, len(metrics))
    rng = np.random.default_rng(seed)
    present, cell = (
        cells(length, kind) if length.size else (np.zeros((0, 2), np.int64), np.zeros(0, int))
    )
    means: dict[tuple[int, int], np.ndarray] = {}  # per cell: estimates (M,)
    boots: dict[tuple[int, int], np.ndarray] = {}  # per cell: resampled means (B x M)
    counts: dict[tuple[int, int], np.ndarray] = {}
    out_cells: list[SyntheticCell] = []
    warnings: list[str] = []
    gd_cols = (
        (metrics.index("gd"), metrics.index("word_gd"))
        if "gd" in metrics and "word_gd" in metrics
        else None
    )
    for j, (ln, kd) in enumerate(present):
        x = values[cell == j]
        finite = np.isfinite(x)
        est = np.full(len(metrics), np.nan)
        boot = np.full((b, len(metrics)), np.nan)
        groups: dict[bytes, list[int]] = {}
        for m in range(len(metrics)):  # metrics missing on the same items share the draws
            groups.setdefault(finite[:, m].tobytes(), []).append(m)
        for cols in groups.values():
            rows = x[finite[:, cols[0]]][:, cols]
            if rows.shape[0] == 0:
                continue
            est[cols] = rows.mean(axis=0)
            boot[:, cols] = resample_sums(rows, b, rng) / rows.shape[0]
        key = (int(ln), int(kd))
        means[key], boots[key], counts[key] = est, boot, finite.sum(axis=0)
        figures = {
            name: _figure("cgd", name, ln, int(kd), None, est[m], boot[:, m], level, counts[key][m])
            for m, name in enumerate(metrics)
        }
        agree = float("nan")
        if gd_cols is not None:
            both = finite[:, gd_cols[0]] & finite[:, gd_cols[1]]
            if both.any():
                agree = float(np.mean(x[both, gd_cols[0]] == x[both, gd_cols[1]]))
        out_cells.append(SyntheticCell(int(ln), int(kd), int(x.shape[0]), figures, agree))

    ratios: list[SyntheticFigure] = []
    for ln in sorted({int(v) for v in present[:, 0]}):
        for pair in pairs:
            num, den, g = (*pair, 0)[:3]
            top, bottom = (ln, num), (ln + g, den)
            if top not in means or bottom not in means:
                continue
            est = synthetic_ratio(means[top], means[bottom])
            boot = synthetic_ratio(boots[top], boots[bottom])
            name = "ebc_gap" if g else "ebc" if (num, den) == (MODEL_KIND, DATA_KIND) else "ratio"
            for m, metric in enumerate(metrics):
                n = counts[top][m] + counts[bottom][m]
                if means[bottom][m] == 0 and means[top][m] != 0:
                    warnings.append(
                        f"l={ln}, {metric}: CGD({named(den)}) is 0, so "
                        f"CGD({named(num)}) / CGD({named(den)}) is undefined (null)"
                    )
                fig = _figure(name, metric, ln, num, den, est[m], boot[:, m], level, n, ln + g)
                dropped = b - fig.n_resamples
                if np.isfinite(fig.estimate) and dropped:
                    warnings.append(
                        f"l={ln}, {metric}: {dropped} of {b} resamples of "
                        f"CGD({named(num)}) / CGD({named(den)}) had a denominator of 0; "
                        "left out of its interval"
                    )
                ratios.append(fig)
    return SyntheticTable(
        metrics=list(metrics),
        b=b,
        seed=seed,
        level=level,
        cells=out_cells,
        ratios=ratios,
        warnings=warnings,
    )
