"""Simulated raters for a ratings study over HTTP: the rater model of
:mod:`app.studytypes.ratings.raters` applied to the pairs the server's pages show.

The line between what a rater sees and what the simulation needs is that of
:mod:`app.simulate.godview`:

- **the page** (:mod:`app.simulate.page`, what a rater sees): which pair (its position in
  the HIT), which step (quality, then consistency), the scale's points as the page posts
  them, and the form to post;
- **the god-view** (:class:`app.simulate.godview.GodView`, never sent): the pair's item id,
  kind, prefix length and attention flag.

A :class:`RaterJudge` turns the two into one rating: rater ``a``'s rating of pair ``i`` at
step ``s`` is :meth:`app.studytypes.ratings.raters.Rater.rate` with the latent mean
``mu_(l,k,s)`` of the pair's length and kind, the rater's leniency and rater x kind effect
(drawn once per simulated rater, :meth:`RaterJudge.rater`), the pair effect ``e_(i,s)``
seeded by the item's id (so every rater meets the same pair,
:meth:`app.studytypes.ratings.raters.Raters.pair_effect`) and fresh noise, rounded to the scale. The
truth is the raters' exact population mean per (length, kind, step)
(:meth:`app.studytypes.ratings.raters.Raters.truth`).

Inattention leaves the truth alone: ``noisy`` and ``spammers`` as in
:mod:`app.studytypes.ratings.raters`, and ``fast``: a share of ratings are uniform over the scale's
points and posted faster than the study's minimum time per item (the HTTP crowd reports
the time). Kinds other than ``data`` and ``model`` (diagnostic kinds) get the data's true
means, as :meth:`app.simulate.crowd.StandIn.calibrated` gives them the data's CGD.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.models import StudyType
from app.results.queries import ATTENTION_KIND
from app.results.stats import MODEL_KIND
from app.results.stats.ratings_columns import STEPS
from app.simulate.godview import ItemTruth, SimulationError, StudyView
from app.studytypes.ratings.annotation import Scale
from app.studytypes.ratings.raters import (
    PAPER_CONSISTENCY,
    PAPER_QUALITY,
    Rater,
    RaterHeterogeneity,
    Raters,
)

# The later paper's Table 3 shape: a model-prefix continuation rated a little lower.


@dataclass(frozen=True)
class RaterJudge:
    """Simulated raters of a ratings study whose kind codes are ``kinds``
    (:func:`app.results.queries.kind_codes`); ``seed`` fixes the pair effects."""

    raters: Raters
    kinds: list[str]
    seed: int = 0
    fast: float = 0.0  # share of ratings that are uniform clicks posted too fast

    @classmethod
    def calibrated(
        cls,
        study: StudyView,
        *,
        quality: tuple[float, float] = PAPER_QUALITY,
        consistency: tuple[float, float] = PAPER_CONSISTENCY,
        hetero: RaterHeterogeneity | None = None,
        noisy: float = 0.0,
        fast: float = 0.0,
        spammers: float = 0.0,
        attention_accuracy: float = 0.95,
        seed: int = 0,
    ) -> RaterJudge:
        """Raters of `study` whose true mean ratings are ``quality`` and ``consistency``
        (data, model) at every length, on the study's scale."""
        if study.study_type != StudyType.ratings:
            raise SimulationError(
                f"study {study.slug!r} is a {study.study_type} study: raters rate ratings studies"
            )
        for name, share in (("noisy", noisy), ("fast", fast), ("spammers", spammers)):
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"the share of {name!r} must lie in [0, 1], not {share}")
        targets: dict[tuple[int, int, str], float] = {}
        for length in study.lengths:
            for code, kind in enumerate(study.kinds):
                if kind == ATTENTION_KIND:
                    continue
                which = 1 if code == MODEL_KIND else 0
                targets[(length, code, "quality")] = quality[which]
                targets[(length, code, "consistency")] = consistency[which]
        scale = Scale.of(study.ratings)
        raters = Raters.calibrated(
            targets,
            hetero,
            scale_max=scale.scale_max,
            step=scale.step,
            noisy=noisy,
            spammers=spammers,
            attention_accuracy=attention_accuracy,
        )
        return cls(raters, list(study.kinds), seed=seed, fast=fast)

    def describe(self) -> str:
        """One line for the run's report: the true means and the raters' differences."""
        r, h = self.raters, self.raters.hetero
        data, model = self.kinds[0], self.kinds[MODEL_KIND]
        lengths = sorted({ln for ln, _, _ in r.mu})
        per_length = []
        for ln in lengths:
            steps = ", ".join(
                f"{step} {r.truth(ln, 0, step):.3g} ({data}) {r.truth(ln, MODEL_KIND, step):.3g} "
                f"({model})"
                for step in STEPS
            )
            per_length.append(f"l={ln}: {steps}")
        inattention = ", ".join(
            f"{name} {share:g}"
            for name, share in (("noisy", r.noisy), ("fast", self.fast), ("spammers", r.spammers))
            if share
        )
        return (
            f"simulated raters, true mean ratings (0-{r.scale_max} in steps of {r.step:g}) "
            + "; ".join(per_length)
            + f"; sd rater {h.sd_rater:g}, rater x kind {h.sd_rater_kind:g}, pair "
            f"{h.sd_pair:g}, noise {h.sd_noise:g}"
            + (f"; inattention: {inattention}" if inattention else "")
        )

    def rater(self, rng: np.random.Generator) -> Rater:
        """A new simulated rater's draws (leniency, rater x kind effects, spammer)."""
        return Rater.draw(self.raters, len(self.kinds), rng)

    def rate(
        self, rng: np.random.Generator, rater: Rater, item: ItemTruth, step: str
    ) -> tuple[float, bool]:
        """`rater`'s rating of the pair `item` at `step` (a point of the scale), and
        whether it is a too-fast click (module docstring)."""
        if step not in STEPS:
            raise SimulationError(f"the page asks for a step {step!r}, not one of {STEPS}")
        if rng.random() < self.fast:
            return float(rng.choice(self.raters.points())), True
        code = self.kinds.index(item.kind) if item.kind in self.kinds else -1
        if not item.attention and (item.length, code, step) not in self.raters.mu:
            raise SimulationError(
                f"item {item.item_id} (length {item.length}, kind {item.kind!r}) is not in "
                "the study's design"
            )
        value = rater.rate(
            self.raters,
            length=item.length,
            kind=code,
            step=step,
            pair_effect=self.raters.pair_effect(item.item_id, step, self.seed),
            attention=item.attention,
            rng=rng,
        )
        return value, False


__all__ = ["PAPER_CONSISTENCY", "PAPER_QUALITY", "RaterJudge"]
