"""Bulk approval's exclusion rules on a ratings study read its ratings: an annotator who
rates the attention pairs (shuffled words) above 1 fails the attention rule, on SQLite and
PostgreSQL."""

from __future__ import annotations

from app.crowd import payments
from tests.results.ratings_study import make_rated_study


def test_the_attention_rule_reads_a_ratings_studys_attention_pairs(session):
    rated = make_rated_study(session)
    dropped = payments._excluded_annotators(session, rated.study)
    by_name = {a.id: name for name, a in rated.annotators.items()}
    reasons = {by_name[i]: r for i, r in dropped.items()}
    # careless rates every attention pair 4 (expected <= 1): 0% correct.
    assert set(reasons) == {"careless", "blocked"}
    assert any("attention items 0% correct" in r for r in reasons["careless"])
    assert reasons["blocked"] == ["blocked, past work excluded"]
