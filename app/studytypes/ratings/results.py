"""Results of a ratings study (docs/design.md "Second protocol: ratings of continuations").

``ratings_document`` loads the study's ratings (:func:`~.queries.load_ratings`) and hands
them to ``compute_ratings``, which is pure: columns in, :class:`RatingsOut` out.
A rating counts once its HIT is submitted, as a next-word judgment (stored only at
submission) does; the ratings of unfinished HITs stay stored, count in neither variant and
are reported as a count. As for a next-word study (:mod:`~app.studytypes.nextword.results`), every
figure is computed twice, with and without the study's pre-declared exclusions
(:mod:`app.results.exclusions`, the same rules: blocked annotators whose past work is
excluded, attention accuracy below the study's threshold — an attention pair of shuffled
words is answered right when its quality is at most ``scale_max / 5``, 1 on 0-5
(:func:`app.results.stats.ratings_figures.attention_max`) —, too-fast ratings, kept work
after a block, past the cap or the replicas; unconfirmed MTurk work counts in neither),
and the ``exclusions`` option only says which is the main one. The next-word options
(estimator, unit, ci) are refused (:class:`~app.studytypes.base.OptionNotForThisType`),
as the next-word figures (diagnostics, the planner) are. The statistics are
:func:`app.results.stats.ratings.ratings_results` and
:func:`~app.results.stats.ratings.rater_quality`; the stored EB-M scores come with them
(:mod:`app.studytypes.ratings.ebm`). Services read; they never commit.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from sqlalchemy.orm import Session

from app.models import Study
from app.results.exclusions import counted, exclusion_mask
from app.results.exports import DocumentText
from app.results.schemas import (
    NEXTWORD_OPTIONS,
    ExclusionReport,
    RatingsQuery,
    ResultQuery,
    ResultsOut,
)
from app.results.stats.ratings import (
    PAPER_RUNS_LABEL,
    STEPS,
    RatingsStats,
    rater_quality,
    ratings_results,
)
from app.results.stats.ratings_figures import attention_max
from app.studytypes.base import OptionNotForThisType
from app.studytypes.ratings import exports
from app.studytypes.ratings.ebm import stored_ebm
from app.studytypes.ratings.queries import Ratings, load_ratings, ratings_per_cell, scale_of
from app.studytypes.ratings.schemas import (
    AgreementRowOut,
    CellMeanOut,
    ContrastOut,
    PaperRowOut,
    RaterQualityOut,
    RatingsOut,
    RatingsRow,
    RatingsSet,
    StepRow,
    TrendOut,
    figures,
    simulated_ratings_label,
)

PAPER_LABEL = f"Paper-comparable: {PAPER_RUNS_LABEL}."


def ratings_query(query: ResultQuery | RatingsQuery) -> RatingsQuery:
    """The options of a ratings study's figures (:class:`RatingsQuery`) from the results'
    options; a next-word option that was given (estimator, unit, ci) is refused with
    :class:`~app.studytypes.base.OptionNotForThisType`, never silently ignored."""
    if isinstance(query, RatingsQuery):
        return query
    given = [name for name in NEXTWORD_OPTIONS if name in query.model_fields_set]
    if given:
        what = "are next-word options" if len(given) > 1 else "is a next-word option"
        raise OptionNotForThisType(
            f"{', '.join(given)} {what}; a ratings study takes b, seed, exclusions and level "
            "(its headline intervals are two-way, annotator x pair; the secondary ones an "
            "annotator bootstrap)",
            given,
        )
    return RatingsQuery.model_validate(query.model_dump(include=set(RatingsQuery.model_fields)))


class RatingsComputed(NamedTuple):
    ratings: RatingsOut
    exclusions: ExclusionReport


def study_ratings(
    session: Session, study: Study, query: ResultQuery | RatingsQuery | None = None
) -> RatingsOut:
    """The ratings figures of `study` for `query` (load and compute)."""
    opts = ratings_query(query or RatingsQuery())
    return compute_ratings(study, load_ratings(session, study), opts).ratings


def ratings_document(
    session: Session,
    study: Study,
    query: ResultQuery | RatingsQuery,
    *,
    started: float | None = None,
) -> ResultsOut:
    """The results document of a ratings study: its ratings figures (``ratings``), its
    stored EB-M (``ebm``) and its exclusion report counted in ratings; the next-word
    figures (CGD, EB-C, the planner) do not apply and are empty, and a next-word option
    given in `query` is refused (:class:`~app.studytypes.base.OptionNotForThisType`)."""
    started = time.perf_counter() if started is None else started
    opts = ratings_query(query)
    r = load_ratings(session, study)
    done = compute_ratings(study, r, opts)
    return ResultsOut(
        study=study.slug,
        kinds=r.kinds,
        options=opts,
        **ResultsOut.stamp(started),
        exclusions=done.exclusions,
        results=None,
        other=None,
        quality=[],
        plan=None,
        simulated_judgments=done.ratings.simulated_ratings,
        ratings=done.ratings,
        ebm=stored_ebm(session, study),
        messages=done.ratings.messages,
    )


def rater_quality_rows(session: Session, study: Study) -> list[RaterQualityOut]:
    """The per-annotator quality figures of a ratings study alone (the Annotators page):
    its counted ratings loaded once, the exclusion rules, no resampling."""
    r = load_ratings(session, study)
    keep, _ = exclusion_mask(r, study.exclusions)
    return _quality(r, keep)


def quality_by_rater(session: Session, study: Study) -> dict[int, RaterQualityOut]:
    """Per annotator id, their figures as a rater (the Annotators page)."""
    return {q.annotator_id: q for q in rater_quality_rows(session, study)}


def study_attention_max(study: Study) -> float:
    """The quality at most which `study`'s attention pairs pass (scale_max / 5)."""
    return attention_max(scale_of(study)[0])


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def compute_ratings(study: Study, r: Ratings, query: ResultQuery | RatingsQuery) -> RatingsComputed:
    """Every figure of a ratings study from its loaded ratings (no database)."""
    keep, report = exclusion_mask(r, study.exclusions)
    messages: list[str] = []
    if r.unfinished_ratings:
        messages.append(
            f"{_count(r.unfinished_ratings, 'rating')} in "
            f"{_count(r.unfinished_hits, 'unfinished HIT')}, not counted: a rating counts "
            "once its HIT is submitted, as a next-word judgment does (ratings.csv keeps "
            "every rating, with its assignment_status)"
        )
    if report.excluded_by_rule.get("unverified"):
        messages.append(
            f"{report.excluded_by_rule['unverified']} ratings of MTurk assignments not yet "
            "confirmed through the MTurk API are left out, with exclusions and without"
        )
    with_excl = _variant(r, keep, query, applied=True, messages=messages)
    if keep.all() and with_excl is not None:  # nothing excluded: the same figures
        without = with_excl.model_copy(update={"exclusions_applied": False})
    else:
        without = _variant(r, counted(r), query, applied=False, messages=messages)
    main, other = (with_excl, without) if query.exclusions == "on" else (without, with_excl)
    if main is None and other is not None:
        main, other = other, None
        messages.append(
            "every rating is excluded by the study's rules: the figures shown are without "
            "exclusions"
        )
    out = RatingsOut(
        scale_max=r.scale_max,
        step=r.step,
        results=main,
        other=other,
        quality=_quality(r, keep),
        n_ratings=r.n,
        unfinished_ratings=r.unfinished_ratings,
        unfinished_hits=r.unfinished_hits,
        attention_max=r.attention_max,
        open_consistency=int(np.isnan(r.consistency).sum()),
        simulated_ratings=max((v.n_simulated for v in (main, other) if v), default=0),
        messages=sorted(set(messages)),
    )
    return RatingsComputed(out, report)


