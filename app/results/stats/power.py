"""Power and budget planner for an EB-C study (docs/design.md §1, "Power").

Normal approximation on the log scale: with ``n`` independent judgments per cell,
``Var(ln EB-C_hat) ~= V / n`` where ``V = (1 - p_D)/p_D + (1 - p_M)/p_M`` (delta
method for the ratio of two binomial means; ``p_D = CGD(M|D)``, ``p_M = R p_D``).
Clustering multiplies the variance by the design effect ``deff`` (annotator-bootstrap
variance / iid variance, measured in a pilot or in the study so far).

Not every target can be planned: EB-C x CGD(data) must stay below 1 (CGD is a share), and a
tiny half-width or level ``alpha`` asks for more judgments than any study collects (or for
infinitely many). :func:`plan_study` then raises :class:`PlanError` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from .ebc import EBCResults
from .figure import Figure

# More judgments per cell than this is no plan for a study of people (the paper has 3,000).
MAX_JUDGMENTS_PER_CELL = 10**9


@dataclass(frozen=True)
class PlanTarget:
    """What a plan aims for: a test of EB-C = ``target_ebc`` against 1 at ``power`` and
    two-sided ``alpha``, or (when ``halfwidth`` is given) an interval of that half-width.
    The defaults here are the planner's only ones; every entry point takes them from here."""

    target_ebc: float | None = 1.02
    halfwidth: float | None = None
    power: float = 0.8
    alpha: float = 0.05


PAPER_CGD_DATA = 0.73
"""CGD(data) assumed before a study has data of its own (the paper's figure)."""
_T = PlanTarget


class PlanError(ValueError):
    """No finite study reaches the target; `reason` says why, `param` which input to change."""

    def __init__(self, reason: str, param: str = "target_ebc") -> None:
        super().__init__(reason)
        self.reason = reason
        self.param = param


def log_variance(cgd_data: float, ebc: float) -> float:
    """``V`` of the module docstring: ``n Var(ln EB-C_hat)`` with ``n`` independent
    judgments per cell, ``(1 - p_D)/p_D + (1 - p_M)/p_M``; a :class:`PlanError` where
    ``p_M = ebc * cgd_data`` is no share. A measured variance of ``ln EB-C_hat`` over this
    at ``n`` is the design effect (``deff = n Var / V``)."""
    return _v(cgd_data, ebc)


def _v(cgd_data: float, ebc: float) -> float:
    p_d, p_m = cgd_data, cgd_data * ebc
    if not 0 < p_d < 1:
        raise PlanError(f"CGD(data) must lie in (0, 1), not {p_d:g}", "cgd_data")
    if not 0 < p_m < 1:
        raise PlanError(
            f"EB-C {ebc:g} with CGD(data) {p_d:.3f} would need CGD(model) = {p_m:.3f}, but a "
            f"CGD is a share below 1: plan for an EB-C below {1 / p_d:.3f}",
            "target_ebc",
        )
    return (1 - p_d) / p_d + (1 - p_m) / p_m


def judgments_per_cell(
    target_ebc: float = _T.target_ebc,
    cgd_data: float = PAPER_CGD_DATA,
    *,
    alpha: float = _T.alpha,
    power: float = _T.power,
    design_effect: float = 1.0,
) -> float:
    """Judgments per cell to detect ``EB-C = target_ebc`` against 1 (two-sided ``alpha``)::

        n = deff (z_(1-alpha/2) + z_power)^2 [(1-p_D)/p_D + (1-p_M)/p_M] / (ln R)^2

    with ``p_M = R p_D``. For R = 1.02, p_D = 0.73: about 14,300 (deff = 1).
    """
    z = special.ndtri(1 - alpha / 2) + special.ndtri(power)
    return design_effect * z**2 * _v(cgd_data, target_ebc) / math.log(target_ebc) ** 2


def power_at(
    n: float,
    target_ebc: float = _T.target_ebc,
    cgd_data: float = PAPER_CGD_DATA,
    *,
    alpha: float = _T.alpha,
    design_effect: float = 1.0,
) -> float:
    """Power of the two-sided level-``alpha`` Wald test of ``ln EB-C = 0`` with ``n``
    judgments per cell: ``Phi(|ln R|/s - z) + Phi(-|ln R|/s - z)``,
    ``s = sqrt(deff V / n)``. The paper's 3,000 per cell gives about 0.25 for 1.02."""
    s = math.sqrt(design_effect * _v(cgd_data, target_ebc) / n)
    z = special.ndtri(1 - alpha / 2)
    shift = abs(math.log(target_ebc)) / s
    return float(special.ndtr(shift - z) + special.ndtr(-shift - z))


