"""What every download shares: CSV cells and streamed CSV and JSON lines, LaTeX escapes,
and the items' export (every study type's). Each type's own downloads are in its package
(``app.studytypes.nextword.exports``: results, judgments; ``app.studytypes.ratings``:
ratings, EB-M, samples).

Item export columns (one row per item, item-id order): ``study``, ``item_id``, ``kind``,
``length``, ``index``, ``is_attention``, ``skip_reason``, ``prompt``, ``source``,
``words``, ``true_next_word`` (data prefixes; never shown), ``true_rank``, ``top1_word``,
``choices`` (the words in model rank order), ``choice_probs``, where it is shown
(``hit_id``, ``hit_index``, ``position``, ``displayed_ranks`` and ``displayed_words`` in
screen order, the "none" slot last) and its ``provenance``.

In CSV, lists are JSON arrays and empty cells are nulls; JSON lines keep the types. A CSV
text cell that a spreadsheet would run as a formula (it begins with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return) is written with a ``'`` in front (OWASP's rule against
CSV injection; drop that first ``'`` to get the stored text). Numbers we write stay numbers.

A download that fails says so. It is not a short file behind a ``200``: the first batch is
made before the status line is sent (a failure there is an error status, no file), and a
failure later ends the file with one error record (CSV: a one-cell row that begins with
``ERROR:``; JSON lines: ``{"error": ...}``) after which the connection is aborted, so the
client reports an incomplete transfer.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from app.csvfiles import FORMULA_START as FORMULA_START
from app.csvfiles import CsvWriter
from app.csvfiles import csv_text as csv_text
from app.models import Study
from app.results import queries
from app.results.stats import finite_or_none

ITEM_FIELDS = [
    "study", "item_id", "kind", "length", "index", "is_attention", "skip_reason", "prompt",
    "source", "words", "true_next_word", "true_rank", "top1_word", "choices",
    "choice_probs", "hit_id", "hit_index", "position", "displayed_ranks", "displayed_words",
    "provenance",
]  # fmt: skip


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) else v


def _bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


def iso_time(v: Any) -> str | None:
    """ISO 8601 in UTC from the driver's value: SQLite's stored text (naive UTC) or
    PostgreSQL's aware datetime."""
    if v is None:
        return None
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    return str(v).replace(" ", "T") + "+00:00"


_CONVERT = {
    "choice_order": _json,
    "choices": _json,
    "provenance": _json,
    "hit_is_overlap": _bool,
    "is_attention": _bool,
    "annotator_blocked": _bool,
    "annotator_exclude_past": _bool,
    "simulated": _bool,
    "too_fast": _bool,
    "late": _bool,
    "over_cap": _bool,
    "extra_replica": _bool,
    "after_block": _bool,
    "unverified": _bool,
    "leased_at": iso_time,
    "page_served_at": iso_time,
    "submitted_at": iso_time,
    "judged_at": iso_time,
}


def records(keys: list[str], rows: list[tuple]) -> Iterator[dict[str, Any]]:
    convert = [(k, _CONVERT.get(k)) for k in keys]
    for row in rows:
        yield {
            k: (f(v) if f and v is not None else v) for (k, f), v in zip(convert, row, strict=True)
        }


def shown_words(words: list[str], order: list[int | str] | None) -> list[str | None] | None:
    """The words in screen order; the "none" slot (and a rank with no word) is null."""
    if order is None:
        return None
    n = len(words)
    return [words[i] if type(i) is int and 0 <= i < n else None for i in order]


def item_record(study: str, r: dict[str, Any]) -> dict[str, Any]:
    choices = r["choices"] or []
    words = [c.get("word") for c in choices]
    true = r["true_next_word"]
    r["study"] = study
    r["true_rank"] = words.index(true) if true is not None and true in words else None
    r["top1_word"] = words[0] if words else None
    r["choices"] = words
    r["choice_probs"] = [c.get("prob") for c in choices]
    r["displayed_ranks"] = r.pop("choice_order")
    r["displayed_words"] = shown_words(words, r["displayed_ranks"])
    return r


def _csv_bool(v: Any) -> str:
    return "" if v is None else ("true" if v else "false")


def _csv_json(v: Any) -> str:
    return "" if v is None else json.dumps(v, ensure_ascii=False)


def csv_cell(v: Any) -> Any:
    if isinstance(v, bool):
        return _csv_bool(v)
    if isinstance(v, list | dict):
        return _csv_json(v)
    if isinstance(v, str):
        return csv_text(v)
    return v  # csv writes None as an empty cell


_BOOL_FIELDS = {k for k, f in _CONVERT.items() if f is _bool} | {"is_none"}
_JSON_FIELDS = {
    "choices", "displayed_ranks", "displayed_words", "choice_probs", "provenance",
}  # fmt: skip


