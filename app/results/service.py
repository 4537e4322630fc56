"""Results of a study: the statistics of ``app.results.stats`` over its judgments.

``study_results`` loads the judgments (``queries.load_judgments``) and hands them to
``compute_results``, which is pure: arrays in, ``ResultsOut`` out. Every result is
computed twice, with and without the study's pre-declared exclusions (DESIGN.md §1:
"results always reported with and without exclusions"); the ``exclusions`` option only
says which of the two is the main one. Services read; they never commit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app import __version__
from app.models import Study
from app.results import queries
from app.results.queries import (
    FLAG_AFTER_BLOCK,
    FLAG_EXTRA_REPLICA,
    FLAG_OVER_CAP,
    FLAG_UNVERIFIED,
    Judgments,
    kind_codes,
)
from app.results.schemas import (
    AgreementOut,
    AnnotatorQualityOut,
    ClusterTestOut,
    CountsOut,
    ExclusionReport,
    LengthRow,
    ManifestOut,
    NoneShareOut,
    PaperFigureOut,
    PermutationOut,
    PlanOut,
    PositionBiasOut,
    QuantityOut,
    ResultQuery,
    ResultSet,
    ResultsOut,
    SanityOut,
    SoftwareOut,
    StudyDetailOut,
    StudySummaryOut,
)
from app.results.stats import (
    DATA_KIND,
    FEW_ANNOTATORS,
    MODEL_KIND,
    PAPER_LABEL,
    EBCResults,
    agreement,
    annotator_quality,
    design_effect,
    estimate_ebc,
    none_share_by_cell,
    paper_comparable,
    permutation_test,
    plan_study,
    position_bias,
    power_at,
    sanity,
    smallest_detectable_ebc,
)
from app.results.stats.power import PAPER_CGD_DATA, PlanError, PlanTarget
from app.software import software
from app.studies.service import config_of

DEFAULT_RULES = {
    "blocked": True,
    "attention_min_accuracy": 0.5,
    "too_fast": True,
    # Kept-but-flagged work (app.annotation.service.submit); not settable in a study file.
    "over_cap": True,
    "extra_replica": True,
}
PLAN_B = 2000  # resamples for the design effect when the main unit is not the annotator
# Item bootstrap of the agreement coefficients: a secondary figure over thousands of
# overlap items, where 2,000 resamples put the Monte Carlo error of a 95% bound well
# below its sampling error and cost a fifth of 10,000.
AGREEMENT_B = 2000


def num(x: Any) -> float | None:
    """A finite float, or None (JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, float | np.floating):
        return num(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


# --------------------------------------------------------------------------- exclusions


def exclusion_mask(
    j: Judgments, rules: dict[str, Any] | None
) -> tuple[np.ndarray, ExclusionReport]:
    """Which judgments the pre-declared rules keep.

    - ``blocked``: every judgment of an annotator who is blocked *and* whose past work
      was marked for exclusion (``exclude_past``);
    - ``attention_min_accuracy``: every judgment of an annotator whose accuracy on
      attention items (share choosing the model's top-1, which for an attention item
      is its unambiguous answer) is below the threshold; annotators without attention
      items are kept;
    - ``too_fast``: each judgment answered faster than the study's minimum time;
    - ``blocked`` also drops every judgment sent after its annotator was blocked
      (``after_block``: the HIT they held when blocked), whatever ``exclude_past`` says;
    - ``over_cap``, ``extra_replica``: late answers kept beyond the annotator's cap or the
      HIT's replicas (a lapsed lease whose slot or cap others took meanwhile);
    - ``unverified``: MTurk work not yet confirmed through the MTurk API. Not a rule one
      can switch off: it is left out of the figures without exclusions as well
      (:func:`counted`).

    The flagged-work rules appear in ``excluded_by_rule`` when they drop something.
    """
    rules = {**DEFAULT_RULES, **(rules or {})}
    n = len(j)
    keep = np.ones(n, bool)
    by_rule: dict[str, int] = {}
    whole: dict[str, list[str]] = {}
    labels = dict(zip(j.annotator_ids.tolist(), j.annotator_labels, strict=True))

    def drop_annotators(rule: str, ids: np.ndarray) -> None:
        hit = np.isin(j.annotator, ids)
        by_rule[rule] = int(hit.sum())
        whole[rule] = [labels.get(int(a), f"annotator {a}") for a in np.sort(ids)]
        keep[hit] = False

    if rules.get("blocked"):
        gone = j.annotator_blocked & j.annotator_exclude_past
        drop_annotators("blocked", j.annotator_ids[gone])
        after = j.flagged(FLAG_AFTER_BLOCK)
        by_rule["blocked"] = int((after | np.isin(j.annotator, j.annotator_ids[gone])).sum())
        keep &= ~after
    for rule, flag in (("over_cap", FLAG_OVER_CAP), ("extra_replica", FLAG_EXTRA_REPLICA)):
        flagged = j.flagged(flag)
        if rules.get(rule) and flagged.any():
            by_rule[rule] = int(flagged.sum())
            keep &= ~flagged
    unverified = j.flagged(FLAG_UNVERIFIED)
    if unverified.any():
        by_rule["unverified"] = int(unverified.sum())
        keep &= ~unverified
    threshold = rules.get("attention_min_accuracy")
    if threshold is not None:
        # Judged on the work that counts: unconfirmed MTurk work must not drop the rest.
        ids, acc = attention_accuracy(j, among=~unverified)
        drop_annotators("attention", ids[acc < float(threshold)])
    if rules.get("too_fast"):
        by_rule["too_fast"] = int(j.too_fast.sum())
        keep &= ~j.too_fast
    report = ExclusionReport(
        rules=rules,
        n_judgments=n,
        n_kept=int(keep.sum()),
        excluded_by_rule=by_rule,
        annotators_excluded=whole,
    )
    return keep, report


def counted(j: Judgments) -> np.ndarray | None:
    """The judgments any figure may count, exclusions or not: all but unconfirmed MTurk
    work (None: all of them)."""
    unverified = j.flagged(FLAG_UNVERIFIED)
    return ~unverified if unverified.any() else None


def attention_accuracy(
    j: Judgments, among: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per annotator with attention judgments (of those in `among`, if given): ``(ids,
    share of them choosing the top-1)``."""
    att = j.attention if among is None else j.attention & among
    ids, a = np.unique(j.annotator[att], return_inverse=True)
    correct = np.bincount(a, weights=(j.choice[att] == 1), minlength=ids.size)
    return ids, correct / np.bincount(a, minlength=ids.size)


# --------------------------------------------------------------------------- results


def study_results(session: Session, study: Study, query: ResultQuery | None = None) -> ResultsOut:
    """All results of `study` for `query` (load and compute)."""
    started = time.perf_counter()
    j = queries.load_judgments(session, study)
    return compute_results(study, j, query or ResultQuery(), started=started)


def compute_results(
    study: Study, j: Judgments, query: ResultQuery, *, started: float | None = None
) -> ResultsOut:
    """Every figure of DESIGN.md §1 from the judgment columns (no database)."""
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
        without = with_excl.model_copy(update={"exclusions_applied": False})
    else:
        without = _result_set(j, counted(j), query, k, applied=False, messages=messages)
    main, other = (with_excl, without) if query.exclusions == "on" else (without, with_excl)
    quality = _quality(j, study, keep, report)
    plan = None
    if main is not None:
        basis = keep if query.exclusions == "on" else counted(j)
        plan = _plan(study, j, basis, query, main, messages)
    return ResultsOut(
        study=study.slug,
        kinds=j.kinds,
        options=query,
        service_version=__version__,
        computed_at=datetime.now(UTC),
        seconds=time.perf_counter() - started,
        exclusions=report,
        results=main,
        other=other,
        quality=quality,
        plan=plan,
        messages=sorted(set(messages)),
    )


def _kind_name(kinds: list[str], code: int | None) -> str | None:
    if code is None:
        return None
    return kinds[code] if 0 <= code < len(kinds) else "other"


def _quantity(q, kinds: list[str]) -> QuantityOut:
    d = _clean(q.as_dict())
    d["kind"] = _kind_name(kinds, q.kind)
    d["reference_kind"] = _kind_name(kinds, q.reference_kind)
    return QuantityOut.model_validate(d)


def _result_set(
    j: Judgments,
    keep: np.ndarray | None,
    query: ResultQuery,
    k: int,
    *,
    applied: bool,
    messages: list[str],
) -> ResultSet | None:
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
    )
    kinds = j.kinds
    sub = j if mask.all() else j.take(mask)
    perms = permutation_test(
        sub.d, sub.length, sub.kind, sub.hit, sub.item, b=query.b, seed=query.seed
    )
    perms_out = [PermutationOut.model_validate(_clean(p.as_dict())) for p in perms]
    tests_out = [ClusterTestOut.model_validate(_clean(t.as_dict())) for t in res.tests]
    paper = [
        PaperFigureOut.model_validate(_clean(p.as_dict()) | {"kind": _kind_name(kinds, p.kind)})
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
    pos = position_bias(sub.option, sub.choice, k=k)
    cells, share = none_share_by_cell(sub.choice, sub.length, sub.kind, k=k)
    none_rows = []
    for (ln, kd), s in zip(cells, share, strict=True):
        n_cell = int(np.sum((sub.length == ln) & (sub.kind == kd)))
        none_rows.append(
            NoneShareOut(
                length=int(ln),
                kind=_kind_name(kinds, int(kd)) or "",
                share_none=num(s),
                n_judgments=n_cell,
            )
        )
    san = sanity(sub.item, sub.kind, sub.choice, sub.true_rank)
    quantities = [_quantity(q, kinds) for q in res.cgd]
    ratios = [_quantity(q, kinds) for q in res.ratios]
    table = _table(res, quantities, ratios, perms_out, paper, tests_out)
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
    return ResultSet(
        exclusions_applied=applied,
        estimator=query.estimator,
        unit=query.unit,
        ci=res.ci,
        b=res.b,
        seed=res.seed,
        level=res.level,
        n_judgments=res.n_judgments,
        n_items=res.n_items,
        n_annotators=res.n_annotators,
        n_clusters=res.n_clusters,
        few_annotators=res.few_annotators,
        n_effective=num(res.n_effective),
        interval=res.interval,
        warnings=res.warnings,
        table=table,
        cgd=quantities,
        ratios=ratios,
        trend=_quantity(res.trend, kinds) if res.trend else None,
        tests=tests_out,
        permutation=perms_out,
        paper_label=PAPER_LABEL,
        paper_comparable=paper,
        agreement=AgreementOut.model_validate(_clean(agree.as_dict())) if agree else None,
        position_bias=PositionBiasOut(
            counts=[int(c) for c in pos.counts],
            rates=[num(r) for r in pos.rates],
            share_none=num(pos.share_none),
            chi2=num(pos.chi2),
            p_value=num(pos.p_value),
        ),
        none_share=none_rows,
        sanity=SanityOut.model_validate(_clean(vars(san))),
        design_effect=num(design_effect(res)) if query.unit == "annotator" else None,
    )


def _table(
    res: EBCResults,
    cgd: list[QuantityOut],
    ratios: list[QuantityOut],
    perms: list[PermutationOut],
    paper: list[PaperFigureOut],
    tests: list[ClusterTestOut],
) -> list[LengthRow]:
    rows = []
    lengths = sorted({q.length for q in cgd if q.length is not None})
    for ln in lengths:

        def cell(kind: str, ln: int = ln) -> QuantityOut | None:
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


def _quality(
    j: Judgments, study: Study, keep: np.ndarray, report: ExclusionReport
) -> list[AnnotatorQualityOut]:
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
                _clean(row)
                | {
                    "annotator_id": aid,
                    "label": label,
                    "channel": channel,
                    "excluded": label in whole,
                }
            )
        )
    return out


# --------------------------------------------------------------------------- planner


def _plan(
    study: Study,
    j: Judgments,
    keep: np.ndarray | None,
    query: ResultQuery,
    main: ResultSet,
    messages: list[str],
) -> PlanOut | None:
    """The default plan shown with the results; None (and a message) when the study's
    own CGD(data) makes the default target impossible (EB-C x CGD(data) >= 1)."""
    deff = main.design_effect
    if deff is None:
        mask = ~j.attention if keep is None else keep & ~j.attention
        res = estimate_ebc(
            j.d,
            j.length,
            j.kind,
            j.annotator,
            j.hit,
            j.item,
            choice=j.choice,
            estimator=query.estimator,
            unit="annotator",
            b=PLAN_B,
            seed=query.seed,
            keep=mask,
        )
        deff = num(design_effect(res))
    cgd = [q.estimate for q in main.cgd if q.kind == "data" and q.estimate]
    cgd_measured = bool(cgd) and 0 < float(np.mean(cgd)) < 1
    cgd_data = float(np.mean(cgd)) if cgd_measured else PAPER_CGD_DATA
    n_now = [q.n_judgments for q in main.cgd if q.kind in ("data", "model")]
    try:
        return plan_for_study(
            study,
            cgd_data=cgd_data,
            cgd_data_measured=cgd_measured,
            design_effect=deff,
            judgments_now=min(n_now) if n_now else 0,
        )
    except PlanError as exc:
        messages.append(f"planner: {exc.reason}")
        return None


def plan_for_study(
    study: Study,
    target: PlanTarget | None = None,
    *,
    cgd_data: float = PAPER_CGD_DATA,
    cgd_data_measured: bool = False,
    design_effect: float | None = None,
    judgments_now: int = 0,
) -> PlanOut:
    """The planner: DESIGN.md's power formula with the study's layout, cap and payment,
    for ``target`` (:class:`PlanTarget`'s defaults when None). The results page's default
    plan and :func:`study_plan` differ only in how they measure its inputs.

    Raises PlanError (answered 422 with its reason) when no finite study reaches the target.
    """
    target = target or PlanTarget()
    target_ebc, halfwidth, power, alpha = (
        target.target_ebc,
        target.halfwidth,
        target.power,
        target.alpha,
    )
    deff_ok = design_effect is not None and math.isfinite(design_effect) and design_effect > 0
    deff = float(design_effect) if deff_ok else 1.0
    mix = dict(study.hit_layout.get("mix", {"data": 5, "model": 5}))
    per_kind = int(mix.get("data", 5)) or 5
    per_hit = sum(int(v) for v in mix.values()) + int(study.hit_layout.get("attention", 0))
    plan = plan_study(
        target_ebc=target_ebc,
        halfwidth=halfwidth,
        cgd_data=cgd_data,
        alpha=alpha,
        power=power,
        design_effect=deff,
        lengths=study.prefix_lengths,
        items_per_kind_per_hit=per_kind,
        items_per_hit=per_hit,
        replicas=int(study.replicas),
        max_hits_per_annotator=int(study.per_annotator_cap),
        max_cell_share=study.max_cell_share,
        reward_per_assignment=study.reward_cents / 100.0,
        platform_fee=float(study.platform_fee),
    )
    power_now = detectable = None
    if judgments_now > 0 and target_ebc and target_ebc != 1:
        try:
            power_now = num(
                power_at(judgments_now, target_ebc, cgd_data, alpha=alpha, design_effect=deff)
            )
            detectable = num(
                smallest_detectable_ebc(
                    judgments_now, cgd_data, alpha=alpha, power=power, design_effect=deff
                )
            )
        except ValueError:
            pass
    d = _clean(plan.as_dict())
    power_plan = d.pop("power")
    return PlanOut(
        target_ebc=target_ebc,
        halfwidth=halfwidth,
        cgd_data=cgd_data,
        cgd_data_measured=cgd_data_measured,
        alpha=alpha,
        power_target=power,
        design_effect_measured=deff_ok,
        power=power_plan,
        judgments_per_cell_now=judgments_now,
        power_now=power_now,
        smallest_detectable_ebc_now=detectable,
        **d,
    )


def study_plan(
    session: Session,
    study: Study,
    *,
    target_ebc: float | None = PlanTarget.target_ebc,
    halfwidth: float | None = PlanTarget.halfwidth,
    power: float = PlanTarget.power,
    alpha: float = PlanTarget.alpha,
    seed: int = 0,
) -> PlanOut:
    """The planner with CGD(data) and the design effect measured on the study's data so
    far (annotator bootstrap, exclusions applied); the paper's 0.73 and 1 without data."""
    j = queries.load_judgments(session, study)
    keep, _ = exclusion_mask(j, study.exclusions)
    mask = keep & ~j.attention
    target = PlanTarget(target_ebc, halfwidth, power, alpha)
    if not mask.any():
        return plan_for_study(study, target)
    res = estimate_ebc(
        j.d, j.length, j.kind, j.annotator, j.hit, j.item, b=PLAN_B, seed=seed, keep=mask
    )
    cgd = [q.estimate for q in res.cgd if q.kind == DATA_KIND and 0 < q.estimate < 1]
    n_now = [q.n_judgments for q in res.cgd if q.kind in (DATA_KIND, MODEL_KIND)]
    return plan_for_study(
        study,
        target,
        cgd_data=float(np.mean(cgd)) if cgd else PAPER_CGD_DATA,
        cgd_data_measured=bool(cgd),
        design_effect=num(design_effect(res)),
        judgments_now=min(n_now) if n_now else 0,
    )


# --------------------------------------------------------------------------- studies


def task_label(study: Study) -> str:
    """The first column of the paper's Table 4, e.g. "LM, gpt2" or "NMT, my-model"."""
    task = "LM" if str(study.task.value) == "lm" else "NMT"
    return f"{task}, {study.model_name}"


def study_summary(study: Study) -> StudySummaryOut:
    return StudySummaryOut(
        slug=study.slug,
        title=study.title,
        task=str(study.task.value),
        status=str(study.status.value),
        model=study.model_name,
        prefix_lengths=list(study.prefix_lengths),
        kinds=list(study.kinds),
        created_at=study.created_at,
    )


def study_summaries(studies: Iterable[Study]) -> list[StudySummaryOut]:
    return [study_summary(s) for s in studies]


def study_detail(session: Session, study: Study) -> StudyDetailOut:
    return StudyDetailOut(
        **study_summary(study).model_dump(),
        description=study.description,
        config=config_of(study).model_dump(mode="json"),
        counts=CountsOut(**queries.study_counts(session, study)),
    )


def manifest(session: Session, study: Study) -> ManifestOut:
    """The provenance manifest: what the study's figures were computed from."""
    config = config_of(study).model_dump(mode="json")
    examples = queries.provenance_examples(session, study)
    made_with: list[dict] = []
    for prov in examples.values():
        if isinstance(prov, dict) and prov.get("software") and prov["software"] not in made_with:
            made_with.append(prov["software"])
    return ManifestOut(
        study=study.slug,
        title=study.title,
        task=str(study.task.value),
        service="ebc-judge",
        service_version=__version__,
        generated_at=datetime.now(UTC),
        model={"name": study.model_name, "revision": study.model_revision},
        tokenizer=study.tokenizer_name or study.model_name,
        dataset={
            "path": study.dataset_path,
            "format": study.dataset_format,
            "sha256": study.dataset_sha256,
        },
        seeds={"study": study.seed, "results_default": ResultQuery().seed},
        decoding=dict(study.decoding),
        config=config,
        counts=CountsOut(**queries.study_counts(session, study)),
        item_provenance=examples,
        results_defaults=ResultQuery(),
        software=SoftwareOut(**software()),
        precompute_software=[SoftwareOut(**s) for s in made_with],
    )


__all__ = [
    "attention_accuracy",
    "compute_results",
    "exclusion_mask",
    "kind_codes",
    "manifest",
    "plan_for_study",
    "study_detail",
    "study_plan",
    "study_results",
    "study_summaries",
    "task_label",
]
