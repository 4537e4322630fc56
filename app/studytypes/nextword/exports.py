"""A next-word study's downloads: results as CSV and as a LaTeX table (the paper's Table 4),
a plain-text table for the terminal, judgments as CSV or JSON lines, streamed in constant
memory (the items' export, every type's, is :mod:`app.results.exports`).

Judgment export columns (one row per judgment, judgment-id order):

- ``study``, ``judgment_id``, ``hit_id``, ``hit_index``, ``hit_is_overlap``,
  ``position`` (of the item in its HIT), ``item_id``, ``kind``, ``length``,
  ``is_attention``;
- ``displayed_ranks``: the model rank (0-based) of the word at each screen slot, in
  screen order, then ``"none"`` (slot k, "None of the above is plausible");
  ``displayed_words``: the same as words (null at the "none" slot);
  ``choices``: the words in model rank order (top-1 first); ``top1_word``;
  ``true_next_word`` (data prefixes; never shown);
- ``option`` (screen slot chosen; k = none), ``chosen_rank`` (0-based model rank, empty
  for none), ``chosen_word``, ``is_none``, ``d`` (0: the top-1 was chosen);
- ``annotator_id``, ``annotator_label``, ``channel``, ``worker_id`` (the platform's
  id), ``annotator_blocked``, ``annotator_exclude_past``, ``simulated`` (true: the
  annotator is a simulated crowd's, not a person); ``assignment`` (public id),
  ``external_assignment_id``, ``external_hit_id``, ``external_session_id``,
  ``assignment_status``, ``review_status``;
- timings: ``leased_at``, ``page_served_at``, ``submitted_at``, ``judged_at`` (UTC, ISO
  8601), ``client_ms``; flags ``too_fast``, ``late``;
- the assignment's flags on kept work that may not count (the results' exclusion rules):
  ``over_cap``, ``extra_replica`` (late answers past the annotator's cap or the HIT's
  replicas), ``after_block`` (sent after the annotator was blocked), ``unverified`` (MTurk
  work not yet confirmed through the MTurk API);
- the participant's side (issue 33): ``hit_comment`` (their comment on the HIT, untrusted
  text), ``page_away`` and ``page_away_ms`` (how often and how long they left the page while
  on this item, where the page's script ran; empty: none recorded). A flag, never a rule.

CSV cells, JSON lines and failures mid-way follow :mod:`app.results.exports`.
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
    jsonl_chunks,
    plus_minus,
    records,
    shown_words,
    tex_escape,
    variant_head,
)
from app.results.schemas import ResultSet, ResultsOut, simulated_label
from app.results.stats import Quantity, finite_or_none, jsonable
from app.studytypes.nextword import queries

JUDGMENT_FIELDS = [
    "study", "judgment_id", "hit_id", "hit_index", "hit_is_overlap", "position", "item_id",
    "kind", "length", "is_attention", "displayed_ranks", "displayed_words", "choices",
    "top1_word", "true_next_word", "option", "chosen_rank", "chosen_word", "is_none", "d",
    "annotator_id", "annotator_label", "channel", "worker_id", "annotator_blocked",
    "annotator_exclude_past", "simulated", "assignment", "external_assignment_id",
    "external_hit_id", "external_session_id", "assignment_status", "review_status",
    "leased_at", "page_served_at", "submitted_at", "judged_at", "client_ms", "too_fast",
    "late", "over_cap", "extra_replica", "after_block", "unverified", *PAGE_SIGNAL_FIELDS,
]  # fmt: skip

RESULT_FIELDS = [
    "study", "exclusions", "estimator", "unit", "name", "length", "kind", "reference_kind",
    "estimate", "se", "low", "high", "method", "level", "delta_se", "delta_low",
    "delta_high", "iid_se", "design_effect", "n_judgments", "n_items", "n_annotators",
    "n_clusters", "few_annotators", "n_effective", "p_value", "p_greater", "test",
    "permutation_p_value", "permutation_p_greater", "paper_mean", "paper_std",
    "n_simulated", "simulated",
]  # fmt: skip
"""Results CSV columns. ``p_value``/``p_greater`` are the headline test's (for EB-C and
diagnostic ratios: wild cluster bootstrap by annotator, H0: population ratio = 1; for
the trend under the default interval: jackknife t, H0: slope = 0), named in ``test``;
until issue 11 they held the within-HIT permutation test's, now in ``permutation_*``
(secondary). ``n_effective``: effective number of annotators. ``n_simulated``: of the
variant's judgments, those from a simulated crowd, and ``simulated`` says so in words
("includes N judgments from a simulated crowd"; empty: people only)."""


def judgment_record(study: str, r: dict[str, Any]) -> dict[str, Any]:
    words = [c.get("word") for c in r["choices"] or []]
    r["study"] = study
    r["displayed_ranks"] = r.pop("choice_order")
    r["displayed_words"] = shown_words(words, r["displayed_ranks"])
    r["choices"] = words
    r["top1_word"] = words[0] if words else None
    r["is_none"] = r["chosen_rank"] is None
    return with_page_signals(r)


def _judgment_batches(session: Session, study: Study) -> Iterator[list[dict[str, Any]]]:
    slug = study.slug
    for keys, rows in queries.iter_judgment_rows(session, study):
        yield [judgment_record(slug, r) for r in records(keys, rows)]


def judgments_csv(session: Session, study: Study) -> Iterator[str]:
    """The study's judgments as CSV text chunks (one per fetched batch)."""
    return csv_chunks(JUDGMENT_FIELDS, _judgment_batches(session, study))


