"""The papers' diagnostic curves (issue 14): CGD per prefix kind against prefix length,
from people and from a reference model, in one table, with each row's ratio: a corrupted
kind's corruption ratio and a gap kind's EB-C_gap (the later paper's self-recovery).

One row per (source, kind, length): ``source`` is ``people`` (the judgments, with the
estimator and the annotator-cluster intervals of the headline figures:
:func:`app.results.stats.estimate_ebc` with the results' options and the study's
exclusion rules) or ``synthetic:<metric>`` (the reference model P_D in place of people:
the mean over items of token d_TV, d_JS, d_GD or word-level d_GD, item-bootstrap
intervals: :mod:`app.studytypes.nextword.synthetic`). Kinds are the study's: data, model,
data_shuffled, random, unrelated, data_corrupted@c, model_corrupted@c and the gap kinds
data_shuffled+gap@g, data_corrupted@c+gap@g; a translation study's rows also carry the
first paper's labels (DATA, NORMAL, UNREL, RAND).

A row's ratio (see :data:`RATIO_DEFINITIONS`) is a ratio of two cells' CGDs: a corrupted
kind's corruption ratio over the kind it corrupts at the same length (before issue 34 it
was called the self-recovery gap), a gap kind's EB-C_gap over ``data`` at l + g. Its
interval comes from the same resampling as its source's CGDs: annotator clusters for
people (the wild cluster bootstrap that the headline EB-C uses, and its test of ratio =
1; a model_corrupted ratio is the same estimator with ``model`` as the reference kind),
items for the synthetic rows.

:func:`compute_diagnostics` is pure (loaded columns in, ``DiagnosticsOut`` out);
:func:`study_diagnostics` loads and computes; :func:`results_with_diagnostics` computes
the results and the diagnostics from one load, the people rows reusing the headline
estimate when they count the same judgments with the same options (the results page).
Services read; they never commit.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.csvfiles import DictCsvWriter, csv_text
from app.models import Study
from app.results.exclusions import counted, exclusion_mask
from app.results.exports import interval_text
from app.results.queries import ATTENTION_KIND, FIXED_KINDS
from app.results.schemas import (
    DiagnosticRow,
    DiagnosticsOut,
    ResultQuery,
    ResultsOut,
    SyntheticOut,
    simulated_label,
)
from app.results.stats import (
    INTERVAL_LABELS,
    METRICS,
    MODEL_KIND,
    SYNTHETIC_INTERVAL,
    Quantity,
    estimate_ebc,
)
from app.studies.kinds import KINDS
from app.studytypes.nextword import queries
from app.studytypes.nextword.queries import Judgments
from app.studytypes.nextword.results import MainEstimate, load_and_compute
from app.studytypes.nextword.synthetic import (
    corruption_reference,
    gap_codes,
    parts_of,
    reference_model,
    synthetic_results,
)

PAPER_LABELS = {base: info.paper_label for base, info in KINDS.items() if info.paper_label}
"""The first paper's forced prefixes of its translation diagnostics, by our kind names."""

RATIO_DEFINITIONS = {
    "corruption_ratio": (
        "CGD(M | data_corrupted@c, l) / CGD(M | data, l), and for model_corrupted@c the same "
        "over CGD(M | model, l): how much more often the model's next word departs from "
        "P_D's after a prefix whose words were each replaced at random with probability c "
        "than after the clean prefix of the same kind and length. Not the paper's gap: "
        "before issue 34 this ratio was called the self-recovery gap."
    ),
    "ebc_gap": (
        "EB-C_gap(l, l_gap) = CGD(M | distorted prefix of l words + l_gap words written by "
        "the model) / CGD(M | data prefix of l + l_gap words) (the later paper's App. A "
        "eq. 9, kinds data_shuffled+gap@g and data_corrupted@c+gap@g): a model that "
        "recovers from the distortion (self-recovery) shows EB-C_gap falling towards 1 as "
        "l_gap grows; one that stays above 1 keeps the damage, one that rises compounds it."
    ),
}

