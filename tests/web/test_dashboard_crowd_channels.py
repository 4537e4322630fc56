"""The annotators page gives the URL to paste into the panel (with the study's entry key),
and that URL lets a participant in; managers see it, viewers do not."""

from __future__ import annotations

import html
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import func, select

from app.models import Annotator, StudyMember
from tests.hits.factory import make_study
from tests.web.accounts import csrf_of, login


def test_the_panel_url_is_shown_to_managers_and_works(logged_in, session, settings):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
    study.channels = {**study.channels, "prolific": {"enabled": True, "study_id": "a" * 24}}
    session.commit()
    page = logged_in.get("/dashboard/studies/s1/annotators")
    crowd = page.context["crowd"]
    assert crowd["mturk"] is None and crowd["prolific"].startswith(f"{settings.base_url}/p/s1?key=")
    assert html.escape(crowd["prolific"]) in page.text and "Mechanical Turk: off" in page.text
    # What the panel does with it: fill in its placeholders, send the participant.
    url = urlsplit(crowd["prolific"])
    params = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert params["PROLIFIC_PID"] == "{{%PROLIFIC_PID%}}"
    params |= {"PROLIFIC_PID": "f" * 24, "STUDY_ID": "a" * 24, "SESSION_ID": "b" * 24}
    r = logged_in.get(url.path, params=params, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/a/")
    assert session.scalar(select(func.count()).select_from(Annotator)) == 1


def test_viewers_do_not_see_the_panel_url(client, session, admin, researcher):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
    study.channels = {**study.channels, "prolific": {"enabled": True}}
    session.add(StudyMember(study_id=study.id, user_id=researcher.id, role="view"))
    session.commit()
    assert login(client, "bob").status_code == 303
    page = client.get("/dashboard/studies/s1/annotators")
    assert page.status_code == 200 and csrf_of(client.get("/dashboard").text)
    assert page.context["crowd"] is None and "/p/s1?key=" not in page.text
