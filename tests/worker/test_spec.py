"""The worker's settings come from the study through `app.studies.schemas`' one mapping."""

from __future__ import annotations

from dataclasses import fields

from app.models import Study, StudyType
from app.studies.schemas import WORKER_DEFAULTS, worker_settings
from app.studies.service import create_study
from tests.studies.test_mapping import FULL, RATINGS
from worker.prefixes import PrefixSpec
from worker.runner import spec_for


def test_the_spec_is_the_studys_settings(session):
    study = create_study(session, FULL)
    session.commit()
    session.expire_all()
    spec = spec_for(session.get(Study, study.id), 7)
    assert spec == PrefixSpec(**worker_settings(FULL), batch_size=7)
    assert (spec.sample_top_k, spec.num_beams, spec.eos_policy) == (40, 4, "skip")


def test_the_specs_defaults_are_the_study_files():
    defaults = {f.name: f.default for f in fields(PrefixSpec)}
    assert set(WORKER_DEFAULTS) <= set(defaults)
    # `special_policy` alone differs, on purpose (worker/prefixes.py says why).
    differ = {n for n, v in WORKER_DEFAULTS.items() if defaults[n] != v}
    assert differ == {"special_policy"}


def test_only_a_ratings_study_continues_its_prefixes():
    assert worker_settings(RATINGS)["continuation_words"] == 30
    assert worker_settings(RATINGS)["continuation_top_k"] == 40
    # The same file as a next-word study: its ratings section is not the worker's business.
    nextword = RATINGS.model_copy(update={"type": StudyType.nextword})
    assert not {"continuation_words", "continuation_top_k"} & set(worker_settings(nextword))
    assert PrefixSpec(**worker_settings(nextword)).continuation_words == 0
