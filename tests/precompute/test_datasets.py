"""Dataset readers and their error messages."""

from __future__ import annotations

import hashlib
import json

import pytest

from app.precompute.datasets import DatasetError, check_dataset, load_dataset


def test_plain_text_skips_blank_lines_and_headings(tmp_path):
    path = tmp_path / "wiki.tokens"
    path.write_text(" = Title = \n\n the cat sat \n = = Section = = \nit ran , fast\n\n")
    ds = load_dataset(path)
    assert ds.format == "text" and ds.task == "lm"
    assert [r.words for r in ds.rows] == [("the", "cat", "sat"), ("it", "ran", ",", "fast")]
    assert [r.line for r in ds.rows] == [3, 5]
    assert ds.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ds.vocabulary() == sorted({"the", "cat", "sat", "it", "ran", ",", "fast"})


def test_jsonl_text_and_pairs(tmp_path):
    text = tmp_path / "a.jsonl"
    text.write_text(json.dumps({"text": "a b c"}) + "\n\n" + json.dumps({"text": "d e"}) + "\n")
    assert [r.words for r in load_dataset(text).rows] == [("a", "b", "c"), ("d", "e")]
    pairs = tmp_path / "b.jsonl"
    pairs.write_text(json.dumps({"source": "ein Hund", "target": "a dog"}) + "\n")
    ds = load_dataset(pairs)
    assert ds.task == "seq2seq"
    assert ds.rows[0].source == "ein Hund" and ds.rows[0].words == ("a", "dog")


def test_tsv_pairs(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("ein Hund\ta dog\nzwei\ttwo\n")
    ds = load_dataset(path)
    pairs = [(r.source, r.words) for r in ds.rows]
    assert pairs == [("ein Hund", ("a", "dog")), ("zwei", ("two",))]


def test_missing_file(tmp_path):
    with pytest.raises(DatasetError, match="dataset file not found"):
        load_dataset(tmp_path / "nope.txt")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n = Heading = \n\n")
    with pytest.raises(DatasetError, match="the dataset is empty"):
        load_dataset(path)


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n\n{"text": broken\n')
    with pytest.raises(DatasetError, match=r"line 3: invalid JSON"):
        load_dataset(path)


def test_json_without_expected_keys(tmp_path):
    path = tmp_path / "keys.jsonl"
    path.write_text('{"sentence": "x"}\n')
    with pytest.raises(DatasetError, match=r"line 1: expected"):
        load_dataset(path)


def test_bad_tsv_row(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("a\tb\nno tab here\n")
    with pytest.raises(DatasetError, match=r"line 2: expected 'source<TAB>target'"):
        load_dataset(path)


def test_too_few_long_lines(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("one two three\none two three four five six\n")
    ds = load_dataset(path)
    check_dataset(ds, [2], 2)
    with pytest.raises(DatasetError, match=r"need 2 lines with at least 6 words; only 1"):
        check_dataset(ds, [2, 5], 2)
    with pytest.raises(DatasetError, match="at least 5 words"):
        check_dataset(ds, [2], 2, prompt_words=2)


def test_task_mismatch(tmp_path):
    pairs = tmp_path / "p.tsv"
    pairs.write_text("a b\tc d e\n")
    text = tmp_path / "t.txt"
    text.write_text("a b c\n")
    check_dataset(load_dataset(pairs), [1], 1, task="seq2seq")
    with pytest.raises(DatasetError, match="needs source/target rows"):
        check_dataset(load_dataset(text), [1], 1, task="seq2seq")
    with pytest.raises(DatasetError, match="needs text rows"):
        check_dataset(load_dataset(pairs), [1], 1, task="lm")
