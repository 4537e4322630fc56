"""Results of a next-word study: the statistics of ``app.results.stats`` over its judgments.

``load_and_compute`` loads the judgments (``queries.load_judgments``) and hands them to
``compute_results``, which is pure: arrays in, ``ResultsOut`` out (``load_and_compute``
also hands back the judgments and the main estimate, which the diagnostics reuse). Every
result is computed twice, with and without the study's pre-declared exclusions (DESIGN.md §1:
"results always reported with and without exclusions"; :mod:`app.results.exclusions`);
the ``exclusions`` option only says which of the two is the main one. The statistics'
dataclasses go into the document as they come, their kind codes named. A study with a
reference model also gets its synthetic figures (``synthetic``, from the items'
divergences: :mod:`app.studytypes.nextword.synthetic`). Services read; they never commit.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import NamedTuple

import numpy as np
from sqlalchemy.orm import Session

from app.models import Study
from app.results.exclusions import counted, exclusion_mask
from app.results.exports import DocumentText
from app.results.schemas import (
    AnnotatorQualityOut,
    ExclusionReport,
    LengthRow,
    NoneShareOut,
    ResultQuery,
    ResultSet,
    ResultsOut,
    SyntheticOut,
)
from app.results.stats import (
    FEW_ANNOTATORS,
    PAPER_LABEL,
    ClusterTest,
    EBCResults,
    PaperFigure,
    PermutationTest,
    PlanError,
    Quantity,
    agreement,
    annotator_quality,
    design_effect,
    estimate_ebc,
    none_share_by_cell,
    paper_comparable,
    permutation_test,
    position_bias,
    sanity,
)
from app.results.stats.agreement import AGREEMENT_B
from app.studytypes.nextword import exports, queries
from app.studytypes.nextword.planning import plan_from_judgments
from app.studytypes.nextword.queries import Judgments, References
from app.studytypes.nextword.synthetic import gap_codes, reference_model, synthetic_results


class _Variant(NamedTuple):
    """One variant's document and the estimate it came from (the planner reuses it)."""

    figures: ResultSet
    estimate: EBCResults
    keep: np.ndarray  # the judgments the estimate counted


class MainEstimate(NamedTuple):
    """The main figures' estimate, the judgments it counted (a mask over the loaded
    `Judgments`) and the options it was made with: the diagnostics' people rows reuse it
    when they count the same judgments with the same options."""

    query: ResultQuery
    keep: np.ndarray
    estimate: EBCResults


class Computed(NamedTuple):
    """The results, the judgments they were computed from and the main estimate (None: no
    figures), for a caller that computes more from the same load (the results page)."""

    results: ResultsOut
    judgments: Judgments
    main: MainEstimate | None


# The Annotators page's next-word figures need no error bars: the fewest resamples the
# results accept.
QUALITY_QUERY = ResultQuery(b=100)


def quality_by_annotator(session: Session, study: Study) -> dict[int, AnnotatorQualityOut]:
    """Per annotator id, the quality figures of the Annotators page, from the study's
    results at the fewest resamples."""
    return {q.annotator_id: q for q in study_results(session, study, QUALITY_QUERY).quality}


def study_results(
    session: Session,
    study: Study,
    query: ResultQuery | None = None,
    *,
    started: float | None = None,
) -> ResultsOut:
    """All results of `study` for `query` (load and compute)."""
    return load_and_compute(session, study, query, started=started).results


def load_and_compute(
    session: Session,
    study: Study,
    query: ResultQuery | None = None,
    *,
    started: float | None = None,
) -> Computed:
    """`study_results` with what it loaded and its main estimate (see `Computed`)."""
    started = time.perf_counter() if started is None else started
    j = queries.load_judgments(session, study)
    refs = queries.load_references(session, study) if reference_model(study) else None
    res, main = _compute(study, j, query or ResultQuery(), started=started, references=refs)
    return Computed(res, j, main)


def compute_results(
    study: Study,
    j: Judgments,
    query: ResultQuery,
    *,
    started: float | None = None,
    references: References | None = None,
) -> ResultsOut:
    """Every figure of DESIGN.md §1 from the judgment columns (no database); with the
    items' divergences from a reference model (`references`), the synthetic figures."""
    return _compute(study, j, query, started=started, references=references)[0]


