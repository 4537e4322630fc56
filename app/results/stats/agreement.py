"""Inter-annotator agreement on the model rank of the chosen word (docs/design.md §1, "Agreement").

Judgments are coded by the **model rank** of the chosen word (1..k, and one code for
"none"), never by the shuffled screen position. Only items with at least two
judgments (the overlap subset) enter; all four coefficients are functions of the
item x category count matrix ``n_uc`` (``m_u = sum_c n_uc`` judgments on item u), so
one item bootstrap (resampling items with replacement, weights ``W``) gives all four
intervals at once from ``W @ (per-item features)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .bootstrap import percentile_interval, resample_sums
from .columns import unique_inverse, unique_values
from .figure import Figure

AGREEMENT_B = 2000
"""The most resamples an agreement bootstrap takes (next-word items, rated pairs): a
secondary figure over thousands of overlap units, where 2,000 resamples put the Monte
Carlo error of a 95% bound well below its sampling error and cost a fifth of 10,000 (and
a ratings study's pair bootstrap holds ``b x V x V`` coincidence sums in memory)."""


def category_counts(
    item: np.ndarray, choice: np.ndarray, categories: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Item x category count matrix ``n_uc`` over items with >= 2 judgments.

    ``categories`` fixes the columns (e.g. ``[1, 2, 3, 4, 5, 0]`` for top-5 + none);
    by default the observed codes. Returns ``(counts, categories)``.
    """
    item, choice = np.asarray(item), np.asarray(choice)
    cats = np.unique(choice) if categories is None else np.asarray(categories)
    if not np.isin(unique_values(choice), cats).all():
        raise ValueError("a choice code is not among `categories`")
    # Only items judged at least twice enter (the overlap subset: a few percent).
    _, ii = unique_inverse(item)
    several = np.bincount(ii)[ii] >= 2 if ii.size else np.zeros(0, bool)
    if not several.all():
        choice = choice[several]
        _, ii = unique_inverse(item[several])
    by_value = np.argsort(cats)
    pos = np.minimum(np.searchsorted(cats[by_value], choice), cats.size - 1)
    col = by_value[pos]  # column in the caller's category order
    n_items = int(ii.max()) + 1 if ii.size else 0
    counts = np.bincount(ii * cats.size + col, minlength=n_items * cats.size).reshape(
        n_items, cats.size
    )
    return counts[counts.sum(axis=1) >= 2], cats


def _sum(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.sum(axis=0) for k, v in f.items()}


def _features(counts: np.ndarray) -> dict[str, np.ndarray]:
    n = counts.astype(float)
    m = n.sum(axis=1)
    same = np.sum(n * (n - 1), axis=1)
    return {
        "one": np.ones_like(m),
        "m": m,
        "o_diag": same / (m - 1),  # Krippendorff: item's sum_c o_cc
        "p_agree": same / (m * (m - 1)),  # share of agreeing ordered pairs on the item
        "n_c": n,  # category totals
        "share_c": n / m[:, None],  # Gwet: item's category shares
    }


def _coefficients(f: dict[str, np.ndarray], n_categories: int) -> dict[str, np.ndarray]:
    """All four coefficients from (possibly resampled, leading axis) feature totals."""
    n = f["m"]
    n_c = f["n_c"]
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = 1.0 - (n - 1.0) * (n - f["o_diag"]) / (n**2 - np.sum(n_c**2, axis=-1))
        pa = f["p_agree"] / f["one"]
        p_c = n_c / n[..., None]
        pe_f = np.sum(p_c**2, axis=-1)
        kappa = (pa - pe_f) / (1.0 - pe_f)
        pi = f["share_c"] / f["one"][..., None]
        pe_g = np.sum(pi * (1.0 - pi), axis=-1) / (n_categories - 1)
        ac1 = (pa - pe_g) / (1.0 - pe_g)
    return {
        "krippendorff_alpha": alpha,
        "fleiss_kappa": kappa,
        "percent_agreement": pa,
        "gwet_ac1": ac1,
    }


def krippendorff_alpha_nominal(counts: np.ndarray) -> float:
    """Krippendorff's alpha, nominal metric, from the item x category counts.

    Coincidences ``o_cc' = sum_u n_uc (n_uc' - 1[c=c']) / (m_u - 1)`` over items with
    ``m_u >= 2``; ``n_c = sum_c' o_cc'``, ``n = sum_c n_c``. Then
    ``alpha = 1 - D_o / D_e = 1 - (n - 1) (n - sum_c o_cc) / (n^2 - sum_c n_c^2)``.
    Handles any number of judgments per item (missing values).
    """
    return float(_coefficients(_sum(_features(_pairable(counts))), 2)["krippendorff_alpha"])


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' kappa: ``(P_bar - P_e) / (1 - P_e)`` with
    ``P_u = sum_c n_uc (n_uc - 1) / (m (m - 1))``, ``P_bar`` its mean over items,
    ``p_c = sum_u n_uc / (N m)`` and ``P_e = sum_c p_c^2``.
    Assumes every item has the same number ``m`` of judgments (ValueError otherwise)."""
    counts = _pairable(counts)
    if np.unique(counts.sum(axis=1)).size > 1:
        raise ValueError("Fleiss' kappa needs the same number of judgments on every item")
    return float(_coefficients(_sum(_features(counts)), 2)["fleiss_kappa"])


def percent_agreement(counts: np.ndarray) -> float:
    """Raw agreement: mean over items of the share of agreeing pairs of judgments,
    ``P_u = sum_c n_uc (n_uc - 1) / (m_u (m_u - 1))``."""
    return float(_coefficients(_sum(_features(_pairable(counts))), 2)["percent_agreement"])


def gwet_ac1(counts: np.ndarray, n_categories: int | None = None) -> float:
    """Gwet's AC1 for several raters (Gwet 2008): ``(p_a - p_e) / (1 - p_e)`` with
    ``p_a`` the mean of ``P_u`` (as :func:`percent_agreement`),
    ``pi_c = mean_u n_uc / m_u`` and ``p_e = sum_c pi_c (1 - pi_c) / (q - 1)``;
    ``q`` is the number of possible categories (default: the columns of ``counts``),
    e.g. 6 for top-1..top-5 and none. Stays stable under high prevalence, unlike kappa."""
    counts = _pairable(counts)
    q = counts.shape[1] if n_categories is None else n_categories
    return float(_coefficients(_sum(_features(counts)), q)["gwet_ac1"])


def _pairable(counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(counts)
    return counts[counts.sum(axis=1) >= 2]


@dataclass(frozen=True)
class AgreementStat:
    """One coefficient with its item-bootstrap SE and percentile interval."""

    name: str
    estimate: Figure
    se: Figure
    low: Figure
    high: Figure
    level: float


@dataclass(frozen=True)
class Agreement:
    """Agreement on the overlap subset. ``fleiss_kappa`` is ``None`` when items have
    different numbers of judgments (it is not defined there)."""

    krippendorff_alpha: AgreementStat
    fleiss_kappa: AgreementStat | None
    percent_agreement: AgreementStat
    gwet_ac1: AgreementStat
    n_items: int
    n_judgments: int
    min_judgments_per_item: int
    max_judgments_per_item: int
    n_categories: int
    b: int
    seed: int | None


def agreement(
    item: np.ndarray,
    choice: np.ndarray,
    *,
    categories: np.ndarray | None = None,
    b: int = 10_000,
    seed: int | None = 0,
    level: float = 0.95,
) -> Agreement | None:
    """Krippendorff's alpha (nominal), Fleiss' kappa, percent agreement and Gwet's AC1
    on the model rank of the chosen word, each with an item-bootstrap interval.

    ``categories``: all possible codes, e.g. ``[1, 2, 3, 4, 5, 0]``, so that AC1 uses
    q = 6 even when some rank was never chosen (default: the observed codes). Items are
    resampled with replacement (``b`` resamples, percentile interval); judgments within
    an item stay together. Assumes items are independent;
    annotator effects are not resampled. Returns ``None`` when fewer than 2 items have
    two or more judgments.
    """
    counts, cats = category_counts(item, choice, categories)
    if counts.shape[0] < 2:
        return None
    f = _features(counts)
    q = cats.size
    point = _coefficients(_sum(f), q)
    keys = list(f)
    widths = [1 if f[k].ndim == 1 else f[k].shape[1] for k in keys]
    x = np.column_stack([f[k] for k in keys])
    xb = resample_sums(x, b, seed)
    parts = np.split(xb, np.cumsum(widths)[:-1], axis=1)
    fb = {k: (p[:, 0] if w == 1 else p) for k, p, w in zip(keys, parts, widths, strict=True)}
    boot = _coefficients(fb, q)
    m = counts.sum(axis=1)
    equal = np.unique(m).size == 1

    def stat(name: str) -> AgreementStat:
        tb = boot[name]
        tb = np.where(np.isfinite(tb), tb, np.nan)[:, None]
        lo, hi = percentile_interval(tb, level)
        return AgreementStat(
            name,
            float(point[name]),
            float(np.nanstd(tb, ddof=1)),
            float(lo[0]),
            float(hi[0]),
            level,
        )

    return Agreement(
        krippendorff_alpha=stat("krippendorff_alpha"),
        fleiss_kappa=stat("fleiss_kappa") if equal else None,
        percent_agreement=stat("percent_agreement"),
        gwet_ac1=stat("gwet_ac1"),
        n_items=int(counts.shape[0]),
        n_judgments=int(m.sum()),
        min_judgments_per_item=int(m.min()),
        max_judgments_per_item=int(m.max()),
        n_categories=q,
        b=b,
        seed=seed,
    )
