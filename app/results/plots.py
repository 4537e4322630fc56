"""What the study types' figures share: a figure saved as SVG or PNG, error bars from
interval ends, and the self-recovery panel (a gap ratio against l_gap, one line per distorted
kind and prefix length l: the later paper's Fig. 3), drawn for EB-C_gap (next-word studies)
and EB-M_gap (ratings studies) by the same code.

matplotlib's object API on the Agg canvas (no pyplot, no global state), imported lazily by the
callers so that the app starts fast.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from app.results.stats import finite_or_none


def save_figure(fig, fmt: str) -> bytes:
    """`fig` as SVG (text kept as text, no date) or PNG (150 dpi) bytes."""
    from matplotlib import rc_context

    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    # Text as text (searchable, and the written-out bounds testable), not glyph paths.
    with rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=150, metadata=metadata)
    return buf.getvalue()


def error_bars(points: Sequence[Any], est: str, low: str, high: str):
    """Estimates and ``[below, above]`` error-bar lengths of `points` (attributes `est`,
    `low`, `high`; a missing end draws no bar on that side)."""
    ys, lo, hi = [], [], []
    for p in points:
        y = finite_or_none(getattr(p, est))
        ys.append(float("nan") if y is None else y)
        a, b = finite_or_none(getattr(p, low)), finite_or_none(getattr(p, high))
        lo.append(max(y - a, 0.0) if y is not None and a is not None else 0.0)
        hi.append(max(b - y, 0.0) if y is not None and b is not None else 0.0)
    return ys, [lo, hi]


def gap_panel(
    ax,
    points: Sequence[Any],
    *,
    estimate: str,
    ylabel: str,
    title: str,
    distorted: Callable[[Any], str],
    low: str = "low",
    high: str = "high",
) -> None:
    """A gap ratio against l_gap: one line per (distorted kind, l) with its intervals as
    error bars, the line at 1 (recovered) dashed grey. `points` have ``length``, ``l_gap``
    and the attributes `estimate`, `low`, `high`; `distorted` names a point's distorted
    kind (its kind without the gap)."""
    lines = sorted({(distorted(p), p.length) for p in points})
    for i, (kind, length) in enumerate(lines):
        mine = sorted(
            (p for p in points if (distorted(p), p.length) == (kind, length)),
            key=lambda p: p.l_gap,
        )
        ys, err = error_bars(mine, estimate, low, high)
        ax.errorbar([p.l_gap for p in mine], ys, yerr=err, marker="o", capsize=3,
                    color=f"C{i % 10}", label=f"{kind}, l = {length}")  # fmt: skip
    ax.axhline(1.0, color="0.5", linestyle="--", linewidth=1)
    ax.set_xlabel("l_gap (words the model wrote after the distorted prefix)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="small")
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize="x-small")
    else:
        ax.text(0.5, 0.5, "no gap kind", ha="center", va="center", transform=ax.transAxes)


__all__ = ["error_bars", "gap_panel", "save_figure"]