def _compute(
    study: Study,
    j: Judgments,
    query: ResultQuery,
    *,
    started: float | None,
    references: References | None,
) -> tuple[ResultsOut, MainEstimate | None]:
    started = time.perf_counter() if started is None else started
    keep, report = exclusion_mask(j, study.exclusions)
    k = int(study.top_k)
    messages: list[str] = []
    if report.excluded_by_rule.get("unverified"):
        messages.append(
            f"{report.excluded_by_rule['unverified']} judgments of MTurk assignments not yet "
            "confirmed through the MTurk API are left out, with exclusions and without"
        )
    with_excl = _result_set(j, keep, query, k, applied=True, messages=messages)
    if keep.all() and with_excl is not None:  # nothing excluded: the same figures
        without = with_excl._replace(
            figures=with_excl.figures.model_copy(update={"exclusions_applied": False})
        )
    else:
        without = _result_set(j, counted(j), query, k, applied=False, messages=messages)
    main, other = (with_excl, without) if query.exclusions == "on" else (without, with_excl)
    # Every judgment excluded: the figures without exclusions take the main place (their
    # exclusions_applied says so) rather than an empty page.
    fallback = main is None and other is not None
    if fallback:
        main, other = other, None
        messages.append(
            "every judgment is excluded by the study's rules: the figures shown are "
            "without exclusions"
        )
    plan = None
    if main is not None:
        basis = keep if query.exclusions == "on" and not fallback else counted(j)
        # The main figures' annotator estimate is the planner's measurement, as it stands.
        measured = main.estimate if main.estimate.unit == "annotator" else None
        try:
            plan = plan_from_judgments(
                study, j, basis, estimator=query.estimator, seed=query.seed, measured=measured
            )
        except PlanError as exc:
            messages.append(f"planner: {exc.reason}")
    results = ResultsOut(
        study=study.slug,
        kinds=j.kinds,
        options=query,
        **ResultsOut.stamp(started),
        exclusions=report,
        results=main.figures if main else None,
        other=other.figures if other else None,
        quality=_quality(j, study, report),
        plan=plan,
        simulated_judgments=max(
            (rs.figures.n_simulated for rs in (main, other) if rs is not None), default=0
        ),
        synthetic=_synthetic(study, references, query),
        messages=sorted(set(messages)),
    )
    return results, MainEstimate(query, main.keep, main.estimate) if main else None


def _synthetic(study: Study, refs: References | None, query: ResultQuery) -> SyntheticOut | None:
    return synthetic_results(study, refs, query) if refs is not None else None


def _kind_name(kinds: list[str], code: int | str | None) -> str | None:
    if code is None or isinstance(code, str):
        return code
    return kinds[code] if 0 <= code < len(kinds) else "other"


def _named(q: Quantity, kinds: list[str]) -> Quantity:
    return replace(
        q, kind=_kind_name(kinds, q.kind), reference_kind=_kind_name(kinds, q.reference_kind)
    )


def _result_set(
    j: Judgments,
    keep: np.ndarray | None,
    query: ResultQuery,
    k: int,
    *,
    applied: bool,
    messages: list[str],
) -> _Variant | None:
    mask = ~j.attention if keep is None else (keep & ~j.attention)
    label = "with exclusions" if applied else "without exclusions"
    if not mask.any():
        messages.append(f"no judgments {label} (attention items aside): nothing to estimate")
        return None
    res = estimate_ebc(
        j.d,
        j.length,
        j.kind,
        j.annotator,
        j.hit,
        j.item,
        choice=j.choice,
        estimator=query.estimator,
        unit=query.unit,
        b=query.b,
        ci=query.ci,
        level=query.level,
        seed=query.seed,
        keep=mask,
        gaps=gap_codes(j.kinds),  # EB-C_gap of the gap kinds, as the diagnostics count it
    )
    kinds = j.kinds
    sub = j if mask.all() else j.take(mask)
    perms = permutation_test(
        sub.d, sub.length, sub.kind, sub.hit, sub.item, b=query.b, seed=query.seed
    )
    paper = [
        replace(p, kind=_kind_name(kinds, p.kind))
        for p in paper_comparable(sub.d, sub.length, sub.kind, seed=query.seed)
    ]
    agree = agreement(
        sub.item,
        sub.choice,
        categories=np.array([*range(1, k + 1), 0]),
        b=min(query.b, AGREEMENT_B),
        seed=query.seed,
        level=query.level,
    )
    cells, share = none_share_by_cell(sub.choice, sub.length, sub.kind, k=k)
    none_rows = [
        NoneShareOut(
            length=int(ln),
            kind=_kind_name(kinds, int(kd)) or "",
            share_none=float(s),
            n_judgments=int(np.sum((sub.length == ln) & (sub.kind == kd))),
        )
        for (ln, kd), s in zip(cells, share, strict=True)
    ]
    quantities = [_named(q, kinds) for q in res.cgd]
    ratios = [_named(q, kinds) for q in res.ratios]
    if res.few_annotators:
        # The warning rests on the effective number (a few busy annotators count as few).
        eff = [q.n_effective for q in res.cgd + res.ratios if math.isfinite(q.n_effective)]
        worst = f"{min(eff):.1f}" if eff else "?"
        if res.n_annotators < FEW_ANNOTATORS:
            who = f"only {res.n_annotators} annotators (effective number {worst})"
        else:
            who = (
                f"{res.n_annotators} annotators, but an effective number of only {worst} "
                "(a few did most of the work)"
            )
        messages.append(
            f"{label}: {who}; intervals and tests are unreliable below "
            f"{FEW_ANNOTATORS} effective annotators"
        )
    figures = ResultSet(
        exclusions_applied=applied,
        estimator=query.estimator,
        unit=res.unit,
        ci=res.ci,
        b=res.b,
        seed=res.seed,
        level=res.level,
        design=res.design,
        design_reason=res.design_reason,
        shared_share=res.shared_share,
        n_judgments=res.n_judgments,
        n_items=res.n_items,
        n_annotators=res.n_annotators,
        n_clusters=res.n_clusters,
        n_simulated=int((j.simulated & mask).sum()),
        few_annotators=res.few_annotators,
        n_effective=res.n_effective,
        interval=res.interval,
        warnings=res.warnings,
        table=_table(quantities, ratios, perms, paper, res.tests),
        cgd=quantities,
        ratios=ratios,
        trend=_named(res.trend, kinds) if res.trend else None,
        tests=res.tests,
        secondary_tests=res.secondary_tests,
        multiplicity=res.multiplicity,
        permutation=perms,
        paper_label=PAPER_LABEL,
        paper_comparable=paper,
        agreement=agree,
        position_bias=position_bias(sub.option, sub.choice, k=k),
        none_share=none_rows,
        sanity=sanity(sub.item, sub.kind, sub.choice, sub.true_rank),
        design_effect=design_effect(res) if res.unit == "annotator" else math.nan,
    )
    return _Variant(figures, res, mask)


