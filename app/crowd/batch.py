"""The offline MTurk batch format (docs/design.md §2 "Offline MTurk format"), which Turkle
reads too.

`export_batch` makes a HIT template (an HTML fragment with `${var}` placeholders, no
`<form>`: MTurk and Turkle wrap it in theirs, add a Submit button and post its fields as
`Answer.<name>`) and an input CSV with one row per HIT. A HIT's replicas are the tool's
"assignments per task" (MTurk's MaxAssignments), never repeated rows: a tool hands a worker
the next row, so adjacent copies of a HIT would go to the same person. HITs with other
replicas (the overlap HITs) go to an input file of their own, one per assignments count.
A row carries only opaque ids (the study's slug, the HIT's number) and what the annotator
sees: each position's text and options in the HIT's stored screen order; "None of the
above is plausible" is the template's last option of every text. No kind, rank,
probability or item id is in either file. The ids are hidden fields of the template too,
so every column is a `${var}` of it (Turkle warns of columns that are not) and they come
back as `Answer.study` and `Answer.hit` as well as `Input.*`.

The fields the template posts are those of our own page: `o{position}` is the chosen
screen slot (`k`, the study's top-k, is "none") and `ms{position}` the milliseconds spent
on the text (a small script fills it; without JavaScript it stays empty). The participant
side of the web pages (app.annotation.participants) comes with it: a study's consent text
is shown on every HIT (the tool has no page before the first) with a required box,
`consent` ("yes"), and a study that takes comments has an optional `comment` box.

Both tools put a CSV value into the page as it is, so every value is HTML-escaped here
(and `$` written `&#36;`, so a value cannot bring another `${var}` into the page). A value
that a spreadsheet would run as a formula starts with its first character written as an
HTML character reference, which the page shows unchanged; `csv_text` then has nothing left
to neutralise but still guards every cell.

`parse_results` reads a `Batch_results.csv` back into typed rows (`ResultRow`), checking
each row against the batch as exported: the echoed `Input.*` columns (and the ids posted
back as `Answer.*`) must be what this export writes for that HIT (else the row is reported
as tampered), and the answers must be slots of the texts the row showed. A row must answer
every text of its HIT, as a post of the service's own page must (a HIT's texts are
balanced together: the attention item, the kinds); a row with an unanswered text is
refused whole and names them; so is a row without the consent box ticked where the study
asks for consent, or with a comment the web page would refuse (`comment_from`). Results
of batches exported with one row per replica (an `Input.replica` column) still read. A
file's cells quoted in a message are cut to `CELL_LIMIT` characters; a row's line is its
first in the file (a cell may hold line breaks). It stores nothing: a row's `answers` and
`times` have the shapes of `answers_from_form` of the next-word type, for an importer to
pass to the submission service.
"""

from __future__ import annotations

import csv
import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from markupsafe import Markup
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.annotation.errors import AnnotationError
from app.annotation.participants import MAX_COMMENT, comment_from, comments_on, consent_text
from app.config import PACKAGE
from app.csvfiles import FORMULA_START, csv_text, write_csv
from app.models import Hit, HitPosition, Item, Study, Task
from app.studytypes.registry import study_type_of

NONE_TEXT = "None of the above is plausible"
TEMPLATE_FILE = "hit_template.html"
INPUT_FILE = "input.csv"
ID_COLUMNS = ("study", "hit")
LEGACY_REPLICA = "Input.replica"  # batches exported with one row per replica
# Columns of a results file that every row needs (MTurk and Turkle both write them).
RESULT_COLUMNS = ("AssignmentId", "WorkerId")
_DIGITS = re.compile(r"[0-9]{1,6}")
_MS = re.compile(r"-?[0-9]{1,12}")
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
_MAX_ID = 255
CELL_LIMIT = 200  # characters of a file's cell quoted in a message
ANONYMOUS = (
    "no WorkerId: the tool let someone work without logging in, and work that names no "
    "person cannot be capped, blocked or kept to one answer per HIT; in Turkle, tick "
    '"Login required" on the project and its batches (MTurk always sends a WorkerId)'
)

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(PACKAGE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
)


