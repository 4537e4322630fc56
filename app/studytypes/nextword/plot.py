"""The results plots: CGD(data), CGD(model) and EB-C against prefix length, with error bars;
and the diagnostics plot (the papers' self-recovery figure: CGD against length per kind).

Readable at any size (issue 32): EB-C is a ratio, so its axis is logarithmic (1/2 and 2
lie as far from 1); the axis runs at most `CLIP_FACTOR` beyond the estimates and 1, and an
interval end beyond it (a pilot's [0.68, 5.4e7], an unbounded end) is drawn to the axis's
edge with an arrow and its value written beside it (SVG group ``clipped-<high|low>-<l>``).
Text in the SVG stays text (``svg.fonttype: none``), so a reader can search it.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global state, safe
in a web process); imported lazily so the app starts fast.
"""

from __future__ import annotations

import math
from typing import Literal

from app.results.plots import save_figure
from app.results.schemas import DiagnosticsOut, ResultsOut, simulated_label
from app.results.stats import Quantity, finite_or_none
from app.results.stats.figure import bound_text


def simulated_line(n_simulated: int) -> str:
    """The title's second line when a simulated crowd's judgments are in the figure (a
    plot travels without the page's banner), else nothing."""
    label = simulated_label(n_simulated)
    return f"\nSIMULATED: {label}" if label else ""


def _series(rows, pick) -> tuple[list[int], list[float], list[list[float]]]:
    xs, ys, lo, hi = [], [], [], []
    for row in rows:
        q: Quantity | None = pick(row)
        est = finite_or_none(q.estimate) if q else None
        if est is None:
            continue
        low, high = finite_or_none(q.low), finite_or_none(q.high)
        xs.append(row.length)
        ys.append(est)
        lo.append(max(est - low, 0.0) if low is not None else 0.0)
        hi.append(max(high - est, 0.0) if high is not None else 0.0)
    return xs, ys, [lo, hi]


# An EB-C axis runs at most this factor below and above the estimates (and the line at 1):
# an interval that goes further is clipped with an arrow and its end written out.
CLIP_FACTOR = 4.0


def ratio_limits(points: list[tuple[float, float | None, float | None]]) -> tuple[float, float]:
    """The log axis of a ratio's panel for `points` (estimate, low, high): the estimates,
    the line at 1 and the interval ends within `CLIP_FACTOR` of them, with a margin of a
    tenth of the range on the log scale (at least 0.5%)."""
    ests = [e for e, _, _ in points if e > 0] + [1.0]
    core_lo, core_hi = min(ests), max(ests)
    lows = [lo for _, lo, _ in points if lo is not None and lo > 0]
    highs = [hi for _, _, hi in points if hi is not None and math.isfinite(hi)]
    lo = max(min([*lows, core_lo]), core_lo / CLIP_FACTOR)
    hi = min(max([*highs, core_hi]), core_hi * CLIP_FACTOR)
    pad = max(0.1 * math.log(hi / lo), 0.005)
    return lo * math.exp(-pad), hi * math.exp(pad)


def _minor_label(v: float, _pos: object = None) -> str:
    mantissa = round(v / 10 ** math.floor(math.log10(v)), 6) if v > 0 else 0
    return f"{v:.3g}" if mantissa in (2, 3, 5) else ""


def _ratio_panel(ax, rows) -> None:
    """EB-C per length on a log axis with its intervals; an end off the axis is clipped
    with an arrow and written out."""
    pts = []
    for row in rows:
        q = row.ebc
        est = finite_or_none(q.estimate) if q else None
        if est is None or est <= 0:
            continue
        if math.isnan(q.low) or math.isnan(q.high):  # no interval (one annotator): a point
            pts.append((row.length, est, est, est))
            continue
        low, high = finite_or_none(q.low), finite_or_none(q.high)
        pts.append((row.length, est, low if low is None or low > 0 else None, high))
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))  # 0.1, not 10^-1
    ax.yaxis.set_minor_formatter(FuncFormatter(_minor_label))  # 2, 3, 5, 20, 0.5: no crowding
    ax.axhline(1.0, color="0.5", linestyle="--", linewidth=1)
    if not pts:
        return
    bottom, top = ratio_limits([(e, lo, hi) for _, e, lo, hi in pts])
    ax.set_ylim(bottom, top)
    if top / bottom < 4:  # a narrow range: evenly spaced labelled ticks, not 1 alone
        from matplotlib.ticker import MaxNLocator, NullLocator, ScalarFormatter

        ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.yaxis.set_major_formatter(ScalarFormatter(useOffset=False))
        ax.yaxis.set_minor_locator(NullLocator())
    for x, _est, low, high in pts:
        lo_drawn = bottom if low is None else max(low, bottom)
        hi_drawn = top if high is None else min(high, top)
        ax.vlines(x, lo_drawn, hi_drawn, color="C3")
        for end, drawn, clipped, up in (
            (high, hi_drawn, high is None or high > top, True),
            (low, lo_drawn, low is None or low < bottom, False),
        ):
            if not clipped:
                ax.plot([x], [drawn], marker="_", markersize=10, color="C3")
                continue
            arrow = ax.annotate(
                "",
                xy=(x, drawn),
                xytext=(0, -18 if up else 18),
                textcoords="offset points",
                arrowprops={"arrowstyle": "-|>", "color": "C3", "linewidth": 1.2},
            )
            label = ax.annotate(
                f"{'up to' if up else 'down to'} {bound_text(end, high=up)}",
                xy=(x, drawn),
                xytext=(5, -9 if up else 2),
                textcoords="offset points",
                fontsize="small",
                color="C3",
            )
            gid = f"clipped-{'high' if up else 'low'}-{x}"
            arrow.arrow_patch.set_gid(gid)
            label.set_gid(f"{gid}-text")
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "D", color="C3", label="EB-C")