def _failure(rows: int, exc: Exception) -> str:
    # The exception itself is re-raised after this record: the server logs it.
    return (
        f"ERROR: the export failed after {rows} rows ({type(exc).__name__}); "
        "this file is incomplete"
    )


def csv_chunks(fields: list[str], batches: Iterable[list[dict[str, Any]]]) -> Iterator[str]:
    buf = io.StringIO()
    writer = CsvWriter(buf)  # neutralises the text cells
    writer.writerow(fields)
    bools = [f for f in fields if f in _BOOL_FIELDS]
    lists = [f for f in fields if f in _JSON_FIELDS]
    rows = 0
    try:
        for batch in batches:
            for rec in batch:
                for f in bools:
                    rec[f] = _csv_bool(rec[f])
                for f in lists:
                    rec[f] = _csv_json(rec[f])
            writer.writerows([rec[f] for f in fields] for rec in batch)
            yield buf.getvalue()
            rows += len(batch)
            buf.seek(0)
            buf.truncate()
    except Exception as exc:
        if not rows:
            raise  # nothing sent yet: the caller answers with an error status instead
        buf.seek(0)
        buf.truncate()
        writer.writerow([_failure(rows, exc)])
        yield buf.getvalue()
        raise
    if buf.tell():
        yield buf.getvalue()


def jsonl_chunks(fields: list[str], batches: Iterable[list[dict[str, Any]]]) -> Iterator[str]:
    rows = 0
    try:
        for batch in batches:
            lines = [json.dumps({f: rec[f] for f in fields}, ensure_ascii=False) for rec in batch]
            yield "\n".join(lines) + "\n"
            rows += len(batch)
    except Exception as exc:
        if not rows:
            raise
        yield json.dumps({"error": _failure(rows, exc)}) + "\n"
        raise


def _item_batches(session: Session, study: Study) -> Iterator[list[dict[str, Any]]]:
    slug = study.slug
    for keys, rows in queries.iter_item_rows(session, study):
        yield [item_record(slug, r) for r in records(keys, rows)]


def items_csv(session: Session, study: Study) -> Iterator[str]:
    return csv_chunks(ITEM_FIELDS, _item_batches(session, study))


def items_jsonl(session: Session, study: Study) -> Iterator[str]:
    return jsonl_chunks(ITEM_FIELDS, _item_batches(session, study))


_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex_escape(text: str) -> str:
    return "".join(_TEX_ESCAPES.get(c, c) for c in text)


def variant_head(
    study: str, applied: bool, what: str, simulated: str | None, header: str
) -> list[str]:
    """The head of one variant's block in a terminal table: the study, with or without the
    exclusions (`applied`) and then `what` it counts, a SIMULATED line when a simulated
    crowd's answers count (`simulated`: what they are), and the columns' `header`."""
    excl = "with" if applied else "without"
    lines = [f"{study}: {excl} exclusions{what}"]
    if simulated:
        lines.append(f"SIMULATED: {simulated}, not people")
    lines.append(header)
    return lines


def interval_text(est: float, low: float, high: float, digits: int = 3) -> str:
    """A figure and its interval for the terminal: ``0.812 [0.700, 0.901]``; ``--`` when
    the figure is not finite, the figure alone when the interval is not."""
    e, lo, hi = finite_or_none(est), finite_or_none(low), finite_or_none(high)
    if e is None:
        return "--"
    if lo is None or hi is None:
        return f"{e:.{digits}f}"
    return f"{e:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def plus_minus(mean: float | None, spread: float | None, digits: int = 3) -> str:
    mean, spread = finite_or_none(mean), finite_or_none(spread)
    if mean is None:
        return "--"
    if spread is None:
        return f"${mean:.{digits}f}$"
    return f"${mean:.{digits}f} \\pm {spread:.{digits}f}$"


def task_label(study: Study) -> str:
    """The first column of the paper's Table 4, e.g. "LM, gpt2" or "NMT, my-model"."""
    task = "LM" if str(study.task.value) == "lm" else "NMT"
    return f"{task}, {study.model_name}"


@dataclass(frozen=True)
class DocumentText:
    """A type's results document as ``ebc results -f FMT`` prints it, by the type's
    functions: ``csv``, ``latex`` (`label`: the table's row label; `paper`: the
    paper-comparable mean +- std) or else a plain-text ``table`` for the terminal."""

    csv: Callable[[Any], str]
    latex: Callable[..., str]
    table: Callable[[Any], str]

    def __call__(self, res: Any, fmt: str, label: str, *, paper: bool) -> str:
        if fmt == "csv":
            return self.csv(res)
        if fmt == "latex":
            return self.latex(res, label, paper=paper)
        return self.table(res)
