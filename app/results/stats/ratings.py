"""Statistics of a ratings study (docs/design.md "Second protocol: ratings of continuations").

The dataclasses below are what the service, the pages, the exports and the simulation
read. One rating is one annotator's rating of one context-continuation pair at one step
(quality, then consistency); a cell is one prefix length x kind at one step. Attention
pairs never enter a mean; a missing consistency (NaN) leaves that rating out of the
consistency figures only.

- Means, gaps, ratios and trends: :mod:`.ratings_inference` (the design is crossed, each
  pair rated by several annotators: the headline interval is two-way, annotator x pair;
  the plain annotator-cluster bootstrap is the labelled secondary figure).
- Agreement: :mod:`.ratings_agreement` (Krippendorff's alpha, percent agreement).
- The paper's runs and the per-annotator figures: :mod:`.ratings_figures`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.results.stats.columns import cells as cells_present
from app.results.stats.ebc import FEW_ANNOTATORS
from app.results.stats.ratings_agreement import rating_agreement
from app.results.stats.ratings_columns import STEPS, RatingColumns
from app.results.stats.ratings_figures import (
    PAPER_RUNS_LABEL,
    paper_runs,
    rater_figures,
    summarise_run,
)
from app.results.stats.ratings_inference import (
    ANNOTATOR_BOOTSTRAP,
    METHOD_LABELS,
    TWOWAY,
    Estimands,
    Intervals,
    estimands,
    intervals,
)

__all__ = [
    "ANNOTATOR_BOOTSTRAP",
    "METHOD_LABELS",
    "PAPER_AGREEMENT",
    "PAPER_RUNS_LABEL",
    "STEPS",
    "TWOWAY",
    "AgreementRow",
    "CellMean",
    "Contrast",
    "MeanRatings",
    "PaperRow",
    "RaterQuality",
    "RatingColumns",
    "RatingsStats",
    "Trend",
    "mean_ratings",
    "rater_quality",
    "ratings_results",
]


@dataclass(frozen=True)
class CellMean:
    """The mean rating of one (length, kind, step) cell, attention pairs left out, with an
    annotator-cluster interval."""

    length: int
    kind: str
    step: str  # "quality" | "consistency"
    mean: float
    ci_low: float
    ci_high: float
    n_ratings: int
    n_pairs: int
    n_annotators: int
    effective_annotators: float = float("nan")
    method: str = ""


@dataclass(frozen=True)
class Contrast:
    """Data against model prefixes at one length and step: the absolute gap
    (data - model) and the ratio data / model, with intervals (``method`` names them)."""

    length: int
    step: str
    data_mean: float
    model_mean: float
    gap: float
    gap_low: float
    gap_high: float
    ratio: float
    ratio_low: float
    ratio_high: float
    n_annotators: int
    effective_annotators: float
    method: str


@dataclass(frozen=True)
class PaperRow:
    """The paper's figure: mean +- std over ``runs`` runs of ``pairs`` pairs (disjoint
    random parts of the cell's pairs), labelled as such; ``what`` is a kind name, "gap"
    or "ratio"."""

    length: int
    step: str
    what: str
    mean: float
    std: float
    runs: int
    pairs: int


@dataclass(frozen=True)
class Trend:
    """The slope over prefix length (per word) of ``measure`` ("gap" or "log ratio") at
    one step, with an annotator-resampled interval."""

    step: str
    measure: str
    slope: float
    low: float
    high: float
    effective_annotators: float = float("nan")
    method: str = ""


@dataclass(frozen=True)
class AgreementRow:
    """Inter-annotator agreement on one step, over the pairs rated by two or more
    annotators: Krippendorff's alpha (interval and ordinal metric) with pair-bootstrap
    intervals, and pairwise percent agreement (exact, within one step, within one point);
    ``paper`` names which of them is the paper's "agreement" figure and says why."""

    step: str
    n_pairs: int
    n_ratings: int
    alpha_interval: float
    alpha_interval_low: float
    alpha_interval_high: float
    alpha_ordinal: float
    alpha_ordinal_low: float
    alpha_ordinal_high: float
    exact: float
    within_step: float
    within_point: float
    paper: str


@dataclass(frozen=True)
class RaterQuality:
    """Quality-control figures of one annotator (``annotator`` is the columns' id):
    ratings given, attention pairs rated and the share rated at most a fifth of the scale
    (1 on 0-5: their expected rating), the share of the annotator's most frequent value
    (straight-lining), the mean deviation from the other raters' mean of the same pair
    (leniency; NaN when no pair is shared), and the share of ratings flagged too fast."""

    annotator: int
    n_ratings: int
    n_attention: int
    attention_pass: float
    top_value_share: float
    leniency: float
    too_fast_share: float


