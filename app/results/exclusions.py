"""The study's pre-declared exclusion rules (docs/design.md §1, "Random clicking"): which
judgments (of a ratings study: ratings) they keep, and what they dropped and why.

Every result is computed with and without them (each type's results); MTurk work not
yet confirmed through the MTurk API counts in neither.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from app.results.queries import (
    FLAG_AFTER_BLOCK,
    FLAG_EXTRA_REPLICA,
    FLAG_OVER_CAP,
    FLAG_UNVERIFIED,
)
from app.results.schemas import ExclusionReport


class Answers(Protocol):
    """What the rules read of a study's answers (a next-word study's judgments, a ratings
    study's ratings): per answer its annotator, attention flag, whether it answered an
    attention item as expected, too-fast flag and its assignment's flags (``flagged``); per
    annotator (indexed like ``annotator_ids``) blocked, exclude_past and label."""

    annotator: np.ndarray
    attention: np.ndarray
    too_fast: np.ndarray
    annotator_ids: np.ndarray
    annotator_blocked: np.ndarray
    annotator_exclude_past: np.ndarray
    annotator_labels: list[str]

    def __len__(self) -> int: ...

    @property
    def attention_correct(self) -> np.ndarray: ...

    def flagged(self, flag: int) -> np.ndarray: ...


DEFAULT_RULES = {
    "blocked": True,
    "attention_min_accuracy": 0.5,
    "too_fast": True,
    # Kept-but-flagged work (app.annotation.submissions.submission_flags); not settable in
    # a study file.
    "over_cap": True,
    "extra_replica": True,
}


def exclusion_mask(j: Answers, rules: dict[str, Any] | None) -> tuple[np.ndarray, ExclusionReport]:
    """Which judgments the pre-declared rules keep (of a ratings study: which ratings of its
    submitted HITs, by the same rules; an attention pair is answered right when its
    quality is at most ``scale_max / 5``, 1 on the paper's 0-5 scale).

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


def counted(j: Answers) -> np.ndarray | None:
    """The judgments any figure may count, exclusions or not: all but unconfirmed MTurk
    work (None: all of them)."""
    unverified = j.flagged(FLAG_UNVERIFIED)
    return ~unverified if unverified.any() else None


def attention_accuracy(
    j: Answers, among: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per annotator with attention judgments (of those in `among`, if given): ``(ids,
    share of them answered as expected)`` (`attention_correct`: a judgment choosing the
    top-1; a rating of an attention pair's quality at most ``scale_max / 5``)."""
    att = j.attention if among is None else j.attention & among
    ids, a = np.unique(j.annotator[att], return_inverse=True)
    correct = np.bincount(a, weights=j.attention_correct[att], minlength=ids.size)
    return ids, correct / np.bincount(a, minlength=ids.size)