def _table(
    cgd: list[Quantity],
    ratios: list[Quantity],
    perms: list[PermutationTest],
    paper: list[PaperFigure],
    tests: list[ClusterTest],
) -> list[LengthRow]:
    rows = []
    lengths = sorted({q.length for q in cgd if q.length is not None})
    for ln in lengths:

        def cell(kind: str, ln: int = ln) -> Quantity | None:
            return next((q for q in cgd if q.length == ln and q.kind == kind), None)

        ebc = next((q for q in ratios if q.length == ln and q.name == "ebc"), None)
        figs = {}
        for f in paper:
            if f.length != ln:
                continue
            if f.name == "ebc":
                figs["ebc"] = f
            elif f.kind in ("data", "model"):
                figs[f"cgd_{f.kind}"] = f
        rows.append(
            LengthRow(
                length=ln,
                cgd_data=cell("data"),
                cgd_model=cell("model"),
                ebc=ebc,
                ratios=[q for q in ratios if q.length == ln and q.name == "ratio"],
                test=next((t for t in tests if t.length == ln), None),
                permutation=next((p for p in perms if p.length == ln), None),
                paper=figs,
            )
        )
    return rows


def _quality(j: Judgments, study: Study, report: ExclusionReport) -> list[AnnotatorQualityOut]:
    """Per annotator, on all their judgments, with whether the rules dropped them whole."""
    if len(j) == 0:
        return []
    rules = report.rules
    q = annotator_quality(
        j.annotator,
        j.hit,
        j.item,
        j.kind,
        j.choice,
        np.minimum(j.option, study.top_k - 1),
        j.client_ms / 1000.0,
        attention=j.attention,
        attention_correct=j.choice == 1,
        k=int(study.top_k),
        length=j.length,
        min_seconds=study.min_ms_per_item / 1000.0,
        min_attention=float(rules.get("attention_min_accuracy") or 0.8),
    )
    whole = {x for labels in report.annotators_excluded.values() for x in labels}
    info = {
        int(a): (lab, ch)
        for a, lab, ch in zip(
            j.annotator_ids, j.annotator_labels, j.annotator_channels, strict=True
        )
    }
    out = []
    for row in q.rows():
        aid = int(row.pop("annotator"))
        label, channel = info.get(aid, (f"annotator {aid}", ""))
        row["top1_rate"] = {
            _kind_name(j.kinds, kd) or "other": v for kd, v in row["top1_rate"].items()
        }
        out.append(
            AnnotatorQualityOut.model_validate(
                row
                | {
                    "annotator_id": aid,
                    "label": label,
                    "channel": channel,
                    "excluded": label in whole,
                }
            )
        )
    return out


# -- the type's results namespace (StudyTypePlugin.results) ------------------------------

document, quality = study_results, quality_by_annotator
answers, answers_per_cell = queries.load_judgments, queries.judgments_per_cell
text = DocumentText(exports.results_csv, exports.results_latex, exports.results_table)


def check_options(query: ResultQuery) -> None:
    """A next-word study takes every option of the results."""
    return None


__all__ = [
    "AGREEMENT_B",
    "Computed",
    "MainEstimate",
    "compute_results",
    "load_and_compute",
    "quality_by_annotator",
    "study_results",
]