class BatchError(ValueError):
    """The batch cannot be made, or a results file cannot be read at all (clear message)."""


@dataclass(frozen=True)
class _Position:
    number: int
    words: str
    prompt: str | None
    source: str | None
    options: tuple[str, ...]  # in the HIT's stored screen order, "none" left out


@dataclass(frozen=True)
class _Hit:
    id: int
    index: int
    replicas: int
    positions: tuple[_Position, ...]


@dataclass(frozen=True)
class Layout:
    """The columns a study's batch needs: the most texts a HIT has, the most options a
    text has (the study's top-k), and whether prompts or source sentences are shown."""

    positions: int
    options: int
    prompts: bool
    sources: bool

    def position_columns(self, p: int) -> list[str]:
        cols = [f"text_{p}"]
        if self.prompts:
            cols.append(f"prompt_{p}")
        if self.sources:
            cols.append(f"source_{p}")
        return cols + [f"option_{p}_{s}" for s in range(self.options)]

    @property
    def columns(self) -> list[str]:
        return [*ID_COLUMNS, *(c for p in range(self.positions) for c in self.position_columns(p))]


def _hits(session: Session, study: Study) -> list[_Hit]:
    rows = session.execute(
        select(
            Hit.id,
            Hit.index,
            Hit.replicas,
            HitPosition.position,
            HitPosition.choice_order,
            Item.words,
            Item.prompt,
            Item.source,
            Item.choices,
        )
        .join(HitPosition, HitPosition.hit_id == Hit.id)
        .join(Item, Item.id == HitPosition.item_id)
        .where(Hit.study_id == study.id)
        .order_by(Hit.index, HitPosition.position)
    ).all()
    hits: list[_Hit] = []
    for r in rows:
        words = [choice["word"] for choice in r.choices]
        position = _Position(
            number=r.position,
            words=r.words,
            prompt=r.prompt,
            source=r.source,
            options=tuple(words[rank] for rank in r.choice_order if rank != "none"),
        )
        if hits and hits[-1].id == r.id:
            last = hits[-1]
            hits[-1] = _Hit(last.id, last.index, last.replicas, (*last.positions, position))
        else:
            hits.append(_Hit(r.id, r.index, r.replicas, (position,)))
    return hits


def _layout(study: Study, hits: list[_Hit]) -> Layout:
    plugin = study_type_of(study)
    if not plugin.offline_batch:  # its type's answers need the service's own pages
        raise BatchError(plugin.refusal(study, "batch"))
    if not hits:
        raise BatchError(f"Study {study.slug} has no HITs yet: build them first.")
    for hit in hits:
        numbers = [p.number for p in hit.positions]
        if numbers != list(range(len(numbers))):
            raise BatchError(f"HIT {hit.index} has gaps in its positions {numbers}.")
    return Layout(
        positions=max(len(h.positions) for h in hits),
        options=max(len(p.options) for h in hits for p in h.positions),
        prompts=any(p.prompt for h in hits for p in h.positions),
        sources=study.task == Task.seq2seq or any(p.source for h in hits for p in h.positions),
    )


def page_text(text: str | None) -> Markup:
    """`text` as the tool's page must receive it to show it as it reads: HTML-escaped, and
    `$` written `&#36;` (the tool would take `${var}` for a placeholder)."""
    return Markup(html.escape(text or "", quote=True).replace("$", "&#36;"))


def shown(text: str | None) -> str:
    """`text` as a cell of the input CSV: HTML-escaped for the page, neutralised for a
    spreadsheet, and shown by the page exactly as `text` reads."""
    out = str(page_text(text))
    if out.startswith(FORMULA_START):
        out = f"&#{ord(out[0])};{out[1:]}"
    return csv_text(out)


def _row(study: Study, layout: Layout, hit: _Hit) -> dict[str, str]:
    row = {"study": csv_text(study.slug), "hit": str(hit.index)}
    for p in range(layout.positions):
        pos = hit.positions[p] if p < len(hit.positions) else None
        row[f"text_{p}"] = shown(pos.words if pos else "")
        if layout.prompts:
            row[f"prompt_{p}"] = shown(pos.prompt if pos else "")
        if layout.sources:
            row[f"source_{p}"] = shown(pos.source if pos else "")
        for s in range(layout.options):
            options = pos.options if pos else ()
            row[f"option_{p}_{s}"] = shown(options[s] if s < len(options) else "")
    return row


