"""Researcher login (sessions, CSRF), ending sessions, API bearer tokens, the proxy
addresses login throttling trusts, and the headers that keep secrets out of caches."""

import re

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from app.auth.service import create_api_token, create_user, revoke_api_token, set_password
from app.config import Settings
from app.main import create_app
from app.models import AuditEvent, User
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


# -- ending sessions -----------------------------------------------------------------------


def _login_as(client, username, password=PASSWORD):
    page = client.get("/login")
    data = {"username": username, "password": password, "csrf_token": _csrf(page.text)}
    r = client.post("/login", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text
    return client.cookies["ebc_session"]


def _with_cookie(client, cookie):
    """The dashboard as a browser holding `cookie` sees it: 200, or 303 to the login page."""
    client.cookies.clear()
    client.cookies.set("ebc_session", cookie)
    try:
        return client.get("/dashboard", follow_redirects=False).status_code
    finally:
        client.cookies.clear()


def test_logout_ends_every_session_of_the_user_and_the_old_cookie_fails(
    client, session, researcher
):
    laptop = _login_as(client, "ada")
    client.cookies.clear()
    phone = _login_as(client, "ada")
    assert _with_cookie(client, laptop) == 200 and _with_cookie(client, phone) == 200
    client.cookies.set("ebc_session", laptop)
    page = client.get("/dashboard")
    r = client.post("/logout", data={"csrf_token": _csrf(page.text)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    # A copy of the cookie taken before the logout (replayed, stolen) no longer works,
    # nor does the session on the other device.
    assert _with_cookie(client, laptop) == 303
    assert _with_cookie(client, phone) == 303
    session.expire_all()
    assert session.get(User, researcher.id).session_epoch == 1
    assert _with_cookie(client, _login_as(client, "ada")) == 200  # logging in again works


def test_a_password_reset_in_one_session_ends_the_others(client, session, researcher):
    bob = create_user(session, "bob", PASSWORD)
    session.commit()
    bobs = _login_as(client, "bob")
    client.cookies.clear()
    admins = _login_as(client, "ada")
    other_admin_session = _login_as(TestClient(client.app), "ada")
    page = client.get("/dashboard/users")
    r = client.post(f"/dashboard/users/{bob.id}/password", data={"csrf_token": _csrf(page.text)})
    assert r.status_code == 200 and r.context["password"]
    assert _with_cookie(client, bobs) == 303
    assert _with_cookie(client, admins) == 200  # someone else's reset leaves this one alone
    # An admin resetting their own password keeps the session they did it from, only.
    client.cookies.set("ebc_session", admins)
    r = client.post(
        f"/dashboard/users/{researcher.id}/password", data={"csrf_token": _csrf(page.text)}
    )
    assert r.status_code == 200
    assert client.get("/dashboard", follow_redirects=False).status_code == 200
    assert _with_cookie(client, other_admin_session) == 303


def test_a_new_password_from_the_cli_service_ends_sessions(client, session, researcher):
    cookie = _login_as(client, "ada")
    set_password(session, researcher, "another long password")  # what `ebc admin set-password` runs
    session.commit()
    assert _with_cookie(client, cookie) == 303


def test_deactivation_ends_sessions_and_stops_api_tokens(client, session, researcher):
    bob = create_user(session, "bob", PASSWORD)
    token = create_api_token(session, bob, "script")
    session.commit()
    auth = {"Authorization": f"Bearer {token.secret}"}
    bobs = _login_as(client, "bob")
    client.cookies.clear()
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    _login_as(client, "ada")
    csrf = _csrf(client.get("/dashboard/users").text)
    r = client.post(
        f"/dashboard/users/{bob.id}/active", data={"csrf_token": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    assert _with_cookie(client, bobs) == 303
    assert client.get("/api/v1/me", headers=auth).status_code == 401
    # Reactivated: the API token works again (it was never revoked); the session stays ended.
    _login_as(client, "ada")  # the admin's own session was not touched; a fresh one anyway
    csrf = _csrf(client.get("/dashboard/users").text)
    r = client.post(
        f"/dashboard/users/{bob.id}/active",
        data={"csrf_token": csrf, "active": "true"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    client.cookies.clear()
    assert client.get("/api/v1/me", headers=auth).status_code == 200
    assert _with_cookie(client, bobs) == 303


# -- X-Forwarded-For and login throttling --------------------------------------------------


def _app_client(settings, connection, address, **overrides):
    app = create_app(settings.model_copy(update=overrides), bind=connection)
    return TestClient(app, base_url="http://testserver", client=(address, 40000))


def _failed_logins(client, count, forwarded):
    for i in range(count):
        page = client.get("/login")
        data = {"username": "ada", "password": "wrong password!", "csrf_token": _csrf(page.text)}
        r = client.post("/login", data=data, headers={"X-Forwarded-For": forwarded(i)})
        assert r.status_code == 401


def _login_status(client, forwarded):
    page = client.get("/login")
    data = {"username": "ada", "password": PASSWORD, "csrf_token": _csrf(page.text)}
    headers = {"X-Forwarded-For": forwarded}
    return client.post("/login", data=data, headers=headers, follow_redirects=False).status_code


def _failure_addresses(session):
    session.expire_all()
    events = session.scalars(select(AuditEvent).where(AuditEvent.action == "login_failed"))
    return [e.detail["ip"] for e in events]


def test_forwarded_for_from_an_untrusted_client_cannot_dodge_throttling(
    settings, connection, session, researcher
):
    with _app_client(settings, connection, "198.51.100.7") as c:  # EBC_TRUSTED_PROXIES unset
        _failed_logins(c, 5, lambda i: f"203.0.113.{i}")
        assert _login_status(c, "203.0.113.99") == 429
    assert _failure_addresses(session) == ["198.51.100.7"] * 5


def test_forwarded_for_from_a_trusted_proxy_names_the_client(
    settings, connection, session, researcher
):
    with _app_client(
        settings, connection, "10.1.2.3", trusted_proxies="10.0.0.0/8, 192.0.2.1"
    ) as c:
        # The proxy appends the address it saw; whatever the client claimed comes before.
        _failed_logins(c, 5, lambda i: f"1.2.3.4, 203.0.113.{i}")
        assert _login_status(c, "203.0.113.99") == 303  # another client: not throttled
        c.cookies.clear()
        _failed_logins(c, 5, lambda i: "203.0.113.50")
        assert _login_status(c, "203.0.113.50") == 429
    assert _failure_addresses(session)[:5] == [f"203.0.113.{i}" for i in range(5)]


def test_trusted_proxies_must_be_addresses_or_networks():
    assert Settings(_env_file=None, trusted_proxies=" 10.0.0.0/8 ,::1").trusted_proxies == (
        "10.0.0.0/8,::1"
    )
    with pytest.raises(ValidationError, match="not an IP address or CIDR"):
        Settings(_env_file=None, trusted_proxies="10.0.0.0/8, proxy.internal")


# -- caching and transport -----------------------------------------------------------------


def test_dashboard_and_api_responses_are_never_stored(client, session, researcher):
    new = create_api_token(session, researcher, "t")
    session.commit()
    assert client.get("/login").headers["cache-control"] == "no-store"
    _login_as(client, "ada")
    for path in ("/dashboard", "/dashboard/tokens", "/dashboard/studies/nope"):
        assert client.get(path).headers["cache-control"] == "no-store", path
    page = client.get("/dashboard/tokens")
    created = client.post("/dashboard/tokens", data={"csrf_token": _csrf(page.text), "name": "x"})
    assert "ebc_" in created.text and created.headers["cache-control"] == "no-store"
    auth = {"Authorization": f"Bearer {new.secret}"}
    for path in ("/api/v1/me", "/api/v1/studies", "/api/v1/version", "/api/v1/studies/nope"):
        assert client.get(path, headers=auth).headers["cache-control"] == "no-store", path
    assert "cache-control" not in client.get("/healthz").headers
    assert "strict-transport-security" not in client.get("/login").headers  # http base URL


def test_an_https_base_url_sends_hsts_on_every_response(settings, connection):
    with _app_client(settings, connection, "127.0.0.1", base_url="https://ebc.example") as c:
        for path in ("/login", "/healthz", "/api/v1/version", "/static/style.css", "/a/x"):
            r = c.get(path)
            assert r.headers["strict-transport-security"] == "max-age=31536000", path
