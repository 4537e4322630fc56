"""Importing an MTurk-format results file: batch export -> a stand-in "Turkle" fill -> import.

"Turkle" is `tests.crowd.test_batch.turkle_results`: every `${column}` of the exported
template replaced by the input row's value, the page's form parsed and answered, and a
results file written with Turkle's own columns (HITId ... WorkTimeInSeconds, `Input.*`,
`Answer.*`, `Turkle.Username`). What the import stored is compared with the database's
own screen order: d and the chosen rank are never taken from the file.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from app.annotation.identities import crowd_annotator
from app.annotation.leases import next_assignment
from app.audit.service import CLI
from app.crowd.batch import BatchError, export_batch
from app.crowd.imports import assignment_key, import_results
from app.models import (
    Annotator,
    Assignment,
    AssignmentStatus,
    AuditEvent,
    Channel,
    Hit,
    Judgment,
    StudyStatus,
    utcnow,
)
from app.results.schemas import ResultQuery
from app.results.service import study_results
from tests.crowd.test_batch import edit, read_csv, screen, turkle_results
from tests.hits.factory import annotator as local_annotator
from tests.hits.factory import make_study


def batch(session, slug, **kwargs):
    """A study built by `build_hits`, its batch filled by "Turkle": (study, results, clicks)."""
    study = make_study(session, slug=slug, lengths=(10,), **kwargs)
    results, clicked = turkle_results(export_batch(session, study))
    return study, results, clicked


SOURCE = "lab-turkle"


def key(study, assignment_id: str, source: str = SOURCE) -> str:
    return assignment_key(study, source, assignment_id)


def count(session, model) -> int:
    return session.scalar(select(func.count()).select_from(model))


def stored_rows(session, study) -> dict[str, dict[int, Judgment]]:
    """external assignment id -> position -> its judgment."""
    rows = session.execute(
        select(Assignment.external_assignment_id, Judgment)
        .join(Judgment, Judgment.assignment_id == Assignment.id)
        .join(Hit, Hit.id == Assignment.hit_id)
        .where(Hit.study_id == study.id)
    ).all()
    out: dict[str, dict[int, Judgment]] = {}
    for key, judgment in rows:
        out.setdefault(key, {})[judgment.position] = judgment
    return out


def test_the_judgments_are_those_the_workers_chose(session):
    study, results, clicked = batch(session, "im1", per_cell=20, replicas=2)
    report = import_results(session, study, results, source=SOURCE, by=CLI)

    file_rows = read_csv(results)
    assert (report.stored, report.repeated, report.errors) == (len(file_rows), 0, [])
    shown_at = screen(session, study)
    stored = stored_rows(session, study)
    assert len(stored) == len(file_rows) == 8
    for row, click in zip(file_rows, clicked, strict=True):
        judged = stored[key(study, row["AssignmentId"])]
        assert set(judged) == set(click["words"])
        for p, j in judged.items():
            db = shown_at[(click["hit"], p)]
            rank = db["order"][j.option]  # the stored screen order, not the file
            assert j.chosen_rank == (None if rank == "none" else rank)
            word = None if rank == "none" else db["item"].choices[rank]["word"]
            assert j.chosen_word == word == click["words"][p]
            assert j.d == (0.0 if rank == 0 else 1.0)
            assert j.client_ms == int(row[f"Answer.ms{p}"])
            assert j.too_fast == (j.client_ms < study.min_ms_per_item)
    assert {j.d for judged in stored.values() for j in judged.values()} == {0.0, 1.0}

    # Each worker is a `batch` annotator of the study; the work counts at once (the
    # researcher's import confirms it) and every replica slot is filled, none leased.
    assignments = session.execute(
        select(Assignment, Annotator)
        .join(Annotator, Annotator.id == Assignment.annotator_id)
        .where(Annotator.study_id == study.id)
    ).all()
    assert len(assignments) == 8
    for a, who in assignments:
        assert who.channel is Channel.batch and who.external_id.startswith("lab-turkle:u")
        assert a.status is AssignmentStatus.submitted
        assert not (a.unverified or a.late or a.over_cap or a.extra_replica)
    hits = session.execute(
        select(Hit.replicas, Hit.leased_count, Hit.submitted_count).where(Hit.study_id == study.id)
    ).all()
    assert all(leased == 0 and submitted == replicas for replicas, leased, submitted in hits)

    event = session.scalar(
        select(AuditEvent).where(
            AuditEvent.study_id == study.id, AuditEvent.action == "crowd_results_imported"
        )
    )
    assert event.detail["stored"] == 8 and event.detail["by"] == "cli"

    # The results take them as they are: nothing waits for a confirmation.
    res = study_results(session, study, ResultQuery(b=100))
    assert res.results is not None and "unverified" not in res.exclusions.excluded_by_rule


def test_importing_the_same_file_twice_adds_nothing(session):
    study, results, _ = batch(session, "im2", per_cell=10, replicas=2)
    import_results(session, study, results, source=SOURCE, by=CLI)
    before = [count(session, m) for m in (Annotator, Assignment, Judgment)]
    judged = {
        (k, p): (j.option, j.d) for k, js in stored_rows(session, study).items()
        for p, j in js.items()
    }  # fmt: skip

    again = import_results(session, study, results, source=SOURCE, by=CLI)
    assert (again.stored, again.repeated, again.errors, again.differing) == (0, 4, [], [])
    assert [count(session, m) for m in (Annotator, Assignment, Judgment)] == before

    # The same assignments with other answers: repeats, reported; the first answers stay.
    rows = read_csv(results)
    changed = str((int(rows[1]["Answer.o0"]) + 1) % 6)
    third = import_results(
        session, study, edit(results, {1: {"Answer.o0": changed}}), source=SOURCE, by=CLI
    )
    assert (third.stored, third.repeated, third.errors) == (0, 4, [])
    assert [d.line for d in third.differing] == [3]
    assert "imported before with other answers" in third.differing[0].message
    assert [count(session, m) for m in (Annotator, Assignment, Judgment)] == before
    after = {
        (k, p): (j.option, j.d) for k, js in stored_rows(session, study).items()
        for p, j in js.items()
    }  # fmt: skip
    assert after == judged


def test_tampered_and_unknown_rows_are_reported_and_the_good_rows_stored(session):
    study, results, _ = batch(session, "im3", per_cell=20)
    rows = read_csv(results)
    bad = edit(
        results,
        {
            0: {"Input.option_0_0": rows[0]["Input.option_0_1"]},  # the screen order swapped
            1: {"Input.hit": "999"},
        },
    )
    report = import_results(session, study, bad, source=SOURCE, by=CLI)

    assert (report.stored, report.skipped) == (2, 2)
    messages = {e.line: e.message for e in report.errors}
    assert "tampered: Input.option_0_0" in messages[2]
    assert messages[3] == "unknown HIT '999'"
    stored = stored_rows(session, study)
    assert set(stored) == {key(study, r["AssignmentId"]) for r in rows[2:]}
    assert count(session, Annotator) == 2  # nobody was made for the skipped rows
    # The good rows' HITs are filled; the skipped rows' are free for someone else.
    done = select(Hit.index, Hit.submitted_count).where(Hit.study_id == study.id)
    filled = dict(session.execute(done).all())
    assert filled == {int(r["Input.hit"]): int(i >= 2) for i, r in enumerate(rows)}


def test_a_worker_who_already_did_the_hit_or_a_full_hit_is_skipped(session):
    study, results, _ = batch(session, "im4", per_cell=20)
    first = edit(results, {1: {"WorkerId": "u0"}})  # u0 does two HITs, u1 none
    assert import_results(session, study, first, source=SOURCE, by=CLI).stored == 4
    before = [count(session, m) for m in (Annotator, Assignment, Judgment)]

    # A later file (one slot per HIT, all four filled): u0 again on row 0's HIT under
    # another assignment; new workers u9 and u1 on HITs that u2 and u3 filled.
    later = edit(
        first,
        {
            0: {"AssignmentId": "7000"},
            2: {"AssignmentId": "7002", "WorkerId": "u9"},
            3: {"AssignmentId": "7003", "WorkerId": "u1"},
        },
    )
    report = import_results(session, study, later, source=SOURCE, by=CLI)
    messages = {e.line: e.message for e in report.errors}
    assert list(messages) == [2, 4, 5]
    assert "already had this HIT" in messages[2]
    assert "no free replica slot" in messages[4] and "no free replica slot" in messages[5]
    assert (report.stored, report.repeated) == (0, 1)  # line 3 is row 1 as stored
    assert [count(session, m) for m in (Annotator, Assignment, Judgment)] == before
    leased = select(func.sum(Hit.leased_count)).where(Hit.study_id == study.id)
    assert session.scalar(leased) == 0  # the refused leases gave their count back

    # The same AssignmentId for another worker is not the stored assignment.
    clash = edit(first, {2: {"WorkerId": "u8"}})
    report = import_results(session, study, clash, source=SOURCE, by=CLI)
    assert "imported before for another worker or HIT" in report.errors[0].message
    assert report.errors[0].line == 4 and report.repeated == 3


def test_a_slot_held_by_a_live_lease_is_not_taken_but_a_lapsed_one_is(session):
    study, results, _ = batch(session, "im5", per_cell=20)
    rows = read_csv(results)
    hit_ids = dict(session.execute(select(Hit.index, Hit.id).where(Hit.study_id == study.id)).all())
    live, lapsed = local_annotator(session, study, "live"), local_annotator(session, study, "old")
    # The claim gives the fewest-submitted HIT first: whichever it is, name it in the file.
    held = next_assignment(session, live).assignment
    gone = next_assignment(session, lapsed, now=utcnow() - timedelta(hours=2)).assignment
    index_of = {v: k for k, v in hit_ids.items()}
    line_of = {int(r["Input.hit"]): i for i, r in enumerate(rows)}

    report = import_results(session, study, results, source=SOURCE, by=CLI)
    messages = {e.line: e.message for e in report.errors}
    assert list(messages) == [line_of[index_of[held.hit_id]] + 2]
    assert "no free replica slot" in messages[line_of[index_of[held.hit_id]] + 2]
    assert report.stored == 3
    taken = session.execute(
        select(Hit.leased_count, Hit.submitted_count).where(Hit.id == gone.hit_id)
    ).one()
    assert tuple(taken) == (1, 1)  # the lapsed lease still counted until it is expired
    assert session.scalar(select(Hit.leased_count).where(Hit.id == held.hit_id)) == 1


def test_the_cap_and_blocks_apply_to_batch_workers(session):
    study, results, _ = batch(session, "im6", per_cell=20, per_annotator_cap=2)
    one_worker = edit(results, {i: {"WorkerId": "w1"} for i in range(4)})
    report = import_results(session, study, one_worker, source=SOURCE, by=CLI)
    assert report.stored == 2 and len(report.errors) == 2
    assert all("reached their limit of HITs" in e.message for e in report.errors)

    worker = session.scalar(select(Annotator).where(Annotator.external_id == "lab-turkle:w1"))
    worker.hit_cap, worker.blocked = 10, True
    session.flush()
    report = import_results(session, study, one_worker, source=SOURCE, by=CLI)
    assert report.repeated == 2 and all("blocked" in e.message for e in report.errors)
    worker.blocked = False
    session.flush()
    report = import_results(
        session, study, one_worker, source=SOURCE, by=CLI
    )  # a raised cap: the rest
    assert (report.stored, report.repeated, report.errors) == (2, 2, [])


def test_times_without_client_times_come_from_the_tools_work_time(session):
    study, results, _ = batch(session, "im7", per_cell=20)
    rows = read_csv(results)
    no_ms = {k: "" for k in rows[0] if k.startswith("Answer.ms")}
    quick = edit(results, {0: {**no_ms, "WorkTimeInSeconds": "3"}, 1: no_ms})
    report = import_results(session, study, quick, source=SOURCE, by=CLI)
    timed = [int(v) for r in rows[2:] for k, v in r.items() if k.startswith("Answer.ms") and v]
    slow = sum(ms < study.min_ms_per_item for ms in timed)
    assert report.stored == 4 and report.too_fast == 11 + slow  # 3 s over 11 texts
    stored = stored_rows(session, study)
    fast = {k: {j.too_fast for j in js.values()} for k, js in stored.items()}
    assert fast[key(study, rows[0]["AssignmentId"])] == {True}
    assert fast[key(study, rows[1]["AssignmentId"])] == {False}  # 240 s
    untimed = stored[key(study, rows[1]["AssignmentId"])].values()
    assert all(j.client_ms is None for j in untimed)


def test_a_failed_import_stores_nothing_and_runs_again_once(session):
    study, results, _ = batch(session, "im8", per_cell=20)
    nested = session.begin_nested()
    import_results(session, study, results, source=SOURCE, by=CLI)
    nested.rollback()  # the import's transaction dies before its commit
    assert count(session, Judgment) == count(session, Assignment) == 0
    submitted = select(func.sum(Hit.submitted_count)).where(Hit.study_id == study.id)
    assert session.scalar(submitted) == 0

    report = import_results(session, study, results, source=SOURCE, by=CLI)
    assert report.stored == 4 and count(session, Assignment) == 4


def test_a_closed_study_or_another_file_is_refused_whole(session):
    study, results, _ = batch(session, "im9", per_cell=10)
    with pytest.raises(BatchError, match="not a results file"):
        import_results(session, study, "HITId,WorkerId\r\n1,w\r\n", source=SOURCE, by=CLI)
    study.status = StudyStatus.closed
    session.flush()
    with pytest.raises(BatchError, match="closed"):
        import_results(session, study, results, source=SOURCE, by=CLI)
    assert count(session, Assignment) == 0


def test_a_batch_worker_is_not_the_mturk_worker_of_the_same_id(session):
    study, results, _ = batch(session, "im10", per_cell=10)
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    mturk = crowd_annotator(session, study, Channel.mturk, "u0")
    import_results(session, study, results, source=SOURCE, by=CLI)
    batch_worker = session.scalar(
        select(Annotator).where(
            Annotator.channel == Channel.batch, Annotator.external_id == "lab-turkle:u0"
        )
    )
    assert batch_worker is not None and batch_worker.id != mturk.id


def test_two_installations_are_two_sources_of_people_and_assignments(session):
    """Turkle's WorkerId is its user number and its AssignmentId counts from 1 in every
    installation: two installations, one assignment per task each, write the same ids."""
    study, results, _ = batch(session, "im11", per_cell=20, replicas=2)
    rows = read_csv(results)
    assert len(rows) == 8
    # Each installation did one assignment of every HIT, under the same ids.
    firsts = [i for i, r in enumerate(rows) if i == 0 or r["Input.hit"] != rows[i - 1]["Input.hit"]]
    same_ids = {
        i: {"AssignmentId": str(n + 1), "WorkerId": str(n + 1)} for n, i in enumerate(firsts)
    }
    lab_a = edit(results, same_ids)
    lab_b = edit(results, {i + 1: cells for i, cells in same_ids.items()})
    first = [r for i, r in enumerate(read_csv(lab_a)) if i in firsts]
    second = [r for i, r in enumerate(read_csv(lab_b)) if i - 1 in firsts]
    assert [(r["AssignmentId"], r["WorkerId"]) for r in first] == [
        (r["AssignmentId"], r["WorkerId"]) for r in second
    ]
    only = lambda text, keep: edit_rows(text, keep)  # noqa: E731

    a = import_results(session, study, only(lab_a, firsts), source="lab-a", by=CLI)
    b = import_results(session, study, only(lab_b, [i + 1 for i in firsts]), source="lab-b", by=CLI)
    assert (a.stored, b.stored, a.errors, b.errors) == (4, 4, [], [])
    people = session.scalars(
        select(Annotator.external_id).where(Annotator.study_id == study.id)
    ).all()
    assert sorted(people) == sorted(
        [f"lab-a:{n}" for n in range(1, 5)] + [f"lab-b:{n}" for n in range(1, 5)]
    )
    assert set(stored_rows(session, study)) == {
        key(study, str(n), source) for n in range(1, 5) for source in ("lab-a", "lab-b")
    }
    again = import_results(
        session, study, only(lab_b, [i + 1 for i in firsts]), source="lab-b", by=CLI
    )
    assert (again.stored, again.repeated) == (0, 4)
    with pytest.raises(BatchError, match="not a source name"):
        import_results(session, study, results, source="Lab A", by=CLI)


def edit_rows(results: str, keep: list[int]) -> str:
    """The results file with only the rows numbered `keep` (0-based)."""
    lines = results.split("\r\n")
    return "\r\n".join([lines[0], *(lines[i + 1] for i in keep)]) + "\r\n"


@pytest.mark.sqlite  # the file's reading: the same on every backend
def test_an_anonymous_row_names_the_setting_to_change(session):
    study, results, _ = batch(session, "im12", per_cell=20)
    report = import_results(
        session, study, edit(results, {0: {"WorkerId": ""}}), source=SOURCE, by=CLI
    )
    assert report.stored == 3 and [e.line for e in report.errors] == [2]
    assert "no WorkerId" in report.errors[0].message
    assert '"Login required"' in report.errors[0].message


def test_a_row_with_an_unanswered_text_is_refused_whole_as_the_page_refuses_it(session):
    from app.annotation.errors import InvalidAnswers
    from app.studytypes.nextword.annotation import submit

    study, results, _ = batch(session, "im13", per_cell=20)
    rows = read_csv(results)
    report = import_results(
        session,
        study,
        edit(results, {0: {"Answer.o3": "", "Answer.o7": ""}}),
        source=SOURCE,
        by=CLI,
    )
    assert report.stored == 3 and [e.line for e in report.errors] == [2]
    assert report.errors[0].message.startswith("no answer for texts 4, 8 (9 of 11 answered)")
    assert key(study, rows[0]["AssignmentId"]) not in stored_rows(session, study)
    free = select(Hit.submitted_count).where(
        Hit.study_id == study.id, Hit.index == int(rows[0]["Input.hit"])
    )
    assert session.scalar(free) == 0  # the HIT is free for someone else

    # The page refuses the same answers: one rule on every path.
    person = local_annotator(session, study, "page")
    work = next_assignment(session, person).assignment
    answers = {p: 0 for p in range(11) if p not in (3, 7)}
    with pytest.raises(InvalidAnswers, match="answer for every text"):
        submit(session, person, work.public_id, answers)


@pytest.mark.sqlite  # the file's reading: the same on every backend
def test_a_huge_cell_is_quoted_cut_in_the_report(session):
    study, results, _ = batch(session, "im14", per_cell=20)
    huge = "9" * 100_000
    report = import_results(
        session,
        study,
        edit(results, {0: {"Input.hit": huge}, 1: {"Input.study": "x" * 100_000}}),
        source=SOURCE,
        by=CLI,
    )
    messages = {e.line: e for e in report.errors}
    assert messages[2].message == f"unknown HIT {huge[:200]!r}... (100,000 characters)"
    assert len(messages[2].hit) == 200
    assert len(messages[3].message) < 300 and "(100,000 characters)" in messages[3].message


@pytest.mark.sqlite  # the file's reading: the same on every backend
def test_results_of_a_batch_with_one_row_per_replica_still_import(session):
    study, results, _ = batch(session, "im15", per_cell=20)
    rows = read_csv(results)
    for row in rows:
        row["Input.replica"] = "0"
        del row["Answer.study"], row["Answer.hit"]
    old = write_rows(rows)
    report = import_results(session, study, old, source=SOURCE, by=CLI)
    assert (report.stored, report.errors) == (4, [])
    rows[0]["Input.replica"] = "1"
    rows[0]["AssignmentId"] = "x1"
    report = import_results(session, study, write_rows(rows), source=SOURCE, by=CLI)
    assert "has no replica '1'" in report.errors[0].message


def write_rows(rows: list[dict]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, list(rows[0]), lineterminator="\r\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def test_ebc_crowd_import_results(migrated_copy, tmp_path):
    from app.db import build_engine, make_sessionmaker
    from app.models import Study
    from tests.test_cli import ebc

    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        study = make_study(
            s, slug="imcli", lengths=(10,), per_cell=20, participants={"consent": "We ask."}
        )
        exported = export_batch(s, study)
    results, _ = turkle_results(exported)
    good = tmp_path / "Batch_1_results.csv"
    good.write_bytes(results.encode())
    bad = tmp_path / "Batch_2_results.csv"
    rows = read_csv(results)
    bad.write_bytes(
        edit(
            results,
            {
                0: {"AssignmentId": "9000", "Input.option_0_0": "=HYPERLINK(" + "x" * 9000},
                1: {"AssignmentId": "9001", "Answer.consent": ""},  # the box not ticked
            },
        ).encode()
    )

    def run(path, *more, check=True):
        return ebc(
            "crowd", "import-results", "imcli", str(path), *more, db=migrated_copy, check=check
        )

    out = run(good, "--source", "lab-turkle")
    assert "stored 4, repeated 0, refused 0" in out.stdout
    out = run(good, "--source", "lab-turkle")  # all repeated: done, exit 0
    assert "stored 0, repeated 4, refused 0" in out.stdout
    out = run(bad, "--source", "lab-turkle", check=False)
    assert out.returncode == 3
    assert "stored 0, repeated 2, refused 2" in out.stdout
    hit = rows[0]["Input.hit"]
    assert f"refused line 2 (HIT {hit}): tampered: Input.option_0_0" in out.stdout
    assert f"refused line 3 (HIT {rows[1]['Input.hit']}): no consent:" in out.stdout
    assert len(out.stdout) < 1500  # the cell is not quoted
    no_source = run(good, check=False)
    assert no_source.returncode == 2 and "--source" in no_source.stderr
    bad_source = run(good, "--source", "Lab/1", check=False)
    assert bad_source.returncode == 1 and "not a source name" in bad_source.stderr
    missing = ebc(
        "crowd", "import-results", "nope", str(good), "--source", "x", db=migrated_copy, check=False
    )
    assert missing.returncode == 1 and "no study 'nope'" in missing.stderr

    with make_sessionmaker(engine)() as s:
        found = s.scalar(select(Study).where(Study.slug == "imcli"))
        assert len(stored_rows(s, found)) == 4
        assert s.scalar(select(func.count()).select_from(Judgment)) == 4 * 11
        events = s.scalars(
            select(AuditEvent.detail)
            .where(AuditEvent.action == "crowd_results_imported")
            .order_by(AuditEvent.id)
        ).all()
        assert [(e["stored"], e["skipped"], e["source"]) for e in events] == [
            (4, 0, "lab-turkle"),
            (0, 0, "lab-turkle"),
            (0, 2, "lab-turkle"),
        ]
    engine.dispose()


CONSENT = "We study how people guess words.\n\nYou may stop at any time."
FORMULA = '=HYPERLINK("http://evil","x")'


def test_batch_rows_carry_consent_and_comments_as_the_web_pages_store_them(session):
    import csv
    import io

    from app.crowd.batch import NO_CONSENT
    from app.studytypes.nextword.exports import judgments_csv

    study = make_study(
        session, slug="im16", lengths=(10,), per_cell=20,
        participants={"consent": CONSENT, "comments": True},
    )  # fmt: skip
    results, _ = turkle_results(export_batch(session, study), workers=2)
    rows = read_csv(results)
    assert [r["WorkerId"] for r in rows] == ["u0", "u1", "u0", "u1"]
    assert {r["Answer.consent"] for r in rows} == {"yes"} and "Answer.comment" in rows[0]
    sent = edit(
        results,
        {
            # u0: the later row first (HIT order): the earliest time is kept; a comment
            0: {"SubmitTime": "Tue Nov 11 12:00:00 UTC 2026", "Answer.comment": FORMULA + "\r\nok"},
            1: {"Answer.consent": ""},  # u1: the box not ticked: refused
            2: {"SubmitTime": "Tue Nov 11 02:05:00 PST 2026"},  # MTurk's site: Pacific time
            3: {"SubmitTime": "", "AcceptTime": "soon"},  # u1: no time read: the import's
        },
    )
    before = utcnow()
    report = import_results(session, study, sent, source=SOURCE, by=CLI)
    after = utcnow()
    # Line 4 of the file: the comment above holds a line break.
    assert report.stored == 3 and [(e.line, e.message) for e in report.errors] == [(4, NO_CONSENT)]
    consented = dict(
        session.execute(
            select(Annotator.external_id, Annotator.consented_at).where(
                Annotator.study_id == study.id
            )
        ).all()
    )
    assert consented[f"{SOURCE}:u0"] == datetime(2026, 11, 11, 10, 5, tzinfo=UTC)
    assert before <= consented[f"{SOURCE}:u1"] <= after
    comments = dict(
        session.execute(
            select(Assignment.external_assignment_id, Assignment.comment)
            .join(Hit, Hit.id == Assignment.hit_id)
            .where(Hit.study_id == study.id)
        ).all()
    )
    assert comments == {
        key(study, rows[0]["AssignmentId"]): FORMULA + "\nok",
        key(study, rows[2]["AssignmentId"]): None,  # an empty box: no comment
        key(study, rows[3]["AssignmentId"]): None,
    }
    exported = list(csv.DictReader(io.StringIO("".join(judgments_csv(session, study)))))
    assert {r["hit_comment"] for r in exported} == {"", "'" + FORMULA + "\nok"}

    # The box ticked in the file: the row is stored; the others are repeats.
    again = import_results(
        session, study, edit(sent, {1: {"Answer.consent": "yes"}}), source=SOURCE, by=CLI
    )
    assert (again.stored, again.repeated, again.errors) == (1, 3, [])


@pytest.mark.sqlite  # the file's reading: the same on every backend
def test_a_comment_the_web_page_refuses_refuses_its_row(session):
    study, results, _ = batch(session, "im17", per_cell=20)
    bad = {0: {"Answer.comment": "x" * 2001 + "\r\nmore"}, 1: {"Answer.comment": "bell \x07"}}
    report = import_results(session, study, edit(results, bad), source=SOURCE, by=CLI)
    # A row's line is its first: the first row takes lines 2 and 3.
    assert report.stored == 2 and [e.line for e in report.errors] == [2, 4]
    assert "longer than 2000 characters" in report.errors[0].message
    assert "not allowed" in report.errors[1].message
    assert all(len(e.message) < 300 for e in report.errors)


def test_the_times_of_a_results_file():
    from app.crowd.imports import tool_time

    assert tool_time("Sat Nov 28 12:30:00 UTC 2026") == datetime(2026, 11, 28, 12, 30, tzinfo=UTC)
    assert tool_time("Sat Jul 04 05:00:00 PDT 2026") == datetime(2026, 7, 4, 12, 0, tzinfo=UTC)
    assert tool_time("2026-11-28T12:30:00+01:00") == datetime(2026, 11, 28, 11, 30, tzinfo=UTC)
    for unread in ("", "Sat Nov 28 12:30:00 CET 2026", "2026-11-28T12:30:00", "Feb 30", None):
        assert tool_time(unread) is None
    # Valid in their own zone but outside Python's range once in UTC: not read either.
    for beyond in ("9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00",
                   "Fri Dec 31 23:00:00 PST 9999"):  # fmt: skip
        assert tool_time(beyond) is None


@pytest.mark.sqlite  # the file's reading: the same on every backend
def test_a_time_beyond_the_calendar_is_the_imports_time_not_a_crash(session):
    study = make_study(
        session, slug="im18", lengths=(10,), per_cell=20,
        participants={"consent": CONSENT, "comments": True},
    )  # fmt: skip
    results, _ = turkle_results(export_batch(session, study), workers=1)
    sent = edit(results, {0: {"SubmitTime": "9999-12-31T23:00:00-05:00"}})
    report = import_results(session, study, sent, source=SOURCE, by=CLI)
    assert report.errors == [] and report.stored == len(read_csv(results))
    person = session.scalar(select(Annotator).where(Annotator.study_id == study.id))
    assert person.consented_at is not None and person.consented_at <= utcnow()
