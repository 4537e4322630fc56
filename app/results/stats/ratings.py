"""Statistics of a ratings study (DESIGN.md "Second protocol: ratings of continuations").

CONTRACT (the dataclasses below are what the service, the pages, the exports and the
simulation read; the functions are filled in by the statistics work).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.results.stats.ratings_columns import STEPS, RatingColumns

__all__ = [
    "STEPS",
    "AgreementRow",
    "CellMean",
    "Contrast",
    "PaperRow",
    "RaterQuality",
    "RatingColumns",
    "RatingsStats",
    "Trend",
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
    ratings given, attention pairs rated and the share rated at most 1 (their expected
    rating), the share of the annotator's most frequent value (straight-lining), the mean
    deviation from the other raters' mean of the same pair (leniency; NaN when no pair is
    shared), and the share of ratings flagged too fast."""

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


def ratings_results(
    cols: RatingColumns,
    *,
    b: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    paper_runs: int = 5,
    paper_pairs: int = 50,
) -> RatingsStats:
    """Every figure of a ratings study from its columns (attention pairs are left out of
    the means; `cols` is already filtered by any exclusion rule)."""
    raise NotImplementedError("filled in by the statistics work of issue 15")


def rater_quality(cols: RatingColumns) -> list[RaterQuality]:
    """Per-annotator quality control figures (:class:`RaterQuality`), attention pairs
    included (they are what the attention figures read)."""
    raise NotImplementedError("filled in by the statistics work of issue 15")
