"""The results documents of a ratings study (the later paper's second protocol).

The figures are the ratings statistics' own dataclasses
(:mod:`app.results.stats.ratings`), written through models made from them field for
field (:func:`figures_model`): a float becomes a :data:`~app.results.stats.Figure`, so a
figure that cannot be computed (NaN) is ``null`` in JSON and ``number | null`` in the
OpenAPI document, as every other figure of the results. The unit of every count is named:
a **rating** is one annotator's ratings (quality, then consistency) of one
context-continuation pair; a **pair** is one context-continuation item.

:class:`RatingsOut` is the ``ratings`` field of :class:`app.results.schemas.ResultsOut`
for a ratings study; :class:`RatingsSet` holds one variant (with or without the study's
exclusions), its Table 3 in :class:`RatingsRow`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.results.stats import Figure
from app.results.stats.ratings import (
    AgreementRow,
    CellMean,
    Contrast,
    PaperRow,
    Trend,
)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


def figures_model(dc: type) -> type[BaseModel]:
    """A pydantic model with the fields of the statistics dataclass `dc`, its floats as
    Figure (NaN and +-inf: null in JSON); made from `dc` so the two never drift apart."""
    hints = typing.get_type_hints(dc, include_extras=True)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(dc):
        tp = hints[f.name]
        fields[f.name] = (Figure if tp is float or tp == Figure else tp, ...)
    return create_model(f"{dc.__name__}Out", __base__=_Out, __doc__=dc.__doc__, **fields)


CellMeanOut = figures_model(CellMean)
ContrastOut = figures_model(Contrast)
PaperRowOut = figures_model(PaperRow)
TrendOut = figures_model(Trend)
AgreementRowOut = figures_model(AgreementRow)


def figures(model: type[BaseModel], obj: Any) -> Any:
    """`obj` (a statistics dataclass) as `model`."""
    return model.model_validate(obj, from_attributes=True)


class StepRow(_Out):
    """One step (quality or consistency) at one length: data and model means, their
    contrast (gap and ratio with intervals), and the paper's mean +- std figures."""

    data: CellMeanOut | None  # type: ignore[valid-type]
    model: CellMeanOut | None  # type: ignore[valid-type]
    contrast: ContrastOut | None  # type: ignore[valid-type]
    paper: dict[str, PaperRowOut] = Field(  # type: ignore[valid-type]
        description="the paper's mean +- std over runs: data, model, gap, ratio"
    )


class RatingsRow(_Out):
    """One row of the later paper's Table 3: one prefix length, quality then consistency."""

    length: int
    quality: StepRow
    consistency: StepRow


class RatingsSet(_Out):
    """Every figure of one variant (with or without the exclusions)."""

    exclusions_applied: bool
    b: int
    seed: int
    level: float
    n_ratings: int = Field(description="ratings counted (attention pairs left out)")
    n_annotators: int
    n_simulated: int = Field(
        0, description="of n_ratings, those by simulated annotators (a simulated crowd)"
    )
    simulated: str | None = Field(
        None, description="'includes N ratings from a simulated crowd'; null: people only"
    )
    interval: str = Field(description="the headline intervals' method, in words")
    table: list[RatingsRow] = Field(description="the later paper's Table 3, one row a length")
    cells: list[CellMeanOut] = Field(  # type: ignore[valid-type]
        description="every (length, kind, step) mean"
    )
    contrasts: list[ContrastOut] = Field(  # type: ignore[valid-type]
        description="data against model per length and step: gap and ratio"
    )
    secondary: list[ContrastOut] = Field(  # type: ignore[valid-type]
        default_factory=list,
        description="the same contrasts with intervals by the other method (see their method)",
    )
    paper_label: str
    paper: list[PaperRowOut] = Field(  # type: ignore[valid-type]
        description="paper-comparable mean +- std over random disjoint runs of pairs"
    )
    trends: list[TrendOut]  # type: ignore[valid-type]
    agreement: list[AgreementRowOut]  # type: ignore[valid-type]
    warnings: list[str]

    def paper_design(self, length: str = "l={}") -> str:
        """The paper-comparable figure's runs x pairs: once (``5 runs of 50 pairs``) when
        every length has the same, else per length (``5 runs of 50 pairs at l=10, 5 runs
        of 3 pairs at l=20``; `length` formats the length); empty without figures."""
        return paper_design(self.paper, length)


