"""P_D of a simulated next-word crowd over HTTP: what an annotator of a next-word study
answers, from the page it reads and the simulator's god-view
(:mod:`app.simulate.godview`).

A :class:`Judge` turns both into the honest answer of one annotator (a model rank 1..k of a
shown word, 0 for "none"); :func:`app.simulate.crowd.deliver` then layers inattention on top
and maps the answer to a screen slot. Two judges:

- :class:`StandInJudge`: the parametric stand-in of :mod:`app.simulate.crowd` (a chosen true
  EB-C). It needs the model's rank of each shown word and each item's kind and length: the
  god-view. Per-annotator skill ``u_a`` and annotator x kind effects ``v_(a,k)`` are drawn
  once per simulated annotator, the item effect ``e_i`` once per item (seeded by the item's
  id, so every annotator meets the same item), exactly as in the module's model.
- :class:`ModelJudge`: a model P_D, the stored ``items.reference`` of a study with a
  ``[reference]`` model (``worker.synthetic``). ``oracle`` picks ``reference_top_word``
  when it is among the shown words, else "none", so its ``d`` equals the item's
  ``word_gd``; ``sampler`` draws choice ``i`` with probability ``choice_probs[i]`` and
  "none" with ``none_prob``. Every annotator shares the one P_D (no heterogeneity: the
  model is the truth being checked).

Attention items are answered by the attention rule of :func:`app.simulate.crowd.deliver`
under both judges (an unambiguous next word, answered right by the attentive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.simulate.crowd import Crowd, StandIn, honest_choice
from app.simulate.godview import ItemTruth, SimulationError, StudyView


class Judge(Protocol):
    """P_D of a simulated crowd: an annotator's honest answers to one HIT's items."""

    def describe(self) -> str:
        """One line for the run's report."""
        ...

    def annotator(self, rng: np.random.Generator) -> Any:
        """Per-annotator state, drawn once when the annotator is made (heterogeneity)."""
        ...

    def honest(
        self,
        rng: np.random.Generator,
        crowd: Crowd,
        state: Any,
        items: Sequence[ItemTruth],
        shown: Sequence[Sequence[str]],
    ) -> np.ndarray:
        """Model ranks (1..k, 0 for "none") of the honest answers to ``items``, whose
        pages show the words ``shown`` (screen order). A rank is always that of a shown
        word, or 0."""
        ...


@dataclass(frozen=True)
class _Effects:
    u: float
    v: np.ndarray  # by kind code


class StandInJudge:
    """The parametric stand-in P_D (:class:`app.simulate.crowd.StandIn`) over a study's
    kind codes; ``seed`` fixes the item effects."""

    def __init__(
        self, stand_in: StandIn, kinds: list[str], *, seed: int, base: str = "sampler"
    ) -> None:
        self.stand_in = stand_in
        self.kinds = kinds
        self.seed = seed
        self.base = base  # the behaviour the truth is stated for

    @classmethod
    def calibrated(
        cls,
        study: StudyView,
        crowd: Crowd,
        *,
        true_ebc: float,
        cgd_data: float = 0.73,
        seed: int = 0,
    ) -> StandInJudge:
        stand_in = StandIn.calibrated(
            list(study.lengths),
            len(study.kinds),
            cgd_data=cgd_data,
            ebc=true_ebc,
            base=crowd.base,
            hetero=crowd.hetero,
            top_k=study.top_k,
        )
        return cls(stand_in, study.kinds, seed=seed, base=crowd.base)

    def describe(self) -> str:
        lengths = sorted({ln for ln, _ in self.stand_in.mu})
        ebc = {ln: self.stand_in.true_ebc(ln, self.base) for ln in lengths}
        shown = ", ".join(f"l={ln}: {v:.4g}" for ln, v in ebc.items())
        return f"stand-in P_D (parametric), true EB-C ({self.base}) {shown}"

    def annotator(self, rng: np.random.Generator) -> _Effects:
        h = self.stand_in.hetero
        return _Effects(
            u=float(rng.normal(0.0, h.sd_annotator)),
            v=rng.normal(0.0, h.sd_annotator_kind, len(self.kinds)),
        )

    def _item_effect(self, item_id: int) -> float:
        return float(
            np.random.default_rng([self.seed, item_id]).normal(0.0, self.stand_in.hetero.sd_item)
        )

    def honest(
        self,
        rng: np.random.Generator,
        crowd: Crowd,
        state: _Effects,
        items: Sequence[ItemTruth],
        shown: Sequence[Sequence[str]],
    ) -> np.ndarray:
        eta = np.zeros(len(items))
        for n, item in enumerate(items):
            if item.attention:
                continue  # answered by the attention rule (crowd.deliver)
            code = self.kinds.index(item.kind) if item.kind in self.kinds else -1
            mu = self.stand_in.mu.get((item.length, code), 0.0)
            effect = state.v[code] if code >= 0 else 0.0
            eta[n] = mu + state.u + effect + self._item_effect(item.item_id)
        ranks = honest_choice(rng, crowd, self.stand_in, eta)
        # An item with fewer shown words than top-k: a rank past them is not on screen.
        return np.array([r if r <= len(s) else 0 for r, s in zip(ranks, shown, strict=True)])


class ModelJudge:
    """A model P_D: the items' stored ``reference`` (module docstring)."""

    def describe(self) -> str:
        return "model P_D (the study's reference model, items.reference)"

    def annotator(self, rng: np.random.Generator) -> None:
        return None

    def honest(
        self,
        rng: np.random.Generator,
        crowd: Crowd,
        state: None,
        items: Sequence[ItemTruth],
        shown: Sequence[Sequence[str]],
    ) -> np.ndarray:
        out = np.zeros(len(items), np.int64)
        for n, (item, words) in enumerate(zip(items, shown, strict=True)):
            ref = item.reference
            if item.attention and not ref:
                continue  # answered by the attention rule (crowd.deliver)
            if not ref:
                raise SimulationError(
                    f"item {item.item_id} has no reference: a model P_D needs a study with a "
                    "[reference] model, precomputed"
                )
            if crowd.base == "oracle":
                top = ref["reference_top_word"]
                out[n] = item.rank(top) if top in words else 0
                continue
            p = np.array([*ref["choice_probs"], ref["none_prob"]], float)
            pick = int(rng.choice(p.size, p=p / p.sum()))
            word = item.words[pick] if pick < len(item.words) else None
            out[n] = item.rank(word) if word is not None and word in words else 0
        return out


__all__ = ["Judge", "ModelJudge", "StandInJudge"]
