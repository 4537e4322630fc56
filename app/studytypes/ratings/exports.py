"""A ratings study's downloads: every rating (CSV or JSON lines, streamed), and its figures
as the later paper's Table 3 (CSV, one row per figure; a booktabs LaTeX table; a terminal
table).

``ratings.csv`` columns, one row per rating stored (one annotator's ratings of one
pair), those of unfinished HITs too (``assignment_status`` other than ``submitted``:
they count in no figure until the HIT is submitted), in rating-id order: ``study``,
``rating_id``, ``assignment`` (public id), ``hit_id``, ``hit_index``, ``position`` (of
the pair in its HIT), ``item_id``, ``kind``, ``length``, ``is_attention``,
``skip_reason``, ``prompt``, ``prefix``, ``continuation``, ``quality``, ``consistency``
(empty: not given yet), ``quality_ms``, ``consistency_ms`` (the client's time),
``quality_at``, ``consistency_at`` (UTC, ISO 8601), ``too_fast``, ``late``,
``annotator_id`` (the service's opaque id: no platform worker id, no label; the
judgments and the annotators page hold those), ``channel``, ``simulated`` (true: a
simulated crowd's annotator, not a person), ``annotator_blocked``,
``annotator_exclude_past``, ``assignment_status``, and the assignment's flags on kept
work that may not count: ``over_cap``, ``extra_replica``, ``after_block``,
``unverified``; the participant's side (issue 33): ``hit_comment`` (their comment on the
HIT), ``page_away``, ``page_away_ms`` (how often and how long they left the page on this
pair's two steps, where the page's script ran; empty: none recorded). Text cells a
spreadsheet would run as a formula are neutralised as in every export
(:mod:`app.results.exports`).

``ratings_table.csv`` columns, one row per figure, main variant first: ``study``,
``exclusions`` (on/off), ``figure`` (``mean`` of a kind; ``gap`` = data - model; ``ratio`` =
data / model; ``gap_secondary``, ``ratio_secondary``: the same with the other interval
method, named in ``method``; ``trend``: slope per word of prefix length of ``kind`` = gap or
log ratio;
agreement: ``alpha_interval``, ``alpha_ordinal``, ``exact``, ``within_step``,
``within_point``), ``length``, ``step``, ``kind``, ``estimate``, ``low``, ``high``,
``level``, ``method``, ``n_ratings``, ``n_pairs``, ``n_annotators``,
``effective_annotators``, ``paper_mean``, ``paper_std`` (the paper's mean +- std over
``paper_runs`` runs of ``paper_pairs`` pairs, which may differ between lengths), ``b``,
``seed``, ``n_simulated``,
``simulated``, ``note`` (agreement: which figure is the paper's "agreement" and why).
Empty cells are nulls.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from sqlalchemy.orm import Session

from app.annotation.participants import PAGE_SIGNAL_FIELDS, with_page_signals
from app.csvfiles import DictCsvWriter
from app.models import Study
from app.results.exports import (
    csv_cell,
    csv_chunks,
    iso_time,
    jsonl_chunks,
    records,
    tex_escape,
    variant_head,
)
from app.results.schemas import ResultsOut
from app.results.stats import finite_or_none
from app.studytypes.ratings.queries import iter_rating_rows
from app.studytypes.ratings.schemas import RatingsOut, RatingsSet

RATING_FIELDS = [
    "study", "rating_id", "assignment", "hit_id", "hit_index", "position", "item_id", "kind",
    "length", "is_attention", "skip_reason", "prompt", "prefix", "continuation", "quality",
    "consistency", "quality_ms", "consistency_ms", "quality_at", "consistency_at",
    "too_fast", "late", "annotator_id", "channel", "simulated", "annotator_blocked",
    "annotator_exclude_past", "assignment_status", "over_cap", "extra_replica",
    "after_block", "unverified", *PAGE_SIGNAL_FIELDS,
]  # fmt: skip
TABLE_FIELDS = [
    "study", "exclusions", "figure", "length", "step", "kind", "estimate", "low", "high",
    "level", "method", "n_ratings", "n_pairs", "n_annotators", "effective_annotators",
    "paper_mean", "paper_std", "paper_runs", "paper_pairs", "b", "seed", "n_simulated",
    "simulated", "note",
]  # fmt: skip
AGREEMENT_FIGURES = ("alpha_interval", "alpha_ordinal", "exact", "within_step", "within_point")
STEP_LABELS = {"quality": "Quality", "consistency": "Consistency"}


# --------------------------------------------------------------------------- every rating


def _rating_batches(session: Session, study: Study) -> Iterator[list[dict[str, Any]]]:
    slug = study.slug
    for keys, rows in iter_rating_rows(session, study):
        batch = []
        for r in records(keys, rows):
            r["prefix"] = r.pop("words")
            r["quality_at"] = iso_time(r["quality_at"])
            r["consistency_at"] = iso_time(r["consistency_at"])
            batch.append({"study": slug, **with_page_signals(r)})
        yield batch


def ratings_csv(session: Session, study: Study) -> Iterator[str]:
    """Every rating of `study` as CSV text chunks (one per fetched batch)."""
    return csv_chunks(RATING_FIELDS, _rating_batches(session, study))


def ratings_jsonl(session: Session, study: Study) -> Iterator[str]:
    return jsonl_chunks(RATING_FIELDS, _rating_batches(session, study))


# --------------------------------------------------------------------------- the figures


def _variants(ratings: RatingsOut | None) -> list[RatingsSet]:
    return [v for v in (ratings.results, ratings.other) if v] if ratings else []


def _table_rows(study: str, v: RatingsSet) -> Iterator[dict[str, Any]]:
    common = {
        "study": study,
        "exclusions": "on" if v.exclusions_applied else "off",
        "level": v.level,
        "b": v.b,
        "seed": v.seed,
        "n_simulated": v.n_simulated,
        "simulated": v.simulated or "",
    }
    paper = {(p.length, p.step, p.what): p for p in v.paper}

    def with_paper(row: dict[str, Any], key: tuple) -> dict[str, Any]:
        p = paper.get(key)
        if p is not None:
            row |= {
                "paper_mean": p.mean,
                "paper_std": p.std,
                "paper_runs": p.runs,
                "paper_pairs": p.pairs,
            }
        return row

    for c in v.cells:
        row = common | {
            "figure": "mean", "length": c.length, "step": c.step, "kind": c.kind,
            "estimate": c.mean, "low": c.ci_low, "high": c.ci_high,
            "method": c.method or v.interval, "n_ratings": c.n_ratings, "n_pairs": c.n_pairs,
            "n_annotators": c.n_annotators, "effective_annotators": c.effective_annotators,
        }  # fmt: skip
        yield with_paper(row, (c.length, c.step, c.kind))
    for suffix, contrasts in (("", v.contrasts), ("_secondary", v.secondary)):
        for x in contrasts:
            for figure, kind, est, low, high in (
                ("gap", "data - model", x.gap, x.gap_low, x.gap_high),
                ("ratio", "data / model", x.ratio, x.ratio_low, x.ratio_high),
            ):
                row = common | {
                    "figure": figure + suffix, "length": x.length, "step": x.step,
                    "kind": kind, "estimate": est, "low": low, "high": high,
                    "method": x.method, "n_annotators": x.n_annotators,
                    "effective_annotators": x.effective_annotators,
                }  # fmt: skip
                yield with_paper(row, (x.length, x.step, figure)) if not suffix else row
    for t in v.trends:
        yield common | {
            "figure": "trend", "step": t.step, "kind": t.measure, "estimate": t.slope,
            "low": t.low, "high": t.high, "effective_annotators": t.effective_annotators,
            "method": "slope per word of prefix length" + (f"; {t.method}" if t.method else ""),
        }  # fmt: skip
    for a in v.agreement:
        cells = {
            "alpha_interval": (a.alpha_interval, a.alpha_interval_low, a.alpha_interval_high),
            "alpha_ordinal": (a.alpha_ordinal, a.alpha_ordinal_low, a.alpha_ordinal_high),
            "exact": (a.exact, None, None),
            "within_step": (a.within_step, None, None),
            "within_point": (a.within_point, None, None),
        }
        for figure in AGREEMENT_FIGURES:
            est, low, high = cells[figure]
            yield common | {
                "figure": figure, "step": a.step, "estimate": est, "low": low, "high": high,
                "n_ratings": a.n_ratings, "n_pairs": a.n_pairs, "note": a.paper,
            }  # fmt: skip


def ratings_table_csv(res: ResultsOut) -> str:
    """Every figure of a ratings study, one row each, main variant first (only the header
    when there are none)."""
    buf = io.StringIO()
    writer = DictCsvWriter(buf, TABLE_FIELDS)
    writer.writeheader()
    for v in _variants(res.ratings):
        for row in _table_rows(res.study, v):
            writer.writerow(
                {
                    k: csv_cell(finite_or_none(x) if isinstance(x, float) else x)
                    for k, x in row.items()
                }
            )
    return buf.getvalue()


def _num(x: float | None, digits: int) -> str | None:
    x = finite_or_none(x)
    return None if x is None else f"{x:.{digits}f}"


def _tex_interval(est: float | None, low: float | None, high: float | None, digits: int) -> str:
    e = _num(est, digits)
    if e is None:
        return "--"
    lo, hi = _num(low, digits), _num(high, digits)
    if lo is None or hi is None:
        return f"${e}$"
    return f"${e}$ {{\\small [{lo}, {hi}]}}"


def _tex_pm(mean: float | None, std: float | None, digits: int) -> str:
    m = _num(mean, digits)
    if m is None:
        return "--"
    s = _num(std, digits)
    return f"${m}$" if s is None else f"${m} \\pm {s}$"


def _step_cells(row, step: str, *, paper: bool) -> list[str]:
    s = getattr(row, step)
    if paper:
        return [
            _tex_pm(p.mean, p.std, d) if p else "--"
            for p, d in (
                (s.paper.get("data"), 2),
                (s.paper.get("model"), 2),
                (s.paper.get("gap"), 2),
                (s.paper.get("ratio"), 3),
            )
        ]
    c = s.contrast
    return [
        _tex_interval(s.data.mean, s.data.ci_low, s.data.ci_high, 2) if s.data else "--",
        _tex_interval(s.model.mean, s.model.ci_low, s.model.ci_high, 2) if s.model else "--",
        _tex_interval(c.gap, c.gap_low, c.gap_high, 2) if c else "--",
        _tex_interval(c.ratio, c.ratio_low, c.ratio_high, 3) if c else "--",
    ]


def ratings_latex(res: ResultsOut, task_label: str, *, paper: bool = False) -> str:
    """The later paper's Table 3 as a booktabs table: task, l, then for quality and for
    consistency the mean after data prefixes, after model prefixes, their gap and ratio,
    each with its interval, or with ``paper=True`` the paper-comparable mean +- std over
    random disjoint runs of pairs. Main variant only."""
    ratings = res.ratings
    v = ratings.results if ratings else None
    head = " & ".join(f"\\multicolumn{{4}}{{c}}{{{STEP_LABELS[s]}}}" for s in STEP_LABELS)
    sub = " & ".join(["data & model & gap & ratio"] * 2)
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{ll" + "c" * 8 + "}",
        "\\toprule",
        f" & & {head} \\\\",
        "\\cmidrule(lr){3-6} \\cmidrule(lr){7-10}",
        f"Task & $l$ & {sub} \\\\",
        "\\midrule",
    ]
    for row in v.table if v else []:
        cells = [*_step_cells(row, "quality", paper=paper)]
        cells += _step_cells(row, "consistency", paper=paper)
        lines.append(f"{tex_escape(task_label)} & {row.length} & " + " & ".join(cells) + " \\\\")
    n = f"{v.n_ratings:,} ratings by {v.n_annotators} annotators" if v else "no ratings"
    who = "Human"
    if v is not None and v.n_simulated:
        n += f"; {tex_escape(v.simulated or '')}, not people"
        who = "Simulated-crowd" if v.n_simulated >= v.n_ratings else "Human and simulated"
    if paper and v is not None and v.paper:
        what = (
            "mean $\\pm$ std over random disjoint runs of pairs, "
            f"{v.paper_design('$l={}$')} (paper-comparable)"
        )
    elif paper:
        what = "mean $\\pm$ std over random disjoint runs of pairs (paper-comparable)"
    elif v is not None:
        level = f"{v.level:.0%}".replace("%", "\\%")
        what = f"estimate [{level} interval: {tex_escape(v.interval)}]"
    else:
        what = "no figures"
    excl = "with" if v and v.exclusions_applied else "without"
    scale = f"0--{ratings.scale_max}" if ratings else "0--5"
    lines += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{{who} ratings ({scale}) of the continuations of {tex_escape(res.study)} "
        "after data and model prefixes: gap = data $-$ model, ratio = data / model; "
        f"{what}; {excl} the pre-declared exclusions; {n}.}}",
        f"\\label{{tab:ratings-{tex_escape(res.study).replace(chr(92), '')}}}",
        "\\end{table}",
        "",
    ]
    return "\n".join(lines)


def _iv(est: float | None, low: float | None, high: float | None, digits: int = 2) -> str:
    e = _num(est, digits)
    if e is None:
        return "--"
    lo, hi = _num(low, digits), _num(high, digits)
    return e if lo is None or hi is None else f"{e} [{lo}, {hi}]"


COLUMNS = (
    f"{'l':>4}  {'step':<11}  {'data':>18}  {'model':>18}  {'gap (data-model)':>20}  "
    f"{'ratio (data/model)':>21}  {'n ann':>5}  {'eff':>5}"
)


def ratings_table(res: ResultsOut) -> str:
    """A plain-text Table 3 for the terminal: both variants, one line per length and step;
    then the paper-comparable rows, the trends and the agreement."""
    ratings = res.ratings
    out: list[str] = []
    for v in _variants(ratings):
        what = f"; {v.n_ratings} ratings by {v.n_annotators} annotators; {v.interval}"
        out += variant_head(res.study, v.exclusions_applied, what, v.simulated, COLUMNS)
        for row in v.table:
            for step in STEP_LABELS:
                s = getattr(row, step)
                c = s.contrast
                data = _iv(s.data.mean, s.data.ci_low, s.data.ci_high) if s.data else "--"
                model = _iv(s.model.mean, s.model.ci_low, s.model.ci_high) if s.model else "--"
                gap = _iv(c.gap, c.gap_low, c.gap_high) if c else "--"
                ratio = _iv(c.ratio, c.ratio_low, c.ratio_high, 3) if c else "--"
                n_ann = c.n_annotators if c else 0
                eff = _num(c.effective_annotators, 1) if c else None
                out.append(
                    f"{row.length:>4}  {step:<11}  {data:>18}  {model:>18}  {gap:>20}  "
                    f"{ratio:>21}  {n_ann:>5}  {eff or '--':>5}"
                )
        if v.paper:
            out.append(f"paper-comparable (mean +- std over {v.paper_design()}):")
            for row in v.table:
                for step in STEP_LABELS:
                    figs = getattr(row, step).paper
                    cells = []
                    for what in ("data", "model", "gap", "ratio"):
                        p = figs.get(what)
                        m, sd = (_num(p.mean, 3), _num(p.std, 3)) if p else (None, None)
                        cells.append(f"{what} {m or '--'} +- {sd or '--'}")
                    out.append(f"{row.length:>4}  {step:<11}  " + "; ".join(cells))
        for t in v.trends:
            out.append(
                f"trend of the {t.step} {t.measure} per word: {_iv(t.slope, t.low, t.high, 4)}"
            )
        for a in v.agreement:
            interval = _iv(a.alpha_interval, a.alpha_interval_low, a.alpha_interval_high, 3)
            ordinal = _iv(a.alpha_ordinal, a.alpha_ordinal_low, a.alpha_ordinal_high, 3)
            shares = [_num(x, 3) or "--" for x in (a.exact, a.within_step, a.within_point)]
            out.append(
                f"agreement on {a.step} ({a.n_pairs} pairs, {a.n_ratings} ratings): alpha "
                f"interval {interval}, ordinal {ordinal}; exact {shares[0]}, within one step "
                f"{shares[1]}, within one point {shares[2]}"
            )
        out.extend(f"agreement: {text}" for text in dict.fromkeys(a.paper for a in v.agreement))
        out.extend(f"warning: {w}" for w in v.warnings)
        out.append("")
    if not _variants(ratings):
        out.append(f"{res.study}: no ratings to estimate from yet")
    out.extend(f"note: {m}" for m in res.messages)
    return "\n".join(out).rstrip() + "\n"


__all__ = [
    "RATING_FIELDS",
    "TABLE_FIELDS",
    "ratings_csv",
    "ratings_jsonl",
    "ratings_latex",
    "ratings_table",
    "ratings_table_csv",
]
