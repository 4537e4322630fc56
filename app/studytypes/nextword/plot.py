"""The results plots: CGD(data), CGD(model) and EB-C against prefix length, with error bars;
and the diagnostics plot (the papers' self-recovery figure: CGD against length per kind).

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global state, safe
in a web process); imported lazily so the app starts fast.
"""

from __future__ import annotations

import io
from typing import Literal

from app.results.schemas import DiagnosticsOut, ResultsOut, simulated_label
from app.results.stats import Quantity, finite_or_none


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
    xs, ys, err = _series(rows, lambda r: r.ebc)
    if xs:
        right.errorbar(xs, ys, yerr=err, marker="D", capsize=4, color="C3", label="EB-C")
    right.axhline(1.0, color="0.5", linestyle="--", linewidth=1)
    for ax, ylabel in ((left, "CGD (share of d_GD = 1)"), (right, "EB-C = CGD(M|M) / CGD(M|D)")):
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
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    fig.savefig(buf, format=fmt, dpi=150, metadata=metadata)
    return buf.getvalue()


def save_figure(fig, fmt: str) -> bytes:
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    fig.savefig(buf, format=fmt, dpi=150, metadata=metadata)
    return buf.getvalue()


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
