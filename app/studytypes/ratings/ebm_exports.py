"""EB-M downloads: the stored scores as CSV, as a LaTeX table (the paper's shape: one row
per prefix length, one column per score) and as a terminal table; the prefix-switching
samples (kind, prompt, prefix, continuation) as CSV or JSON lines, streamed.

Scores CSV columns: ``study``, ``figure`` (``score``: one kind's score; ``ebm``: the ratio
``f(data) / f(kind)``, EB-M where ``kind`` is ``model``; ``eb_bleu``: the first paper's
EB-bleu), ``length``, ``kind``, ``score``, ``value``, ``se``, ``low``, ``high`` (the
interval at ``level`` over prompts), ``method`` (the interval's: percentile bootstrap, or the
delete-d jackknife for the scores that are not sums over continuations), ``n``
(continuations counted), ``b``, ``seed``, ``computed_at``. Empty cells are nulls.

Samples columns: ``study``, ``item_id``, ``kind``, ``length``, ``index``, ``is_attention``,
``skip_reason``, ``prompt``, ``prefix``, ``continuation``. Text cells are neutralised
against CSV injection as in every export (:mod:`app.results.exports`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

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
from app.results.schemas import EBMOut
from app.results.stats import finite_or_none
from app.results.stats.ebm import FEW_PROMPTS, SCORE_LABELS, SCORES
from app.studytypes.ratings import queries

EBM_FIELDS = [
    "study", "figure", "length", "kind", "score", "value", "se", "low", "high", "method",
    "level", "n", "b", "seed", "computed_at",
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


def ebm_latex(study: str, ebm: EBMOut | None, task_label: str) -> str:
    """A booktabs table: task, l, EB-M per score (± bootstrap SE), EB-bleu."""
    cols = "ll" + "c" * (len(SCORES) + 1)
    head = " & ".join(tex_escape(SCORE_LABELS[s]) for s in SCORES)
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
        for score in SCORES:
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
    return "\n".join(lines)


def ebm_table(study: str, ebm: EBMOut | None) -> str:
    """A plain-text table for the terminal: per length, each kind's scores, EB-M, EB-bleu."""
    if ebm is None:
        return f"{study}: no EB-M scores yet (`ebc results score {study}`)\n"
    s = ebm.scores
    out = [
        f"{study}: EB-M, computed {ebm.computed_at:%Y-%m-%d %H:%M:%S} UTC; {s.level:.0%} "
        f"intervals over prompts (percentile bootstrap; backward-BLEU, entropy, EB-bleu: "
        f"delete-d jackknife), B={s.b}, seed={s.seed}",
        f"{'l':>4}  {'figure':<12}  " + "  ".join(f"{SCORE_LABELS[n]:>26}" for n in SCORES),
    ]
    for ln in sorted({t.length for t in s.scores}):
        kinds = sorted({t.kind for t in s.scores if t.length == ln}, key=lambda k: k != "data")
        for kind in kinds:
            cells = []
            for name in SCORES:
                t = next(
                    (x for x in s.scores if (x.length, x.kind, x.score) == (ln, kind, name)), None
                )
                cells.append(interval_text(t.value, t.low, t.high) if t else "--")
            out.append(f"{ln:>4}  {kind[:12]:<12}  " + "  ".join(f"{c:>26}" for c in cells))
        for kind in sorted({r.kind for r in s.ratios if r.length == ln}):
            cells = []
            for name in SCORES:
                r = next(
                    (x for x in s.ratios if (x.length, x.kind, x.score) == (ln, kind, name)), None
                )
                cells.append(interval_text(r.value, r.low, r.high) if r else "--")
            label = "EB-M" if kind == "model" else f"data/{kind}"
            out.append(f"{ln:>4}  {label[:12]:<12}  " + "  ".join(f"{c:>26}" for c in cells))
        e = next((x for x in s.eb_bleu if x.length == ln), None)
        if e is not None:
            out.append(f"{ln:>4}  {'EB-bleu':<12}  {interval_text(e.value, e.low, e.high, 2):>26}")
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
                "ebm": [_cell(ratios.get(("model", n)), fewest) for n in SCORES],
                "eb_bleu": _cell(next((e for e in s.eb_bleu if e.length == ln), None), fewest),
                "kinds": [
                    (k, [_cell(scores.get((k, n)), counts.get(k)) for n in SCORES]) for k in kinds
                ],
                "others": [
                    (k, [_cell(ratios.get((k, n)), fewest) for n in SCORES])
                    for k in kinds
                    if k not in ("data", "model")
                ],
                "n": {k: scores[(k, "bleu")].n for k in kinds if (k, "bleu") in scores},
            }
        )
    return view


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
    "ebm_latex",
    "ebm_table",
    "ebm_view",
    "samples_csv",
    "samples_jsonl",
]
