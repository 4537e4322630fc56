"""Login throttling, researcher accounts and API tokens in the dashboard."""

from __future__ import annotations

import re

from sqlalchemy import select

from app.audit.service import MAX_FAILURES_PER_USER_IP
from app.models import ApiToken, User
from tests.web.accounts import PASSWORD, login


def test_failed_logins_are_throttled_per_username_and_address(client, admin, researcher):
    for _ in range(MAX_FAILURES_PER_USER_IP):
        assert login(client, "ada", "wrong password!").status_code == 401
    r = login(client, "ada", PASSWORD)  # even the right password waits now
    assert r.status_code == 429 and "Too many failed logins" in r.text
    assert client.get("/dashboard", follow_redirects=False).status_code == 303
    assert login(client, "bob").status_code == 303  # another username is not locked out


def test_a_successful_login_clears_earlier_failures(client, admin):
    for _ in range(MAX_FAILURES_PER_USER_IP - 1):
        login(client, "ada", "wrong password!")
    assert login(client, "ada").status_code == 303
    login(client, "ada", "wrong password!")
    assert login(client, "ada").status_code == 303


def test_admin_creates_users_and_resets_passwords(logged_in, session):
    r = logged_in.post(
        "/dashboard/users", data={"csrf_token": logged_in.csrf, "username": "<carol>"}
    )
    assert r.status_code == 200
    shown = re.search(r'<code class="secret">([^<]+)</code>', r.text)[1]
    assert "&lt;carol&gt; was created" in r.text
    carol = session.scalar(select(User).where(User.username == "<carol>"))
    assert carol is not None and not carol.is_admin
    assert shown not in carol.password_hash
    dup = logged_in.post(
        "/dashboard/users", data={"csrf_token": logged_in.csrf, "username": "<carol>"}
    )
    assert dup.status_code == 400 and "already exists" in dup.text
    short = logged_in.post(
        "/dashboard/users",
        data={"csrf_token": logged_in.csrf, "username": "dan", "password": "short"},
    )
    assert short.status_code == 400 and "at least 10" in short.text
    r = logged_in.post(f"/dashboard/users/{carol.id}/password", data={"csrf_token": logged_in.csrf})
    new = re.search(r'<code class="secret">([^<]+)</code>', r.text)[1]
    assert new != shown
    r = logged_in.post(f"/dashboard/users/{carol.id}/active", data={"csrf_token": logged_in.csrf})
    assert "deactivated" in r.text
    me = session.scalar(select(User).where(User.username == "ada"))
    r = logged_in.post(f"/dashboard/users/{me.id}/active", data={"csrf_token": logged_in.csrf})
    assert "cannot deactivate your own account" in r.text


def test_api_tokens_are_shown_once_listed_and_revoked(logged_in, session):
    r = logged_in.post("/dashboard/tokens", data={"csrf_token": logged_in.csrf, "name": "laptop"})
    secret = re.search(r'<code class="secret">(ebc_[^<]+)</code>', r.text)[1]
    auth = {"Authorization": f"Bearer {secret}"}
    assert logged_in.get("/api/v1/me", headers=auth).json()["username"] == "ada"
    listing = logged_in.get("/dashboard/tokens")
    assert "laptop" in listing.text and secret not in listing.text
    token = session.scalar(select(ApiToken).where(ApiToken.name == "laptop"))
    r = logged_in.post(f"/dashboard/tokens/{token.id}/revoke", data={"csrf_token": logged_in.csrf})
    assert "revoked" in r.text
    assert logged_in.get("/api/v1/me", headers=auth).status_code == 401
    assert (
        logged_in.post("/dashboard/tokens", data={"csrf_token": logged_in.csrf}).status_code == 400
    )