def smallest_detectable_ebc(
    n: float,
    cgd_data: float = PAPER_CGD_DATA,
    *,
    alpha: float = _T.alpha,
    power: float = _T.power,
    design_effect: float = 1.0,
) -> float:
    """Smallest ``R > 1`` with :func:`power_at` ``(n, R) = power``, solved exactly (the
    variance moves with ``p_M = R p_D``). About 1.043 at n = 3,000, p_D = 0.73; docs/design.md's
    "≈ 1.045" evaluates the variance at ``p_M = p_D``."""
    upper = min(1.0 / cgd_data, 10.0) * (1 - 1e-9)

    def f(r: float) -> float:
        return power_at(n, r, cgd_data, alpha=alpha, design_effect=design_effect) - power

    if f(upper) < 0:
        return float("inf")
    return float(optimize.brentq(f, 1.0 + 1e-12, upper, xtol=1e-10))


def judgments_for_halfwidth(
    halfwidth: float,
    ebc: float = 1.0,
    cgd_data: float = PAPER_CGD_DATA,
    *,
    level: float = 0.95,
    design_effect: float = 1.0,
) -> float:
    """Judgments per cell for a ``level`` interval of EB-C with half-width ``halfwidth``
    at ``EB-C = ebc`` (delta method, ``SE(R) = R sqrt(deff V / n)``)::

        n = deff z^2 V R^2 / halfwidth^2
    """
    z = special.ndtri(0.5 + level / 2)
    return design_effect * z**2 * _v(cgd_data, ebc) * ebc**2 / halfwidth**2


def design_effect(results: EBCResults) -> float:
    """Design effect measured so far: the mean over lengths of
    ``(SE_cluster(EB-C) / SE_iid(EB-C))^2`` from :func:`estimate_ebc` results (use
    ``unit="annotator"``). NaN when there is no EB-C."""
    vals = [q.design_effect for q in results.ratios if q.name == "ebc"]
    vals = [v for v in vals if math.isfinite(v)]
    return sum(vals) / len(vals) if vals else float("nan")


@dataclass(frozen=True)
class StudyPlan:
    """Judgments, HITs, annotators and cost for a target (docs/design.md's power formula).

    The target as asked (``target_ebc``, ``halfwidth``, ``alpha``, ``power_target``);
    what the plan assumes: ``cgd_data`` (measured on the study's data, or the paper's
    0.73) and ``design_effect`` (measured by annotator bootstrap, else 1); what it takes:
    judgments per cell before (``_iid``) and after clustering, HITs, assignments,
    judgments, annotators (the per-annotator cap and cell share) and ``cost`` (in the
    currency of the reward, platform fee included); ``power`` of the plan (NaN for a
    half-width plan). ``judgments_per_cell_now`` is the smallest data or model cell so
    far, with its power for the target (``power_now``) and the smallest EB-C it detects
    at that power (``smallest_detectable_ebc_now``); NaN where there is none.
    """

    target_ebc: float | None
    halfwidth: float | None
    cgd_data: float
    cgd_data_measured: bool
    alpha: float
    power_target: float
    design_effect: float
    design_effect_measured: bool
    judgments_per_cell_iid: int
    judgments_per_cell: int
    power: Figure
    hits_per_length: int
    hits: int
    assignments: int
    judgments: int
    annotators_needed: int
    cost: float
    judgments_per_cell_now: int
    power_now: Figure
    smallest_detectable_ebc_now: Figure
    assumptions: str