def judgments_jsonl(session: Session, study: Study) -> Iterator[str]:
    return jsonl_chunks(JUDGMENT_FIELDS, _judgment_batches(session, study))


# --------------------------------------------------------------------------- results


def _result_rows(results: ResultsOut, rs: ResultSet) -> Iterator[dict[str, Any]]:
    perm = {p.length: p for p in rs.permutation}
    tests = {t.length: t for t in rs.tests}
    paper = {(f.name, f.length, f.kind): f for f in rs.paper_comparable}
    qs: list[Quantity] = [*rs.cgd, *rs.ratios, *([rs.trend] if rs.trend else [])]
    for q in qs:
        row = jsonable(q)
        p = perm.get(q.length) if q.name == "ebc" else None
        t = tests.get(q.length) if q.name == "ebc" else None
        f = paper.get((q.name, q.length, q.kind)) if q.name in ("cgd", "ebc") else None
        test = None
        if row["p_value"] is not None:
            test = (
                "jackknife t, H0: slope = 0"
                if q.name == "trend"
                else f"{t.method if t else 'wild cluster bootstrap-t by annotator'}; H0: "
                f"{t.null if t else 'population ratio = 1, annotators as the sampled unit'}"
            )
        row |= {
            "study": results.study,
            "exclusions": "on" if rs.exclusions_applied else "off",
            "estimator": rs.estimator,
            "unit": rs.unit,
            "p_greater": finite_or_none(t.p_greater) if t else None,
            "test": test,
            "permutation_p_value": p.p_value if p else None,
            "permutation_p_greater": p.p_greater if p else None,
            "paper_mean": finite_or_none(f.mean) if f else None,
            "paper_std": finite_or_none(f.std) if f else None,
            "n_simulated": rs.n_simulated,
            "simulated": simulated_label(rs.n_simulated) or "",
        }
        yield row


