"""The pre-declared exclusion rules on the hand-made set (see test_service.py's table)."""

from __future__ import annotations

from app.results.exclusions import attention_accuracy, exclusion_mask
from app.studytypes.nextword.queries import load_judgments


def test_exclusion_report(session, handmade):
    j = load_judgments(session, handmade.study)
    keep, report = exclusion_mask(j, handmade.study.exclusions)
    assert report.n_judgments == 25 and report.n_kept == 14 == int(keep.sum())
    assert report.excluded_by_rule == {"blocked": 5, "attention": 5, "too_fast": 1}
    assert report.annotators_excluded == {"blocked": ["C"], "attention": ["E"]}
    ids, acc = attention_accuracy(j)
    by_label = dict(zip(j.annotator_labels, j.annotator_ids.tolist(), strict=True))
    assert dict(zip(ids.tolist(), acc.tolist(), strict=True))[by_label["E"]] == 0.0
    # Rules switched off in the study keep everything.
    off = {"blocked": False, "attention_min_accuracy": None, "too_fast": False}
    keep, report = exclusion_mask(j, off)
    assert keep.all() and report.excluded_by_rule == {}


def test_blocked_without_exclude_past_keeps_past_work(session, handmade):
    handmade.annotators["C"].exclude_past = False
    session.flush()
    j = load_judgments(session, handmade.study)
    _, report = exclusion_mask(j, handmade.study.exclusions)
    assert report.excluded_by_rule["blocked"] == 0
