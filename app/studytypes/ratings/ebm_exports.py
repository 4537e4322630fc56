"""EB-M downloads: the stored scores as CSV, as a LaTeX table (the paper's shape: one row
per prefix length, one column per score) and as a terminal table; the prefix-switching
samples (kind, prompt, prefix, continuation) as CSV or JSON lines, streamed.

Scores CSV columns: ``study``, ``figure`` (``score``: one kind's score; ``ebm``: the ratio
``f(data) / f(kind)``, EB-M where ``kind`` is ``model``; ``eb_bleu``: the first paper's
EB-bleu; ``ebm_gap``: EB-M_gap ``f(data at l + l_gap) / f(kind at l)`` of a gap kind),
``length``, ``kind``, ``score``, ``value``, ``se``, ``low``, ``high`` (the interval at
``level`` over prompts), ``method`` (the interval's: percentile bootstrap, or the delete-d
jackknife for the scores that are not sums over continuations), ``n`` (continuations counted),
``b``, ``seed``, ``computed_at``, and for ``ebm_gap`` rows ``l_gap`` and ``reference_length``
(l + l_gap). Empty cells are nulls.

The EB-M_gap figure (:func:`ebm_gap_plot`, SVG or PNG): EB-M_gap against l_gap, one line per
distorted kind and l, one panel per score, drawn by the panel that draws EB-C_gap
(`app.results.plots.gap_panel`).

Samples columns: ``study``, ``item_id``, ``kind``, ``length``, ``index``, ``is_attention``,
``skip_reason``, ``prompt``, ``prefix``, ``continuation``. Text cells are neutralised
against CSV injection as in every export (:mod:`app.results.exports`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any, Literal

from sqlalchemy.orm import Session

from app.csvfiles import DictCsvWriter
from app.models import Study
from app.results.exports import (
    csv_cell,
    csv_chunks,
    interval_text,
    jsonl_chunks,
    plus_minus,
    records,
    tex_escape,
)
from app.results.plots import gap_panel, save_figure
from app.results.schemas import EBMOut
from app.results.stats import finite_or_none
from app.results.stats.ebm import FEW_PROMPTS, SCORE_LABELS, SCORES
from app.studies.kinds import kind_parts
from app.studytypes.ratings import queries

EBM_FIELDS = [
    "study", "figure", "length", "kind", "score", "value", "se", "low", "high", "method",
    "level", "n", "b", "seed", "computed_at", "l_gap", "reference_length",
]  # fmt: skip
SAMPLE_FIELDS = [
    "study", "item_id", "kind", "length", "index", "is_attention", "skip_reason", "prompt",
    "prefix", "continuation",
]  # fmt: skip


def _rows(study: str, ebm: EBMOut) -> Iterator[dict[str, Any]]:
    s = ebm.scores
    common = {
        "study": study,
        "level": s.level,
        "b": s.b,
        "seed": s.seed,
        "computed_at": ebm.computed_at.isoformat(),
    }
    for t in s.scores:
        yield common | {
            "figure": "score", "length": t.length, "kind": t.kind, "score": t.score,
            "value": t.value, "se": t.se, "low": t.low, "high": t.high, "n": t.n,
            "method": t.method,
        }  # fmt: skip
    for r in s.ratios:
        yield common | {
            "figure": "ebm", "length": r.length, "kind": r.kind, "score": r.score,
            "value": r.value, "se": r.se, "low": r.low, "high": r.high, "n": None,
            "method": r.method,
        }  # fmt: skip
    for e in s.eb_bleu:
        yield common | {
            "figure": "eb_bleu", "length": e.length, "kind": "model", "score": "bleu",
            "value": e.value, "se": e.se, "low": e.low, "high": e.high, "n": e.n_model,
            "method": e.method,
        }  # fmt: skip
    for g in s.gap_ratios:
        yield common | {
            "figure": "ebm_gap", "length": g.length, "kind": g.kind, "score": g.score,
            "value": g.value, "se": g.se, "low": g.low, "high": g.high, "n": None,
            "method": g.method, "l_gap": g.l_gap, "reference_length": g.reference_length,
        }  # fmt: skip


def ebm_csv(study: str, ebm: EBMOut | None) -> str:
    """Every stored figure, one row each (only the header when none is stored)."""
    buf = io.StringIO()
    writer = DictCsvWriter(buf, EBM_FIELDS)
    writer.writeheader()
    for row in _rows(study, ebm) if ebm else ():
        writer.writerow(
            {k: csv_cell(finite_or_none(v) if isinstance(v, float) else v) for k, v in row.items()}
        )
    return buf.getvalue()


def _ratio(ebm: EBMOut, length: int, score: str):
    return next(
        (
            r
            for r in ebm.scores.ratios
            if r.length == length and r.score == score and r.kind == "model"
        ),
        None,
    )


def _names(ebm: EBMOut | None) -> list[str]:
    """The scores a stored document has (a language model's or a translation model's)."""
    return list(ebm.scores.names) if ebm else list(SCORES)


def ebm_latex(study: str, ebm: EBMOut | None, task_label: str) -> str:
    """A booktabs table: task, l, EB-M per score (± bootstrap SE), EB-bleu; and, with gap
    kinds, a second one: EB-M_gap per distorted kind, l and l_gap."""
    names = _names(ebm)
    cols = "ll" + "c" * (len(names) + 1)
    head = " & ".join(tex_escape(SCORE_LABELS[s]) for s in names)
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        f"\\begin{{tabular}}{{{cols}}}",
        "\\toprule",
        f"Task & $l$ & {head} & EB-bleu \\\\",
        "\\midrule",
    ]
    lengths = sorted({t.length for t in ebm.scores.scores}) if ebm else []
    for ln in lengths:
        cells = []
        for score in names:
            r = _ratio(ebm, ln, score)
            cells.append(plus_minus(r.value, r.se) if r else "--")
        e = next((x for x in ebm.scores.eb_bleu if x.length == ln), None)
        cells.append(plus_minus(e.value, e.se, digits=2) if e else "--")
        lines.append(f"{tex_escape(task_label)} & {ln} & " + " & ".join(cells) + " \\\\")
    if ebm:
        s = ebm.scores
        what = (
            f"EB-M = f(data prefixes) / f(model prefixes) $\\pm$ standard error over prompts "
            f"(percentile bootstrap; backward-BLEU, entropy and EB-bleu: delete-d jackknife; "
            f"B = {s.b:,}, seed {s.seed}); EB-bleu: BLEU of the continuations after "
            "model prefixes against those after data prefixes. METEOR: exact and stem matches "
            "only"
        )
    else:
        what = "no scores computed yet"
    lines += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{EB-M of {tex_escape(study)}: {what}.}}",
        f"\\label{{tab:ebm-{tex_escape(study).replace(chr(92), '')}}}",
        "\\end{table}",
        "",
    ]
    if ebm and ebm.scores.gap_ratios:
        lines += _gap_latex(study, ebm, names)
    return "\n".join(lines)


def _gap_latex(study: str, ebm: EBMOut, names: list[str]) -> list[str]:
    s = ebm.scores
    head = " & ".join(tex_escape(SCORE_LABELS[n]) for n in names)
    out = [
        "\\begin{table}[t]",
        "\\centering",
        f"\\begin{{tabular}}{{lrrr{'c' * len(names)}}}",
        "\\toprule",
        f"distorted prefix & $l$ & $l_{{gap}}$ & $l + l_{{gap}}$ & {head} \\\\",
        "\\midrule",
    ]
    for key, by_score in _gap_rows(s):
        kind, length, l_gap = key
        cells = [
            plus_minus(by_score[n].value, by_score[n].se) if n in by_score else "--" for n in names
        ]
        out.append(
            f"{tex_escape(kind_parts(kind).distorted)} & {length} & {l_gap} & "
            f"{length + l_gap} & " + " & ".join(cells) + " \\\\"
        )
    out += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{EB-M$_{{gap}}$ of {tex_escape(study)}: f(continuations after the data "
        "prefix of $l + l_{gap}$ words) / f(continuations after the distorted prefix of $l$ "
        "words and the model's $l_{gap}$), both against the data continuations after "
        "$l + l_{gap}$ words; $\\pm$ standard error over prompts (as EB-M's).}",
        "\\end{table}",
        "",
    ]
    return out


def _gap_rows(s) -> list[tuple[tuple[str, int, int], dict]]:
    """EB-M_gap by (kind, l, l_gap), each with its ratios by score, in order."""
    rows: dict[tuple[str, int, int], dict] = {}
    for g in s.gap_ratios:
        rows.setdefault((g.kind, g.length, g.l_gap), {})[g.score] = g
    return sorted(rows.items(), key=lambda kv: (kind_parts(kv[0][0]).distorted, *kv[0][1:]))


def ebm_table(study: str, ebm: EBMOut | None) -> str:
    """A plain-text table for the terminal: per length, each kind's scores, EB-M, EB-bleu."""
    if ebm is None:
        return f"{study}: no EB-M scores yet (`ebc results score {study}`)\n"
    s = ebm.scores
    names = _names(ebm)
    out = [
        f"{study}: EB-M, computed {ebm.computed_at:%Y-%m-%d %H:%M:%S} UTC; {s.level:.0%} "
        f"intervals over prompts (percentile bootstrap; backward-BLEU, entropy, EB-bleu: "
        f"delete-d jackknife), B={s.b}, seed={s.seed}",
        f"{'l':>4}  {'figure':<12}  " + "  ".join(f"{SCORE_LABELS[n]:>26}" for n in names),
    ]
    for ln in sorted({t.length for t in s.scores}):
        kinds = sorted({t.kind for t in s.scores if t.length == ln}, key=lambda k: k != "data")
        for kind in kinds:
            cells = []
            for name in names:
                t = next(
                    (x for x in s.scores if (x.length, x.kind, x.score) == (ln, kind, name)), None
                )
                cells.append(interval_text(t.value, t.low, t.high) if t else "--")
            out.append(f"{ln:>4}  {kind[:12]:<12}  " + "  ".join(f"{c:>26}" for c in cells))
        for kind in sorted({r.kind for r in s.ratios if r.length == ln}):
            cells = []
            for name in names:
                r = next(
                    (x for x in s.ratios if (x.length, x.kind, x.score) == (ln, kind, name)), None
                )
                cells.append(interval_text(r.value, r.low, r.high) if r else "--")
            label = "EB-M" if kind == "model" else f"data/{kind}"
            out.append(f"{ln:>4}  {label[:12]:<12}  " + "  ".join(f"{c:>26}" for c in cells))
        e = next((x for x in s.eb_bleu if x.length == ln), None)
        if e is not None:
            out.append(f"{ln:>4}  {'EB-bleu':<12}  {interval_text(e.value, e.low, e.high, 2):>26}")
    seen = None
    for (kind, length, l_gap), by_score in _gap_rows(s):
        distorted = kind_parts(kind).distorted
        if distorted != seen:
            out.append(
                f"EB-M_gap after {distorted}: f(data at l + l_gap) / f({distorted}+gap@l_gap at l)"
            )
            seen = distorted
        cells = [
            interval_text(by_score[n].value, by_score[n].low, by_score[n].high)
            if n in by_score
            else "--"
            for n in names
        ]
        label = f"l_gap {l_gap}"
        out.append(f"{length:>4}  {label[:12]:<12}  " + "  ".join(f"{c:>26}" for c in cells))
    out.extend(f"warning: {w}" for w in s.warnings)
    meteor = s.settings.get("meteor", {}).get("matching")
    if meteor:
        out.append(f"note: METEOR matching: {meteor}")
    return "\n".join(out) + "\n"


