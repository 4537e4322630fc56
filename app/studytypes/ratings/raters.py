"""Simulated raters for ratings studies (the later paper's second protocol), with a known
truth.

Rater ``a`` rating pair ``i`` (a continuation after a prefix of length ``l`` and kind
``k``) at step ``s`` (quality, then consistency) forms a latent judgment::

    y = mu_(l,k,s) + u_(a,s) + v_(a,k,s) + e_(i,s) + eps,

``u ~ N(0, sd_rater^2)`` (a rater's leniency: some rate everything higher), ``v ~
N(0, sd_rater_kind^2)`` (a rater x kind effect, drawn once per rater, kind and step: it
does not cancel inside a HIT), ``e ~ N(0, sd_pair^2)`` (how good the pair is, drawn once
per pair, so every rater meets the same pair) and ``eps ~ N(0, sd_noise^2)`` (this one
rating), all independent. The rating given is ``y`` rounded to the nearest scale point
and clipped to the scale: ``r = clip(step * floor(y / step + 1/2), 0, scale_max)``.

Truth. The researcher's figure is the population mean rating of a kind: the expected
``r`` of one rating by a rater drawn from the population of a pair drawn from the kind.
With ``y ~ N(mu, s^2)``, ``s^2`` the sum of the four variances, it is exact::

    E[r] = step * sum_(j = 1..J) Phi((mu - (j - 1/2) step) / s),   J = scale_max / step

(``r >= j step`` exactly when ``y >= (j - 1/2) step``). The true gap is ``E[r | data] -
E[r | model]`` and the true ratio ``E[r | data] / E[r | model]``, per length and step.
:meth:`Raters.calibrated` solves ``mu`` for chosen true means. A realised study differs
from the population (finitely many raters and pairs): the sampling error an interval must
cover.

Inattention leaves the truth alone: ``noisy`` (a share of ratings are uniform over the
scale's points) and ``spammers`` (a share of raters rate uniformly throughout, attention
pairs included). An attentive rater rates an attention pair (shuffled words) at most
``attention_max`` (a fifth of the scale: 1 on 0-5) with probability
``attention_accuracy`` (uniform over those points), else uniformly.

Pure numpy and scipy; randomness only through a passed Generator or an explicit seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special

from app.results.stats import DATA_KIND, MODEL_KIND
from app.results.stats.ratings_columns import STEPS, RatingColumns
from app.results.stats.ratings_figures import attention_max
from app.simulate.crowd import Heterogeneity
from app.simulate.design import Design, Slots, assign_slots, hit_layout

# Default true means (after data, after model prefixes) per step: a model-prefix
# continuation rated a little lower, as in the later paper's Table 3.
PAPER_QUALITY = (3.4, 3.1)
PAPER_CONSISTENCY = (3.3, 2.9)


@dataclass(frozen=True)
class RaterHeterogeneity:
    """Differences between raters and pairs (rating points) and how busy raters are (as
    :class:`app.simulate.crowd.Heterogeneity`: a heavy Pareto tail, a few raters do much of
    the work)."""

    sd_rater: float = 0.5
    sd_rater_kind: float = 0.25
    sd_pair: float = 0.6
    sd_noise: float = 0.7
    activity_min: float = 2.0
    activity_tail: float = 1.2

    @property
    def sd_total(self) -> float:
        return math.sqrt(
            self.sd_rater**2 + self.sd_rater_kind**2 + self.sd_pair**2 + self.sd_noise**2
        )

    def activity(self) -> Heterogeneity:
        return Heterogeneity(activity_min=self.activity_min, activity_tail=self.activity_tail)

    def check(self) -> None:
        """ValueError unless every sd is finite and not negative and one is positive: with
        all four 0 a kind's every rating is the same scale point, ``E[r]`` a step function
        of ``mu``, and no true mean between two points can be calibrated."""
        for name in ("sd_rater", "sd_rater_kind", "sd_pair", "sd_noise"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be finite and not negative (got {value:g})")
        if self.sd_total == 0.0:
            raise ValueError(
                "the total sd of the raters' ratings is 0 (sd_rater, sd_rater_kind, sd_pair "
                "and sd_noise all 0): every rating of a kind would be the same scale point, "
                "so no true mean between two points can be met; give one a positive value"
            )


def _phi(x: np.ndarray | float) -> np.ndarray:
    return 0.5 * special.erfc(-np.asarray(x, float) / math.sqrt(2.0))


def expected_rating(mu: float, sd: float, scale_max: int, step: float) -> float:
    """``E[r]`` of a rounded, clipped ``N(mu, sd^2)`` rating (module docstring)."""
    j = np.arange(1, round(scale_max / step) + 1)
    return float(step * _phi((mu - (j - 0.5) * step) / sd).sum())


def _solve_mu(target: float, sd: float, scale_max: int, step: float) -> float:
    if not 0.0 < target < scale_max:
        raise ValueError(f"a true mean rating lies strictly inside (0, {scale_max}), not {target}")
    return float(
        optimize.brentq(
            lambda m: expected_rating(m, sd, scale_max, step) - target,
            -10.0 * scale_max - 10.0,
            11.0 * scale_max + 10.0,
            xtol=1e-12,
        )
    )


def round_to_scale(y: np.ndarray, scale_max: int, step: float) -> np.ndarray:
    return np.clip(step * np.floor(np.asarray(y) / step + 0.5), 0.0, float(scale_max))


@dataclass(frozen=True)
class Raters:
    """A rater population: latent means ``mu[(length, kind code, step)]``, heterogeneity,
    inattention and the scale."""

    mu: Mapping[tuple[int, int, str], float]
    hetero: RaterHeterogeneity = field(default_factory=RaterHeterogeneity)
    scale_max: int = 5
    step: float = 0.5
    noisy: float = 0.0
    spammers: float = 0.0
    attention_accuracy: float = 0.95

    @classmethod
    def calibrated(
        cls,
        targets: Mapping[tuple[int, int, str], float],
        hetero: RaterHeterogeneity | None = None,
        *,
        scale_max: int = 5,
        step: float = 0.5,
        **fields: float,
    ) -> Raters:
        """Raters whose true mean rating of ``(length, kind code, step)`` is ``targets[...]``
        (ValueError for sds :meth:`RaterHeterogeneity.check` refuses, or a mean not
        strictly inside the scale)."""
        hetero = hetero or RaterHeterogeneity()
        hetero.check()
        mu = {
            key: _solve_mu(float(t), hetero.sd_total, scale_max, step) for key, t in targets.items()
        }
        return cls(mu=mu, hetero=hetero, scale_max=scale_max, step=step, **fields)

    @classmethod
    def paper_like(
        cls,
        lengths: tuple[int, ...],
        *,
        quality: tuple[float, float] = PAPER_QUALITY,
        consistency: tuple[float, float] = PAPER_CONSISTENCY,
        hetero: RaterHeterogeneity | None = None,
        scale_max: int = 5,
        step: float = 0.5,
        **fields: float,
    ) -> Raters:
        """True means (data, model) per step at every length: by default a model-prefix
        continuation rated a little lower, as in the later paper's Table 3."""
        targets: dict[tuple[int, int, str], float] = {}
        for ln in lengths:
            for code, i in ((DATA_KIND, 0), (MODEL_KIND, 1)):
                targets[(ln, code, "quality")] = quality[i]
                targets[(ln, code, "consistency")] = consistency[i]
        return cls.calibrated(targets, hetero, scale_max=scale_max, step=step, **fields)

    def truth(self, length: int, kind: int, step: str) -> float:
        """The population mean rating of a kind at a length and step (exact)."""
        return expected_rating(
            self.mu[(length, kind, step)], self.hetero.sd_total, self.scale_max, self.step
        )

    def true_gap(self, length: int, step: str) -> float:
        return self.truth(length, DATA_KIND, step) - self.truth(length, MODEL_KIND, step)

    def true_ratio(self, length: int, step: str) -> float:
        return self.truth(length, DATA_KIND, step) / self.truth(length, MODEL_KIND, step)

    def points(self) -> np.ndarray:
        return np.arange(round(self.scale_max / self.step) + 1) * self.step

    def pair_effect(self, item_id: int, step: str, seed: int) -> float:
        """``e_(i,s)`` of a stored pair: seeded by its id, so every rater meets the same pair."""
        rng = np.random.default_rng([seed, int(item_id), STEPS.index(step)])
        return float(rng.normal(0.0, self.hetero.sd_pair))


