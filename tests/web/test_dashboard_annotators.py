"""Invite links, the annotator table, blocking (with or without past judgments), caps."""

from __future__ import annotations

import csv
import io
import re

import pytest
from sqlalchemy import func, select

from app.annotation.identities import annotator_for_invite, read_invite_token
from app.annotation.leases import next_assignment
from app.annotation.schemas import WorkStatus
from app.models import Annotator, Assignment, AuditEvent, Channel, Judgment
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


def test_revoke_and_reissue_an_invite_link(logged_in, session, settings, client):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
    from tests.hits.factory import annotator

    a = annotator(session, study, "lab member")
    crowd = annotator(session, study, "crowd", channel=Channel.prolific, external_id="P1")
    session.commit()
    url = "/dashboard/studies/s1/annotators"
    old = logged_in.get(url).context["links"][a.id]
    old_path = old.removeprefix(settings.base_url)
    page = logged_in.get(old_path)  # the annotator works through the link: a judgment is kept
    assert page.status_code == 200
    work = page.context["work"].assignment
    positions = len(page.context["page"].positions)
    answers = {f"o{p}": "0" for p in range(positions)}
    done = logged_in.post(
        f"{old_path}/submit", data={"assignment": work.public_id, **answers}, follow_redirects=False
    )
    assert done.status_code == 303
    judged = _judgments(session, a)
    assert judged == positions

    r = logged_in.post(f"{url}/{a.id}/revoke", data={"csrf_token": logged_in.csrf})
    assert "The invite link of lab member no longer works." in r.text
    assert r.context["links"][a.id] is None and "link revoked" in r.text
    dead = logged_in.get(old_path)
    assert dead.status_code == 404 and "This link is no longer valid" in dead.text
    assert "lab member" not in logged_in.get(f"{url}/links.csv").text
    session.expire_all()
    revoked = session.get(Annotator, a.id)
    assert revoked.invite_nonce is None and revoked.revoked_at is not None
    assert _judgments(session, a) == judged  # their work is kept

    r = logged_in.post(f"{url}/{a.id}/reissue", data={"csrf_token": logged_in.csrf})
    assert "has a new invite link" in r.text
    new = r.context["links"][a.id]
    assert new != old and new in r.text
    assert logged_in.get(new.removeprefix(settings.base_url)).status_code == 200
    assert logged_in.get(old_path).status_code == 404  # the old link stays dead
    session.expire_all()
    assert session.get(Annotator, a.id).revoked_at is None

    # A crowd worker has no link to revoke: blocked instead, and nothing changes here.
    nonce = crowd.invite_nonce
    r = logged_in.post(f"{url}/{crowd.id}/revoke", data={"csrf_token": logged_in.csrf})
    assert "crowd worker is blocked instead" in r.text
    session.expire_all()
    assert session.get(Annotator, crowd.id).invite_nonce == nonce
    actions = session.scalars(
        select(AuditEvent.action).where(AuditEvent.action.like("invite_%")).order_by(AuditEvent.id)
    ).all()
    assert actions == ["invite_revoked", "invite_reissued"]


def _judgments(session, annotator_row) -> int:
    session.expire_all()
    return session.scalar(
        select(func.count(Judgment.id))
        .join(Assignment, Assignment.id == Judgment.assignment_id)
        .where(Assignment.annotator_id == annotator_row.id)
    )


def test_the_annotator_table_shows_the_llm_assistance_signal(logged_in, session):
    from tests.web.test_dashboard_results_page import _crowd_with_an_assisted_annotator

    _crowd_with_an_assisted_annotator(session, "llm2")
    r = logged_in.get("/dashboard/studies/llm2/annotators")
    assert r.status_code == 200
    quality = r.context["quality"]
    assert [q.label for q in quality.values() if q.assisted] == ["copilot"]
    row = next(tr for tr in r.text.split("<tr") if "<strong>copilot</strong>" in tr)
    assert "LLM-assisted?" in row and "1.00 vs" in row
    assert "agrees with the reference model&#39;s top-1 far beyond the crowd" in row
    assert r.text.count("LLM-assisted?") == 1


def test_a_ratings_study_shows_each_raters_quality_figures(logged_in, session, monkeypatch):
    """Per rater (RaterQuality): ratings, attention pass share, straight-lining, leniency,
    too fast, from the ratings alone: the figures' resampling is not run for them."""
    from app.studytypes.ratings import results as ratings_service
    from tests.results.ratings_study import make_rated_study

    rated = make_rated_study(session)
    session.commit()

    def no_figures(*_args, **_kwargs):
        raise AssertionError("the Annotators page computes no results document")

    monkeypatch.setattr(ratings_service, "ratings_results", no_figures)
    r = logged_in.get("/dashboard/studies/rated/annotators")
    assert r.status_code == 200
    quality = r.context["quality"]
    ids = {name: a.id for name, a in rated.annotators.items()}
    assert set(quality) == set(ids.values())
    careless, steady = quality[ids["careless"]], quality[ids["steady"]]
    assert careless.attention_pass == 0 and careless.top_value_share == 1 and careless.excluded
    assert steady.attention_pass == 1 and steady.n_ratings == 22 and not steady.excluded
    assert steady.too_fast_share == pytest.approx(2 / 22)
    table = re.search(r'<table class="grid compact" id="annotators">.*?</table>', r.text, re.S)
    head = table.group(0).split("</thead>")[0]
    for column in ("Ratings", "Attention pairs rated ≤ 1", "Most frequent value", "Leniency"):
        assert column in head
    assert "Top-1 rate" not in head and '"None" share' not in head
    row = re.search(r"<tr[^>]*>\s*<td><strong>careless</strong>.*?</tr>", table.group(0), re.S)
    assert "excluded by the rules" in row.group(0) and "1.00" in row.group(0)


def test_links_csv_neutralises_a_label_that_a_spreadsheet_would_run(logged_in, session):
    make_study(session, slug="s9", lengths=(10,), per_cell=10)
    session.commit()
    url = "/dashboard/studies/s9/annotators"
    label = '=HYPERLINK("http://evil","x")'
    made = logged_in.post(
        f"{url}/invite",
        data={"csrf_token": logged_in.csrf, "count": "2", "label": label, "as_csv": "true"},
    )
    for table in (made.text, logged_in.get(f"{url}/links.csv").text):
        rows = list(csv.DictReader(io.StringIO(table)))
        assert [r["label"] for r in rows] == [f"'{label} 1", f"'{label} 2"]
        cells = [c for r in csv.reader(io.StringIO(table)) for c in r]
        assert not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
