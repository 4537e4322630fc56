"""A simulated crowd: a stand-in P_D with a chosen true EB-C, and annotator behaviours.

The stand-in person (docs/design.md §1, "The measurement"). Annotator ``a`` looking at item
``i`` (a prefix of length ``l`` and kind ``k``, shown with the model's top-k words and
"none") has a next-word distribution over the k + 1 answers whose mass on the model's
top-1 word is::

    q_ai = sigmoid(eta_ai),   eta_ai = mu_(l,k) + u_a + v_(a,k) + e_i

with ``u_a ~ N(0, sd_annotator^2)`` (skill), ``v_(a,k) ~ N(0, sd_annotator_kind^2)`` (an
annotator x kind effect, drawn once per annotator and kind: it does not cancel inside a
HIT), ``e_i ~ N(0, sd_item^2)`` (how predictable the prefix is), all independent. The
rest, ``1 - q_ai``, is split over ranks 2..k and "none" in the fixed shares ``other``.

Behaviours of an honest annotator:

- ``sampler``: one draw from that distribution, so ``P(d = 1 | a, i) = 1 - q_ai``;
- ``oracle``: its argmax: the top-1 when ``q_ai > max(other) (1 - q_ai)``, i.e.
  ``eta_ai > ln max(other)``, else the most likely other answer ("none" when that is
  "none"), so ``d = 1[eta_ai <= ln max(other)]``.

Truth. Annotators differ, so "the" CGD is the researcher's population figure: the
expected ``d`` of one judgment by an annotator drawn from the population on a prefix
drawn from the kind, ``E_(a,i)[P(d = 1 | a, i)]`` (docs/design.md: the headline figures answer
the researcher's question about the population). With ``s^2`` the sum of the three
variances it is exact::

    sampler: CGD_(l,k) = 1 - E[sigmoid(mu_(l,k) + s Z)]   (Gauss-Hermite, 96 nodes)
    oracle:  CGD_(l,k) = Phi((ln max(other) - mu_(l,k)) / s)

and the true EB-C is ``CGD_(l,model) / CGD_(l,data)``. :meth:`StandIn.calibrated` solves
``mu`` for a chosen ``CGD(data)`` and EB-C per length. The realised crowd of one study
differs from the population (finitely many annotators and prefixes): that is the
sampling error an annotator-clustered interval must cover. Activity is drawn independent
of the effects, so the judgment-weighted and the annotator-weighted population averages
agree.

Inattention is layered on top of the honest behaviour and leaves the truth alone (it is
what the researcher wants to measure, not what the crowd delivers): ``noisy:s`` (a share
``s`` of judgments are uniform clicks over the k + 1 screen slots, so ``d = k/(k+1)``
in expectation, 5/6 for k = 5), ``position:s`` (a share clicks the first screen slot),
``fast:s`` (a share are uniform clicks answered faster than the study's minimum time),
``spammers:f`` (a share ``f`` of annotators click uniformly throughout, attention items
included).

Pure numpy (and scipy for the root finding); randomness only through a passed Generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import optimize, special

BASES = ("sampler", "oracle")
LAYERS = ("noisy", "position", "fast", "spammers")
_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(96)
_GH_W = _GH_W / math.sqrt(2 * math.pi)


class CrowdSpecError(ValueError):
    """A ``--crowd`` description that cannot be read; the message says why."""


@dataclass(frozen=True)
class Heterogeneity:
    """Differences between annotators and prefixes (logit scale) and how busy annotators
    are: each wants ``ceil(activity_min * (1 + Pareto(activity_tail)))`` HITs, at most the
    study's cap (a tail index near 1 is heavy: a few annotators do much of the work)."""

    sd_annotator: float = 0.5
    sd_annotator_kind: float = 0.3
    sd_item: float = 1.0
    activity_min: float = 2.0
    activity_tail: float = 1.2

    @property
    def sd_total(self) -> float:
        return math.sqrt(self.sd_annotator**2 + self.sd_annotator_kind**2 + self.sd_item**2)


