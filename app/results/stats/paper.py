"""The paper's "standard deviation from 5 evaluations": mean ± std over random parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from .columns import DATA_KIND, MODEL_KIND, Kind, cells
from .figure import Figure


def ebc_ratio(cgd_model: float | np.ndarray, cgd_data: float | np.ndarray) -> np.ndarray:
    """``EB-C = CGD(M|M, l) / CGD(M|D, l)``: a ratio of pooled means, never a mean of ratios."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(cgd_model, dtype=float) / np.asarray(cgd_data, dtype=float)


@dataclass(frozen=True)
class PaperFigure:
    """Mean ± std of an estimate (CGD of a cell, or EB-C) over random disjoint parts of
    the judgments; ``parts`` holds the estimate of each part."""

    label: str
    name: Literal["cgd", "ebc"]
    length: int
    kind: Kind | None
    mean: Figure
    std: Figure
    parts: list[Figure] = field(repr=False, compare=False)


PAPER_LABEL = "mean ± std over 5 random disjoint parts (paper-comparable; not a CI)"


def paper_comparable(
    d: np.ndarray,
    length: np.ndarray,
    kind: np.ndarray,
    *,
    parts: int = 5,
    seed: int | None = 0,
    ddof: int = 0,
    data_kind: int = DATA_KIND,
    model_kind: int = MODEL_KIND,
) -> list[PaperFigure]:
    """The paper's "standard deviation from 5 evaluations".

    The judgments are split at random into ``parts`` disjoint parts of (almost) equal
    size; in each part CGD per cell and ``EB-C_l = CGD_(l,model)/CGD_(l,data)`` are
    computed; reported as ``mean ± std`` of the ``parts`` values (``std`` with ``ddof``,
    0 as ``numpy.std``). This is a spread of sub-sample estimates that ignores
    clustering; it is comparable with the paper, not a confidence interval.
    """
    d = np.asarray(d, dtype=float)
    length, kind = np.asarray(length), np.asarray(kind)
    rng = np.random.default_rng(seed)
    part = rng.permutation(d.size) % parts
    present, cell = cells(length, kind)
    n_cells = present.shape[0]
    s = np.bincount(part * n_cells + cell, weights=d, minlength=parts * n_cells)
    n = np.bincount(part * n_cells + cell, minlength=parts * n_cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        cgd = (s / n).reshape(parts, n_cells)
    out: list[PaperFigure] = []
    index = {(int(a), int(b)): j for j, (a, b) in enumerate(present)}
    for j, (ln, kd) in enumerate(present):
        v = cgd[:, j]
        out.append(_figure("cgd", int(ln), int(kd), v, ddof))
    for ln in np.unique(present[:, 0]):
        jm, jd = index.get((int(ln), model_kind)), index.get((int(ln), data_kind))
        if jm is None or jd is None:
            continue
        v = ebc_ratio(cgd[:, jm], cgd[:, jd])
        out.append(_figure("ebc", int(ln), model_kind, v, ddof))
    return out


def _figure(name: str, length: int, kind: int, v: np.ndarray, ddof: int) -> PaperFigure:
    # A part whose CGD(data) is 0 has no EB-C (inf or NaN): then neither has the mean ± std.
    defined = v.size > 0 and bool(np.isfinite(v).all())
    return PaperFigure(
        label=PAPER_LABEL,
        name=name,
        length=length,
        kind=kind,
        mean=float(v.mean()) if defined else float("nan"),
        std=float(v.std(ddof=ddof)) if defined and v.size > ddof else float("nan"),
        parts=v.tolist(),
    )
