import pytest
from pydantic import ValidationError

from app.studies.schemas import StudyConfig, parse_kind
from app.studies.service import StudyError, config_of, create_study, load_config, parse_config

MINIMAL = {
    "slug": "wiki",
    "title": "Wiki",
    "model": {"name": "gpt2"},
    "dataset": {"path": "wiki.test.txt"},
    "prefix_lengths": [30, 10, 20],
    "items_per_cell": 3000,
}


def test_defaults_follow_the_paper():
    cfg = StudyConfig.model_validate(MINIMAL)
    assert cfg.prefix_lengths == [10, 20, 30]
    assert cfg.kinds == ["data", "model"]
    assert cfg.top_k == 5
    assert cfg.hits.mix == {"data": 5, "model": 5}
    assert cfg.annotators.per_annotator_cap == 200
    assert cfg.annotators.lease_minutes == 30
    assert cfg.decoding.temperature == 1.0 and cfg.decoding.top_k is None
    assert cfg.decoding.beam_width == 10
    assert cfg.decoding.max_word_tokens == 16
    unlimited = StudyConfig.model_validate({**MINIMAL, "decoding": {"max_word_tokens": 0}})
    assert unlimited.decoding.max_word_tokens == 0
    with pytest.raises(ValidationError):
        StudyConfig.model_validate({**MINIMAL, "decoding": {"max_word_tokens": -1}})


@pytest.mark.parametrize(
    ("kind", "parsed"),
    [
        ("data", ("data", None)),
        ("model_corrupted@0.3", ("model_corrupted", 0.3)),
        ("data_corrupted@1", ("data_corrupted", 1.0)),
        ("random", ("random", None)),
        # A gap kind parses as its distorted prefix (`kind_parts` has the gap).
        ("data_shuffled+gap@5", ("data_shuffled", None)),
        ("data_corrupted@0.3+gap@10", ("data_corrupted", 0.3)),
    ],
)
def test_parse_kind(kind, parsed):
    assert parse_kind(kind) == parsed


@pytest.mark.parametrize(
    "kind",
    [
        "modle",
        "data_corrupted@0",
        "data_corrupted@1.5",
        "data@0.1",
        "data+gap@5",
        "model_corrupted@0.3+gap@5",
        "data_shuffled+gap@0",
        "data_shuffled+gap@1001",
        "data_shuffled+gap@5+gap@5",
    ],
)
def test_bad_kinds_are_refused(kind):
    with pytest.raises(ValueError):
        parse_kind(kind)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kinds": ["data"]}, "needs both 'data' and 'model'"),
        ({"prefix_lengths": [10, 10]}, "distinct"),
        ({"kinds": ["data", "model", "data_corrupted@0.30"]}, "as 'data_corrupted@0.3'"),
        ({"kinds": ["data", "model", "data_corrupted@1.0+gap@5"]}, "as 'data_corrupted@1\\+gap@5'"),
        ({"prefix_lengths": [0]}, "between 1 and 1000"),
        ({"hits": {"mix": {"data": 5, "random": 5}}}, "does not make"),
        ({"task": "seq2seq"}, "jsonl or tsv"),
        ({"slug": "Has Spaces"}, "pattern"),
        ({"top_k": 1}, "greater than or equal to 2"),
        ({"unknown_option": 1}, "Extra inputs"),
    ],
)
def test_invalid_configurations_say_what_is_wrong(change, message):
    with pytest.raises(ValidationError, match=message):
        StudyConfig.model_validate({**MINIMAL, **change})


def test_gap_kinds_parts_and_checks():
    from app.studies.kinds import kind_parts

    parts = kind_parts("data_corrupted@0.3+gap@5")
    assert (parts.base, parts.rate, parts.gap, parts.distorted) == (
        "data_corrupted",
        0.3,
        5,
        "data_corrupted@0.3",
    )
    ok = StudyConfig.model_validate({**MINIMAL, "kinds": ["data", "model", "data_shuffled+gap@10"]})
    assert ok.kinds[-1] == "data_shuffled+gap@10"  # 10 + 10 and 20 + 10 are lengths
    with pytest.raises(ValidationError, match="add a prefix length l \\+ 5"):
        StudyConfig.model_validate({**MINIMAL, "kinds": ["data", "model", "data_shuffled+gap@5"]})
    seq2seq = {
        **MINIMAL,
        "task": "seq2seq",
        "dataset": {"path": "pairs.tsv", "format": "tsv"},
        "kinds": ["data", "model", "data_shuffled+gap@10"],
    }
    with pytest.raises(ValidationError, match="for language models"):
        StudyConfig.model_validate(seq2seq)
    # A ratings study takes a gap kind (EB-M_gap), with the same need of a data cell at l + g.
    ratings = {**MINIMAL, "type": "ratings", "kinds": ["data", "model", "data_shuffled+gap@10"]}
    assert StudyConfig.model_validate(ratings).kinds[-1] == "data_shuffled+gap@10"
    with pytest.raises(ValidationError, match="add a prefix length l \\+ 5"):
        StudyConfig.model_validate({**ratings, "kinds": ["data", "model", "data_shuffled+gap@5"]})


