"""The Crowd page for the local channel (invite links), driven with the test client on a
study built with `build_hits`, on SQLite and PostgreSQL: publish (no fee, balance "not
applicable"), lab members' work through their links, sync, the payment states; and an
invite link after the posting expired."""

from __future__ import annotations

import lxml.html
from sqlalchemy import select

from app.annotation import admin
from app.annotation.identities import annotator_for_invite, read_invite_token
from app.annotation.leases import next_assignment
from app.crowd import common, payments
from app.db import make_sessionmaker
from app.models import CrowdPosting, HitPosition
from app.studytypes.nextword.annotation import submit
from tests.hits.factory import make_study

SLUG = "lab"
PAGE = f"/dashboard/studies/{SLUG}/crowd"
LOCAL = "provider=local&environment=local"


def text_of(html: str, element_id: str) -> str:
    return " ".join(lxml.html.fromstring(html).get_element_by_id(element_id).text_content().split())


def hand_in(session, settings, link: str) -> str:
    """A lab member opens their link and submits a HIT (the model's top-1 everywhere)."""
    token = link.rsplit("/a/", 1)[1]
    annotator = annotator_for_invite(session, read_invite_token(settings.secret_key, token))
    lease = next_assignment(session, annotator, serve=True).assignment
    rows = session.execute(
        select(HitPosition.position, HitPosition.choice_order).where(
            HitPosition.hit_id == lease.hit_id
        )
    ).all()
    submit(session, annotator, lease.public_id, {p: order.index(0) for p, order in rows}, {})
    session.commit()
    return lease.public_id


def test_the_crowd_page_runs_a_lab_study(logged_in, session, settings, connection):
    study = make_study(session, slug=SLUG, lengths=(10,), per_cell=20, reward_cents=40)
    session.commit()

    page = logged_in.get(f"{PAGE}?provider=local")
    assert page.status_code == 200 and page.context["target"].label == "Local (invite links)"
    assert 'id="not-published"' in page.text
    assert text_of(page.text, "balance").startswith("Balance: not applicable")
    current = lxml.html.fromstring(page.text).xpath('//nav[@class="tabs"]/a[@aria-current="page"]')
    assert [a.text_content() for a in current] == ["Local (invite links)"]
    form = lxml.html.fromstring(page.text).get_element_by_id("publish-form")
    fields = {e.get("id") for e in form.iter("input")}
    assert "f-reward" in fields and not fields & {"f-rate", "f-lifetime", "f-locales"}

    preview = logged_in.get(f"{PAGE}/publish?{LOCAL}&reward_cents=40")
    assert preview.status_code == 200
    assert text_of(preview.text, "balance") == "not applicable"
    assert text_of(preview.text, "estimate-total") == "1.60"  # 4 HITs x 40 cents, no fee

    r = logged_in.post(
        f"{PAGE}/publish?{LOCAL}",
        data={"csrf_token": logged_in.csrf, "reward_cents": "40"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == f"{PAGE}?{LOCAL}"
    page = logged_in.get(r.headers["location"])
    notices = " ".join(text for _, text in page.context["notices"])
    assert "4 HITs published on Local (invite links) now; 4 there in all." in notices
    assert text_of(page.text, "posting-status") == "published"
    posting = session.scalar(select(CrowdPosting))
    assert f"posting {posting.external_id}" in text_of(page.text, "posting")

    made = admin.invite(session, study, 2, "lab member", by="cli")
    done = hand_in(session, settings, admin.invite_link("", settings.secret_key, made[0]))
    page = logged_in.get(f"{PAGE}?{LOCAL}")
    assert "unconfirmed 1" in page.text and "no: sync first" in text_of(page.text, f"a-{done}")

    r = logged_in.post(
        f"{PAGE}/sync?{LOCAL}", data={"csrf_token": logged_in.csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    page = logged_in.get(f"{PAGE}?{LOCAL}")
    assert "Synced: 1 submissions listed, 1 confirmed now" in " ".join(
        text for _, text in page.context["notices"]
    )
    row = text_of(page.text, f"a-{done}")
    assert made[0].external_id in row and "yes" in row and "pending" in row
    assert "to review 1" in page.text

    bonus = logged_in.get(f"{PAGE}/bonus?{LOCAL}&assignment={done}&amount_cents=25&reason=Thanks")
    assert bonus.status_code == 200 and text_of(bonus.text, "balance") == "not applicable"

    # Expired (`ebc crowd expire --provider local`): a link takes no new work.
    make_session = make_sessionmaker(connection, join_transaction_mode="create_savepoint")
    provider = common.provider_for(settings, "local", sessions=make_session)
    assert payments.expire(make_session, SLUG, provider, by="cli").made
    token = admin.invite_link("", settings.secret_key, made[1]).rsplit("/a/", 1)[1]
    closed = logged_in.get(f"/a/{token}")
    assert 'data-kind="closed"' in closed.text and "This study is closed" in closed.text


def test_the_local_channel_has_one_environment(logged_in, session):
    make_study(session, slug=SLUG, lengths=(10,), per_cell=5)
    session.commit()
    for query in ("provider=local&environment=sandbox", "provider=mturk&environment=local"):
        r = logged_in.get(f"{PAGE}?{query}")
        assert r.status_code == 400 and "one environment, local" in r.text, query
    assert logged_in.get(f"{PAGE}?{LOCAL}").status_code == 200
