"""The columns a ratings study's results read (one entry per rating of a pair).

Built from the database by :func:`app.studytypes.ratings.queries.load_ratings` and by the
simulated raters of :mod:`app.studytypes.ratings.raters`; the statistics of
:mod:`app.results.stats.ratings` read nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STEPS = ("quality", "consistency")


@dataclass
class RatingColumns:
    """One entry per rating (one annotator's ratings of one context-continuation pair).

    ``annotator``, ``hit`` and ``item`` are ids (any integers; equal ids are the same
    annotator, HIT or pair); ``kind`` a code into ``kinds`` (``data`` 0, ``model`` 1, as
    :func:`app.results.queries.kind_codes` names them); ``length`` the prefix length in
    words. ``quality`` is always given; ``consistency`` is NaN where the rater has not
    given it yet (an assignment left between the two steps). ``attention`` marks the
    attention pairs (a continuation of shuffled words: expected quality at most
    ``scale_max / 5``, :func:`.ratings_figures.attention_max`), kept out of every mean
    and used for quality control. ``too_fast`` and ``late`` as stored.
    ``scale_max`` and ``step``: the study's scale (0 to ``scale_max`` in ``step`` steps).
    """

    kinds: list[str]
    annotator: np.ndarray
    hit: np.ndarray
    item: np.ndarray
    length: np.ndarray
    kind: np.ndarray
    quality: np.ndarray
    consistency: np.ndarray
    attention: np.ndarray
    too_fast: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    scale_max: int = 5
    step: float = 0.5
    simulated: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        n = self.annotator.size
        for name in ("too_fast", "late", "simulated"):
            if getattr(self, name).size == 0 and n:
                setattr(self, name, np.zeros(n, bool))
        sizes = {
            name: getattr(self, name).size
            for name in (
                "annotator",
                "hit",
                "item",
                "length",
                "kind",
                "quality",
                "consistency",
                "attention",
                "too_fast",
                "late",
                "simulated",
            )
        }
        if len(set(sizes.values())) > 1:
            raise ValueError(f"rating columns of different lengths: {sizes}")

    @property
    def n(self) -> int:
        return int(self.annotator.size)

    def subset(self, keep: np.ndarray) -> RatingColumns:
        """The ratings where `keep` is true (same kinds and scale)."""
        return RatingColumns(
            kinds=list(self.kinds),
            annotator=self.annotator[keep],
            hit=self.hit[keep],
            item=self.item[keep],
            length=self.length[keep],
            kind=self.kind[keep],
            quality=self.quality[keep],
            consistency=self.consistency[keep],
            attention=self.attention[keep],
            too_fast=self.too_fast[keep],
            late=self.late[keep],
            scale_max=self.scale_max,
            step=self.step,
            simulated=self.simulated[keep],
        )

    def values(self, step: str) -> np.ndarray:
        if step not in STEPS:
            raise ValueError(f"a rating step is one of {STEPS}, not {step!r}")
        return self.quality if step == "quality" else self.consistency