@dataclass(frozen=True)
class Rater:
    """One simulated rater's draws: leniency per step, rater x kind effects, spammer."""

    u: np.ndarray  # (2,) per step
    v: np.ndarray  # (n kinds, 2)
    spammer: bool

    @classmethod
    def draw(cls, raters: Raters, n_kinds: int, rng: np.random.Generator) -> Rater:
        h = raters.hetero
        return cls(
            u=rng.normal(0.0, h.sd_rater, 2),
            v=rng.normal(0.0, h.sd_rater_kind, (n_kinds, 2)),
            spammer=bool(rng.random() < raters.spammers),
        )

    def rate(
        self,
        raters: Raters,
        *,
        length: int,
        kind: int,
        step: str,
        pair_effect: float,
        attention: bool,
        rng: np.random.Generator,
    ) -> float:
        """One rating of one pair at one step (the page's value, a scale point)."""
        points = raters.points()
        if self.spammer or rng.random() < raters.noisy:
            return float(rng.choice(points))
        if attention:
            if step == "quality" and rng.random() < raters.attention_accuracy:
                return float(rng.choice(points[points <= attention_max(raters.scale_max) + 1e-9]))
            if step == "quality":
                return float(rng.choice(points))
            return float(rng.choice(points[points <= 1.5 * attention_max(raters.scale_max) + 1e-9]))
        s = STEPS.index(step)
        y = (
            raters.mu[(length, kind, step)]
            + self.u[s]
            + self.v[kind, s]
            + pair_effect
            + rng.normal(0.0, raters.hetero.sd_noise)
        )
        return float(round_to_scale(y, raters.scale_max, raters.step))


