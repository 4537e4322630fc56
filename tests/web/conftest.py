"""Logged-in clients for the web tests (the dashboard's pages)."""

from __future__ import annotations

import pytest

from tests.web.accounts import csrf_of, login, make_user


@pytest.fixture
def admin(session):
    return make_user(session, "ada", is_admin=True)


@pytest.fixture
def researcher(session):
    return make_user(session, "bob", is_admin=False)


@pytest.fixture
def logged_in(client, admin):
    """The client with an admin's session; `.csrf` holds the session's CSRF token."""
    assert login(client).status_code == 303
    client.csrf = csrf_of(client.get("/dashboard").text)
    return client
