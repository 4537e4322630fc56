"""The `ebc` console script, run as a user runs it (a subprocess)."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app import __version__
from app.auth.service import authenticate, user_for_token
from app.db import build_engine, make_sessionmaker
from app.migrate import current_revisions, head_revisions
from app.models import Study

EBC = str(Path(sys.executable).with_name("ebc"))


def ebc(*args, db=None, stdin=None, cwd=None, check=True):
    env = {**os.environ, "EBC_ENV": "test"}
    if db is not None:
        env["DATABASE_URL"] = db.url
    out = subprocess.run(
        [EBC, *args], input=stdin, capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def _session(db):
    engine = build_engine(db.settings())
    return engine, make_sessionmaker(engine)()


def test_version():
    assert ebc("version").stdout.strip() == f"ebc-judge {__version__}"


def test_db_upgrade_current_downgrade(empty_db):
    assert "database at head" in ebc("db", "upgrade", db=empty_db).stdout
    engine = build_engine(empty_db.settings())
    with engine.connect() as conn:
        assert current_revisions(conn) == head_revisions()
    assert "current: " + next(iter(head_revisions())) in ebc("db", "current", db=empty_db).stdout
    ebc("db", "downgrade", "base", db=empty_db)
    with engine.connect() as conn:
        assert current_revisions(conn) == set()
    engine.dispose()


def test_admin_users_and_tokens(migrated_copy):
    ebc(
        "admin",
        "create-user",
        "bob",
        "--password",
        "-",
        "--admin",
        db=migrated_copy,
        stdin="a secret long enough\n",
    )
    dup = ebc("admin", "create-user", "bob", "--password", "x" * 12, db=migrated_copy, check=False)
    assert dup.returncode == 1 and "already exists" in dup.stderr
    token = ebc("admin", "create-token", "bob", "--name", "ci", db=migrated_copy).stdout.strip()
    engine, session = _session(migrated_copy)
    with session:
        user = authenticate(session, "bob", "a secret long enough")
        assert user is not None and user.is_admin
        assert user_for_token(session, token).username == "bob"
    ebc("admin", "revoke-token", token[:12], db=migrated_copy)
    with make_sessionmaker(engine)() as session:
        assert user_for_token(session, token) is None
    engine.dispose()


def test_study_create_from_a_file(migrated_copy, tmp_path):
    path = tmp_path / "study.toml"
    path.write_text(
        'slug = "wiki"\ntitle = "Wiki"\nprefix_lengths = [10, 20]\nitems_per_cell = 100\n'
        '[model]\nname = "gpt2"\n[dataset]\npath = "wiki.txt"\n'
    )
    assert (
        "created study wiki"
        in ebc("study", "create", "--config", str(path), db=migrated_copy).stdout
    )
    assert "wiki\tdraft\tlm\tl=10,20" in ebc("study", "list", db=migrated_copy).stdout
    path.write_text('slug = "other"\ntitle = "x"\n')
    bad = ebc("study", "create", "--config", str(path), db=migrated_copy, check=False)
    assert bad.returncode == 1 and "items_per_cell" in bad.stderr
    engine, session = _session(migrated_copy)
    with session:
        assert session.scalars(select(Study.slug)).all() == ["wiki"]
    engine.dispose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(url: str, proc: subprocess.Popen, seconds: float = 30) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited: {proc.stdout.read()}")
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            time.sleep(0.2)
    pytest.fail(f"{url} did not answer in {seconds} s")


def test_serve_migrates_then_answers_healthz(empty_db):
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": empty_db.url, "EBC_ENV": "test"}
    proc = subprocess.Popen(
        [EBC, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        r = _wait_for(f"http://127.0.0.1:{port}/healthz", proc)
        assert r.status_code == 200 and r.json()["database"] == "ok"
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_command_builds_one_engine_and_disposes_it_when_it_ends(empty_db, monkeypatch):
    from typer.testing import CliRunner

    from app.cli import cli, common

    settings = empty_db.settings()
    with common.session_scope(settings) as first:
        pass
    with common.session_scope(settings) as second:
        pass
    assert first.get_bind() is second.get_bind()  # one engine, however many transactions
    common.dispose_engines()
    assert common._engines == {}
    monkeypatch.setenv("DATABASE_URL", empty_db.url)
    monkeypatch.setenv("EBC_ENV", "test")
    out = CliRunner().invoke(cli, ["db", "current"])
    assert out.exit_code == 0 and "current: (empty)" in out.output
    assert common._engines == {}  # disposed when the command ended