@dataclass(frozen=True)
class Crowd:
    """An honest behaviour (``base``) with inattention layered on top, and heterogeneity.

    ``attention_accuracy``: how often an honest annotator answers an attention item
    right (its top-1 is the unambiguous next word)."""

    base: str = "sampler"
    noisy: float = 0.0
    position: float = 0.0
    fast: float = 0.0
    spammers: float = 0.0
    hetero: Heterogeneity = field(default_factory=Heterogeneity)
    attention_accuracy: float = 0.97

    @classmethod
    def parse(cls, spec: str, hetero: Heterogeneity | None = None) -> Crowd:
        """``"sampler"``, ``"oracle"``, ``"noisy:0.2"``, ``"oracle,position:0.1,fast:0.05"``:
        a base (default sampler) and layers with their shares in [0, 1]."""
        out: dict[str, object] = {}
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            name, _, value = part.partition(":")
            if name in BASES:
                if value:
                    raise CrowdSpecError(f"{name!r} takes no share (got {part!r})")
                if "base" in out:
                    raise CrowdSpecError("name one base behaviour: sampler or oracle")
                out["base"] = name
            elif name in LAYERS:
                try:
                    share = float(value)
                except ValueError:
                    raise CrowdSpecError(
                        f"{name!r} needs a share, e.g. {name}:0.2 (got {part!r})"
                    ) from None
                if not 0.0 <= share <= 1.0:
                    raise CrowdSpecError(f"the share of {name!r} must lie in [0, 1], not {share}")
                out[name] = share
            else:
                known = ", ".join((*BASES, *(f"{x}:SHARE" for x in LAYERS)))
                raise CrowdSpecError(f"unknown crowd behaviour {name!r}: use {known}")
        return cls(**out, hetero=hetero or Heterogeneity())  # type: ignore[arg-type]

    def describe(self) -> str:
        parts = [self.base] + [
            f"{name}:{getattr(self, name):g}" for name in LAYERS if getattr(self, name)
        ]
        return ",".join(parts)

    @property
    def random_share(self) -> float:
        """Share of judgments (by honest annotators) answered by a uniform click."""
        return self.noisy + (1 - self.noisy) * self.fast


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return special.expit(x)


@dataclass(frozen=True)
class StandIn:
    """The parametric P_D: ``mu`` per (length, kind code) on the logit scale, the shares
    ``other`` of ranks 2..k and "none" (in that order) in the non-top-1 mass, and the
    heterogeneity. See the module docstring for the exact truth."""

    mu: dict[tuple[int, int], float]
    other: tuple[float, ...]
    hetero: Heterogeneity

    @property
    def k(self) -> int:
        return len(self.other)

    def cgd(self, length: int, kind: int, base: str = "sampler") -> float:
        """The population CGD of one honest judgment in cell (length, kind), exactly."""
        return population_cgd(self.mu[(length, kind)], self.hetero.sd_total, self.other, base)

    def true_ebc(self, length: int, base: str = "sampler", data: int = 0, model: int = 1):
        return self.cgd(length, model, base) / self.cgd(length, data, base)

    @classmethod
    def calibrated(
        cls,
        lengths: list[int],
        n_kinds: int,
        *,
        cgd_data: float | dict[int, float] = 0.73,
        ebc: float | dict[int, float] = 1.0,
        base: str = "sampler",
        hetero: Heterogeneity | None = None,
        top_k: int = 5,
        other: tuple[float, ...] | None = None,
    ) -> StandIn:
        """``mu`` such that the population ``CGD(l, data)`` is ``cgd_data`` and
        ``CGD(l, model) = ebc * cgd_data`` for the honest behaviour ``base`` (a number
        for every length, or one per length). Kinds other than data (0) and model (1)
        get the data's CGD (a true ratio of 1)."""
        hetero = hetero or Heterogeneity()
        if other is None:
            # Ranks 2..k decreasing, "none" a quarter of the non-top-1 mass.
            ranks = np.array([1.0 / r for r in range(2, top_k + 1)])
            other = tuple([*(0.75 * ranks / ranks.sum()), 0.25])
        if len(other) != top_k or not math.isclose(sum(other), 1.0):
            raise ValueError(f"`other` needs {top_k} shares summing to 1")
        mu = {}
        for ln in lengths:
            p_d = cgd_data[ln] if isinstance(cgd_data, dict) else cgd_data
            r = ebc[ln] if isinstance(ebc, dict) else ebc
            for kind in range(n_kinds):
                target = p_d * r if kind == 1 else p_d
                if not 0.0 < target < 1.0:
                    raise ValueError(
                        f"EB-C {r:g} with CGD(data) {p_d:g} makes CGD(model) {target:.3f} at "
                        f"l={ln}, but a CGD is a share in (0, 1)"
                    )
                mu[(ln, kind)] = _solve_mu(target, hetero.sd_total, other, base)
        return cls(mu=mu, other=other, hetero=hetero)

    def with_hetero(self, hetero: Heterogeneity) -> StandIn:
        return replace(self, hetero=hetero)


def population_cgd(mu: float, sd: float, other: tuple[float, ...], base: str) -> float:
    """``1 - E[sigmoid(mu + sd Z)]`` (sampler) or ``Phi((ln max(other) - mu)/sd)``
    (oracle), Z standard normal."""
    if base == "sampler":
        return float(1.0 - np.dot(_GH_W, _sigmoid(mu + sd * _GH_X)))
    if base == "oracle":
        threshold = math.log(max(other))
        if sd == 0:
            return float(mu <= threshold)
        return float(special.ndtr((threshold - mu) / sd))
    raise ValueError(f"unknown behaviour {base!r}")