def simulate_ratings(design: Design, raters: Raters, rng: np.random.Generator) -> RatingColumns:
    """One simulated ratings study as the results read it: HITs of one length holding the
    design's mix of pairs (5 data + 5 model by default) and its attention pairs, each done
    by ``design.replicas`` raters (5 in the paper), taken as :func:`assign_slots` assigns
    next-word HITs (heavy-tailed activity, the cap, never one HIT twice), every pair rated
    for quality and consistency by the model of the module docstring (vectorised).

    ValueError when ``raters.mu`` has no latent mean for a (length, kind, step) the HITs
    hold (a diagnostic kind or a length the raters were not calibrated for): a mean of 0
    would be a truth nobody chose. Attention pairs need none."""
    design.check()
    missing = [
        f"(l={ln}, {design.kinds[code]}, {step})"
        for ln in design.lengths
        for code in sorted(design.mix)
        for step in STEPS
        if code != design.attention_code and (ln, code, step) not in raters.mu
    ]
    if missing:
        raise ValueError(
            f"the raters have no true mean rating for {', '.join(missing)}: calibrate them "
            "for every length and kind of the design"
        )
    h = raters.hetero
    pos_kind, hit_length = hit_layout(design)
    per_hit = pos_kind.size
    replicas = np.full(hit_length.size, design.replicas, np.int64)
    a_annot, a_hit, _ = assign_slots(rng, design, h.activity(), hit_length, replicas)
    n_annot = int(a_annot.max()) + 1
    slots = Slots.of(design, a_annot, a_hit, pos_kind, hit_length)
    annotator, hit, item = slots.annotator, slots.hit, slots.item
    kind, length, attention = slots.kind, slots.length, slots.attention
    n_kinds, n_items, n = len(design.kinds), hit_length.size * per_hit, annotator.size
    points = raters.points()

    out = {}
    for step in STEPS:
        mu = np.zeros(n)  # every rated pair's is set (checked above); attention pairs'
        for (ln, code, st), m in raters.mu.items():  # ratings are replaced below
            if st == step:
                mu[(length == ln) & (kind == code)] = m
        u = rng.normal(0.0, h.sd_rater, n_annot)
        v = rng.normal(0.0, h.sd_rater_kind, (n_annot, n_kinds))
        e = rng.normal(0.0, h.sd_pair, n_items)
        y = mu + u[annotator] + v[annotator, kind] + e[item] + rng.normal(0.0, h.sd_noise, n)
        r = round_to_scale(y, raters.scale_max, raters.step)
        top = attention_max(raters.scale_max) * (1.0 if step == "quality" else 1.5)
        low = points[points <= top + 1e-9]
        right = rng.random(n) < (raters.attention_accuracy if step == "quality" else 1.0)
        r = np.where(attention, np.where(right, rng.choice(low, n), rng.choice(points, n)), r)
        out[step] = r
    spammer = rng.random(n_annot) < raters.spammers
    for step in STEPS:
        random = spammer[annotator] | (rng.random(n) < raters.noisy)
        out[step] = np.where(random, rng.choice(points, n), out[step])
    return RatingColumns(
        kinds=list(design.kinds),
        annotator=annotator + 1,
        hit=hit + 1,
        item=item + 1,
        length=length,
        kind=kind,
        quality=out["quality"],
        consistency=out["consistency"],
        attention=attention,
        scale_max=raters.scale_max,
        step=raters.step,
        simulated=np.ones(n, bool),
    )