@dataclass(frozen=True)
class RatingsStats:
    cells: list[CellMean]
    contrasts: list[Contrast]
    paper: list[PaperRow]
    trends: list[Trend]
    agreement: list[AgreementRow]
    n_ratings: int
    n_annotators: int
    level: float
    b: int
    seed: int
    warnings: list[str] = field(default_factory=list)
    method: str = ""  # the headline interval method, in words (METHOD_LABELS)
    # The contrasts by the other method (the one-way annotator bootstrap when the
    # headline is two-way, and the reverse), labelled in their ``method``.
    secondary: list[Contrast] = field(default_factory=list)


PAPER_AGREEMENT = (
    'the paper\'s "agreement ~65%" is not defined there; our reading is the share of '
    "pairs of ratings of the same continuation within one point of each other "
    "(within_point). Exact agreement on the 11 points of a half-point 0-5 scale is far "
    "lower: with raters as in app.simulate.raters' paper-like population, exact ~15%, "
    "within one step ~40%, within one point ~62%"
)
"""Which agreement figure is comparable with the paper's, and why (``AgreementRow.paper``).
The text is part of every ratings document: it names the raters' model by the module it had
when the figures were measured (``app.simulate.raters``, now
``app.studytypes.ratings.raters``), so the documents stay what they were."""


def ratings_results(
    cols: RatingColumns,
    *,
    b: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    paper_runs: int = 5,
    paper_pairs: int = 50,
    method: str = TWOWAY,
) -> RatingsStats:
    """Every figure of a ratings study from its columns (attention pairs are left out of
    the means; `cols` is already filtered by any exclusion rule).

    Per step (quality, consistency) and cell (length x kind): the **mean rating**, pooled
    over the cell's ratings (``sum y / n``). Per length: ``gap = mean_data -
    mean_model`` and ``ratio = mean_data / mean_model`` (a ratio of pooled means, never a
    mean of ratios). Per step, with two or more lengths: the OLS **trend** over l of the
    gap and of ``ln ratio`` (per word). Intervals at ``level`` by ``method``
    (:func:`app.results.stats.ratings_inference.intervals`): ``"twoway"`` (default;
    annotator x pair jackknife variance, t with ``G_eff - 1`` df; no resampling) or
    ``"annotator-bootstrap"`` (``b`` annotator resamples, percentile); the other method's
    contrasts are ``secondary``. Cell means' intervals are cut to the scale.

    The paper's figure (``paper``): mean +- std (ddof 0) over ``paper_runs`` disjoint
    random runs of ``paper_pairs`` pairs (:func:`.ratings_figures.paper_runs`).
    Agreement per step over pairs with >= 2 ratings: Krippendorff's alpha (interval and
    ordinal), pair-bootstrap intervals (``b`` resamples), and pairwise percent
    agreement (:func:`.ratings_agreement.rating_agreement`).

    Randomness only from ``seed``: the bootstrap of step s draws from
    ``default_rng([seed, s, 1])``, its agreement bootstrap from ``default_rng([seed, s,
    2])``, the paper's runs as :func:`.ratings_figures.paper_split`. Raises ValueError on
    no rating outside the attention pairs and on bad arguments; a figure that cannot be
    computed (a step without ratings, a missing kind) is NaN or absent, with a warning.
    """
    _check(b=b, level=level, seed=seed, method=method)
    if paper_runs < 1 or paper_pairs < 1:
        raise ValueError(
            f"paper_runs and paper_pairs must be positive ({paper_runs}, {paper_pairs})"
        )
    means = mean_ratings(cols, b=b, seed=seed, level=level, method=method)
    rated = _rated(cols)
    notes = list(means.warnings)
    agreement: list[AgreementRow] = []
    for s, step in enumerate(STEPS):
        sub = rated.subset(np.isfinite(rated.values(step)))
        row = _agreement(sub, step, b, [seed, s, 2], level, notes)
        if row is not None:
            agreement.append(row)
    data, model = _kind_codes(cols)
    paper = [
        PaperRow(r.length, r.step, r.what, *summarise_run(r.values), paper_runs, r.pairs)
        for r in _paper(rated, data, model, paper_runs, paper_pairs, seed, notes)
    ]
    return RatingsStats(
        cells=means.cells,
        contrasts=means.contrasts,
        paper=paper,
        trends=means.trends,
        agreement=agreement,
        n_ratings=rated.n,
        n_annotators=int(np.unique(rated.annotator).size),
        level=level,
        b=b,
        seed=seed,
        warnings=list(dict.fromkeys(notes)),
        method=METHOD_LABELS[method],
        secondary=means.secondary,
    )


@dataclass(frozen=True)
class MeanRatings:
    """The mean ratings, contrasts and trends of :func:`mean_ratings`; ``secondary``
    holds the contrasts by the other interval method."""

    cells: list[CellMean]
    contrasts: list[Contrast]
    secondary: list[Contrast]
    trends: list[Trend]
    warnings: list[str]