NAN = float("nan")


def shows_diagnostics(study: Study) -> bool:
    """Whether `study` has diagnostics to show: a kind beyond data and model, or a reference
    model."""
    return any(k not in FIXED_KINDS for k in study.kinds) or reference_model(study) is not None


def study_diagnostics(
    session: Session,
    study: Study,
    query: ResultQuery | None = None,
    *,
    synthetic: SyntheticOut | None = None,
) -> DiagnosticsOut:
    """The diagnostics table of `study` for `query` (load and compute). `synthetic`: the
    results' synthetic figures for the same `query`, when the caller has them already,
    instead of computing them again."""
    query = query or ResultQuery()
    j = queries.load_judgments(session, study)
    if synthetic is None and reference_model(study):
        synthetic = synthetic_results(study, queries.load_references(session, study), query)
    return compute_diagnostics(study, j, synthetic, query)


def results_with_diagnostics(
    session: Session, study: Study, query: ResultQuery
) -> tuple[ResultsOut, DiagnosticsOut | None]:
    """The results of `study` for `query` and, when it shows them, its diagnostics (else
    None), from one load of the judgments; the synthetic figures and, where the people rows
    count the judgments the headline figures count, the headline estimate are reused."""
    done = load_and_compute(session, study, query)
    if not shows_diagnostics(study):
        return done.results, None
    synthetic = done.results.synthetic
    diag = compute_diagnostics(study, done.judgments, synthetic, query, main=done.main)
    return done.results, diag


def _task(study: Study) -> str:
    return str(getattr(study.task, "value", study.task))


def compute_diagnostics(
    study: Study,
    j: Judgments,
    synthetic: SyntheticOut | None,
    query: ResultQuery,
    *,
    main: MainEstimate | None = None,
) -> DiagnosticsOut:
    """Every row of the diagnostics table (module docstring) from the loaded judgments and
    the synthetic figures (:func:`~.synthetic.synthetic_results`; None: none).
    `main`: the results' main estimate over the same `j`; the people rows take it instead
    of estimating again when it counted the same judgments with the same options."""
    messages: list[str] = []
    labels = PAPER_LABELS if _task(study) == "seq2seq" else {}
    people, applied, interval, n_simulated = _people_rows(
        study, j, query, labels, messages, main=main
    )
    rows = list(people)
    if synthetic is not None:
        rows += _synthetic_rows(synthetic, labels)
        messages += [f"synthetic: {w}" for w in synthetic.warnings]
    order = {k: i for i, k in enumerate(study.kinds)}
    sources = {"people": -1} | {f"synthetic:{m}": i for i, m in enumerate(METRICS)}
    rows.sort(key=lambda r: (sources.get(r.source, 99), order.get(r.kind, 99), r.length))
    return DiagnosticsOut(
        study=study.slug,
        task=_task(study),
        kinds=list(study.kinds),
        shown=shows_diagnostics(study),
        reference_model=reference_model(study),
        options=query,
        exclusions_applied=applied,
        people_interval=interval,
        synthetic_interval=SYNTHETIC_INTERVAL,
        ratio_definitions=RATIO_DEFINITIONS,
        paper_labels=labels,
        n_simulated=n_simulated,
        rows=rows,
        messages=list(dict.fromkeys(messages)),
    )