def _runs(runs: int, pairs: int) -> str:
    return f"{runs} runs of {pairs} pair{'' if pairs == 1 else 's'}"


def paper_design(paper: list[Any], length: str = "l={}") -> str:
    """See :meth:`RatingsSet.paper_design` (`paper`: its rows, each with length, runs,
    pairs; a length's runs and pairs are the same at both steps)."""
    per_length = sorted({(p.length, p.runs, p.pairs) for p in paper})
    if len({(r, n) for _, r, n in per_length}) == 1:
        return _runs(*per_length[0][1:])
    return ", ".join(f"{_runs(r, n)} at {length.format(ln)}" for ln, r, n in per_length)


class RaterQualityOut(_Out):
    """One annotator's quality-control figures, on all their ratings (attention pairs
    included), with who they are and whether the exclusion rules dropped them."""

    annotator_id: int
    label: str
    channel: str
    simulated: bool
    blocked: bool
    n_ratings: int
    n_attention: int = Field(description="attention pairs rated")
    attention_pass: Figure = Field(
        description="share of them rated at most attention_max, scale_max / 5 (expected)"
    )
    top_value_share: Figure = Field(description="share of the most frequent value given")
    leniency: Figure = Field(
        description="mean deviation from the other raters of the same pair (null: none shared)"
    )
    too_fast_share: Figure
    excluded: bool = Field(description="none of their ratings count with the exclusions")


class RatingsOut(_Out):
    """A ratings study's figures from its ratings: quality and consistency per length and
    prefix kind, with and without the study's exclusions (the study's exclusion report is
    the document's ``exclusions``, counted in ratings)."""

    unit: str = Field(
        "rating: one annotator's quality and consistency ratings of one context-continuation pair",
        description="what n_ratings counts",
    )
    scale_max: int
    step: float
    results: RatingsSet | None = Field(description="main figures (as the exclusions option)")
    other: RatingsSet | None = Field(description="the same with the opposite exclusions")
    quality: list[RaterQualityOut] = Field(description="per annotator, on all their ratings")
    n_ratings: int = Field(
        description="every rating of a submitted HIT on a shown pair (before exclusions)"
    )
    unfinished_ratings: int = Field(
        0,
        description="ratings stored in HITs not submitted (begun, given back or lapsed): "
        "counted in neither variant, kept in ratings.csv with their assignment_status",
    )
    unfinished_hits: int = Field(
        0, description="the unfinished HITs those are in (assignments: one annotator's HIT)"
    )
    attention_max: float = Field(
        description="an attention pair passes at a quality of at most this: scale_max / 5"
    )
    open_consistency: int = Field(
        description="counted ratings without a consistency (a HIT is submitted with its "
        "last consistency, so none are expected)"
    )
    simulated_ratings: int = Field(
        0, description="ratings by simulated annotators these figures include (most of both)"
    )
    messages: list[str]

    @property
    def simulated_label(self) -> str | None:
        return simulated_ratings_label(self.simulated_ratings)


def simulated_ratings_label(n: int) -> str | None:
    """What every surface of a ratings study's results says when simulated ratings count."""
    if n <= 0:
        return None
    return f"includes {n:,} rating{'s' if n != 1 else ''} from a simulated crowd"


__all__ = [
    "AgreementRowOut",
    "CellMeanOut",
    "ContrastOut",
    "PaperRowOut",
    "RaterQualityOut",
    "RatingsOut",
    "RatingsRow",
    "RatingsSet",
    "StepRow",
    "TrendOut",
    "figures",
    "figures_model",
    "paper_design",
    "simulated_ratings_label",
]