def template_html(study: Study, layout: Layout) -> str:
    """The HIT template for `layout`: placeholders named as the input CSV's columns."""

    def var(name: str) -> str:
        return "${" + name + "}"

    positions = [
        {
            "n": p,
            "text": var(f"text_{p}"),
            "prompt": var(f"prompt_{p}") if layout.prompts else None,
            "source": var(f"source_{p}") if layout.sources else None,
            "options": [var(f"option_{p}_{s}") for s in range(layout.options)],
        }
        for p in range(layout.positions)
    ]
    consent = consent_text(study)
    return _templates.get_template("crowd/batch_hit.html").render(
        ids=[(name, var(name)) for name in ID_COLUMNS],
        consent=[page_text(para) for para in consent.split("\n\n")] if consent else [],
        comments=comments_on(study),
        max_comment=MAX_COMMENT,
        positions=positions,
        none_slot=layout.options,
        none_text=NONE_TEXT,
        seq2seq=layout.sources,
        k=layout.options,
    )


@dataclass(frozen=True)
class InputFile:
    """One input CSV of a batch: its HITs, one row each, all wanting `assignments` workers
    (the tool's "assignments per task", MTurk's MaxAssignments)."""

    name: str
    assignments: int
    hits: int
    text: str


@dataclass(frozen=True)
class ExportedBatch:
    template: str
    inputs: tuple[InputFile, ...]  # by assignments; one file when every HIT has the same


def input_name(assignments: int, groups: int) -> str:
    """`input.csv` when the HITs all want as many workers; else one file per count."""
    return INPUT_FILE if groups == 1 else f"input-{assignments}-assignments.csv"


def export_batch(session: Session, study: Study) -> ExportedBatch:
    """The study's HIT template and its input CSVs: one row per HIT (by HIT number), one
    file per replicas count."""
    hits = _hits(session, study)
    layout = _layout(study, hits)
    groups = sorted({h.replicas for h in hits})
    inputs = []
    for assignments in groups:
        chosen = [h for h in hits if h.replicas == assignments]
        inputs.append(
            InputFile(
                name=input_name(assignments, len(groups)),
                assignments=assignments,
                hits=len(chosen),
                text=write_csv(layout.columns, (_row(study, layout, h) for h in chosen)),
            )
        )
    return ExportedBatch(template_html(study, layout), tuple(inputs))


def write_batch(session: Session, study: Study, out_dir: Path) -> tuple[Path, ExportedBatch]:
    """Write `hit_template.html` and the input CSVs into `out_dir` (made if missing)."""
    batch = export_batch(session, study)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TEMPLATE_FILE).write_text(batch.template, encoding="utf-8")
    for made in batch.inputs:
        (out_dir / made.name).write_text(made.text, encoding="utf-8", newline="")
    return out_dir / TEMPLATE_FILE, batch


def placeholders(template: str) -> set[str]:
    """The `${var}` names a HIT template uses."""
    return set(_PLACEHOLDER.findall(template))


# -- the results file -------------------------------------------------------------------


@dataclass(frozen=True)
class ResultRow:
    """One worker's answers to one exported row, checked against the batch.

    `answers` maps a position to the screen slot chosen (the HIT's option count is
    "none"), `times` a position to the milliseconds the page measured (absent when it
    measured none): the shapes `answers_from_form` gives the submission service.
    """

    line: int  # in the results file (the header is line 1)
    hit_id: int  # our HIT's database id
    hit_index: int  # the HIT's number, as in the file
    worker_id: str
    assignment_id: str  # the tool's assignment id
    answers: dict[int, int]
    times: dict[int, int]
    work_seconds: int | None = None
    accept_time: str | None = None  # as the tool wrote it
    submit_time: str | None = None
    status: str | None = None  # MTurk's AssignmentStatus, when the file has it
    consented: bool = False  # the template's consent box ticked (`Answer.consent` "yes")
    comment: str | None = None  # `Answer.comment`, as `comment_from` takes a posted one