def results_plot(results: ResultsOut, fmt: Literal["svg", "png"] = "svg") -> bytes:
    """Two panels: CGD per kind (left) and EB-C with the line EB-C = 1 (right); error bars
    are the main figures' intervals (method and level in the title)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rs = results.results
    fig = Figure(figsize=(8.0, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    rows = rs.table if rs else []
    for label, pick, marker in (
        ("CGD(M|D)  data prefixes", lambda r: r.cgd_data, "o"),
        ("CGD(M|M)  model prefixes", lambda r: r.cgd_model, "s"),
    ):
        xs, ys, err = _series(rows, pick)
        if xs:
            left.errorbar(xs, ys, yerr=err, marker=marker, capsize=4, label=label)
    _ratio_panel(right, rows)
    for ax, ylabel in (
        (left, "CGD (share of d_GD = 1)"),
        (right, "EB-C = CGD(M|M) / CGD(M|D), log scale"),
    ):
        ax.set_xlabel("prefix length l (words)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(sorted({r.length for r in rows}) or [0])
        ax.grid(alpha=0.3)
    if rows:
        left.legend(fontsize="small")
    if rs is None:
        fig.suptitle(f"{results.study}: no judgments yet", fontsize="medium")
    else:
        excl = "with" if rs.exclusions_applied else "without"
        fig.suptitle(
            f"{results.study}: {rs.n_judgments:,} judgments, {rs.n_annotators} annotators, "
            f"{excl} exclusions; {rs.level:.0%} {rs.ci} intervals (unit: {rs.unit})"
            + simulated_line(rs.n_simulated),
            fontsize="medium",
        )
    return save_figure(fig, fmt)


def diagnostics_plot(diag: DiagnosticsOut, fmt: Literal["svg", "png"] = "svg") -> bytes:
    """CGD against prefix length, one line per kind with its interval as error bars: one
    panel for people, one per synthetic metric (the sources the table has)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sources = list(dict.fromkeys(r.source for r in diag.rows)) or ["people"]
    fig = Figure(figsize=(3.4 * len(sources) + 1.6, 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(sources), squeeze=False)[0]
    colour = {k: f"C{i % 10}" for i, k in enumerate(diag.kinds)}
    for ax, source in zip(axes, sources, strict=True):
        rows = [r for r in diag.rows if r.source == source]
        for kind in diag.kinds:
            mine = sorted((r for r in rows if r.kind == kind), key=lambda r: r.length)
            pts = [(r, finite_or_none(r.cgd)) for r in mine]
            pts = [(r, y) for r, y in pts if y is not None]
            if not pts:
                continue
            xs = [r.length for r, _ in pts]
            ys = [y for _, y in pts]
            lo = [max(y - (finite_or_none(r.cgd_low) or y), 0.0) for r, y in pts]
            hi = [max((finite_or_none(r.cgd_high) or y) - y, 0.0) for r, y in pts]
            label = f"{kind} ({mine[0].paper_label})" if mine[0].paper_label else kind
            ax.errorbar(
                xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=colour[kind], label=label
            )
        unit = "d_GD, judgments" if source == "people" else source.split(":", 1)[-1]
        ax.set_title(f"{source} ({unit})", fontsize="medium")
        ax.set_xlabel("prefix length l (words)")
        ax.set_ylabel("CGD")
        ax.set_xticks(sorted({r.length for r in rows}) or [0])
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize="small")
    level = f"{diag.options.level:.0%}"
    fig.suptitle(
        (
            f"{diag.study}: CGD per prefix kind; {level} intervals (people: annotator "
            "clusters, synthetic: items)"
            if diag.rows
            else f"{diag.study}: no diagnostics yet"
        )
        + simulated_line(diag.n_simulated),
        fontsize="medium",
    )
    return save_figure(fig, fmt)