def plan_study(
    *,
    target_ebc: float | None = _T.target_ebc,
    halfwidth: float | None = _T.halfwidth,
    cgd_data: float | None = None,
    alpha: float = _T.alpha,
    power: float = _T.power,
    design_effect: float | None = None,
    judgments_now: int = 0,
    lengths: Iterable[int] = (10, 20, 30),
    items_per_kind_per_hit: int = 5,
    items_per_hit: int = 10,
    replicas: int = 1,
    max_hits_per_annotator: int = 200,
    max_cell_share: float | None = None,
    reward_per_assignment: float = 0.5,
    platform_fee: float = 0.2,
) -> StudyPlan:
    """Plan a study for a target EB-C (power) or an interval half-width.

    ``n_iid`` from :func:`judgments_per_cell` (or :func:`judgments_for_halfwidth` when
    ``halfwidth`` is given); ``n = ceil(deff n_iid)``. A HIT of one length carries
    ``items_per_kind_per_hit`` items of each kind, each judged by ``replicas``
    annotators, so ``HITs per length = ceil(n / (items_per_kind_per_hit * replicas))``
    (replicated judgments of one item are not independent: the design effect measured
    with replicas accounts for that). Assignments = HITs x replicas. Annotators needed
    = ``max(ceil(assignments / max_hits_per_annotator), ceil(1 / max_cell_share))``.
    Cost = assignments x reward x (1 + platform fee) (MTurk: 20%, 40% with 10 or more
    assignments per HIT).

    ``cgd_data`` None: the paper's 0.73 (``cgd_data_measured`` false). ``design_effect``
    None, NaN or not above 0: 1 (``design_effect_measured`` false). ``judgments_now``
    (judgments per cell so far): the power they give for the target and the smallest
    EB-C they detect, by :func:`power_at` and :func:`smallest_detectable_ebc`.
    """
    lengths = list(lengths)
    cgd_measured = cgd_data is not None
    cgd_data = PAPER_CGD_DATA if cgd_data is None else cgd_data
    deff_measured = design_effect is not None and math.isfinite(design_effect) and design_effect > 0
    design_effect = float(design_effect) if deff_measured else 1.0
    if halfwidth is not None:
        if not halfwidth > 0:
            raise PlanError("the half-width must be above 0", "halfwidth")
        with np.errstate(divide="ignore", over="ignore"):  # infinite: refused below
            n_iid = judgments_for_halfwidth(halfwidth, target_ebc or 1.0, cgd_data, level=1 - alpha)
        what = f"{1 - alpha:.0%} interval half-width {halfwidth:g}"
        blame = "halfwidth"
    elif target_ebc is not None:
        if not target_ebc > 1:
            raise PlanError("the target EB-C must be above 1", "target_ebc")
        if not alpha < power:
            # A level-alpha test rejects with probability alpha without any data.
            raise PlanError(f"power {power:g} must exceed alpha {alpha:g}", "power")
        with np.errstate(divide="ignore", over="ignore"):
            n_iid = judgments_per_cell(target_ebc, cgd_data, alpha=alpha, power=power)
        what = f"power {power:g} for EB-C {target_ebc:g} vs 1 at alpha {alpha:g}"
        blame = "target_ebc"
    else:
        raise PlanError("give a target EB-C or a half-width", "target_ebc")
    needed = design_effect * n_iid
    if not needed <= MAX_JUDGMENTS_PER_CELL:  # also infinite or NaN
        if not math.isfinite(special.ndtri(1 - alpha / 2)):
            blame = "alpha"  # 1 - alpha/2 rounds to 1: z is infinite
        how_many = f"{needed:.3g}" if math.isfinite(needed) else "infinitely many"
        instead = "a wider half-width" if halfwidth is not None else "a larger target EB-C"
        raise PlanError(
            f"this needs {how_many} judgments per cell, more than any study collects "
            f"(over {MAX_JUDGMENTS_PER_CELL:,}): ask for {instead} or a larger alpha",
            blame,
        )
    n = math.ceil(design_effect * n_iid)
    per_hit = items_per_kind_per_hit * replicas
    hits_per_length = math.ceil(n / per_hit)
    hits = hits_per_length * len(lengths)
    assignments = hits * replicas
    annotators = math.ceil(assignments / max_hits_per_annotator)
    if max_cell_share:
        annotators = max(annotators, math.ceil(1 / max_cell_share))
    pw = (
        power_at(n, target_ebc, cgd_data, alpha=alpha, design_effect=design_effect)
        if target_ebc and target_ebc != 1
        else float("nan")
    )
    power_now = detectable = float("nan")
    if judgments_now > 0 and target_ebc and target_ebc != 1:
        try:
            power_now = power_at(
                judgments_now, target_ebc, cgd_data, alpha=alpha, design_effect=design_effect
            )
            detectable = smallest_detectable_ebc(
                judgments_now, cgd_data, alpha=alpha, power=power, design_effect=design_effect
            )
        except ValueError:  # (the target itself is planned above: only the "now" figures)
            pass
    return StudyPlan(
        target_ebc=target_ebc,
        halfwidth=halfwidth,
        cgd_data=cgd_data,
        cgd_data_measured=cgd_measured,
        alpha=alpha,
        power_target=power,
        design_effect=design_effect,
        design_effect_measured=deff_measured,
        judgments_per_cell_iid=math.ceil(n_iid),
        judgments_per_cell=n,
        power=pw,
        hits_per_length=hits_per_length,
        hits=hits,
        assignments=assignments,
        judgments=assignments * items_per_hit,
        annotators_needed=annotators,
        cost=round(assignments * reward_per_assignment * (1 + platform_fee), 2),
        judgments_per_cell_now=judgments_now,
        power_now=power_now,
        smallest_detectable_ebc_now=detectable,
        assumptions=f"{what}; CGD(data) {cgd_data:g}; design effect {design_effect:g}; "
        f"{len(lengths)} lengths; {items_per_kind_per_hit} items per kind per HIT; "
        f"{replicas} replica(s); normal approximation on ln EB-C",
    )