@dataclass(frozen=True)
class RowError:
    """A row that was not read, and why (nothing of it is to be stored)."""

    line: int
    hit: str | None
    message: str


@dataclass
class ParsedResults:
    rows: list[ResultRow] = field(default_factory=list)
    errors: list[RowError] = field(default_factory=list)


def cell(value: str | None) -> str:
    """A cell of the file as a message quotes it: repr'd, cut to `CELL_LIMIT` characters."""
    value = value or ""
    if len(value) > CELL_LIMIT:
        return repr(value[:CELL_LIMIT]) + f"... ({len(value):,} characters)"
    return repr(value)


def parse_results(session: Session, study: Study, text: str) -> ParsedResults:
    """Read an MTurk or Turkle `Batch_results.csv` of `study`'s batch into typed rows.

    A file that is not a results file of this batch format (missing columns) raises
    `BatchError`; a bad row is reported in `errors` and the others are still read.
    """
    hits = _hits(session, study)
    layout = _layout(study, hits)
    by_index = {h.index: h for h in hits}
    reader = csv.DictReader(io.StringIO(text.removeprefix("\ufeff"), newline=""))
    header = reader.fieldnames or []
    needed = [*RESULT_COLUMNS, *(f"Input.{c}" for c in layout.columns)]
    if missing := [c for c in needed if c not in header]:
        shown_missing = ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")
        raise BatchError(
            f"This is not a results file of {study.slug}'s batch: it lacks {shown_missing}."
        )
    answer_columns = {c for c in header if re.fullmatch(r"Answer\.o[0-9]+", c)}
    result = ParsedResults()
    seen_assignments: dict[str, int] = {}
    seen_workers: dict[tuple[str, int], int] = {}
    end = reader.line_num  # the header's last line
    for raw in reader:  # a row's line is its first (a cell may hold line breaks)
        line, end = end + 1, reader.line_num
        hit_ref = (raw.get("Input.hit") or "")[:CELL_LIMIT] or None
        if None in raw:  # more cells than the header names
            result.errors.append(RowError(line, hit_ref, "the row has extra cells"))
            continue
        row = {k: (v or "") for k, v in raw.items()}
        problems: list[str] = []
        hit = _check_ids(study, by_index, row, problems)
        if hit is not None:
            expected = _row(study, layout, hit)
            changed = [c for c in layout.columns if row[f"Input.{c}"] != expected[c]]
            changed += [
                f"Answer.{f}"
                for f in ID_COLUMNS
                if row.get(f"Answer.{f}") not in ("", None, expected[f])
            ]
            if changed:
                where = "" if changed[0].startswith("Answer.") else "Input."
                problems.append(
                    f"tampered: {where}{changed[0]} is not what the batch showed for HIT "
                    f"{hit.index}" + (f" (and {len(changed) - 1} more)" if len(changed) > 1 else "")
                )
        worker = _platform_id(row["WorkerId"], "WorkerId", problems)
        assignment = _platform_id(row["AssignmentId"], "AssignmentId", problems)
        answers, times = ({}, {})
        if hit is not None and not problems:
            answers, times = _answers(row, layout, hit, answer_columns, problems)
        consented, comment = _participant_side(study, row, problems)
        if assignment and assignment in seen_assignments:
            problems.append(
                f"assignment {assignment} is already on line {seen_assignments[assignment]}"
            )
        if hit is not None and worker and (worker, hit.id) in seen_workers:
            problems.append(
                f"worker {worker} already answered HIT {hit.index} on line "
                f"{seen_workers[(worker, hit.id)]} (a HIT is done once per person)"
            )
        if problems or hit is None or worker is None or assignment is None:
            result.errors.append(RowError(line, hit_ref, "; ".join(problems)))
            continue
        seen_assignments[assignment] = line
        seen_workers[(worker, hit.id)] = line
        seconds = row.get("WorkTimeInSeconds", "").strip()
        result.rows.append(
            ResultRow(
                line=line,
                hit_id=hit.id,
                hit_index=hit.index,
                worker_id=worker,
                assignment_id=assignment,
                answers=answers,
                times=times,
                work_seconds=int(seconds) if _DIGITS.fullmatch(seconds) else None,
                accept_time=row.get("AcceptTime", "")[:64] or None,
                submit_time=row.get("SubmitTime", "")[:64] or None,
                status=row.get("AssignmentStatus", "")[:64] or None,
                consented=consented,
                comment=comment,
            )
        )
    return result