def _people_rows(
    study: Study,
    j: Judgments,
    query: ResultQuery,
    labels: dict[str, str],
    messages: list[str],
    *,
    main: MainEstimate | None = None,
) -> tuple[list[DiagnosticRow], bool | None, str, int]:
    """CGD per cell and the gaps from the judgments (exclusions as the results' option),
    and how many of the judgments they count are a simulated crowd's."""
    kinds = j.kinds
    regular = ~j.attention & (j.kind >= 0) & (j.kind != kinds.index(ATTENTION_KIND))
    applied = query.exclusions == "on"
    every = counted(j)  # None: every judgment counts
    every = regular if every is None else every & regular
    mask = exclusion_mask(j, study.exclusions)[0] & regular if applied else every
    if applied and not mask.any() and every.any():
        mask, applied = every, False
        messages.append(
            "every judgment is excluded by the study's rules: the people rows are without "
            "exclusions"
        )
    if not mask.any():
        messages.append("no judgments yet: no people rows")
        return [], None, INTERVAL_LABELS["cgm" if query.unit == "twoway" else query.ci], 0
    common: dict[str, Any] = {
        "choice": j.choice,
        "estimator": query.estimator,
        "unit": query.unit,
        "b": query.b,
        "ci": query.ci,
        "level": query.level,
        "seed": query.seed,
        "gaps": gap_codes(kinds),
    }
    cols = (j.d, j.length, j.kind, j.annotator, j.hit, j.item)
    if main is not None and main.query == query and np.array_equal(main.keep, mask):
        res = main.estimate  # the headline figures' estimate: the same call, made already
    else:
        res = estimate_ebc(*cols, keep=mask, **common)
    ratios: dict[tuple[int, int], Quantity] = {}
    for q in res.ratios:  # every kind over data: the corruption ratios over data, EB-C_gap
        if q.name == "ebc_gap" or corruption_reference(kinds[q.kind]) == "data":
            ratios[(q.length, q.kind)] = q
    corrupted = [c for c, k in enumerate(kinds) if corruption_reference(k) == "model"]
    sub = mask & np.isin(j.kind, [MODEL_KIND, *corrupted])
    with_model = set(j.length[sub & (j.kind == MODEL_KIND)].tolist())
    if with_model & set(j.length[sub & (j.kind != MODEL_KIND)].tolist()):
        # The same estimator with `model` as the reference kind: model_corrupted over model
        # (no kind is labelled the model's, so no EB-C or trend is formed).
        res_m = estimate_ebc(*cols, keep=sub, data_kind=MODEL_KIND, model_kind=-1, **common)
        ratios |= {(q.length, q.kind): q for q in res_m.ratios}
    simulated = j.simulated & mask
    rows = []
    for q in res.cgd:
        kind = kinds[q.kind]
        g = ratios.get((q.length, q.kind))
        n_simulated = int((simulated & (j.length == q.length) & (j.kind == q.kind)).sum())
        rows.append(
            DiagnosticRow(
                source="people",
                **_kind_fields(kind, q.length, g),
                paper_label=labels.get(kind),
                length=q.length,
                cgd=q.estimate,
                cgd_se=q.se,
                cgd_low=q.low,
                cgd_high=q.high,
                method=q.method,
                ratio=g.estimate if g else NAN,
                ratio_se=g.se if g else NAN,
                ratio_low=g.low if g else NAN,
                ratio_high=g.high if g else NAN,
                ratio_p_value=g.p_value if g else NAN,
                n=q.n_judgments,
                n_unit="judgments",
                n_annotators=q.n_annotators,
                n_effective=q.n_effective,
                few_annotators=q.few_annotators,
                n_simulated=n_simulated,
                simulated=simulated_label(n_simulated),
            )
        )
    messages.extend(f"people: {w}" for w in res.warnings)
    n_simulated = int(simulated.sum())
    label = simulated_label(n_simulated)
    if label:  # the people rows say so, as every surface of the results does
        messages.append(f"people rows: {label} (not only people's judgments)")
    return rows, applied, res.interval, n_simulated


