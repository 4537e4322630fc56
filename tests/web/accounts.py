"""Accounts and logins for the web tests: a known password, users, a CSRF token."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from app.auth.service import hash_password
from app.models import User

PASSWORD = "correct horse battery"


@cache
def password_hash() -> str:
    return hash_password(PASSWORD)  # argon2 is slow by design: hash once per run


def make_user(session, username: str, is_admin: bool) -> User:
    user = User(username=username, password_hash=password_hash(), is_admin=is_admin)
    session.add(user)
    session.commit()
    return user


def write_dataset(path: Path) -> Path:
    """A text dataset long enough for any study these tests plan (400 lines of 40 words)."""
    path.write_text("".join(" ".join(f"w{i}x{j}" for j in range(40)) + "\n" for i in range(400)))
    return path


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def login(client, username: str = "ada", password: str = PASSWORD):
    page = client.get("/login")
    data = {"username": username, "password": password, "csrf_token": csrf_of(page.text)}
    return client.post("/login", data=data, follow_redirects=False)
