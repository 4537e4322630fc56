"""Database timeouts (app/db.py): a stalled network or a statement that does not end
answers 503 in bounded time, and the probes say so without the driver's details."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.auth.service import create_api_token
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.models import User


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A local port that accepts TCP connections and never says a word (a stalled
    network, as far as a client can tell)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


def test_a_silent_database_answers_503_within_the_connect_timeout(silent_server):
    from app.config import Settings

    url = f"postgresql+psycopg://ebc:secret-password@127.0.0.1:{silent_server}/ebc"
    settings = Settings(database_url=url, env="test", db_connect_timeout=2)
    with TestClient(create_app(settings)) as client:
        for path in ("/healthz", "/readyz"):
            started = time.monotonic()
            r = client.get(path)
            assert time.monotonic() - started < 6
            # Generic: no host, port, user or driver message for whoever reaches the probe.
            assert r.status_code == 503 and r.json() == {
                "status": "error",
                "database": "unavailable",
            }
        started = time.monotonic()
        r = client.get("/api/v1/studies", headers={"Authorization": "Bearer ebc_x"})
        assert time.monotonic() - started < 6
        assert r.status_code == 503 and r.headers["retry-after"] == "30"
        assert r.json()["status"] == 503 and str(silent_server) not in r.text
        r = client.get("/login")  # no database needed
        assert r.status_code == 200


@pytest.mark.postgres
def test_web_statements_are_limited_and_the_workers_are_not(backend, migrated_db):
    settings = migrated_db.settings(db_statement_timeout=1.5, db_tcp_timeout=90)
    for web, shown in ((True, "1500ms"), (False, "0")):
        engine = build_engine(settings, web=web)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SHOW statement_timeout")).scalar() == shown
                params = conn.connection.driver_connection.info.get_parameters()
                assert params["connect_timeout"] == "10" and params["keepalives"] == "1"
                assert params["tcp_user_timeout"] == "90000"
                assert int(params["keepalives_idle"]) + 3 * int(params["keepalives_interval"]) <= 90
        finally:
            engine.dispose()
    engine = build_engine(migrated_db.settings(db_statement_timeout=0), web=True)
    with engine.connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar() == "0"
    engine.dispose()


@pytest.mark.postgres
def test_a_statement_past_the_timeout_answers_503(backend, migrated_copy):
    engine = build_engine(migrated_copy.settings())
    with make_sessionmaker(engine)() as session:
        user = User(username="ada", password_hash="unused", is_admin=True)
        session.add(user)
        session.flush()
        secret = create_api_token(session, user, "tests").secret
        session.commit()
    auth = {"Authorization": f"Bearer {secret}"}
    app = create_app(migrated_copy.settings(db_statement_timeout=0.5))
    try:
        with TestClient(app) as client, engine.connect() as blocker:
            assert client.get("/api/v1/studies", headers=auth).status_code == 200
            blocker.execute(text("LOCK TABLE studies IN ACCESS EXCLUSIVE MODE"))
            started = time.monotonic()
            r = client.get("/api/v1/studies", headers=auth)
            waited = time.monotonic() - started
            assert r.status_code == 503 and r.headers["retry-after"] == "30", r.text
            assert 0.4 < waited < 5
            blocker.rollback()  # the lock goes: the service is back
            assert client.get("/api/v1/studies", headers=auth).status_code == 200
    finally:
        engine.dispose()