def test_study_round_trips_through_the_table(session):
    cfg = StudyConfig.model_validate(
        {
            **MINIMAL,
            "kinds": ["data", "model", "data_corrupted@0.3"],
            "hits": {"mix": {"data": 4, "model": 4, "data_corrupted@0.3": 2}, "replicas": 2},
            "annotators": {"max_cell_share": 0.05, "lease_minutes": 20},
            "decoding": {"top_p": 0.9},
            "payment": {"reward_cents": 150, "platform_fee": 0.2},
            "seed": 2**62,
        }
    )
    study = create_study(session, cfg)
    session.expire_all()
    assert config_of(session.get(type(study), study.id)) == cfg


def test_load_config_reports_file_problems(tmp_path):
    with pytest.raises(StudyError, match="not found"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("slug = ")
    with pytest.raises(StudyError, match="not valid TOML"):
        load_config(bad)
    incomplete = tmp_path / "incomplete.toml"
    incomplete.write_text('slug = "x"\ntitle = "X"\n')
    with pytest.raises(StudyError, match="items_per_cell"):
        load_config(incomplete)


def test_duplicate_slug_is_refused(session):
    create_study(session, StudyConfig.model_validate(MINIMAL))
    with pytest.raises(StudyError, match="already exists"):
        create_study(session, StudyConfig.model_validate(MINIMAL))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"title": "a\x00b"}, "control characters"),
        ({"model": {"name": "gp\x1bt2"}}, "control characters"),
        ({"dataset": {"path": "d" * 1025}}, "at most 1024 characters"),
        ({"title": "t" * 256}, "at most 255 characters"),
        ({"description": "x" * 20_001}, "at most 20000 characters"),
        ({"decoding": {"temperature": float("inf")}}, "finite number"),
        ({"hits": {"overlap_share": float("nan")}}, "finite number"),
        ({"annotators": {"min_seconds_per_item": 1e300}}, "less than or equal to 3600"),
        ({"annotators": {"per_annotator_cap": 10**18}}, "less than or equal to 1000000"),
        ({"payment": {"reward_cents": 2**40}}, "less than or equal to 2147483647"),
        ({"hits": {"attention": 10**9}}, "less than or equal to 100"),
        ({"hits": {"mix": {"data": 10**12, "model": 5}}}, "between 0 and 1000"),
        ({"kinds": ["data", "model", "data_corrupted@0." + "1" * 80]}, "longer than 64"),
        ({"kinds": ["data\n", "model"]}, "unknown prefix kind"),
        ({"channels": {"panel": {"completion_code": "C\x00"}}}, "control characters"),
        ({"channels": {"mturk": {"submit_origins": ["x"] * 21}}}, "at most 20 items"),
        ({"description": [[[[[[[[["deep"]]]]]]]]]}, "nests deeper than 8"),
    ],
)
def test_values_that_cannot_be_stored_are_refused(change, message):
    with pytest.raises(ValidationError, match=message):
        StudyConfig.model_validate({**MINIMAL, **change})


def test_a_description_keeps_its_lines_and_tabs():
    text = "Line one\n\tindented\r\nend"
    assert StudyConfig.model_validate({**MINIMAL, "description": text}).description == text


def test_a_study_file_nested_past_the_parser_is_refused_with_a_message():
    deep = "slug = 'x'\ndescription = " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(StudyError, match="nested far deeper"):
        parse_config(deep)
    table = "slug = 'x'\nx = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n"
    with pytest.raises(StudyError, match="nested far deeper"):
        parse_config(table)
    dotted = "slug = 'x'\nx." + ".".join(["a"] * 3000) + " = 1\n"  # deep, yet parsed
    with pytest.raises(StudyError, match="nests deeper than 8"):
        parse_config(dotted)


def test_one_spelling_per_kind():
    from app.studies.kinds import canonical_kind

    assert canonical_kind("data_corrupted@0.30") == "data_corrupted@0.3"
    assert canonical_kind("model_corrupted@1.00") == "model_corrupted@1"
    assert canonical_kind("data_corrupted@0.25+gap@5") == "data_corrupted@0.25+gap@5"
    assert canonical_kind("data_shuffled+gap@5") == "data_shuffled+gap@5"
    assert canonical_kind("data") == "data"