def _solve_mu(target: float, sd: float, other: tuple[float, ...], base: str) -> float:
    if base == "oracle":
        if sd == 0:
            raise ValueError("an oracle crowd with no heterogeneity has CGD 0 or 1")
        return math.log(max(other)) - sd * float(special.ndtri(target))
    return float(
        optimize.brentq(
            lambda m: population_cgd(m, sd, other, base) - target, -40.0, 40.0, xtol=1e-14
        )
    )


@dataclass(frozen=True)
class Answers:
    """Per judgment: the model rank chosen (1..k, 0 for none), the screen slot (0..k-1 a
    word, k none), and whether it was answered faster than the minimum time."""

    choice: np.ndarray
    option: np.ndarray
    too_fast: np.ndarray


def answer(
    rng: np.random.Generator,
    crowd: Crowd,
    stand_in: StandIn,
    *,
    eta: np.ndarray,
    attention: np.ndarray,
    spammer: np.ndarray,
    rank_at_slot: np.ndarray,
) -> Answers:
    """Answers of the crowd for judgments with linear predictors ``eta`` (module
    docstring), attention flags, whether each judgment's annotator is a spammer, and the
    item's screen order (``rank_at_slot``: n x k, the model rank shown in each slot)."""
    choice = honest_choice(rng, crowd, stand_in, eta)
    return deliver(
        rng, crowd, choice, attention=attention, spammer=spammer, rank_at_slot=rank_at_slot
    )


def honest_choice(
    rng: np.random.Generator, crowd: Crowd, stand_in: StandIn, eta: np.ndarray
) -> np.ndarray:
    """The honest answer (model rank 1..k, 0 for none) of the stand-in person with linear
    predictors ``eta``: one draw (``sampler``) or the argmax (``oracle``)."""
    n, k = eta.shape[0], stand_in.k
    other = np.asarray(stand_in.other)
    alt = np.concatenate([np.arange(2, k + 1), [0]])  # the answers `other` weighs
    if crowd.base == "sampler":
        top1 = rng.random(n) < _sigmoid(eta)
        second = alt[rng.choice(k, size=n, p=other)]
    else:
        top1 = eta > math.log(other.max())
        second = np.full(n, alt[int(np.argmax(other))])
    return np.where(top1, 1, second)


def deliver(
    rng: np.random.Generator,
    crowd: Crowd,
    choice: np.ndarray,
    *,
    attention: np.ndarray,
    spammer: np.ndarray,
    rank_at_slot: np.ndarray,
) -> Answers:
    """What the crowd delivers given honest answers ``choice`` (model ranks, 0 for none;
    from the stand-in or any other P_D): attention items answered right by the attentive,
    then the inattention layers (module docstring), on the screen order ``rank_at_slot``
    (n x k, the model rank shown in each slot; k words, then "none" in slot k)."""
    n, k = choice.shape[0], rank_at_slot.shape[1]
    # Attention items: an unambiguous next word, answered right by the attentive.
    right = rng.random(n) < crowd.attention_accuracy
    wrong = rng.integers(2, k + 2, size=n) % (k + 1)  # 2..k or 0 ("none")
    choice = np.where(attention, np.where(right, 1, wrong), choice)
    # Screen slot of the chosen rank in the item's order (none: slot k).
    slot_of = np.argsort(rank_at_slot, axis=1)  # rank r (1-based) is at slot_of[:, r-1]
    option = np.where(choice == 0, k, slot_of[np.arange(n), np.maximum(choice, 1) - 1])

    fast = rng.random(n) < crowd.fast
    clicks = spammer | fast | (rng.random(n) < crowd.noisy)
    first = ~clicks & (rng.random(n) < crowd.position)
    slot = np.where(first, 0, rng.integers(0, k + 1, size=n))
    clicked = clicks | first
    option = np.where(clicked, slot, option)
    shown = rank_at_slot[np.arange(n), np.minimum(option, k - 1)]
    choice = np.where(clicked, np.where(option == k, 0, shown), choice)
    return Answers(choice=choice.astype(np.int64), option=option.astype(np.int64), too_fast=fast)


def expected_with_random_clicks(cgd: float, share: float, k: int = 5) -> float:
    """``E[d]`` when a share of judgments are uniform clicks over k words and "none":
    ``(1 - share) CGD + share k/(k+1)`` (docs/design.md: d = 5/6 for a random answer)."""
    return (1.0 - share) * cgd + share * k / (k + 1)


__all__ = [
    "Answers",
    "Crowd",
    "CrowdSpecError",
    "Heterogeneity",
    "StandIn",
    "answer",
    "deliver",
    "expected_with_random_clicks",
    "honest_choice",
    "population_cgd",
]