def _kind_fields(kind: str, length: int, ratio: Any) -> dict[str, Any]:
    """A row's fields that follow from its kind: base, c, l_gap, and which ratio it has over
    which reference cell (none: null; a ratio that could not be formed keeps its name)."""
    parts = parts_of(kind)
    over = corruption_reference(kind)
    name = "ebc_gap" if parts.gap else "corruption_ratio" if over else None
    reference = "data" if parts.gap else over
    return {
        "kind": kind,
        "base_kind": parts.base,
        "c": parts.rate,
        "l_gap": parts.gap,
        "ratio_name": name,
        "ratio_reference": reference,
        "ratio_reference_length": (length + (parts.gap or 0)) if name else None,
    }


def _synthetic_rows(synthetic: SyntheticOut, labels: dict[str, str]) -> list[DiagnosticRow]:
    ratios = {
        (f.length, f.kind, f.metric): f for f in [*synthetic.corruption_ratios, *synthetic.ebc_gap]
    }
    rows = []
    for cell in synthetic.cells:
        kind = str(cell.kind)
        for metric, f in cell.cgd.items():
            g = ratios.get((cell.length, kind, metric))
            rows.append(
                DiagnosticRow(
                    source=f"synthetic:{metric}",
                    **_kind_fields(kind, cell.length, g),
                    paper_label=labels.get(kind),
                    length=cell.length,
                    cgd=f.estimate,
                    cgd_se=f.se,
                    cgd_low=f.low,
                    cgd_high=f.high,
                    method="percentile (items)",
                    ratio=g.estimate if g else NAN,
                    ratio_se=g.se if g else NAN,
                    ratio_low=g.low if g else NAN,
                    ratio_high=g.high if g else NAN,
                    ratio_p_value=NAN,
                    n=f.n_items,
                    n_unit="items",
                    n_annotators=None,
                    n_effective=NAN,
                    few_annotators=None,
                )
            )
    return rows


# --------------------------------------------------------------------------- writers

DIAGNOSTIC_FIELDS = ["study", *DiagnosticRow.model_fields]
"""Diagnostics CSV columns: the study, then a row's fields (:class:`DiagnosticRow`)."""


def _cell(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    return csv_text(v) if isinstance(v, str) else v  # None: an empty cell


def diagnostics_csv(diag: DiagnosticsOut) -> str:
    """One line per row of the table; figures that cannot be computed are empty cells,
    text cells are neutralised against spreadsheet formulas (``exports.csv_text``)."""
    buf = io.StringIO()
    writer = DictCsvWriter(buf, DIAGNOSTIC_FIELDS)
    writer.writeheader()
    for row in diag.rows:
        values = {"study": diag.study, **row.model_dump(mode="json")}
        writer.writerow({k: _cell(v) for k, v in values.items()})
    return buf.getvalue()


def diagnostics_table(diag: DiagnosticsOut) -> str:
    """A plain-text table for the terminal: one line per row."""
    excl = {True: "with", False: "without", None: "no"}[diag.exclusions_applied]
    out = [
        f"{diag.study}: diagnostics ({excl} exclusions for people; reference model "
        f"{diag.reference_model or 'none'}); {diag.options.level:.0%} intervals, "
        f"B={diag.options.b}",
        f"{'source':<18} {'kind':<26} {'l':>4}  {'CGD':>24}  {'ratio':>24}  {'n':>7}",
    ]
    for r in diag.rows:
        kind = f"{r.kind} ({r.paper_label})" if r.paper_label else r.kind
        ratio = interval_text(r.ratio, r.ratio_low, r.ratio_high) if r.ratio_name else ""
        cgd = interval_text(r.cgd, r.cgd_low, r.cgd_high)
        out.append(
            f"{r.source:<18} {kind:<26} {r.length:>4}  {cgd:>24}  {ratio:>24}  {r.n:>7} {r.n_unit}"
        )
    if not diag.rows:
        out.append("(no rows: no judgments and no reference model divergences yet)")
    out.extend(f"{name}: {text}" for name, text in diag.ratio_definitions.items())
    out.extend(f"note: {m}" for m in diag.messages)
    return "\n".join(out) + "\n"
