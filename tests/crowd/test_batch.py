"""The MTurk-format batch: export (template + input CSV), a Turkle-like fill, and the parser.

Studies are built as production builds them (items, then `build_hits`). "Turkle" here is
what Turkle does with a batch: every `${column}` of the template replaced by the row's
value as it is, the page's form posted as `Answer.<name>`, and a results file with the
row's values echoed as `Input.<column>` (Turkle's own column set and quoting).
"""

from __future__ import annotations

import csv
import io
import random
import re
from html.parser import HTMLParser

import pytest
from sqlalchemy import select

from app.crowd.batch import (
    NONE_TEXT,
    BatchError,
    ExportedBatch,
    export_batch,
    parse_results,
    placeholders,
    shown,
    write_batch,
)
from app.models import Hit, HitPosition, Item, Study
from app.results.exports import FORMULA_START, csv_text
from tests.factories import FORMULA_WORDS
from tests.hits.factory import make_study

FORBIDDEN = ("kind", "rank", "prob", "true", "attention", "item", "model", "data", "score")


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def screen(session, study) -> dict[tuple[int, int], dict]:
    """(HIT number, position) -> what the database says is shown there, and how it ranks."""
    rows = session.execute(
        select(Hit.index, HitPosition.position, HitPosition.choice_order, Item)
        .join(HitPosition, HitPosition.hit_id == Hit.id)
        .join(Item, Item.id == HitPosition.item_id)
        .where(Hit.study_id == study.id)
    ).all()
    out = {}
    for index, position, order, item in rows:
        words = [c["word"] for c in item.choices]
        out[(index, position)] = {
            "item": item,
            "order": order,
            "options": [words[r] for r in order if r != "none"],
        }
    return out


