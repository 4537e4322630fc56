"""Importing an MTurk-format results file: batch export -> a stand-in "Turkle" fill -> import.

"Turkle" is `tests.crowd.test_batch.turkle_results`: every `${column}` of the exported
template replaced by the input row's value, the page's form parsed and answered, and a
results file written with Turkle's own columns (HITId ... WorkTimeInSeconds, `Input.*`,
`Answer.*`, `Turkle.Username`). What the import stored is compared with the database's
own screen order: d and the chosen rank are never taken from the file.
"""

from __future__ import annotations

from datetime import timedelta

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
    template, input_csv = export_batch(session, study)
    results, clicked = turkle_results(template, input_csv)
    return study, results, clicked


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
    report = import_results(session, study, results, by=CLI)

    file_rows = read_csv(results)
    assert (report.stored, report.repeated, report.errors) == (len(file_rows), 0, [])
    shown_at = screen(session, study)
    stored = stored_rows(session, study)
    assert len(stored) == len(file_rows) == 8
    for row, click in zip(file_rows, clicked, strict=True):
        judged = stored[assignment_key(study, row["AssignmentId"])]
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
        assert who.channel is Channel.batch and who.external_id.startswith("u")
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
    import_results(session, study, results, by=CLI)
    before = [count(session, m) for m in (Annotator, Assignment, Judgment)]
    judged = {
        (k, p): (j.option, j.d) for k, js in stored_rows(session, study).items()
        for p, j in js.items()
    }  # fmt: skip

    again = import_results(session, study, results, by=CLI)
    assert (again.stored, again.repeated, again.errors, again.differing) == (0, 4, [], [])
    assert [count(session, m) for m in (Annotator, Assignment, Judgment)] == before

    # The same assignments with other answers: repeats, reported; the first answers stay.
    rows = read_csv(results)
    changed = str((int(rows[1]["Answer.o0"]) + 1) % 6)
    third = import_results(session, study, edit(results, {1: {"Answer.o0": changed}}), by=CLI)
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
    report = import_results(session, study, bad, by=CLI)

    assert (report.stored, report.skipped) == (2, 2)
    messages = {e.line: e.message for e in report.errors}
    assert "tampered: Input.option_0_0" in messages[2]
    assert messages[3] == "unknown HIT '999'"
    stored = stored_rows(session, study)
    assert set(stored) == {assignment_key(study, r["AssignmentId"]) for r in rows[2:]}
    assert count(session, Annotator) == 2  # nobody was made for the skipped rows
    # The good rows' HITs are filled; the skipped rows' are free for someone else.
    done = select(Hit.index, Hit.submitted_count).where(Hit.study_id == study.id)
    filled = dict(session.execute(done).all())
    assert filled == {int(r["Input.hit"]): int(i >= 2) for i, r in enumerate(rows)}


def test_a_worker_who_already_did_the_hit_or_a_full_hit_is_skipped(session):
    study, results, _ = batch(session, "im4", per_cell=20)
    first = edit(results, {1: {"WorkerId": "u0"}})  # u0 does two HITs, u1 none
    assert import_results(session, study, first, by=CLI).stored == 4
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
    report = import_results(session, study, later, by=CLI)
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
    report = import_results(session, study, clash, by=CLI)
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

    report = import_results(session, study, results, by=CLI)
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
    report = import_results(session, study, one_worker, by=CLI)
    assert report.stored == 2 and len(report.errors) == 2
    assert all("reached their limit of HITs" in e.message for e in report.errors)

    worker = session.scalar(select(Annotator).where(Annotator.external_id == "w1"))
    worker.hit_cap, worker.blocked = 10, True
    session.flush()
    report = import_results(session, study, one_worker, by=CLI)
    assert report.repeated == 2 and all("blocked" in e.message for e in report.errors)
    worker.blocked = False
    session.flush()
    report = import_results(session, study, one_worker, by=CLI)  # a raised cap: the rest
    assert (report.stored, report.repeated, report.errors) == (2, 2, [])


