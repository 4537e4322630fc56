"""Per-study access on the dashboard: whoever creates a study owns it, shares it as `view`
or `manage`, and only sees (and lists) the studies they may; viewers never see invite
links and change nothing."""

from __future__ import annotations

from sqlalchemy import func, select

from app.models import Annotator, AuditEvent, Study, StudyMember, StudyStatus
from tests.hits.factory import annotator, make_study
from tests.web.accounts import csrf_of, login, make_user

STUDY_FILE = b"""
slug = "bobs"
title = "Bob's study"
prefix_lengths = [10]
items_per_cell = 5
[model]
name = "gpt2"
[dataset]
path = "wiki.txt"
"""


def _as(client, username: str) -> str:
    """Log `username` in on `client`; returns the session's CSRF token."""
    client.cookies.clear()
    assert login(client, username).status_code == 303
    return csrf_of(client.get("/dashboard").text)


def _listed(client) -> list[str]:
    return [s.slug for s in client.get("/dashboard").context["studies"]]


def _post(client, path: str, csrf: str, **data):
    return client.post(path, data={"csrf_token": csrf, **data}, follow_redirects=False)


def test_the_creator_owns_the_study_and_shares_it(client, session, admin, researcher):
    carol = make_user(session, "carol", is_admin=False)
    make_study(session, slug="admins", lengths=(10,), per_cell=5)  # made by the CLI: no owner
    session.commit()
    csrf = _as(client, "bob")
    r = client.post(
        "/dashboard/studies/upload",
        data={"csrf_token": csrf},
        files={"study_file": ("s.toml", STUDY_FILE)},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert session.scalar(select(Study.created_by_id).where(Study.slug == "bobs")) == researcher.id
    assert _listed(client) == ["bobs"]
    page = client.get("/dashboard/studies/bobs")
    assert page.context["access"].name == "share" and 'id="share"' in page.text
    assert client.get("/dashboard/studies/admins").status_code == 404

    # Sharing: unknown people and roles are refused with a notice, nothing stored.
    for data, message in (
        ({"username": "nobody"}, "There is no user &#39;nobody&#39;."),
        ({"username": "carol", "role": "owner"}, "the role is one of view, manage"),
        ({"username": "bob"}, "bob owns bobs"),
    ):
        r = _post(client, "/dashboard/studies/bobs/members", csrf, **data)
        assert r.status_code == 303
        assert message in client.get(r.headers["location"]).text, data
    assert session.scalar(select(func.count()).select_from(StudyMember)) == 0
    r = _post(client, "/dashboard/studies/bobs/members", csrf, username="carol", role="view")
    assert "carol may now view this study" in client.get(r.headers["location"]).text

    csrf = _as(client, "carol")
    assert _listed(client) == ["bobs"]
    page = client.get("/dashboard/studies/bobs")
    assert page.status_code == 200 and page.context["access"].name == "view"
    assert 'id="close-study"' not in page.text and 'id="share"' not in page.text
    assert "bob" in page.text and "carol" in page.text  # who has access is shown
    assert _post(client, "/dashboard/studies/bobs/close", csrf).status_code == 403
    r = _post(client, "/dashboard/studies/bobs/members", csrf, username="carol", role="manage")
    assert r.status_code == 403
    assert client.get("/dashboard/studies/bobs/results").status_code == 200
    assert client.get("/dashboard/studies/bobs/results/items.csv").status_code == 200

    csrf = _as(client, "bob")
    _post(client, "/dashboard/studies/bobs/members", csrf, username="carol", role="manage")
    csrf = _as(client, "carol")
    assert _post(client, "/dashboard/studies/bobs/close", csrf).status_code == 303
    session.expire_all()
    assert session.scalar(select(Study.status).where(Study.slug == "bobs")) is StudyStatus.closed
    r = _post(client, f"/dashboard/studies/bobs/members/{carol.id}/remove", csrf)
    assert r.status_code == 403  # managers run the study; only the owner shares it

    csrf = _as(client, "bob")
    r = _post(client, f"/dashboard/studies/bobs/members/{carol.id}/remove", csrf)
    assert "carol no longer has access" in client.get(r.headers["location"]).text
    _as(client, "carol")
    assert _listed(client) == []
    assert client.get("/dashboard/studies/bobs").status_code == 404

    _as(client, "ada")  # administrators see every study, owned or not
    assert sorted(_listed(client)) == ["admins", "bobs"]
    actions = session.scalars(
        select(AuditEvent.action).where(AuditEvent.action.like("study_%")).order_by(AuditEvent.id)
    ).all()
    assert actions == [
        "study_created",
        "study_shared",
        "study_shared",
        "study_closed",
        "study_unshared",
    ]


def test_a_viewer_sees_the_annotators_but_no_invite_links(client, session, admin, researcher):
    viewer = make_user(session, "carol", is_admin=False)
    study = make_study(session, slug="s1", lengths=(10,), per_cell=5)
    study.created_by_id = researcher.id
    session.add(StudyMember(study_id=study.id, user_id=viewer.id, role="view"))
    a = annotator(session, study, "lab member")
    session.commit()
    nonce = a.invite_nonce
    csrf = _as(client, "carol")
    page = client.get("/dashboard/studies/s1/annotators")
    assert page.status_code == 200 and "lab member" in page.text
    assert page.context["links"] == {} and "/a/" not in page.text
    assert 'id="invite"' not in page.text and 'id="view-only"' in page.text
    assert "links.csv" not in page.text
    assert client.get("/dashboard/studies/s1/annotators/links.csv").status_code == 403
    for action in ("block", "revoke", "reissue", "cap"):
        r = _post(client, f"/dashboard/studies/s1/annotators/{a.id}/{action}", csrf)
        assert r.status_code == 403, action
    session.expire_all()
    same = session.get(Annotator, a.id)
    assert not same.blocked and same.invite_nonce == nonce and same.revoked_at is None

    _as(client, "bob")
    page = client.get("/dashboard/studies/s1/annotators")
    assert "/a/" in page.context["links"][a.id] and 'id="invite"' in page.text
