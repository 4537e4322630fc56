"""The papers' self-recovery figures (issue 34), drawn as the papers draw them, from the
diagnostics table (:mod:`~.diagnostics`: the same estimates, intervals and tests):

- **EB-C_gap against l_gap**, one line per distorted kind and prefix length l (the later
  paper's Fig. 3: after a shuffled or corrupted prefix of l words the model writes l_gap words
  itself; EB-C_gap = CGD after them over CGD after the data prefix of l + l_gap words);
- **CGD against the corruption rate c**, one line per prefix length l, beside CGD(M|D) and
  CGD(M|M) at the same length (the first paper's Fig. 3).

Each comes from people (the headline estimator and its interval) and from the reference model
(synthetic: the exact per-item divergences, d_JS first as the later paper plots it, item
bootstrap); the legend names the estimator and the interval.  The papers' own values are not
drawn: no value of theirs is cited here (``RecoveryOut.reference_note``), so none is invented.

:func:`recovery_from` is pure (a ``DiagnosticsOut`` in); :func:`study_recovery` loads; the
writers give CSV (one line per point, text cells neutralised), LaTeX and the plot (SVG/PNG).
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy.orm import Session

from app.csvfiles import write_csv
from app.models import Study
from app.results.exports import tex_escape
from app.results.plots import error_bars, gap_panel, save_figure
from app.results.schemas import (
    CorruptionPoint,
    DiagnosticsOut,
    GapPoint,
    RecoveryOut,
    ResultQuery,
)
from app.results.stats import finite_or_none
from app.studytypes.nextword.diagnostics import study_diagnostics
from app.studytypes.nextword.plot import simulated_line
from app.studytypes.nextword.synthetic import corruption_reference, parts_of

REFERENCE_NOTE = (
    "The papers' own values are not drawn: none is cited in this service, and a value read "
    "off a figure would be invented precision. Compare with the papers' Fig. 3 by eye."
)
PLOTTED_SYNTHETIC = ("js", "tv", "gd", "word_gd")  # the first a study has is drawn (d_JS first)


def study_recovery(session: Session, study: Study, query: ResultQuery | None = None) -> RecoveryOut:
    """The recovery figures of `study` for `query` (the diagnostics loaded and computed)."""
    return recovery_from(study_diagnostics(session, study, query or ResultQuery()))


def _f(v: Any) -> float:
    return float("nan") if v is None else float(v)


def recovery_from(diag: DiagnosticsOut) -> RecoveryOut:
    """Both curves from the diagnostics rows (module docstring)."""
    cells = {(r.source, r.kind, r.length): r for r in diag.rows}
    gaps: list[GapPoint] = []
    corruption: list[CorruptionPoint] = []
    for r in diag.rows:
        if r.ratio_name == "ebc_gap" and r.l_gap is not None:
            gaps.append(
                GapPoint(
                    source=r.source,
                    kind=r.kind,
                    distorted_kind=parts_of(r.kind).distorted,
                    c=r.c,
                    length=r.length,
                    l_gap=r.l_gap,
                    reference_length=r.ratio_reference_length or r.length + r.l_gap,
                    ebc_gap=r.ratio,
                    low=r.ratio_low,
                    high=r.ratio_high,
                    p_value=r.ratio_p_value,
                )
            )
        over = corruption_reference(r.kind)
        if over is not None and r.c is not None:
            data = cells.get((r.source, "data", r.length))
            model = cells.get((r.source, "model", r.length))
            corruption.append(
                CorruptionPoint(
                    source=r.source,
                    kind=r.kind,
                    corrupts=over,
                    c=r.c,
                    length=r.length,
                    cgd=r.cgd,
                    low=r.cgd_low,
                    high=r.cgd_high,
                    cgd_data=_f(data.cgd) if data else float("nan"),
                    cgd_model=_f(model.cgd) if model else float("nan"),
                )
            )
    gaps.sort(key=lambda p: (p.source, p.distorted_kind, p.length, p.l_gap))
    corruption.sort(key=lambda p: (p.source, p.corrupts, p.length, p.c))
    sources = list(dict.fromkeys(r.source for r in diag.rows))
    intervals = {
        s: (
            f"people: {diag.options.estimator} estimator, {diag.people_interval}"
            if s == "people"
            else f"reference model ({s.split(':', 1)[1]}): mean over items, "
            f"{diag.synthetic_interval}"
        )
        for s in sources
    }
    messages = []
    if not gaps:
        messages.append(
            "no EB-C_gap: the study has no gap kind (data_shuffled+gap@g, data_corrupted@c+gap@g) "
            "with a data cell at l + g, or no judgments or divergences yet"
        )
    if not corruption:
        messages.append("no CGD against the corruption rate: the study has no corrupted kind")
    return RecoveryOut(
        study=diag.study,
        options=diag.options,
        intervals=intervals,
        gap_curve=gaps,
        corruption_curve=corruption,
        reference_values=[],
        reference_note=REFERENCE_NOTE,
        n_simulated=diag.n_simulated,
        messages=messages,
    )


# --------------------------------------------------------------------------- writers

RECOVERY_FIELDS = [
    "study", "curve", "source", "kind", "distorted_kind", "corrupts", "c", "length", "l_gap",
    "reference_length", "estimate", "low", "high", "p_value", "cgd_data", "cgd_model",
]  # fmt: skip
"""Recovery CSV columns: one line per point of either curve (``curve``: ebc_gap or cgd_by_c)."""


def _lines(rec: RecoveryOut) -> list[dict[str, Any]]:
    out = []
    for p in rec.gap_curve:
        out.append(
            {"curve": "ebc_gap", **p.model_dump(mode="json", exclude={"ebc_gap"})}
            | {"estimate": finite_or_none(p.ebc_gap)}
        )
    for q in rec.corruption_curve:
        out.append(
            {"curve": "cgd_by_c", **q.model_dump(mode="json", exclude={"cgd"})}
            | {"estimate": finite_or_none(q.cgd)}
        )
    return out


def recovery_csv(rec: RecoveryOut) -> str:
    """One line per point; empty cells for what a point does not have or cannot compute; text
    cells neutralised (`app.csvfiles`)."""
    rows = [{"study": rec.study, **line} for line in _lines(rec)]
    fields = set(RECOVERY_FIELDS)
    return write_csv(
        RECOVERY_FIELDS,
        ({k: v for k, v in row.items() if k in fields} for row in rows),
        lineterminator="\n",
    )


def _num(v: Any) -> str:
    v = finite_or_none(v)
    return "--" if v is None else f"{v:.3f}"


def _iv(est: Any, low: Any, high: Any) -> str:
    if finite_or_none(low) is None or finite_or_none(high) is None:
        return _num(est)
    return f"{_num(est)} [{_num(low)}, {_num(high)}]"


def recovery_latex(rec: RecoveryOut) -> str:
    """Two tables (booktabs): EB-C_gap by l and l_gap, CGD by c and l; intervals in brackets."""
    study = tex_escape(rec.study)
    level = f"{rec.options.level:.0%}".replace("%", "\\%")
    out = [
        "% ebc-judge: self-recovery figures of " + study,
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{llrrrl}",
        "\\toprule",
        "source & distorted prefix & $l$ & $l_{gap}$ & $l + l_{gap}$ & EB-C$_{gap}$ \\\\",
        "\\midrule",
    ]
    for p in rec.gap_curve:
        out.append(
            f"{tex_escape(p.source)} & {tex_escape(p.distorted_kind)} & {p.length} & "
            f"{p.l_gap} & {p.reference_length} & {_iv(p.ebc_gap, p.low, p.high)} \\\\"
        )
    out += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{EB-C$_{{gap}}$ of {study} with {level} intervals. "
        + tex_escape("; ".join(rec.intervals.values()))
        + "}",
        "\\end{table}",
        "",
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{llrrlrr}",
        "\\toprule",
        "source & corrupts & $c$ & $l$ & CGD & CGD(M$|$D) & CGD(M$|$M) \\\\",
        "\\midrule",
    ]
    for q in rec.corruption_curve:
        out.append(
            f"{tex_escape(q.source)} & {tex_escape(q.corrupts)} & {q.c:g} & {q.length} & "
            f"{_iv(q.cgd, q.low, q.high)} & {_num(q.cgd_data)} & {_num(q.cgd_model)} \\\\"
        )
    out += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{CGD of {study} against the corruption rate, with {level} intervals.}}",
        "\\end{table}",
        "",
    ]
    return "\n".join(out)


def _sources(rec: RecoveryOut) -> list[str]:
    """The sources drawn: people, and one synthetic metric (d_JS when there)."""
    have = {p.source for p in rec.gap_curve} | {q.source for q in rec.corruption_curve}
    out = ["people"] if "people" in have else []
    for metric in PLOTTED_SYNTHETIC:
        if f"synthetic:{metric}" in have:
            return [*out, f"synthetic:{metric}"]
    return out


def recovery_plot(rec: RecoveryOut, fmt: Literal["svg", "png"] = "svg") -> bytes:
    """One row per source drawn: EB-C_gap against l_gap (left, lines per distorted kind and l,
    the line EB-C_gap = 1 dashed grey) and CGD against c (right, lines per l, CGD(M|D) and
    CGD(M|M) at c = 0 as open markers)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sources = _sources(rec) or ["people"]
    fig = Figure(figsize=(9.0, 3.3 * len(sources)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(sources), 2, squeeze=False)
    for (left, right), source in zip(axes, sources, strict=True):
        gap_panel(
            left,
            [p for p in rec.gap_curve if p.source == source],
            estimate="ebc_gap",
            ylabel="EB-C_gap",
            title=f"{source}: EB-C_gap against l_gap",
            distorted=lambda p: p.distorted_kind,
        )
        _corruption_panel(right, [q for q in rec.corruption_curve if q.source == source])
        right.set_title(rec.intervals.get(source, source), fontsize="x-small", wrap=True)
    fig.suptitle(
        f"{rec.study}: self-recovery; {rec.options.level:.0%} intervals (papers' values not "
        "drawn: none cited)" + simulated_line(rec.n_simulated),
        fontsize="medium",
    )
    return save_figure(fig, fmt)


def _corruption_panel(ax, points: list[CorruptionPoint]) -> None:
    lines = sorted({(q.corrupts, q.length) for q in points})
    for i, (corrupts, length) in enumerate(lines):
        mine = sorted((q for q in points if (q.corrupts, q.length) == (corrupts, length)),
                      key=lambda q: q.c)  # fmt: skip
        ys, err = error_bars(mine, "cgd", "low", "high")
        colour = f"C{i % 10}"
        ax.errorbar([q.c for q in mine], ys, yerr=err, marker="o", capsize=3, color=colour,
                    label=f"CGD(M|{corrupts}^corrupt), l = {length}")  # fmt: skip
        for value, marker, name in ((mine[0].cgd_data, "s", "D"), (mine[0].cgd_model, "^", "M")):
            y = finite_or_none(value)
            if y is not None:
                ax.plot([0.0], [y], marker=marker, markerfacecolor="none", color=colour,
                        linestyle="none", label=f"CGD(M|{name}), l = {length}")  # fmt: skip
    ax.set_xlabel("corruption rate c")
    ax.set_ylabel("CGD")
    ax.grid(alpha=0.3)
    if lines:
        ax.legend(fontsize="x-small")
    else:
        ax.text(0.5, 0.5, "no corrupted kind", ha="center", va="center", transform=ax.transAxes)
