"""The study file's `[samples]` section (issue 34): its defaults are the paper's, every bad
value is refused with a message that names it, and a ratings study of the samples makes them
again as its items."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.studies.forms import field_errors
from app.studies.samples import ratings_config
from app.studies.schemas import StudyConfig, worker_settings
from app.studies.service import StudyError, parse_config
from worker.prefixes import PrefixSpec
from worker.samples import continuation_spec

BASE = {
    "slug": "s",
    "title": "t",
    "model": {"name": "m"},
    "dataset": {"path": "d.txt"},
    "prefix_lengths": [10],
    "items_per_cell": 4,
}
NMT = {**BASE, "task": "seq2seq", "dataset": {"path": "d.tsv", "format": "tsv"}}


def test_the_defaults_are_the_papers():
    lm, nmt = StudyConfig(**BASE), StudyConfig(**NMT)
    assert lm.samples.per_kind == 0 and lm.samples.lengths == [3] and lm.samples.words == 20
    assert lm.samples.kinds_for(lm.task) == ["data", "model", "random", "data_shuffled"]
    assert nmt.samples.kinds_for(nmt.task) == ["data", "model", "unrelated", "random"]


@pytest.mark.parametrize(
    ("samples", "where", "says"),
    [
        ({"per_kind": -1}, "samples.per_kind", "greater than or equal to 0"),
        ({"per_kind": 1001}, "samples.per_kind", "less than or equal to 1000"),
        ({"lengths": [0]}, "samples.lengths", "between 1 and 1000"),
        ({"lengths": [3, 3]}, "samples.lengths", "distinct"),
        ({"lengths": []}, "samples.lengths", "at least 1"),
        ({"kinds": ["nonsense"]}, "samples.kinds", "unknown prefix kind"),
        ({"kinds": ["data_corrupted@0.30"]}, "samples.kinds", "as 'data_corrupted@0.3'"),
        ({"kinds": ["data_shuffled+gap@2"]}, "samples.kinds", "not made after a gap"),
        ({"kinds": ["unrelated"]}, "", "a lm study cannot make ['unrelated']"),
        ({"words": 0}, "samples.words", "greater than or equal to 1"),
        ({"every": 1}, "samples.every", "Extra inputs"),
    ],
)
def test_bad_samples_are_refused_with_their_reason(samples, where, says):
    with pytest.raises(ValidationError) as exc:
        StudyConfig(**BASE, samples=samples)
    (err,) = exc.value.errors()
    assert ".".join(str(p) for p in err["loc"]) == where and says in err["msg"]


def test_a_study_file_takes_the_section():
    text = """slug = "s"\ntitle = "t"\nprefix_lengths = [10]\nitems_per_cell = 4
[model]\nname = "m"\n[dataset]\npath = "d.txt"
[samples]\nper_kind = 20\nlengths = "2, 3"\nkinds = ["data", "model"]\n"""
    config = parse_config(text)
    assert (config.samples.per_kind, config.samples.lengths) == (20, [2, 3])
    with pytest.raises(StudyError, match=r"samples\.per_kind"):
        parse_config(text.replace("per_kind = 20", "per_kind = 'many'"))


def test_the_ratings_study_of_the_samples():
    config = StudyConfig(**BASE, prompt_words=5, seed=9, samples={"per_kind": 6, "words": 7})
    rated = ratings_config(config, "rated")
    assert rated.type.value == "ratings" and rated.slug == "rated"
    assert (rated.prefix_lengths, rated.items_per_cell) == ([3], 6)
    assert rated.kinds == ["data", "model", "random", "data_shuffled"]
    assert rated.hits.mix == {"data": 2, "model": 2, "random": 2, "data_shuffled": 2}
    assert (rated.ratings.continuation_words, rated.ratings.continuation_top_k) == (7, None)
    assert (rated.seed, rated.prompt_words, rated.model) == (9, 5, config.model)
    assert rated.samples.per_kind == 0
    with pytest.raises(StudyError, match="asks for no forced-prefix samples"):
        ratings_config(StudyConfig(**BASE), "rated")
    # A translation model's samples: its ratings study rates the translations after the
    # first paper's forced prefixes.
    nmt = ratings_config(StudyConfig(**NMT, samples={"per_kind": 3}), "rated")
    assert nmt.type.value == "ratings" and nmt.task.value == "seq2seq"
    assert nmt.kinds == ["data", "model", "unrelated", "random"]
    assert nmt.hits.mix == dict.fromkeys(nmt.kinds, 2)
    with pytest.raises(StudyError, match="slug"):
        ratings_config(config, "Not a slug")


def test_the_form_places_a_refused_sample_kind_under_its_field():
    with pytest.raises(ValidationError) as exc:
        StudyConfig(**BASE, samples={"kinds": ["unrelated"]})
    errors = field_errors(exc.value)
    assert (
        list(errors) == ["samples.kinds"] and "cannot make ['unrelated']" in errors["samples.kinds"]
    )


def test_a_ratings_study_rates_the_very_continuations_of_its_samples():
    """A ratings-type source samples its continuations with its own top-k; its samples, and
    the ratings study of them, are both made with the samples' one setting."""
    source = StudyConfig(
        **BASE,
        type="ratings",
        ratings={"continuation_words": 9, "continuation_top_k": 40},
        samples={"per_kind": 3, "words": 7},
    )
    rated = ratings_config(source, "rated")
    made_with = continuation_spec(source, PrefixSpec(**worker_settings(source)))
    assert made_with == PrefixSpec(**worker_settings(rated))
    assert (made_with.continuation_words, made_with.continuation_top_k) == (7, None)


def test_the_copy_keeps_no_reference_model_and_no_platform_identifiers():
    source = StudyConfig(
        **BASE,
        reference={"model": "ref"},
        samples={"per_kind": 2},
        channels={
            "prolific": {"enabled": True, "study_id": "a" * 24, "completion_code": "C0DE"},
            "mturk": {"enabled": True, "sandbox": False},
        },
    )
    rated = ratings_config(source, "rated")
    assert rated.reference == StudyConfig(**BASE).reference
    assert rated.channels == StudyConfig(**BASE).channels
    assert not rated.channels.prolific.enabled and rated.channels.prolific.study_id is None