def _variant(
    r: Ratings,
    keep: np.ndarray | None,
    query: ResultQuery | RatingsQuery,
    *,
    applied: bool,
    messages: list[str],
) -> RatingsSet | None:
    # A kind the study does not list (code -1) has no name to report it under.
    mask = (r.kind >= 0) if keep is None else (keep & (r.kind >= 0))
    if not (mask & ~r.attention).any():
        label = "with exclusions" if applied else "without exclusions"
        messages.append(f"no ratings {label} (attention pairs aside): nothing to estimate")
        return None
    stats = ratings_results(r.subset(mask), b=query.b, seed=query.seed, level=query.level)
    n_simulated = int((r.simulated & mask & ~r.attention).sum())
    return RatingsSet(
        exclusions_applied=applied,
        b=stats.b,
        seed=stats.seed,
        level=stats.level,
        n_ratings=stats.n_ratings,
        n_annotators=stats.n_annotators,
        n_simulated=n_simulated,
        simulated=simulated_ratings_label(n_simulated),
        interval=stats.method,
        table=_table(stats),
        cells=[figures(CellMeanOut, c) for c in stats.cells],
        contrasts=[figures(ContrastOut, c) for c in stats.contrasts],
        secondary=[figures(ContrastOut, c) for c in stats.secondary],
        paper_label=PAPER_LABEL,
        paper=[figures(PaperRowOut, p) for p in stats.paper],
        trends=[figures(TrendOut, t) for t in stats.trends],
        agreement=[figures(AgreementRowOut, a) for a in stats.agreement],
        warnings=list(stats.warnings),
    )