def test_times_without_client_times_come_from_the_tools_work_time(session):
    study, results, _ = batch(session, "im7", per_cell=20)
    rows = read_csv(results)
    no_ms = {k: "" for k in rows[0] if k.startswith("Answer.ms")}
    quick = edit(results, {0: {**no_ms, "WorkTimeInSeconds": "3"}, 1: no_ms})
    report = import_results(session, study, quick, by=CLI)
    timed = [int(v) for r in rows[2:] for k, v in r.items() if k.startswith("Answer.ms") and v]
    slow = sum(ms < study.min_ms_per_item for ms in timed)
    assert report.stored == 4 and report.too_fast == 11 + slow  # 3 s over 11 texts
    stored = stored_rows(session, study)
    fast = {k: {j.too_fast for j in js.values()} for k, js in stored.items()}
    assert fast[assignment_key(study, rows[0]["AssignmentId"])] == {True}
    assert fast[assignment_key(study, rows[1]["AssignmentId"])] == {False}  # 240 s
    untimed = stored[assignment_key(study, rows[1]["AssignmentId"])].values()
    assert all(j.client_ms is None for j in untimed)


def test_a_failed_import_stores_nothing_and_runs_again_once(session):
    study, results, _ = batch(session, "im8", per_cell=20)
    nested = session.begin_nested()
    import_results(session, study, results, by=CLI)
    nested.rollback()  # the import's transaction dies before its commit
    assert count(session, Judgment) == count(session, Assignment) == 0
    submitted = select(func.sum(Hit.submitted_count)).where(Hit.study_id == study.id)
    assert session.scalar(submitted) == 0

    report = import_results(session, study, results, by=CLI)
    assert report.stored == 4 and count(session, Assignment) == 4


def test_a_closed_study_or_another_file_is_refused_whole(session):
    study, results, _ = batch(session, "im9", per_cell=10)
    with pytest.raises(BatchError, match="not a results file"):
        import_results(session, study, "HITId,WorkerId\r\n1,w\r\n", by=CLI)
    study.status = StudyStatus.closed
    session.flush()
    with pytest.raises(BatchError, match="closed"):
        import_results(session, study, results, by=CLI)
    assert count(session, Assignment) == 0


def test_a_batch_worker_is_not_the_mturk_worker_of_the_same_id(session):
    study, results, _ = batch(session, "im10", per_cell=10)
    study.channels = {**study.channels, "mturk": {"enabled": True}}
    session.flush()
    mturk = crowd_annotator(session, study, Channel.mturk, "u0")
    import_results(session, study, results, by=CLI)
    batch_worker = session.scalar(
        select(Annotator).where(Annotator.channel == Channel.batch, Annotator.external_id == "u0")
    )
    assert batch_worker is not None and batch_worker.id != mturk.id


def test_ebc_crowd_import_results(migrated_copy, tmp_path):
    from app.db import build_engine, make_sessionmaker
    from app.models import Study
    from tests.test_cli import ebc

    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as s, s.begin():
        study = make_study(s, slug="imcli", lengths=(10,), per_cell=20)
        template, input_csv = export_batch(s, study)
    results, _ = turkle_results(template, input_csv)
    good = tmp_path / "Batch_1_results.csv"
    good.write_bytes(results.encode())
    bad = tmp_path / "Batch_2_results.csv"
    rows = read_csv(results)
    bad.write_bytes(edit(results, {0: {"AssignmentId": "9000", "Input.option_0_0": "x"}}).encode())

    out = ebc("crowd", "import-results", "imcli", str(good), db=migrated_copy)
    assert "stored 4, repeated 0, skipped 0" in out.stdout
    out = ebc("crowd", "import-results", "imcli", str(bad), db=migrated_copy, check=False)
    assert out.returncode == 1
    assert "stored 0, repeated 3, skipped 1" in out.stdout
    hit = rows[0]["Input.hit"]
    assert f"skipped line 2 (HIT {hit}): tampered: Input.option_0_0" in out.stdout
    missing = ebc("crowd", "import-results", "nope", str(good), db=migrated_copy, check=False)
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
        assert [(e["stored"], e["skipped"]) for e in events] == [(4, 0), (0, 1)]
    engine.dispose()
