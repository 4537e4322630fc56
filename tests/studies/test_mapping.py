"""One mapping of a study's settings: the study file <-> the `studies` table -> the worker."""

from __future__ import annotations

import pytest

from app.models import Study
from app.studies.schemas import (
    SETTINGS,
    STUDY_COLUMNS,
    WORKER_DEFAULTS,
    StudyConfig,
    setting,
    study_columns,
    worker_settings,
)
from app.studies.service import config_of, create_study

# Every setting away from its default (but `task`: a seq2seq study takes no prompt and no
# diagnostic kinds, so SEQ2SEQ moves that one).
FULL = StudyConfig.model_validate(
    {
        "slug": "full",
        "title": "Every setting",
        "description": "not the default",
        "model": {"name": "m", "revision": "r1", "tokenizer": "t"},
        "dataset": {"path": "d.tsv", "format": "tsv"},
        "reference": {"model": "pd", "revision": "r2", "data_prefixes": "reference"},
        "prefix_lengths": [5, 10],
        "kinds": ["data", "model", "data_shuffled", "model_corrupted@0.3"],
        "items_per_cell": 30,
        "top_k": 4,
        "prompt_words": 3,
        "decoding": {
            "temperature": 0.7,
            "top_k": 40,
            "top_p": 0.9,
            "beam_width": 4,
            "resample_on_eos": False,
            "max_word_tokens": 8,
        },
        "special_top1": "renormalise",
        "seed": 11,
        "hits": {
            "mix": {"data": 4, "model": 4, "data_shuffled": 1},
            "attention": 2,
            "replicas": 2,
            "overlap_share": 0.1,
            "overlap_replicas": 4,
        },
        "annotators": {
            "per_annotator_cap": 50,
            "max_cell_share": 0.05,
            "lease_minutes": 12.5,
            "min_seconds_per_item": 1.5,
        },
        "exclusions": {"blocked": False, "attention_min_accuracy": 0.8, "too_fast": False},
        "payment": {"reward_cents": 50, "platform_fee": 0.2},
        "samples": {"per_kind": 5, "lengths": [2, 4], "kinds": ["data", "random"], "words": 12},
        "participants": {
            "consent": "I agree to take part.",
            "comments": False,
            "exclude_studies": ["pilot"],
        },
        "channels": {
            "prolific": {
                "enabled": True,
                "study_id": "abc123",
                "participant_param": "PID",
                "study_param": "SID",
                "session_param": "SESS",
                "completion_code": "C0DE",
                "redirect_url": "https://example.org/done",
                "prescreeners": {
                    "first_languages": ["english"],
                    "fluent_languages": ["english", "french"],
                    "countries": ["GB"],
                    "min_approval_rate": 95,
                },
            },
            "mturk": {
                "enabled": True,
                "sandbox": False,
                "submit_origins": ["http://127.0.0.1:9"],
                "min_approval_rate": 95,
                "min_approved": 1000,
                "locales": ["US", "GB"],
                "masters": True,
            },
        },
    }
)
SEQ2SEQ = StudyConfig(
    slug="mt",
    title="Translation",
    task="seq2seq",
    model={"name": "m"},
    dataset={"path": "d.jsonl", "format": "jsonl"},
    prefix_lengths=[5],
    items_per_cell=10,
)
RATINGS = StudyConfig(
    slug="rate",
    title="Ratings of continuations",
    type="ratings",
    model={"name": "m"},
    dataset={"path": "d.txt"},
    prefix_lengths=[20, 40],
    prompt_words=20,
    items_per_cell=50,
    ratings={"continuation_words": 30, "continuation_top_k": 40, "scale_max": 4, "step": 1},
)
# Columns that are the study's state, not its settings.
STATE = {"id", "status", "dataset_sha256", "created_by_id", "created_at", "updated_at", "closed_at"}


def test_the_examples_move_every_setting():
    """So that the round trips below cover every setting, a new one included."""
    for name, info in SETTINGS.items():
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            moved = [c for c in (FULL, SEQ2SEQ, RATINGS) if setting(c, name) != default]
            assert moved, f"set {name} away from its default in FULL, SEQ2SEQ or RATINGS"


def test_every_column_of_the_table_is_a_setting_or_the_studys_state():
    names = [c.name for c in STUDY_COLUMNS]
    assert len(names) == len(set(names))
    assert set(names) | STATE == set(Study.__table__.columns.keys())
    assert not set(names) & STATE


def test_every_setting_survives_the_table(session):
    for config in (FULL, SEQ2SEQ, RATINGS):
        study = create_study(session, config)
        session.commit()
        session.expire_all()  # read back from the database, JSON columns included
        assert config_of(session.get(Study, study.id)) == config


def test_columns_hold_settings_in_the_tables_units():
    columns = study_columns(FULL)
    assert columns["model_name"] == "m" and columns["tokenizer_name"] == "t"
    assert columns["lease_seconds"] == 750 and columns["min_ms_per_item"] == 1500
    assert columns["hit_layout"] == {
        "mix": {"data": 4, "model": 4, "data_shuffled": 1},
        "attention": 2,
    }
    assert columns["replicas"] == 2 and columns["decoding"]["max_word_tokens"] == 8


def test_a_study_stored_before_max_word_tokens_searched_without_a_limit(session):
    study = create_study(session, FULL)
    study.decoding = {k: v for k, v in study.decoding.items() if k != "max_word_tokens"}
    stored_layout = dict(study.hit_layout)
    session.commit()
    session.expire_all()
    study = session.get(Study, study.id)
    config = config_of(study)
    assert config.decoding.max_word_tokens == 0 and config.decoding.top_k == 40
    assert worker_settings(config)["max_word_tokens"] is None
    assert study.hit_layout == stored_layout  # reading the row leaves it as it was
    assert "max_word_tokens" not in study.decoding


def test_worker_settings_in_the_workers_names():
    assert worker_settings(FULL) == {
        "top_k": 4,
        "prompt_words": 3,
        "temperature": 0.7,
        "sample_top_k": 40,
        "sample_top_p": 0.9,
        "eos_policy": "skip",
        "num_beams": 4,
        "max_word_tokens": 8,
        "special_policy": "renormalise",
    }
    assert WORKER_DEFAULTS == {
        "top_k": 5,
        "prompt_words": 0,
        "temperature": 1.0,
        "sample_top_k": None,
        "sample_top_p": None,
        "eos_policy": "resample",
        "num_beams": 10,
        "max_word_tokens": 16,
        "special_policy": "skip",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"task": "seq2seq", "dataset": {"path": "d.jsonl", "format": "jsonl"}}, "language models"),
        (
            {
                "task": "seq2seq",
                "dataset": {"path": "d.jsonl", "format": "jsonl"},
                "prompt_words": 0,
                "kinds": ["data", "model", "data_shuffled"],
            },
            r"\['data_shuffled'\]: a translation ratings study .* language-model diagnostics",
        ),
        ({"reference": {"model": "pd"}}, "no reference model"),
    ],
)
def test_a_ratings_study_refuses_what_it_cannot_do(extra, message):
    raw = {**RATINGS.model_dump(), **extra}
    with pytest.raises(ValueError, match=message):
        StudyConfig.model_validate(raw)
