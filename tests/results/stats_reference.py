"""Reference statistics used only by the tests: the textbook formulas the estimators in
``app.results.stats`` are checked against (docs/design.md §1, "Toy checks")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.results.stats.columns import cells
from app.results.stats.paper import ebc_ratio


def d_from_choice(choice: np.ndarray) -> np.ndarray:
    """``d = 1[choice != 1]``: 0 for the model's top-1 word, 1 for any other word or none."""
    return (np.asarray(choice) != 1).astype(float)


@dataclass(frozen=True)
class CellMeans:
    """Point CGD per cell: ``cgd = sums / counts`` (single-judgment estimator)."""

    length: np.ndarray
    kind: np.ndarray
    sums: np.ndarray
    counts: np.ndarray

    @property
    def cgd(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sums / self.counts

    def get(self, length: int, kind: int) -> float:
        hit = np.flatnonzero((self.length == length) & (self.kind == kind))
        return float(self.cgd[hit[0]]) if hit.size else float("nan")


def cell_means(d: np.ndarray, length: np.ndarray, kind: np.ndarray) -> CellMeans:
    """``CGD(M|H, l) = mean of d over the judgments of cell (l, H)`` (the paper's estimator)."""
    d = np.asarray(d, dtype=float)
    present, cell = cells(np.asarray(length), np.asarray(kind))
    n_cells = present.shape[0]
    return CellMeans(
        length=present[:, 0],
        kind=present[:, 1],
        sums=np.bincount(cell, weights=d, minlength=n_cells),
        counts=np.bincount(cell, minlength=n_cells).astype(float),
    )


def d_tv(p: np.ndarray, q: np.ndarray) -> float:
    """Total variation distance ``d_TV(P, Q) = 1/2 sum_w |P(w) - Q(w)|``."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def d_gd(p: np.ndarray, q: np.ndarray, tol: float = 1e-12) -> float:
    """Greedy decoding divergence ``1[argmax P != argmax Q]`` with a stated tie rule.

    With argmax sets ``A_P`` and ``A_Q`` (values within ``tol`` of the maximum), ties
    are broken uniformly at random: ``d = 1 - |A_P ∩ A_Q| / (|A_P| |A_Q|)``. When
    ``argmax P`` is unique this is the plurality estimator's ``1 - 1/k`` rule.
    """
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    ap, aq = p >= p.max() - tol, q >= q.max() - tol
    return 1.0 - float(np.sum(ap & aq)) / float(ap.sum() * aq.sum())


@dataclass(frozen=True)
class ToyResult:
    cgd_data: float
    cgd_model: float
    ebc: float


def toy_ebc(
    p_model_first: Sequence[float] = (0.9, 0.1),
    p_model_next: Sequence[Sequence[float]] = ((0.9, 0.1), (0.5, 0.5)),
    p_data_first: Sequence[float] = (0.5, 0.5),
    p_data_next: Sequence[Sequence[float]] = ((0.5, 0.5), (0.5, 0.5)),
    divergence: Literal["tv", "gd"] = "tv",
) -> ToyResult:
    """EB-C at ``l = 1`` in the paper's two-word toy (docs/design.md §1, "Toy checks").

    Vocabulary ``V`` indexed ``0..V-1``; ``p_*_first[w] = P(W1 = w)`` and
    ``p_*_next[w][v] = P(W2 = v | W1 = w)``. Then::

        CGD(M|H, 1) = sum_w P_H(W1 = w) d(P_M(.|w), P_D(.|w)),   H in {D, M}
        EB-C = CGD(M|M, 1) / CGD(M|D, 1)

    The defaults (P_D uniform on {AA, AB, BA, BB}, P_M(A) = 0.9, P_M(A|A) = 0.9,
    P_M(A|B) = 0.5) give, with ``d_TV``, CGD(M|D) = 0.2, CGD(M|M) = 0.36, EB-C = 1.8;
    with P_M(A) = 0.1, EB-C = 0.2. With ``d_GD`` the tie rule of :func:`d_gd` applies.
    """
    div = {"tv": d_tv, "gd": d_gd}[divergence]
    pm1, pd1 = np.asarray(p_model_first, float), np.asarray(p_data_first, float)
    pmn, pdn = np.asarray(p_model_next, float), np.asarray(p_data_next, float)
    dist = np.array([div(pmn[w], pdn[w]) for w in range(pm1.size)])
    cgd_d, cgd_m = float(pd1 @ dist), float(pm1 @ dist)
    return ToyResult(cgd_d, cgd_m, float(ebc_ratio(cgd_m, cgd_d)))