def degenerate(value: float | None, low: float | None, high: float | None) -> bool:
    """Whether a score's interval is degenerate: a value whose interval has no width (every
    resample gave the same number). On a small study the entropy is then at its bound (every
    n-gram of the continuations distinct, whichever prompts are drawn) and its ratio 1 says
    nothing about diversity; the page flags it rather than print [1, 1]."""
    return value is not None and low is not None and high is not None and low == high


def _cell(x, n: int | None = None) -> dict[str, Any] | None:
    if x is None:
        return None
    cell: dict[str, Any] = {k: finite_or_none(getattr(x, k)) for k in ("value", "low", "high")}
    cell["degenerate"] = None
    if getattr(x, "degenerate", False):  # the statistics' own flag and reason
        cell["degenerate"] = getattr(x, "degenerate_reason", "") or "no spread over the prompts"
    elif degenerate(cell["value"], cell["low"], cell["high"]):  # scores stored before it
        few = f" over only {n} continuations" if n is not None and n < FEW_PROMPTS else ""
        cell["degenerate"] = (
            f"no spread over the prompts{few}: every resample gives the same value (for the "
            "entropy: every n-gram distinct, the entropy at its bound), so this is no measurement"
        )
    return cell


def ebm_view(ebm: EBMOut) -> list[dict[str, Any]]:
    """The results page's EB-M rows, per length: EB-M per score and EB-bleu, then each
    kind's scores and the other kinds' ratios (values, interval ends; null: none; and
    ``degenerate``: why a cell is no measurement (:func:`degenerate`), else None)."""
    s = ebm.scores
    names = _names(ebm)
    view = []
    for ln in sorted({t.length for t in s.scores}):
        kinds = sorted({t.kind for t in s.scores if t.length == ln}, key=lambda k: k != "data")
        scores = {(t.kind, t.score): t for t in s.scores if t.length == ln}
        ratios = {(r.kind, r.score): r for r in s.ratios if r.length == ln}
        counts = {k: scores[(k, "entropy")].n for k in kinds if (k, "entropy") in scores}
        fewest = min(counts.values(), default=None)
        view.append(
            {
                "length": ln,
                "ebm": [_cell(ratios.get(("model", n)), fewest) for n in names],
                "eb_bleu": _cell(next((e for e in s.eb_bleu if e.length == ln), None), fewest),
                "kinds": [
                    (k, [_cell(scores.get((k, n)), counts.get(k)) for n in names]) for k in kinds
                ],
                "others": [
                    (k, [_cell(ratios.get((k, n)), fewest) for n in names])
                    for k in kinds
                    if k not in ("data", "model")
                ],
                "n": {k: scores[(k, "bleu")].n for k in kinds if (k, "bleu") in scores},
            }
        )
    return view