def mean_ratings(
    cols: RatingColumns,
    *,
    b: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    method: str = TWOWAY,
) -> MeanRatings:
    """The cell means, contrasts and trends of :func:`ratings_results` (the same
    definitions, intervals and seeds) without the agreement and the paper's runs."""
    _check(b=b, level=level, seed=seed, method=method)
    rated = _rated(cols)
    notes: list[str] = []
    data, model = _kind_codes(cols)
    present, _ = cells_present(rated.length, rated.kind)
    lengths = [int(x) for x in np.unique(present[:, 0])]
    both = [ln for ln in lengths if {data, model} <= set(present[present[:, 0] == ln, 1])]
    for ln in sorted(set(lengths) - set(both)):
        kinds = {cols.kinds[k] for k in present[present[:, 0] == ln, 1]}
        missing = [k for k in ("data", "model") if k not in kinds]
        notes.append(f"l={ln}: no {' or '.join(missing)} pairs, so no gap or ratio there")
    if len(both) < 2:
        notes.append("fewer than two prefix lengths with both kinds: no trend over l")
    n_annot = int(np.unique(rated.annotator).size)
    if n_annot < FEW_ANNOTATORS:
        notes.append(
            f"only {n_annot} annotators rated: intervals are unreliable below {FEW_ANNOTATORS}"
        )
    other = ANNOTATOR_BOOTSTRAP if method == TWOWAY else TWOWAY
    cell_rows: list[CellMean] = []
    contrasts: list[Contrast] = []
    secondary: list[Contrast] = []
    trends: list[Trend] = []
    for s, step in enumerate(STEPS):
        ok = np.isfinite(rated.values(step))
        if not ok.any():
            notes.append(f"no {step} ratings yet: its figures are empty")
        for ln in lengths:
            if ok.any() and not ok[rated.length == ln].any():
                notes.append(f"l={ln}: no {step} ratings yet")
        sub = rated.subset(ok)
        fit = _fit(sub, step, data, model, method, other, b, [seed, s, 1], level)
        for ln, kd in present:
            cell_rows.append(_cell_mean(sub, step, int(ln), int(kd), fit, cols.scale_max))
        for ln in both:
            contrasts.append(_contrast(step, ln, fit, "main", METHOD_LABELS[method]))
            secondary.append(_contrast(step, ln, fit, "other", METHOD_LABELS[other]))
        if fit is not None and ("trend gap", None, None) in fit.est.labels:
            trends += _trends(step, fit)
        if fit is not None:
            notes += [f"{step}: {n}" for n in fit.main.notes]
    # A contrast without ratings at a step (nan) has its own note above; only finite
    # counts can name the worst.
    few = [
        c
        for c in contrasts
        if np.isfinite(c.effective_annotators) and c.effective_annotators < FEW_ANNOTATORS
    ]
    if few:
        worst = min(few, key=lambda c: c.effective_annotators)
        notes.append(
            f"only {worst.effective_annotators:.1f} effective annotators "
            f"((sum n_g)^2 / sum n_g^2 over ratings per annotator; {worst.n_annotators} in "
            f"all) enter the {worst.step} gap at l={worst.length}: intervals are "
            f"unreliable below {FEW_ANNOTATORS}"
        )
    return MeanRatings(cell_rows, contrasts, secondary, trends, list(dict.fromkeys(notes)))


def _check(*, b: int, level: float, seed: int, method: str) -> None:
    if method not in METHOD_LABELS:
        raise ValueError(f"unknown interval method {method!r}; one of {sorted(METHOD_LABELS)}")
    if b < 1 or not 0.0 < level < 1.0 or seed < 0:
        raise ValueError(
            f"b must be positive, seed not negative and level in (0, 1) "
            f"(got b={b}, seed={seed}, level={level})"
        )


def _rated(cols: RatingColumns) -> RatingColumns:
    """The ratings outside the attention pairs (ValueError when there are none)."""
    rated = cols.subset(~cols.attention.astype(bool))
    if rated.n == 0:
        what = "attention pairs only" if cols.n else "no ratings"
        raise ValueError(f"nothing to compute: {what} (attention pairs enter no mean)")
    return rated


def _kind_codes(cols: RatingColumns) -> tuple[int, int]:
    """The codes of ``data`` and ``model`` (-1 for a kind the study does not have)."""
    return tuple(cols.kinds.index(k) if k in cols.kinds else -1 for k in ("data", "model"))


@dataclass(frozen=True)
class _Fit:
    est: Estimands
    main: Intervals
    other: Intervals