class Page(HTMLParser):
    """What a browser shows of a filled template: each text and its radio buttons."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: dict[int, dict] = {}
        self.forms = 0
        self._item: dict | None = None
        self._span: str | None = None
        self._radio: dict | None = None
        self.hidden: dict[str, str] = {}  # hidden fields outside the texts: the row's ids
        self.boxes: dict[str, dict] = {}  # checkboxes outside the texts: name -> attributes
        self.textareas: list[str] = []  # their names
        self.consent = ""  # the consent text as shown
        self._consent = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms += 1
        if tag == "input" and a.get("type") == "hidden" and self._item is None:
            self.hidden[a["name"]] = a.get("value") or ""
        if tag == "input" and a.get("type") == "checkbox" and self._item is None:
            self.boxes[a["name"]] = a
        if tag == "textarea":
            self.textareas.append(a["name"])
        if tag == "div" and a.get("class") == "consent-text":
            self._consent = True
        if tag == "fieldset" and (m := re.fullmatch(r"item(\d+)", a.get("id", ""))):
            self._item = {"words": "", "prompt": "", "source": "", "radios": [], "ms": None}
            self.items[int(m[1])] = self._item
        elif tag == "span" and self._item is not None:
            self._span = a.get("class")
        elif tag == "p" and self._item is not None and "source" in (a.get("class") or ""):
            self._span = "source"
        elif tag == "input" and self._item is not None:
            if a.get("type") == "radio":
                self._radio = {"name": a["name"], "value": a["value"], "word": ""}
                self._item["radios"].append(self._radio)
            elif a.get("type") == "hidden":
                self._item["ms"] = a["name"]

    def handle_endtag(self, tag):
        if tag == "div":
            self._consent = False
        if tag in ("span", "p"):
            self._span = None
        if tag == "fieldset":
            self._item = None

    def handle_data(self, data):
        if self._consent:
            self.consent += data
        if self._item is None or self._span is None:
            return
        if self._span == "words":
            self._item["words"] += data
        elif self._span == "prompt":
            self._item["prompt"] += data
        elif self._span == "source":
            self._item["source"] += data
        elif self._span == "word" and self._radio is not None:
            self._radio["word"] += data


def turkle_fill(template: str, row: dict[str, str]) -> Page:
    page = template
    for name, value in row.items():  # Turkle: plain replacement, in the row's column order
        page = page.replace("${" + name + "}", value)
    parsed = Page()
    parsed.feed(page)
    return parsed


def turkle_results(
    batch: ExportedBatch, *, seed: int = 3, workers: int | None = None
) -> tuple[str, list[dict]]:
    """A results file for every assignment of every input file (each file a Turkle batch
    whose "assignments per task" is the file's), answered at random; and what each worker
    clicked. Worker k of the file is `u{k}` (`workers`: `u{k % workers}`, so that a worker
    comes back to the next HIT); rows come HIT by HIT, as Turkle writes them."""
    rng = random.Random(seed)
    columns = list(read_csv(batch.inputs[0].text)[0])
    answer_names: set[str] = set()
    rows, clicked = [], []
    for made in batch.inputs:
        for row in read_csv(made.text):
            page = turkle_fill(batch.template, row)
            for _ in range(made.assignments):
                answers, chose = dict(page.hidden), {}
                # The consent box ticked (the browser requires it), comment boxes left empty.
                answers |= {name: box["value"] for name, box in page.boxes.items()}
                answers |= dict.fromkeys(page.textareas, "")
                for p, item in page.items.items():
                    if not item["words"].strip():  # hidden and disabled by the page's script
                        continue
                    radios = [r for r in item["radios"] if r["word"].strip()]
                    pick = rng.choice(radios)
                    answers[pick["name"]] = pick["value"]
                    answers[item["ms"]] = str(rng.randrange(800, 9000))
                    chose[p] = None if pick["word"] == NONE_TEXT else pick["word"]
                answer_names |= answers.keys()
                k = len(rows)
                worker = f"u{k if workers is None else k % workers}"
                rows.append((k, made.assignments, worker, row, answers))
                clicked.append({"hit": int(row["hit"]), "words": chose, "page": page})
    header = [
        "HITId", "HITTypeId", "Title", "CreationTime", "MaxAssignments",
        "AssignmentDurationInSeconds", "AssignmentId", "WorkerId", "AcceptTime", "SubmitTime",
        "WorkTimeInSeconds",
        *(f"Input.{c}" for c in sorted(columns)),
        *(f"Answer.{c}" for c in sorted(answer_names)),
        "Turkle.Username",
    ]  # fmt: skip
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\r\n", quoting=csv.QUOTE_ALL)
    writer.writeheader()
    for k, assignments, worker, row, answers in rows:
        writer.writerow(
            {
                "HITId": 100 + k,
                "HITTypeId": 7,
                "Title": "Guess the next word",
                "CreationTime": "Tue Nov 11 10:00:00 UTC 2026",
                "MaxAssignments": assignments,
                "AssignmentDurationInSeconds": 86400,
                "AssignmentId": 5000 + k,
                "WorkerId": worker,
                "AcceptTime": "Tue Nov 11 10:01:00 UTC 2026",
                "SubmitTime": "Tue Nov 11 10:05:00 UTC 2026",
                "WorkTimeInSeconds": 240,
                **{f"Input.{k}": v for k, v in row.items()},
                **{f"Answer.{k}": answers.get(k, "") for k in answer_names},
                "Turkle.Username": f"user-{worker}",
            }
        )
    return out.getvalue(), clicked


def edit(results: str, changes: dict[int, dict[str, str]]) -> str:
    """The results file with cells of some rows (0-based) changed."""
    rows = read_csv(results)
    for i, cells in changes.items():
        rows[i].update(cells)
    out = io.StringIO()
    writer = csv.DictWriter(out, list(rows[0]), lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


# -- export -----------------------------------------------------------------------------


def test_one_row_per_hit_a_file_per_replicas_with_the_stored_screen_order_only(session):
    study = make_study(
        session, slug="bt1", lengths=(10, 20), per_cell=10, replicas=2, overlap_share=0.5
    )
    batch = export_batch(session, study)
    hits = session.execute(select(Hit.index, Hit.replicas).where(Hit.study_id == study.id)).all()

    # Replicas are the tool's assignments per task: each HIT is one row of the file whose
    # assignments are its replicas (overlap HITs have 3), never a repeated row.
    assert {replicas for _, replicas in hits} == {2, 3}
    files = {f.assignments: f for f in batch.inputs}
    assert [f.name for f in batch.inputs] == ["input-2-assignments.csv", "input-3-assignments.csv"]
    for assignments, made in files.items():
        in_file = sorted(int(r["hit"]) for r in read_csv(made.text))
        assert in_file == sorted(i for i, replicas in hits if replicas == assignments)
        assert made.hits == len(in_file)
    rows = [r for f in batch.inputs for r in read_csv(f.text)]
    assert list(rows[0])[:2] == ["study", "hit"] and "replica" not in rows[0]
    assert {r["study"] for r in rows} == {"bt1"}
    template = batch.template

    shown_at = screen(session, study)
    kinds = {sa["item"].kind for sa in shown_at.values()}
    not_top1 = 0
    for r in rows:
        hit = int(r["hit"])
        for (index, p), db in shown_at.items():
            if index != hit:
                continue
            assert r[f"text_{p}"] == shown(db["item"].words)
            assert [r[f"option_{p}_{s}"] for s in range(5)] == [shown(w) for w in db["options"]]
            not_top1 += db["order"][0] != 0
    assert not_top1 > 0  # the screen order is not the model's ranking

    # Nothing names or carries a kind, a rank, a probability or an item id.
    assert not [c for c in rows[0] if any(word in c for word in FORBIDDEN)]
    assert not placeholders(template) & {"kind", "rank", "prob"}
    probs = {str(c["prob"]) for sa in shown_at.values() for c in sa["item"].choices}
    cells = {v for r in rows for k, v in r.items() if k.startswith(("text_", "option_"))}
    assert not cells & (kinds | probs)
    assert not re.search(r"\b(data|model)\b", template)


def test_one_replicas_count_is_one_input_csv(session):
    study = make_study(session, slug="bt1b", lengths=(10,), per_cell=20, replicas=2)
    batch = export_batch(session, study)
    assert [(f.name, f.assignments, f.hits) for f in batch.inputs] == [("input.csv", 2, 4)]
    assert len(read_csv(batch.inputs[0].text)) == 4


def test_cells_are_neutralised_yet_the_page_shows_the_words_as_they_are(session):
    study = make_study(session, slug="bt2", lengths=(10,), per_cell=10, words=FORMULA_WORDS)
    batch = export_batch(session, study)
    template, rows = batch.template, read_csv(batch.inputs[0].text)

    cells = [v for r in rows for v in r.values()]
    assert all(csv_text(c) == c and not c.startswith(FORMULA_START) for c in cells)
    assert any(c.startswith("&#61;") for c in cells)  # "=1+1", its "=" as a reference

    shown_at = screen(session, study)
    page = turkle_fill(template, rows[0])
    for p, item in page.items.items():
        db = shown_at[(int(rows[0]["hit"]), p)]
        assert item["words"] == db["item"].words
        assert [r["word"] for r in item["radios"]] == [*db["options"], NONE_TEXT]
        assert [r["value"] for r in item["radios"]] == [str(s) for s in range(6)]
    words = {w for sa in shown_at.values() for w in sa["options"]}
    assert words & {"=1+1", "+44", "-A1", "@SUM(A1)"}


def test_a_value_cannot_bring_markup_or_another_placeholder_into_the_page():
    assert shown('<b>${text_1}</b> & "q"') == (
        "&lt;b&gt;&#36;{text_1}&lt;/b&gt; &amp; &quot;q&quot;"
    )
    assert shown("=HYPERLINK(1)") == "&#61;HYPERLINK(1)"
    assert shown("\tx") == "&#9;x"


def test_the_template_is_a_form_fragment_whose_placeholders_are_all_columns(session):
    study = make_study(session, slug="bt3", lengths=(10,), per_cell=10)
    batch = export_batch(session, study)
    template = batch.template
    row = read_csv(batch.inputs[0].text)[0]

    # Every column is in the template (Turkle warns of "fields that are not in the HTML
    # template"): the ids travel as hidden fields and come back as answers too.
    assert placeholders(template) == set(row)
    assert turkle_fill(template, row).hidden == {"study": "bt3", "hit": row["hit"]}
    page = Page()
    page.feed(template)
    assert page.forms == 0 and "<html" not in template and "<body" not in template
    assert len(page.items) == 11  # 5 + 5 + 1 attention item
    assert all(r["value"] != "" for item in page.items.values() for r in item["radios"])


HOSTILE_CONSENT = 'We ask <b>you</b> & ${text_0} "q".\n\n<script>alert(1)</script> $5'


def test_the_template_asks_consent_and_a_comment_as_the_study_does(session):
    study = make_study(
        session, slug="bt3c", lengths=(10,), per_cell=10,
        participants={"consent": HOSTILE_CONSENT, "comments": True},
    )  # fmt: skip
    batch = export_batch(session, study)
    row = read_csv(batch.inputs[0].text)[0]
    assert placeholders(batch.template) == set(row)  # the text brings no placeholder
    page = turkle_fill(batch.template, row)
    # Shown as written (escaped: no markup, no `${var}` filled in), paragraph by paragraph.
    assert page.consent == HOSTILE_CONSENT.replace("\n\n", "")
    assert "<script>alert" not in batch.template and "<b>you" not in batch.template
    assert page.boxes["consent"]["value"] == "yes" and "required" in page.boxes["consent"]
    assert page.textareas == ["comment"]
    assert 'maxlength="2000"' in batch.template

    quiet = make_study(session, slug="bt3d", lengths=(10,), per_cell=10,
                       participants={"comments": False})  # fmt: skip
    bare = turkle_fill(export_batch(session, quiet).template, row)
    assert (bare.boxes, bare.textareas, bare.consent) == ({}, [], "")


def test_a_seq2seq_study_shows_the_source_sentence(session):
    study = make_study(session, slug="bt4", lengths=(5,), per_cell=10, task="seq2seq")
    batch = export_batch(session, study)
    template, row = batch.template, read_csv(batch.inputs[0].text)[0]
    assert "source_0" in placeholders(template) and row["source_0"] == "ein Satz auf Deutsch"
    assert turkle_fill(template, row).items[0]["source"] == "ein Satz auf Deutsch"


def test_a_study_without_hits_has_no_batch(session, tmp_path):
    study = make_study(session, slug="bt5", lengths=(10,), per_cell=10, build=False)
    with pytest.raises(BatchError, match="no HITs"):
        export_batch(session, study)
    assert not (tmp_path / "out").exists()


def test_write_batch_writes_the_template_and_the_input_files(session, tmp_path):
    study = make_study(session, slug="bt6", lengths=(10,), per_cell=10)
    template_path, batch = write_batch(session, study, tmp_path / "out")
    assert batch == export_batch(session, study)
    assert template_path.read_bytes().decode() == batch.template
    assert (tmp_path / "out" / "input.csv").read_bytes().decode() == batch.inputs[0].text


# -- the results file ----------------------------------------------------------------


def test_a_turkle_fill_of_the_batch_parses_back_to_what_was_clicked(session):
    study = make_study(
        session, slug="bt7", lengths=(10,), per_cell=10, replicas=2, words=FORMULA_WORDS
    )
    batch = export_batch(session, study)
    results, clicked = turkle_results(batch)

    parsed = parse_results(session, study, results)

    assert parsed.errors == []
    assert len(parsed.rows) == 2 * len(read_csv(batch.inputs[0].text)) == len(clicked)
    shown_at = screen(session, study)
    hit_ids = dict(session.execute(select(Hit.index, Hit.id).where(Hit.study_id == study.id)).all())
    for row, click in zip(parsed.rows, clicked, strict=True):
        assert (row.hit_index, row.hit_id) == (click["hit"], hit_ids[click["hit"]])
        assert row.worker_id.startswith("u") and row.work_seconds == 240
        assert set(row.answers) == set(click["words"]) == set(row.times)
        for p, slot in row.answers.items():
            db = shown_at[(row.hit_index, p)]
            rank = db["order"][slot]
            word = None if rank == "none" else db["item"].choices[rank]["word"]
            assert word == click["words"][p]
    by_hit = sorted(r.hit_index for r in parsed.rows)
    assert by_hit == sorted(2 * [int(r["hit"]) for r in read_csv(batch.inputs[0].text)])
    assert any(slot == 5 for r in parsed.rows for slot in r.answers.values())  # "none"


def test_unknown_and_tampered_rows_are_reported_and_the_rest_is_read(session):
    study = make_study(session, slug="bt8", lengths=(10,), per_cell=20)
    other = make_study(session, slug="bt8x", lengths=(10,), per_cell=10)
    results, _ = turkle_results(export_batch(session, study))
    rows = read_csv(results)
    assert len(rows) == 4
    first_option = rows[0]["Input.option_0_0"]
    bad = edit(
        results,
        {
            0: {"Input.option_0_0": rows[0]["Input.option_0_1"], "Input.option_0_1": first_option},
            1: {"Input.hit": "999"},
            2: {"Answer.o3": "7"},
            3: {"Answer.o0": ""},
        },
    )
    parsed = parse_results(session, study, bad)
    assert parsed.rows == []
    messages = {e.line: e.message for e in parsed.errors}
    assert "tampered: Input.option_0_0" in messages[2]
    assert messages[3] == "unknown HIT '999'"
    assert "answer '7' for text 4 is not one of its options" in messages[4]
    assert messages[5].startswith("no answer for text 1 (10 of 11 answered): a HIT is stored")

    more = edit(
        results,
        {
            0: {"Input.study": "bt8x"},
            1: {"Answer.hit": rows[2]["Input.hit"]},
            2: {"AssignmentId": rows[3]["AssignmentId"]},
        },
    )
    parsed = parse_results(session, study, more)
    messages = {e.line: e.message for e in parsed.errors}
    assert "belongs to study 'bt8x'" in messages[2]
    assert messages[3].startswith("tampered: Answer.hit is not what the batch showed")
    assert f"assignment {rows[3]['AssignmentId']} is already on line 4" in messages[5]
    assert [r.line for r in parsed.rows] == [4]
    assert other.slug == "bt8x"  # the row of another study is not read into this one


def test_one_worker_answering_two_replicas_of_a_hit_is_reported(session):
    study = make_study(session, slug="bt9", lengths=(10,), per_cell=10, replicas=2)
    results, _ = turkle_results(export_batch(session, study))
    rows = read_csv(results)
    same_hit = [i for i, r in enumerate(rows) if r["Input.hit"] == rows[0]["Input.hit"]]
    parsed = parse_results(
        session, study, edit(results, {same_hit[1]: {"WorkerId": rows[0]["WorkerId"]}})
    )
    assert [e.line for e in parsed.errors] == [same_hit[1] + 2]
    assert "already answered HIT" in parsed.errors[0].message
    assert len(parsed.rows) == len(rows) - 1


def test_hits_with_fewer_texts_leave_theirs_empty_and_refuse_answers_to_them(session):
    # Two attention items for four HITs: two HITs have 11 texts, two have 10.
    study = make_study(session, slug="bt10", lengths=(10,), per_cell=20, attention_items=2)
    batch = export_batch(session, study)
    rows = read_csv(batch.inputs[0].text)
    short = [r for r in rows if r["text_10"] == ""]
    assert len(short) == 2 and all(r["option_10_0"] == "" for r in short)

    results, _ = turkle_results(batch)
    parsed = parse_results(session, study, results)
    assert parsed.errors == [] and len(parsed.rows) == 4
    assert sorted(len(r.answers) for r in parsed.rows) == [10, 10, 11, 11]

    line = next(i for i, r in enumerate(read_csv(results)) if r["Input.text_10"] == "")
    parsed = parse_results(session, study, edit(results, {line: {"Answer.o10": "2"}}))
    assert [e.line for e in parsed.errors] == [line + 2]
    assert "Answer.o10 answers a text HIT" in parsed.errors[0].message


def test_a_file_that_is_not_a_results_file_of_this_batch_is_refused(session):
    study = make_study(session, slug="bt11", lengths=(10,), per_cell=10)
    other = make_study(session, slug="bt12", lengths=(10,), per_cell=10, task="seq2seq")
    results, _ = turkle_results(export_batch(session, other))
    with pytest.raises(BatchError, match="not a results file of bt11's batch"):
        parse_results(session, study, "HITId,WorkerId\r\n1,w\r\n")
    # The seq2seq study's batch has source columns: this study's has none, and its rows
    # belong to another study.
    parsed = parse_results(session, study, results)
    assert parsed.rows == [] and all("belongs to study" in e.message for e in parsed.errors)


def test_ebc_crowd_export_batch_writes_the_batch(migrated_copy, tmp_path):
    from app.db import build_engine, make_sessionmaker
    from tests.test_cli import ebc

    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        make_study(s, slug="bcli", lengths=(10,), per_cell=10)
        make_study(s, slug="bnone", lengths=(10,), per_cell=10, build=False)
    out = ebc("crowd", "export-batch", "bcli", "--out", str(tmp_path / "b"), db=migrated_copy)
    assert "hit_template.html" in out.stdout
    assert "input.csv: 2 HITs, one row each; set assignments per task (MaxAssignments) to 1" in (
        out.stdout
    )
    assert '"Login required"' in out.stdout
    with make_sessionmaker(engine)() as s:
        study = s.scalar(select(Study).where(Study.slug == "bcli"))
        batch = export_batch(s, study)
    assert (tmp_path / "b" / "input.csv").read_bytes().decode() == batch.inputs[0].text
    assert (tmp_path / "b" / "hit_template.html").read_bytes().decode() == batch.template
    refused = ebc(
        "crowd",
        "export-batch",
        "bnone",
        "--out",
        str(tmp_path / "c"),
        db=migrated_copy,
        check=False,
    )
    assert refused.returncode == 1 and "no HITs" in refused.stderr
    engine.dispose()
