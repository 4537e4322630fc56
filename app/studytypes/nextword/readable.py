"""What the results page says in words when its intervals say nothing (issue 32, "readable
at any size"): a pilot's EB-C interval of [0.68, 5.4·10⁷] is not a finding, and the page
says so, with what the planner says it would take.

An EB-C interval (a length's, or the pooled one over the lengths that is the headline with
several) is *uninformative* when an end is missing (unbounded, or a low end of 0)
or it spans more than a factor of `UNINFORMATIVE_SPAN` (high / low): it cannot then tell
an EB-C of 1 from one of 2. The sentence names the effective number of annotators, each
such interval with its ends written out (:func:`~app.results.stats.figure.bound_text`),
and the annotators the planner asks for a half-width of
:data:`~app.studytypes.nextword.planning.INFORMATIVE_HALFWIDTH`
(:func:`~app.studytypes.nextword.planning.annotators_for_halfwidth`).
"""

from __future__ import annotations

import math

from app.models import Study
from app.results.schemas import ResultSet, ResultsOut
from app.results.stats import ClusterTest, Quantity, finite_or_none
from app.results.stats.figure import bound_text
from app.studytypes.nextword.planning import annotators_for_halfwidth

UNINFORMATIVE_SPAN = 4.0


def uninformative(q: Quantity | ClusterTest | None) -> bool:
    """Whether the interval of a ratio `q` (a length's EB-C, or the pooled test's) says
    nothing (module docstring); False when `q` has no estimate (the table shows a dash,
    not an interval)."""
    if q is None or finite_or_none(q.estimate) is None:
        return False
    low, high = finite_or_none(q.low), finite_or_none(q.high)
    if low is None or high is None or low <= 0:
        return True
    return high / low > UNINFORMATIVE_SPAN


POOLED = "pooled over the lengths"


def _span(where: str, q: Quantity | ClusterTest) -> str:
    if math.isnan(q.low) or math.isnan(q.high):
        return f"{where}there is no interval (too few annotators to compute one)"
    low, high = finite_or_none(q.low), finite_or_none(q.high)
    return f"{where}it runs from {bound_text(low, high=False)} to {bound_text(high)}"


def interval_sentence(study: Study, res: ResultsOut) -> str | None:
    """The sentence the results page shows above its figures when some EB-C interval of the
    main figures is uninformative; None when every one says something."""
    rs: ResultSet | None = res.results
    if rs is None:
        return None
    rows = [r for r in rs.table if r.ebc is not None and finite_or_none(r.ebc.estimate)]
    wide = [r for r in rows if uninformative(r.ebc)]
    # The pooled interval (the headline with several lengths) is said too when it is wide.
    pooled = next((t for t in rs.tests if t.length is None), None) if len(rows) > 1 else None
    pooled_wide = uninformative(pooled)
    if not wide and not pooled_wide:
        return None
    g = finite_or_none(rs.n_effective)
    who = f"{g:.1f} effective annotators" if g is not None else f"{rs.n_annotators} annotators"
    lengths = ", ".join(str(r.length) for r in wide)
    if len(wide) == len(rows) and (pooled is None or pooled_wide):
        which = "no EB-C interval here is informative"
    elif not wide:
        which = f"the EB-C interval {POOLED} is not informative"
    elif pooled_wide:
        which = f"the EB-C intervals at l = {lengths} and {POOLED} are not informative"
    else:
        which = f"the EB-C interval at l = {lengths}"
        which += " is not informative" if len(wide) == 1 else " are not informative"
    named = len(wide) + pooled_wide > 1 or len(wide) == len(rows)  # else named above
    spans = [_span(f"at l = {r.length} " if named else "", r.ebc) for r in wide]
    if pooled_wide:
        spans.append(_span(f"{POOLED} " if named else "", pooled))
    spans = "; ".join(spans)
    need = annotators_for_halfwidth(study, res.plan, rs.n_annotators)
    if need.total is None:
        planner = f"the planner cannot size a study for a half-width of {need.halfwidth:g}: " + (
            need.reason
        )
    else:
        per = (
            f", at today's {need.per_annotator:.0f} judgments per cell each"
            if math.isfinite(need.per_annotator)
            else ""
        )
        planner = (
            f"the planner says {need.more:,} more annotators ({need.total:,} in all{per}) "
            f"for a half-width of {need.halfwidth:g}"
        )
    return f"With {who} {which} ({spans}): {planner}."


__all__ = ["POOLED", "UNINFORMATIVE_SPAN", "interval_sentence", "uninformative"]