def results_csv(results: ResultsOut) -> str:
    """Every figure, one row per quantity, main variant first, then the other."""
    buf = io.StringIO()
    writer = DictCsvWriter(buf, RESULT_FIELDS, extras="ignore")
    writer.writeheader()
    for rs in (results.results, results.other):
        if rs is None:
            continue
        for row in _result_rows(results, rs):
            writer.writerow({k: csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


def results_latex(results: ResultsOut, task_label: str, *, paper: bool = False) -> str:
    """A LaTeX table shaped like the paper's Table 4: task, l, CGD(M|D), CGD(M|M), EB-C.

    ``±`` is the standard error of the main figures (jackknife under the default
    interval, bootstrap under percentile/BCa; resampling unit as chosen), or with
    ``paper=True`` the paper-comparable std over 5 random parts. Needs
    the ``booktabs`` package.
    """
    rs = results.results
    if paper:
        what = "mean $\\pm$ std over 5 random disjoint parts of the judgments (paper-comparable)"
    else:
        unit = rs.unit if rs else results.options.unit
        se_kind = {"wild": "jackknife", "cgm": "two-way cluster-robust"}.get(
            rs.ci if rs else "", "bootstrap"
        )
        what = f"estimate $\\pm$ {se_kind} standard error (resampling unit: {tex_escape(unit)})"
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        "\\begin{tabular}{llccc}",
        "\\toprule",
        "Task & $l$ & CGD($M|D$) & CGD($M|M$) & EB-C \\\\",
        "\\midrule",
    ]
    for row in rs.table if rs else []:
        if paper:
            cells = [row.paper.get(k) for k in ("cgd_data", "cgd_model", "ebc")]
            vals = [plus_minus(f.mean, f.std) if f else "--" for f in cells]
        else:
            vals = [
                plus_minus(q.estimate, q.se) if q else "--"
                for q in (row.cgd_data, row.cgd_model, row.ebc)
            ]
        lines.append(f"{tex_escape(task_label)} & {row.length} & " + " & ".join(vals) + " \\\\")
    excl = "with" if rs and rs.exclusions_applied else "without"
    n = f"{rs.n_judgments:,} judgments by {rs.n_annotators} annotators" if rs else "no judgments"
    simulated = simulated_label(rs.n_simulated) if rs else None
    who = "Human"
    if simulated:
        n += f"; {tex_escape(simulated)}, not people"
        who = "Simulated-crowd" if rs.n_simulated >= rs.n_judgments else "Human and simulated"
    lines += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{{who} EB-C ($d_{{GD}}$) of {tex_escape(results.study)}, "
        f"{tex_escape(rs.estimator if rs else results.options.estimator)} estimator, "
        f"{excl} the pre-declared exclusions; {what}; {n}.}}",
        f"\\label{{tab:ebc-{tex_escape(results.study).replace(chr(92), '')}}}",
        "\\end{table}",
        "",
    ]
    return "\n".join(lines)


COLUMNS = (
    f"{'l':>4}  {'CGD(M|D)':>24}  {'CGD(M|M)':>24}  {'EB-C':>24}  {'p':>7}  "
    f"{'perm p':>7}  {'n ann':>5}  {'eff':>5}"
)


def results_table(results: ResultsOut) -> str:
    """A plain-text table for the terminal: both variants, one line per length."""
    out = []
    for rs in (results.results, results.other):
        if rs is None:
            continue
        what = (
            f", {rs.estimator} estimator, unit={rs.unit}, {rs.ci} {rs.level:.0%} intervals, "
            f"B={rs.b}; {rs.n_judgments} judgments, {rs.n_annotators} annotators"
        )
        simulated = simulated_label(rs.n_simulated) if rs.n_simulated else None
        out += variant_head(results.study, rs.exclusions_applied, what, simulated, COLUMNS)
        for row in rs.table:
            cells = []
            for q in (row.cgd_data, row.cgd_model, row.ebc):
                est = finite_or_none(q.estimate) if q else None
                if est is None:
                    cells.append(f"{'--':>24}")
                else:
                    low, high = finite_or_none(q.low), finite_or_none(q.high)
                    lo = "?" if low is None else f"{low:.3f}"
                    hi = "inf" if high is None else f"{high:.3f}"
                    cells.append(f"{est:.3f} [{lo}, {hi}]".rjust(24))
            p = finite_or_none(row.test.p_value) if row.test else None
            perm = row.permutation.p_value if row.permutation else None
            n_ann = row.ebc.n_annotators if row.ebc else 0
            eff = finite_or_none(row.ebc.n_effective) if row.ebc else None
            warn = " (few effective annotators)" if row.ebc and row.ebc.few_annotators else ""
            p_txt = "--" if p is None else f"{p:.4f}"
            perm_txt = "--" if perm is None else f"{perm:.4f}"
            eff_txt = "--" if eff is None else f"{eff:.1f}"
            out.append(
                f"{row.length:>4}  " + "  ".join(cells) + f"  {p_txt:>7}  {perm_txt:>7}  "
                f"{n_ann:>5}  {eff_txt:>5}{warn}"
            )
        t = rs.trend
        est = finite_or_none(t.estimate) if t else None
        if est is not None:
            low, high = finite_or_none(t.low), finite_or_none(t.high)
            out.append(
                f"trend of ln EB-C per word: {est:+.5f} [{low:+.5f}, {high:+.5f}]"
                if low is not None and high is not None
                else f"trend of ln EB-C per word: {est:+.5f}"
            )
        t0 = next(iter(rs.tests), None)
        if t0 is not None:
            out.append(f"p: {t0.method}; H0: {t0.null}")
        if rs.permutation:
            out.append(f"perm p: within-HIT permutation test, {rs.permutation[0].label}")
        out.extend(f"warning: {w}" for w in rs.warnings)
        out.append("")
    out.extend(f"note: {m}" for m in results.messages)
    return "\n".join(out).rstrip() + "\n"
