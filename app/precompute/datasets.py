"""Datasets for prefixes: plain text, JSONL and TSV.

Formats (chosen by extension, or explicitly):

- plain text (``.txt``, ``.tokens``, ``.raw``, anything else): one paragraph or sentence per
  line; blank lines and wiki-103 headings (`` = Title = ``, `` = = Section = = ``) are skipped;
- JSONL (``.jsonl``): one object per line, ``{"text": ...}`` for language modelling or
  ``{"source": ..., "target": ...}`` for translation;
- TSV (``.tsv``): ``source<TAB>target`` per line.

Words are whitespace-separated units of the text as it is (docs/design.md §1).  Every row keeps its
1-based line number for provenance, and the dataset carries the sha256 of the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_HEADING = re.compile(r"^\s*(=\s+)+\S.*?(\s+=)+\s*$")
FORMATS = ("text", "jsonl", "tsv")


class DatasetError(ValueError):
    """A dataset that cannot be used, with a message meant for the researcher."""


@dataclass(frozen=True)
class Row:
    """One usable line: its words (the target side for translation) and, for translation, the
    source sentence."""

    line: int
    words: tuple[str, ...]
    source: str | None = None


@dataclass
class Dataset:
    path: str
    format: str
    rows: list[Row]
    sha256: str
    _vocabulary: list[str] | None = field(default=None, repr=False)

    @property
    def task(self) -> str:
        """``"seq2seq"`` when rows have sources, else ``"lm"``."""
        return "seq2seq" if self.rows and self.rows[0].source is not None else "lm"

    def vocabulary(self) -> list[str]:
        """The distinct words of the dataset, sorted (the vocabulary of random and corrupted
        prefixes)."""
        if self._vocabulary is None:
            self._vocabulary = sorted({w for row in self.rows for w in row.words})
        return self._vocabulary

    def eligible(self, min_words: int) -> list[int]:
        """Indices of the rows with at least ``min_words`` words."""
        return [i for i, row in enumerate(self.rows) if len(row.words) >= min_words]

    def provenance(self) -> dict:
        return {"path": self.path, "format": self.format, "sha256": self.sha256}


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _guess_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "jsonl"
    if suffix == ".tsv":
        return "tsv"
    return "text"


def load_dataset(path: str | Path, format: str | None = None) -> Dataset:
    """Read a dataset file; raise `DatasetError` when it is missing, empty or malformed."""
    p = Path(path)
    fmt = format or _guess_format(p)
    if fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r}; use one of {', '.join(FORMATS)}")
    if not p.is_file():
        raise DatasetError(f"dataset file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{p}: not UTF-8 text ({exc})") from exc
    rows: list[Row] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip("\r\n")
        if not line.strip():
            continue
        if fmt == "text":
            if _HEADING.match(line):
                continue
            rows.append(Row(number, tuple(line.split())))
        elif fmt == "jsonl":
            rows.append(_json_row(p, number, line))
        else:
            parts = line.split("\t")
            if len(parts) != 2:
                raise DatasetError(
                    f"{p}, line {number}: expected 'source<TAB>target', found {len(parts)} "
                    "tab-separated fields"
                )
            rows.append(Row(number, tuple(parts[1].split()), parts[0].strip()))
    if not rows:
        raise DatasetError(f"{p}: the dataset is empty (no usable lines)")
    kinds = {row.source is None for row in rows}
    if len(kinds) > 1:
        raise DatasetError(f"{p}: mixes text rows and source/target rows")
    return Dataset(str(p), fmt, rows, file_sha256(p))


def _json_row(path: Path, number: int, line: str) -> Row:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}, line {number}: invalid JSON ({exc.msg})") from exc
    if not isinstance(obj, dict):
        raise DatasetError(f"{path}, line {number}: expected a JSON object")
    if "text" in obj and isinstance(obj["text"], str):
        return Row(number, tuple(obj["text"].split()))
    if isinstance(obj.get("source"), str) and isinstance(obj.get("target"), str):
        return Row(number, tuple(obj["target"].split()), obj["source"].strip())
    raise DatasetError(
        f'{path}, line {number}: expected {{"text": ...}} or {{"source": ..., "target": ...}}'
    )


def check_dataset(
    dataset: Dataset,
    lengths: list[int] | tuple[int, ...],
    count: int,
    *,
    prompt_words: int = 0,
    task: str | None = None,
    following: int = 1,
) -> None:
    """Raise `DatasetError` unless every prefix length has ``count`` lines long enough.

    A data prefix of length l needs a line of at least ``prompt_words + l + following`` words:
    the true next word is kept (``following`` 1), or a ratings study's real continuation
    (``following`` = l_gen).  Call it when a study is created, before anything is written.
    """
    if task is not None and task != dataset.task:
        raise DatasetError(
            f"{dataset.path}: a {task} study needs "
            + ("source/target rows" if task == "seq2seq" else "text rows")
        )
    for length in lengths:
        need = prompt_words + length + following
        have = len(dataset.eligible(need))
        if have < count:
            raise DatasetError(
                f"{dataset.path}: {count} items of length {length} need {count} lines with at "
                f"least {need} words; only {have} of {len(dataset.rows)} lines are long enough"
            )
