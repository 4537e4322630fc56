"""A simulated crowd's annotators on the Annotators page: listed as simulated, their invite
links never shown, exported or re-issued (whoever followed one would work as a simulated
annotator)."""

from __future__ import annotations

import csv
import io

from sqlalchemy import select

from app.models import Annotator, AuditEvent
from app.simulate.http import simulated_annotator
from tests.hits.factory import annotator, make_study

URL = "/dashboard/studies/s1/annotators"


def test_simulated_annotators_are_shown_as_such_without_their_links(logged_in, session, settings):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=10)
    person = annotator(session, study, "lab member")
    robot = simulated_annotator(session, study, settings.secret_key)  # its run goes on
    session.commit()

    page = logged_in.get(URL)
    assert page.status_code == 200
    links = page.context["links"]
    assert links[person.id] and links[robot.annotator_id] is None
    assert robot.path not in page.text  # its link is nowhere on the page
    row = page.text.split(f"<strong>{robot.label}</strong>", 1)[1].split("</tr>", 1)[0]
    assert 'class="small error simulated">simulated</span>' in row
    assert f"/annotators/{robot.annotator_id}/reissue" not in row
    mine = page.text.split("<strong>lab member</strong>", 1)[1].split("</tr>", 1)[0]
    assert ">simulated</span>" not in mine and f"/annotators/{person.id}/reissue" in mine

    table = list(csv.DictReader(io.StringIO(logged_in.get(f"{URL}/links.csv").text)))
    assert [r["label"] for r in table] == ["lab member"]
    assert all(robot.path not in r["link"] for r in table)

    # Its link is not re-issued to anyone (a clear refusal that changes nothing).
    session.expire_all()
    nonce = session.get(Annotator, robot.annotator_id).invite_nonce
    r = logged_in.post(f"{URL}/{robot.annotator_id}/reissue", data={"csrf_token": logged_in.csrf})
    assert r.status_code == 200 and "not given to anyone" in r.text
    session.expire_all()
    assert session.get(Annotator, robot.annotator_id).invite_nonce == nonce
    reissued = session.scalars(
        select(AuditEvent).where(AuditEvent.action == "invite_reissued")
    ).all()
    assert reissued == []
