"""The study and annotator services write the audit log themselves, for whoever calls them:
a researcher (the dashboard, the API) or the operator at the command line (`by=CLI`)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.annotation.admin import (
    block,
    export_links,
    invite,
    reissue_invite,
    revoke_invite,
    set_cap,
    unblock,
)
from app.annotation.errors import AnnotationError
from app.audit.service import CLI
from app.models import AuditEvent, Channel, StudyStatus, User
from app.precompute.service import plan_job
from app.studies.service import (
    StudyError,
    build_and_open,
    close_study,
    create_study,
    reopen_study,
    set_study_cap,
    stop_precompute,
)
from tests.hits.factory import annotator, make_study
from tests.studies.test_mapping import SEQ2SEQ


def _events(session) -> list[tuple]:
    session.expire_all()
    rows = session.scalars(select(AuditEvent).order_by(AuditEvent.id)).all()
    return [(e.action, e.user_id, e.detail.get("by"), e.study_id) for e in rows]


@pytest.fixture
def researcher(session) -> User:
    user = User(username="ada", password_hash="x")
    session.add(user)
    session.flush()
    return user


@pytest.mark.parametrize("who", ["cli", "researcher"])
def test_each_verb_is_recorded_with_who_did_it(session, researcher, who):
    by = CLI if who == "cli" else researcher
    user_id, by_word = (None, "cli") if who == "cli" else (researcher.id, None)
    made = create_study(session, SEQ2SEQ, by=by)
    study = make_study(session, slug="s1", per_cell=10)
    lab = annotator(session, study, "lab")
    plan_job(session, made)
    stop_precompute(session, made, by=by)
    close_study(session, study, by=by)
    reopen_study(session, study, by=by)
    set_study_cap(session, study, 9, by=by)
    [new] = invite(session, study, 1, "new", by=by)
    export_links(session, study, "http://x", "k" * 32, by=by)
    revoke_invite(session, lab, by=by)
    reissue_invite(session, lab, by=by)
    block(session, new, reason="  fast  ", exclude_past=True, by=by)
    unblock(session, new, by=by)
    set_cap(session, new, 3, by=by)
    events = _events(session)
    assert [e[0] for e in events] == [
        "study_created",
        "precompute_cancelled",
        "study_closed",
        "study_reopened",
        "study_cap_changed",
        "annotators_invited",
        "export",
        "invite_revoked",
        "invite_reissued",
        "annotator_blocked",
        "annotator_unblocked",
        "annotator_cap_changed",
    ]
    assert {(e[1], e[2]) for e in events} == {(user_id, by_word)}
    assert [e[3] for e in events] == [made.id, made.id] + [study.id] * 10
    details = [e.detail for e in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
    assert details[0]["source"] == "file" and details[3]["status"] == "collecting"
    assert details[4]["cap"] == 9 and details[5]["count"] == 1
    assert details[7]["annotator"] == "lab" and details[9]["reason"] == "fast"
    assert details[11]["cap"] == 3


def test_set_up_code_records_nothing(session):
    study = make_study(session, slug="s1", per_cell=10)  # create_study without `by`
    close_study(session, study)
    assert _events(session) == []


def test_refused_transitions_record_nothing(session):
    draft = make_study(session, slug="draft", per_cell=10, build=False)
    study = make_study(session, slug="s1", per_cell=10)
    crowd = annotator(session, study, "crowd", channel=Channel.prolific, external_id="P1")
    refusals = [
        (StudyError, "HITs are built once its items are ready", build_and_open, draft),
        (StudyError, "No precompute job is running", stop_precompute, study),
        (StudyError, "only a closed study can be reopened", reopen_study, study),
        (StudyError, "the cap must be at least 1", lambda s, x, by: set_study_cap(s, x, 0, by=by)),
        (AnnotationError, "crowd worker is blocked instead", revoke_invite, crowd),
        (AnnotationError, "crowd worker is blocked instead", reissue_invite, crowd),
        (AnnotationError, "a cap cannot be negative", lambda s, x, by: set_cap(s, x, -1, by=by)),
        (AnnotationError, "between 1 and 1000", lambda s, x, by: invite(s, x, 0, None, by=by)),
    ]
    for error, message, verb, *target in refusals:
        with pytest.raises(error, match=message):
            verb(session, target[0] if target else study, by=CLI)
    close_study(session, study, by=CLI)
    with pytest.raises(StudyError, match="already closed"):
        close_study(session, study, by=CLI)
    assert [e[0] for e in _events(session)] == ["study_closed"]
    assert study.status is StudyStatus.closed
