"""The paper-comparable runs and the per-annotator quality figures of a ratings study
(the dataclasses they fill live in :mod:`app.results.stats.ratings`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .columns import codes, unique_inverse
from .ratings_columns import STEPS, RatingColumns

PAPER_RUNS_LABEL = (
    "mean ± std over disjoint random runs of pairs (the later paper's figure; "
    "std with ddof 0; not a confidence interval)"
)
ATTENTION_SHARE = 0.2
"""An attention pair's expected quality at most, as a share of the scale: 1 on 0-5."""


def attention_max(scale_max: float) -> float:
    """The quality an attention pair (a continuation of shuffled words) should get at most
    on a 0 to ``scale_max`` scale: ``scale_max / 5`` (1 on the later paper's 0-5 scale,
    its "invalid" end; 2 on 0-10). The one threshold the quality figures, the exclusion
    rule (through :attr:`app.studytypes.ratings.queries.Ratings.attention_correct`), bulk
    approval and the pages read."""
    return float(scale_max) * ATTENTION_SHARE


def attention_passed(quality: np.ndarray, scale_max: float) -> np.ndarray:
    """Per rating: its quality is at most :func:`attention_max` (with a margin of 1e-9,
    the values being stored floats)."""
    return np.asarray(quality, dtype=float) <= attention_max(scale_max) + 1e-9


@dataclass(frozen=True)
class PaperRun:
    """One ``(length, step, what)`` of the paper's figure: the per-run values."""

    length: int
    step: str
    what: str  # a kind name, "gap" or "ratio"
    values: np.ndarray
    pairs: int


def paper_split(pair_ids: np.ndarray, runs: int, per_run: int, seed: int, length: int, kind: int):
    """The runs of one cell: its pairs (distinct ids, sorted) permuted by
    ``numpy.random.default_rng([seed, length, kind]).permutation``; run ``r`` takes
    positions ``r * per_run`` to ``(r + 1) * per_run - 1`` of the permutation, the rest
    is unused. The same runs serve both steps (a run is a set of pairs). Returns a list
    of ``runs`` arrays of pair ids."""
    ids = np.unique(pair_ids)
    perm = np.random.default_rng([seed, length, kind]).permutation(ids.size)
    return [ids[perm[r * per_run : (r + 1) * per_run]] for r in range(runs)]


def paper_runs(
    cols: RatingColumns,
    data_kind: int,
    model_kind: int,
    *,
    runs: int,
    pairs: int,
    seed: int,
    notes: list[str],
) -> list[PaperRun]:
    """The later paper's figure per (length, step): each kind's pairs split at random
    into ``runs`` disjoint runs of ``pairs`` pairs (:func:`paper_split`); per run the
    mean rating of each kind (pooled over the run's ratings), ``gap = data - model`` and
    ``ratio = data / model`` (of the run's pooled means). When a kind has fewer than
    ``runs * pairs`` pairs, every run takes ``floor(n_pairs / runs)`` pairs of each
    kind (the smaller kind decides) and a note says so. ``cols`` holds no attention
    pair. Lengths missing a kind, or with fewer pairs than runs, get nothing (noted)."""
    out: list[PaperRun] = []
    for length in np.unique(cols.length):
        at = cols.length == length
        ids = {k: np.unique(cols.item[at & (cols.kind == k)]) for k in (data_kind, model_kind)}
        n_min = min(v.size for v in ids.values())
        if n_min == 0:
            continue  # no contrast at this length (noted with the contrasts)
        per_run = min(pairs, n_min // runs)
        if per_run == 0:
            notes.append(
                f"l={int(length)}: {n_min} pairs of a kind cannot make {runs} runs: "
                "no paper-comparable figure there"
            )
            continue
        if per_run < pairs:
            notes.append(
                f"l={int(length)}: {n_min} pairs of a kind, fewer than the paper's "
                f"{runs} runs x {pairs} pairs: {runs} runs of {per_run} "
                f"pair{'s' if per_run > 1 else ''} each"
            )
        run_of: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for k, k_ids in ids.items():
            parts = paper_split(k_ids, runs, per_run, seed, int(length), k)
            chosen = np.concatenate(parts)
            order = np.argsort(chosen)
            run = np.repeat(np.arange(runs), [p.size for p in parts])
            run_of[k] = (chosen[order], run[order])  # sorted pair ids, their runs
        for step in STEPS:
            means = {}
            for k, (chosen, run) in run_of.items():
                rows = at & (cols.kind == k)
                y = cols.values(step)[rows]
                pos = np.minimum(np.searchsorted(chosen, cols.item[rows]), chosen.size - 1)
                in_run = (chosen[pos] == cols.item[rows]) & np.isfinite(y)
                r = run[pos][in_run]
                s = np.bincount(r, weights=y[in_run], minlength=runs)
                n = np.bincount(r, minlength=runs)
                with np.errstate(invalid="ignore", divide="ignore"):
                    means[k] = s / n
            d, m = means[data_kind], means[model_kind]
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = d / m
            for what, v in (
                (cols.kinds[data_kind], d),
                (cols.kinds[model_kind], m),
                ("gap", d - m),
                ("ratio", ratio),
            ):
                out.append(PaperRun(int(length), step, what, v, per_run))
    return out


def summarise_run(values: np.ndarray) -> tuple[float, float]:
    """``(mean, std)`` over the runs, std with ddof 0 as :mod:`.paper` (``numpy.std``);
    NaN when a run has no value (no ratings at this step, a model mean of 0)."""
    if values.size == 0 or not np.isfinite(values).all():
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(ddof=0))


