"""Invite links, the annotator table, blocking (with or without past judgments), caps."""

from __future__ import annotations

import csv
import io

from sqlalchemy import select

from app.annotation.schemas import WorkStatus
from app.annotation.service import annotator_for_invite, next_assignment, read_invite_token
from app.models import Annotator, AuditEvent
from tests.hits.factory import make_study


def _annotators(session, study):
    session.expire_all()
    return session.scalars(
        select(Annotator).where(Annotator.study_id == study.id).order_by(Annotator.id)
    ).all()


def test_invites_block_unblock_and_caps(logged_in, session, settings):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
    session.commit()
    url = "/dashboard/studies/s1/annotators"
    r = logged_in.post(f"{url}/invite", data={"csrf_token": logged_in.csrf, "label": "Lab"})
    assert r.status_code == 200 and "1 invite link created" in r.text
    [one] = _annotators(session, study)
    link = r.context["links"][one.id]
    assert link.startswith(f"{settings.base_url}/a/") and link in r.text

    batch = logged_in.post(
        f"{url}/invite",
        data={"csrf_token": logged_in.csrf, "count": "3", "label": "panel", "as_csv": "true"},
    )
    assert batch.headers["content-type"].startswith("text/csv")
    assert "attachment" in batch.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(batch.text)))
    assert [r["label"] for r in rows] == ["panel 1", "panel 2", "panel 3"]
    assert all(r["link"].startswith(f"{settings.base_url}/a/") for r in rows)
    everyone = logged_in.get(f"{url}/links.csv")
    assert len(list(csv.DictReader(io.StringIO(everyone.text)))) == 4

    r = logged_in.post(
        f"{url}/{one.id}/block",
        data={"csrf_token": logged_in.csrf, "reason": "random <clicking>", "exclude_past": "true"},
    )
    assert "is blocked and their past judgments are excluded" in r.text
    assert "random &lt;clicking&gt;" in r.text
    session.expire_all()
    one = session.get(Annotator, one.id)
    assert one.blocked and one.exclude_past and one.blocked_reason == "random <clicking>"
    ref = read_invite_token(settings.secret_key, link.rsplit("/", 1)[1])
    assert next_assignment(session, annotator_for_invite(session, ref)).status is WorkStatus.blocked

    r = logged_in.post(f"{url}/{one.id}/unblock", data={"csrf_token": logged_in.csrf})
    assert "may work again" in r.text
    r = logged_in.post(f"{url}/{one.id}/cap", data={"csrf_token": logged_in.csrf, "cap": "2"})
    assert "at most 2 HITs" in r.text
    r = logged_in.post("/dashboard/studies/s1/cap", data={"csrf_token": logged_in.csrf, "cap": "7"})
    assert "at most 7 HITs" in r.text
    session.expire_all()
    one = session.get(Annotator, one.id)
    assert not one.blocked and not one.exclude_past and one.hit_cap == 2
    assert r.context["caps"][one.id] == 2 and study.per_annotator_cap == 7
    r = logged_in.post(f"{url}/{one.id}/cap", data={"csrf_token": logged_in.csrf, "cap": ""})
    assert "at most 7 HITs" in r.text  # back to the study's cap
    actions = session.scalars(
        select(AuditEvent.action).where(AuditEvent.study_id == study.id).order_by(AuditEvent.id)
    ).all()
    assert actions == [
        "annotators_invited",
        "annotators_invited",
        "export",
        "annotator_blocked",
        "annotator_unblocked",
        "annotator_cap_changed",
        "study_cap_changed",
        "annotator_cap_changed",
    ]


def test_annotator_of_another_study_is_not_found(logged_in, session):
    make_study(session, slug="s1", lengths=(10,), per_cell=5)
    other = make_study(session, slug="s2", lengths=(10,), per_cell=5)
    from tests.hits.factory import annotator

    theirs = annotator(session, other, "x")
    session.commit()
    r = logged_in.post(
        f"/dashboard/studies/s1/annotators/{theirs.id}/block", data={"csrf_token": logged_in.csrf}
    )
    assert r.status_code == 404