def _check_ids(
    study: Study, by_index: dict[int, _Hit], row: dict[str, str], problems: list[str]
) -> _Hit | None:
    if row["Input.study"] != csv_text(study.slug):
        problems.append(f"the row belongs to study {cell(row['Input.study'])}, not {study.slug}")
        return None
    ref = row["Input.hit"]
    hit = by_index.get(int(ref)) if _DIGITS.fullmatch(ref) else None
    if hit is None:
        problems.append(f"unknown HIT {cell(ref)}")
        return None
    replica = row.get(LEGACY_REPLICA, "")  # one row per replica (an earlier export)
    if replica and not (_DIGITS.fullmatch(replica) and int(replica) < hit.replicas):
        problems.append(f"HIT {hit.index} has no replica {cell(replica)}")
        return None
    return hit


NO_CONSENT = (
    "no consent: the study asks for it (participants.consent) and this row's consent box "
    "(Answer.consent) is not ticked, so none of this row is stored (the template makes the "
    "box required: the row comes from an edited file, or a template exported before the "
    "study had a consent text)"
)


def _participant_side(
    study: Study, row: dict[str, str], problems: list[str]
) -> tuple[bool, str | None]:
    """The row's consent box and comment, as the web pages take them: no consent where the
    study asks for it, or a comment the web page would refuse, refuses the row."""
    consented = row.get("Answer.consent", "").strip() == "yes"
    if consent_text(study) and not consented:
        problems.append(NO_CONSENT)
    try:
        comment = comment_from(row, "Answer.comment")
    except AnnotationError as exc:
        comment = None
        problems.append(
            f"the comment (Answer.comment) is refused as the web page refuses it "
            f"({exc.message}); correct the cell and import again"
        )
    return consented, comment


def _platform_id(value: str, column: str, problems: list[str]) -> str | None:
    value = value.strip()
    if not value:
        problems.append(ANONYMOUS if column == "WorkerId" else f"no {column}")
        return None
    if len(value) > _MAX_ID or not value.isprintable() or any(c.isspace() for c in value):
        problems.append(f"{column} {value[:40]!r} is not an id")
        return None
    return value


def _answers(
    row: dict[str, str],
    layout: Layout,
    hit: _Hit,
    answer_columns: set[str],
    problems: list[str],
) -> tuple[dict[int, int], dict[int, int]]:
    answers: dict[int, int] = {}
    times: dict[int, int] = {}
    open_texts: list[int] = []
    for pos in hit.positions:
        p, n = pos.number, len(pos.options)
        value = row.get(f"Answer.o{p}", "").strip()
        if not value:
            open_texts.append(p + 1)
            continue
        slot = int(value) if _DIGITS.fullmatch(value) else -1
        if slot == layout.options:
            slot = n  # the template's "none" is the study's k; this text's is after its options
        elif not 0 <= slot < n:
            problems.append(f"answer {cell(value)} for text {p + 1} is not one of its options")
            continue
        answers[p] = slot
        ms = row.get(f"Answer.ms{p}", "").strip()
        if ms:
            if not _MS.fullmatch(ms):
                problems.append(f"time {cell(ms[:20])} for text {p + 1} is not a number")
            else:
                times[p] = int(ms)
    if open_texts:
        named = ", ".join(map(str, open_texts))
        problems.append(
            f"no answer for text{'s' if len(open_texts) > 1 else ''} {named} "
            f"({len(hit.positions) - len(open_texts)} of {len(hit.positions)} answered): "
            "a HIT is stored whole, as on the service's own page, so none of this row is"
        )
    shown_positions = {f"Answer.o{pos.number}" for pos in hit.positions}
    extra = sorted(c for c in answer_columns - shown_positions if row.get(c, "").strip())
    if extra:
        problems.append(f"tampered: {extra[0]} answers a text HIT {hit.index} does not have")
    return answers, times