def _table(stats: RatingsStats) -> list[RatingsRow]:
    """The later paper's Table 3: per length, each step's data and model means, their
    gap and ratio, and the paper's mean +- std figures."""
    rows = []
    for ln in sorted({c.length for c in stats.cells}):

        def step_row(step: str, ln: int = ln) -> StepRow:
            def cell(kind: str):
                c = next(
                    (c for c in stats.cells if (c.length, c.kind, c.step) == (ln, kind, step)),
                    None,
                )
                return figures(CellMeanOut, c) if c else None

            contrast = next((c for c in stats.contrasts if (c.length, c.step) == (ln, step)), None)
            return StepRow(
                data=cell("data"),
                model=cell("model"),
                contrast=figures(ContrastOut, contrast) if contrast else None,
                paper={
                    p.what: figures(PaperRowOut, p)
                    for p in stats.paper
                    if (p.length, p.step) == (ln, step)
                },
            )

        rows.append(RatingsRow(length=ln, **{step: step_row(step) for step in STEPS}))
    return rows


def _quality(r: Ratings, keep: np.ndarray) -> list[RaterQualityOut]:
    """Per annotator, on all their ratings, with whether the rules left none of them."""
    if r.n == 0:
        return []
    info = {
        int(a): (label, channel, bool(sim), bool(blocked))
        for a, label, channel, sim, blocked in zip(
            r.annotator_ids,
            r.annotator_labels,
            r.annotator_channels,
            r.annotator_simulated,
            r.annotator_blocked,
            strict=True,
        )
    }
    kept = set(np.unique(r.annotator[keep]).tolist())
    out = []
    for q in rater_quality(r):
        aid = int(q.annotator)
        label, channel, simulated, blocked = info.get(aid, (f"annotator {aid}", "", False, False))
        out.append(
            RaterQualityOut(
                annotator_id=aid,
                label=label,
                channel=channel,
                simulated=simulated,
                blocked=blocked,
                n_ratings=q.n_ratings,
                n_attention=q.n_attention,
                attention_pass=q.attention_pass,
                top_value_share=q.top_value_share,
                leniency=q.leniency,
                too_fast_share=q.too_fast_share,
                excluded=aid not in kept,
            )
        )
    return out


# -- the type's results namespace (StudyTypePlugin.results) ------------------------------

document, quality = ratings_document, quality_by_rater
answers, answers_per_cell = load_ratings, ratings_per_cell
text = DocumentText(exports.ratings_table_csv, exports.ratings_latex, exports.ratings_table)


def check_options(query: ResultQuery) -> None:
    """Refuse the next-word options (estimator, unit, ci), given."""
    ratings_query(query)


__all__ = [
    "PAPER_LABEL",
    "RatingsComputed",
    "compute_ratings",
    "rater_quality_rows",
    "ratings_document",
    "ratings_query",
    "study_attention_max",
    "study_ratings",
]