def _fit(sub, step, data, model, method, other, b, seed, level) -> _Fit | None:
    """Both methods' intervals for one step's ratings (``sub``: finite values only)."""
    if sub.n == 0:
        return None
    present, cell = cells_present(sub.length, sub.kind)
    est = estimands(present, data, model)
    y = sub.values(step)

    def run(m: str) -> Intervals:
        rng = np.random.default_rng(seed)  # the same draws whichever method is the headline
        return intervals(
            est, y, cell, sub.annotator, sub.item, method=m, b=b, seed=rng, level=level
        )

    return _Fit(est, run(method), run(other))


def _find(fit: _Fit | None, name: str, length=None, kind=None) -> int | None:
    if fit is None or (name, length, kind) not in fit.est.labels:
        return None
    return fit.est.index(name, length, kind)


def _cell_mean(sub, step, length, kind, fit, scale_max) -> CellMean:
    at = (sub.length == length) & (sub.kind == kind)
    k = _find(fit, "mean", length, kind)
    nan = float("nan")
    iv = fit.main if fit is not None else None
    return CellMean(
        length=length,
        kind=sub.kinds[kind],
        step=step,
        mean=float(iv.estimate[k]) if k is not None else nan,
        ci_low=float(max(iv.low[k], 0.0)) if k is not None else nan,
        ci_high=float(min(iv.high[k], scale_max)) if k is not None else nan,
        n_ratings=int(at.sum()),
        n_pairs=int(np.unique(sub.item[at]).size),
        n_annotators=int(np.unique(sub.annotator[at]).size),
        effective_annotators=float(iv.n_effective[k]) if k is not None else nan,
        method=iv.method if iv is not None else "",
    )


def _contrast(step: str, length: int, fit: _Fit | None, which: str, label: str) -> Contrast:
    nan = float("nan")
    g, r = _find(fit, "gap", length), _find(fit, "log ratio", length)
    if fit is None or g is None or r is None:  # no ratings of a kind at this step
        return Contrast(length, step, nan, nan, nan, nan, nan, nan, nan, nan, 0, nan, label)
    iv = fit.main if which == "main" else fit.other
    cells = fit.est.cells
    d = next(j for j, row in enumerate(fit.est.a_lin[g]) if row > 0)
    m = next(j for j, row in enumerate(fit.est.a_lin[g]) if row < 0)
    return Contrast(
        length=length,
        step=step,
        data_mean=float(iv.estimate[_find(fit, "mean", *map(int, cells[d]))]),
        model_mean=float(iv.estimate[_find(fit, "mean", *map(int, cells[m]))]),
        gap=float(iv.estimate[g]),
        gap_low=float(iv.low[g]),
        gap_high=float(iv.high[g]),
        ratio=float(np.exp(iv.estimate[r])),
        ratio_low=float(np.exp(iv.low[r])),
        ratio_high=float(np.exp(iv.high[r])),
        n_annotators=int(iv.n_annotators[g]),
        effective_annotators=float(iv.n_effective[g]),
        method=iv.method,
    )


def _trends(step: str, fit: _Fit) -> list[Trend]:
    out = []
    for name, measure in (("trend gap", "gap"), ("trend log ratio", "log ratio")):
        k = fit.est.index(name)
        iv = fit.main
        out.append(
            Trend(
                step=step,
                measure=measure,
                slope=float(iv.estimate[k]),
                low=float(iv.low[k]),
                high=float(iv.high[k]),
                effective_annotators=float(iv.n_effective[k]),
                method=iv.method,
            )
        )
    return out


def _agreement(sub, step, b, seed, level, notes) -> AgreementRow | None:
    res = rating_agreement(
        sub.item,
        sub.values(step),
        step=sub.step,
        b=b,
        seed=np.random.default_rng(seed),
        level=level,
    )
    if res is None:
        if sub.n:
            notes.append(f"{step}: fewer than two pairs rated twice or more: no agreement")
        return None
    return AgreementRow(step=step, **vars(res), paper=PAPER_AGREEMENT)


def _paper(rated, data, model, runs, pairs, seed, notes):
    if data < 0 or model < 0:
        return []
    return paper_runs(rated, data, model, runs=runs, pairs=pairs, seed=seed, notes=notes)


def rater_quality(cols: RatingColumns) -> list[RaterQuality]:
    """Per-annotator quality control figures (:class:`RaterQuality`), attention pairs
    included (they are what the attention figures read); the definitions are
    :func:`.ratings_figures.rater_figures`'. Sorted by annotator id; empty for no rows."""
    if cols.n == 0:
        return []
    f = rater_figures(cols)
    return [
        RaterQuality(
            annotator=int(f.annotator[g]),
            n_ratings=int(f.n_ratings[g]),
            n_attention=int(f.n_attention[g]),
            attention_pass=float(f.attention_pass[g]),
            top_value_share=float(f.top_value_share[g]),
            leniency=float(f.leniency[g]),
            too_fast_share=float(f.too_fast_share[g]),
        )
        for g in range(f.annotator.size)
    ]
