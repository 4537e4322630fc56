"""Every non-public route needs a researcher; an annotator's link opens none of them;
every state-changing dashboard form needs the session's CSRF token."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select

from app.annotation.identities import invite_token
from app.models import AuditEvent, Study
from tests.hits.factory import annotator, make_study
from tests.web.accounts import login

try:  # FastAPI >= 0.16x flattens included routers lazily
    from fastapi.routing import iter_route_contexts
except ImportError:  # pragma: no cover
    iter_route_contexts = None

# Reachable without a researcher's login, by design.
PUBLIC = {
    ("GET", "/"),
    ("GET", "/login"),
    ("POST", "/login"),
    ("POST", "/logout"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/api/v1/version"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/docs"),
}
# Annotator pages: the signed token or the platform's ids in the URL are the credentials.
ANNOTATOR_PREFIXES = ("/a/", "/p/", "/mturk/")
PARAMS = {
    "slug": "s1",
    "user_id": "1",
    "token_id": "1",
    "annotator_id": "1",
    "name": "results.csv",
    "fmt": "csv",
}


def _routes(app) -> list[tuple[str, str]]:
    routes = iter_route_contexts(app.routes) if iter_route_contexts else app.routes
    out = []
    for r in routes:
        methods = getattr(r, "methods", None)
        path = getattr(r, "path", None)
        if not methods or path is None:
            continue  # mounts (/static)
        out += [(m, path) for m in sorted(methods - {"HEAD"})]
    return out


def _protected(app) -> list[tuple[str, str]]:
    return [
        (m, p)
        for m, p in _routes(app)
        if (m, p) not in PUBLIC and not p.startswith(ANNOTATOR_PREFIXES)
    ]


def _url(path: str) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: PARAMS[m.group(1)], path)


@pytest.mark.sqlite  # the app's routes and documents, read without a query
def test_every_route_is_classified(client):
    routes = _routes(client.app)
    assert set(routes) >= PUBLIC
    protected = _protected(client.app)
    assert ("GET", "/dashboard") in protected and ("GET", "/api/v1/me") in protected
    assert len(protected) >= 35
    unknown = {m for m in PARAMS if not any("{" + m in p for _, p in protected)}
    assert not unknown, f"stale path parameters in the test: {unknown}"


def test_without_credentials(client, session):
    make_study(session, slug="s1", lengths=(10,), per_cell=5)
    session.commit()
    for method, path in _protected(client.app):
        r = client.request(method, _url(path), follow_redirects=False)
        if path.startswith("/api/v1"):
            assert r.status_code == 401, (method, path, r.status_code)
        else:
            assert r.status_code == 303, (method, path, r.status_code)
            assert r.headers["location"].startswith("/login?next="), (method, path)


def test_an_annotators_link_opens_no_dashboard_or_api_route(client, session, settings):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=5)
    token = invite_token(settings.secret_key, annotator(session, study, "ann"))
    session.commit()
    assert client.get(f"/a/{token}").status_code == 200  # the link itself works
    for method, path in _protected(client.app):
        as_bearer = client.request(
            method, _url(path), headers={"Authorization": f"Bearer {token}"}, follow_redirects=False
        )
        assert as_bearer.status_code == 403, (method, path, as_bearer.status_code)
        if not path.startswith("/api/v1"):
            in_query = client.request(
                method, _url(path) + f"?token={token}", follow_redirects=False
            )
            assert in_query.status_code == 403, (method, path, in_query.status_code)


def test_user_management_is_for_admins(client, session, researcher):
    assert login(client, "bob").status_code == 303
    assert client.get("/dashboard").status_code == 200
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/dashboard").text)[1]
    assert client.get("/dashboard/users").status_code == 403
    r = client.post("/dashboard/users", data={"csrf_token": csrf, "username": "eve"})
    assert r.status_code == 403
    r = client.post(f"/dashboard/users/{researcher.id}/password", data={"csrf_token": csrf})
    assert r.status_code == 403
    assert 'href="/dashboard/users"' not in client.get("/dashboard").text


@pytest.mark.parametrize("token", ["", "forged"])
def test_every_dashboard_form_needs_the_csrf_token(logged_in, session, token):
    study = make_study(session, slug="s1", lengths=(10,), per_cell=5)
    annotator(session, study, "ann")
    session.commit()
    audit_before = session.scalar(select(func.count()).select_from(AuditEvent))
    posts = [p for m, p in _protected(logged_in.app) if m == "POST"]
    assert len(posts) >= 15
    for path in posts:
        data = {"csrf_token": token} if token else {}
        r = logged_in.post(_url(path), data=data, follow_redirects=False)
        assert r.status_code == 403, (path, r.status_code)
        assert "CSRF" in r.text
    session.expire_all()
    assert session.scalar(select(func.count()).select_from(AuditEvent)) == audit_before
    assert session.scalar(select(Study.status).where(Study.slug == "s1")).value == "collecting"