def ebm_gap_view(ebm: EBMOut) -> list[dict[str, Any]]:
    """The results page's EB-M_gap rows: per gap kind, l and l_gap, the ratio per score."""
    names = _names(ebm)
    return [
        {
            "kind": kind,
            "distorted": kind_parts(kind).distorted,
            "length": length,
            "l_gap": l_gap,
            "reference_length": length + l_gap,
            "cells": [_cell(by_score.get(n)) for n in names],
        }
        for (kind, length, l_gap), by_score in _gap_rows(ebm.scores)
    ]


def ebm_gap_plot(study: str, ebm: EBMOut | None, fmt: Literal["svg", "png"] = "svg") -> bytes:
    """EB-M_gap against l_gap, one panel per score (lines per distorted kind and l, the
    intervals as error bars, the line at 1 dashed); the legend and titles name the estimator
    and the interval. No gap kind (or no scores yet): one panel that says so."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = _names(ebm)
    gaps = list(ebm.scores.gap_ratios) if ebm else []
    shown = [n for n in names if any(g.score == n for g in gaps)] or names[:1]
    cols = min(3, len(shown))
    rows = -(-len(shown) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.3 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, name in zip(axes, shown, strict=False):
        mine = [g for g in gaps if g.score == name]
        method = mine[0].method if mine else ""
        gap_panel(
            ax,
            mine,
            estimate="value",
            ylabel=f"EB-M_gap ({SCORE_LABELS[name]})",
            title=f"{SCORE_LABELS[name]}: {method}" if method else SCORE_LABELS[name],
            distorted=lambda g: kind_parts(g.kind).distorted,
        )
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    level = f"{ebm.scores.level:.0%} intervals over prompts" if ebm else "no scores yet"
    fig.suptitle(
        f"{study}: EB-M_gap = f(data prefix, l + l_gap) / f(distorted prefix + gap, l); "
        f"{level} (papers' values not drawn: none cited)",
        fontsize="medium",
    )
    return save_figure(fig, fmt)


def _sample_batches(session: Session, study: Study) -> Iterator[list[dict[str, Any]]]:
    slug = study.slug
    for keys, rows in queries.iter_sample_rows(session, study):
        batch = []
        for r in records(keys, rows):
            r["prefix"] = r.pop("words")
            batch.append({"study": slug, **r})
        yield batch


def samples_csv(session: Session, study: Study) -> Iterator[str]:
    """The prefix-switching samples as CSV text chunks (one per fetched batch)."""
    return csv_chunks(SAMPLE_FIELDS, _sample_batches(session, study))


def samples_jsonl(session: Session, study: Study) -> Iterator[str]:
    return jsonl_chunks(SAMPLE_FIELDS, _sample_batches(session, study))


__all__ = [
    "EBM_FIELDS",
    "SAMPLE_FIELDS",
    "degenerate",
    "ebm_csv",
    "ebm_gap_plot",
    "ebm_gap_view",
    "ebm_latex",
    "ebm_table",
    "ebm_view",
    "samples_csv",
    "samples_jsonl",
]