@dataclass(frozen=True)
class RaterFigures:
    annotator: np.ndarray
    n_ratings: np.ndarray
    n_attention: np.ndarray
    attention_pass: np.ndarray
    top_value_share: np.ndarray
    leniency: np.ndarray
    too_fast_share: np.ndarray


def rater_figures(cols: RatingColumns) -> RaterFigures:
    """Per annotator (sorted ids), over every row of ``cols``:

    - ``n_ratings``: pairs rated (one row each); ``n_attention``: attention pairs rated;
    - ``attention_pass``: share of attention pairs rated at most
      :func:`attention_max` (``scale_max / 5``) for quality (their expected rating), NaN
      without any;
    - ``top_value_share``: ``max_v #{ratings = v} / #ratings`` over the annotator's
      quality and consistency ratings of non-attention pairs (1.0: one value for
      everything, straight-lining), NaN without any;
    - ``leniency``: mean over the annotator's ratings (both steps, non-attention pairs
      rated by someone else too) of ``y - mean of the other raters' ratings of that pair
      at that step``; NaN when no pair is shared;
    - ``too_fast_share``: share of rows flagged too fast.
    """
    ids, a = unique_inverse(cols.annotator)
    g = ids.size
    att = cols.attention.astype(bool)
    n_ratings = np.bincount(a, minlength=g)
    n_att = np.bincount(a, weights=att, minlength=g)
    passed = np.bincount(
        a, weights=att & attention_passed(cols.quality, cols.scale_max), minlength=g
    )
    fast = np.bincount(a, weights=cols.too_fast.astype(float), minlength=g)
    p, n_p = codes(cols.item)
    dev_sum, dev_n = np.zeros(g), np.zeros(g)
    value_rows, value_ann = [], []
    for step in STEPS:
        y = cols.values(step)
        ok = ~att & np.isfinite(y)
        value_rows.append(y[ok])
        value_ann.append(a[ok])
        s = np.bincount(p[ok], weights=y[ok], minlength=n_p)
        n = np.bincount(p[ok], minlength=n_p)
        shared = ok & (n[p] >= 2)
        other = (s[p] - y)[shared] / (n[p][shared] - 1)
        dev_sum += np.bincount(a[shared], weights=y[shared] - other, minlength=g)
        dev_n += np.bincount(a[shared], minlength=g)
    vals, vi = unique_inverse(np.concatenate(value_rows))
    va = np.concatenate(value_ann)
    table = np.bincount(va * vals.size + vi, minlength=g * max(vals.size, 1))
    table = table.reshape(g, max(vals.size, 1))
    total = table.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return RaterFigures(
            annotator=ids,
            n_ratings=n_ratings,
            n_attention=n_att.astype(np.int64),
            attention_pass=np.where(n_att > 0, passed / n_att, np.nan),
            top_value_share=np.where(total > 0, table.max(axis=1) / total, np.nan),
            leniency=np.where(dev_n > 0, dev_sum / dev_n, np.nan),
            too_fast_share=fast / n_ratings,
        )
