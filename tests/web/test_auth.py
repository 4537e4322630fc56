"""Researcher login (sessions, CSRF) and API bearer tokens."""

import re

import pytest

from app.auth.service import create_api_token, create_user, revoke_api_token
from app.studies.schemas import DatasetSection, ModelSection, StudyConfig
from app.studies.service import create_study

PASSWORD = "correct horse battery"


@pytest.fixture
def researcher(session):
    user = create_user(session, "ada", PASSWORD, is_admin=True)
    session.commit()
    return user


def _csrf(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _login(client, password=PASSWORD, next_="/dashboard"):
    page = client.get("/login")
    data = {"username": "ada", "password": password, "csrf_token": _csrf(page.text), "next": next_}
    return client.post("/login", data=data, follow_redirects=False)


def test_dashboard_redirects_to_login_without_a_session(client):
    r = client.get("/dashboard", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=/dashboard"


def test_login_shows_studies_and_logout_ends_the_session(client, session, researcher):
    create_study(
        session,
        StudyConfig(
            slug="first",
            title="<b>First</b> study",
            model=ModelSection(name="gpt2"),
            dataset=DatasetSection(path="wiki.txt"),
            prefix_lengths=[10, 20],
            items_per_cell=3,
        ),
    )
    session.commit()
    r = _login(client)
    assert r.status_code == 303 and r.headers["location"] == "/dashboard"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie
    page = client.get("/dashboard")
    assert page.status_code == 200 and page.template.name == "dashboard.html"
    assert [s.slug for s in page.context["studies"]] == ["first"]
    assert "&lt;b&gt;First&lt;/b&gt; study" in page.text  # titles are escaped
    r = client.post("/logout", data={"csrf_token": _csrf(page.text)}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/dashboard", follow_redirects=False).status_code == 303


def test_wrong_password_is_refused(client, researcher):
    r = _login(client, password="wrong password!")
    assert r.status_code == 401
    assert "Wrong username or password." in r.text
    assert client.get("/dashboard", follow_redirects=False).status_code == 303


def test_login_without_csrf_token_is_forbidden(client, researcher):
    client.get("/login")
    r = client.post("/login", data={"username": "ada", "password": PASSWORD})
    assert r.status_code == 403
    assert client.get("/dashboard", follow_redirects=False).status_code == 303


def test_logout_needs_the_csrf_token(client, researcher):
    _login(client)
    assert client.post("/logout", data={"csrf_token": "forged"}).status_code == 403
    assert client.get("/dashboard").status_code == 200


def test_login_never_redirects_off_site(client, researcher):
    r = _login(client, next_="//evil.example/x")
    assert r.headers["location"] == "/dashboard"


def test_api_needs_a_valid_unrevoked_token(client, session, researcher):
    r = client.get("/api/v1/me")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "API token" in r.json()["detail"]
    new = create_api_token(session, researcher, "test")
    session.commit()
    auth = {"Authorization": f"Bearer {new.secret}"}
    assert client.get("/api/v1/me", headers=auth).json() == {"username": "ada", "is_admin": True}
    assert client.get("/api/v1/me", headers={"Authorization": "Bearer ebc_nope"}).status_code == 401
    revoke_api_token(session, new.token)
    session.commit()
    assert client.get("/api/v1/me", headers=auth).status_code == 401


def test_only_a_hash_of_the_token_is_stored(session, researcher):
    new = create_api_token(session, researcher, "x")
    assert new.secret not in (new.token.token_hash, new.token.prefix)
    assert new.secret.startswith(new.token.prefix)
