"""Streamed downloads over HTTP: the file is what the export makes, and a failing export
fails loudly (an error status before any byte; later, an error record and an aborted
connection, seen through a real uvicorn server)."""

from __future__ import annotations

import csv
import io
import json
import socket
import threading
import time

import httpx
import pytest
from sqlalchemy import select

from app.auth.service import create_api_token
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.models import AuditEvent, User
from app.results.downloads import SPECS
from tests.factories import answered_study, broken_study

DOWNLOADS = ["judgments.csv", "judgments.jsonl", "items.csv", "items.jsonl"]


def _token(session) -> dict[str, str]:
    # Direct insert: the API checks tokens, not passwords (argon2 would cost ~0.5 s a test).
    user = User(username="ada", password_hash="unused", is_admin=True)
    session.add(user)
    session.flush()
    return {"Authorization": f"Bearer {create_api_token(session, user, 'tests').secret}"}


def _made(session, study, name: str) -> str:
    return "".join(SPECS[name].chunks(session, study))


def test_downloads_of_a_study_built_by_build_hits_are_whole(client, session):
    study = answered_study(session)
    auth = _token(session)
    session.commit()
    for name in DOWNLOADS:
        r = client.get(f"/api/v1/studies/rt/{name}", headers=auth)
        assert r.status_code == 200, name
        assert r.headers["content-disposition"] == f'attachment; filename="rt-{name}"'
        assert r.text == _made(session, study, name)
    judgments = client.get("/api/v1/studies/rt/judgments.jsonl", headers=auth).text
    assert len(judgments.splitlines()) == 33
    rows = list(
        csv.DictReader(io.StringIO(client.get("/api/v1/studies/rt/items.csv", headers=auth).text))
    )
    assert all(json.loads(r["displayed_ranks"])[-1] == "none" for r in rows if r["hit_id"])


def test_every_api_download_is_audited_with_the_tokens_user(client, session):
    """The API's downloads go through the same audited catalogue as the dashboard's."""
    study = answered_study(session)
    auth = _token(session)
    session.commit()
    files = [*DOWNLOADS, "results.csv", "results.tex", "plot.svg"]
    for name in files:
        assert client.get(f"/api/v1/studies/rt/{name}", headers=auth).status_code == 200
    session.expire_all()
    events = session.scalars(
        select(AuditEvent).where(AuditEvent.study_id == study.id, AuditEvent.action == "export")
    ).all()
    assert sorted(e.detail["what"] for e in events) == sorted(files)
    assert {e.user_id for e in events} == {session.scalar(select(User.id))}


@pytest.mark.parametrize("name", DOWNLOADS)
def test_a_failure_before_the_first_byte_is_a_500_without_a_file(client, session, name):
    broken_study(session, last=False)
    auth = _token(session)
    session.commit()
    r = client.get(f"/api/v1/studies/broken/{name}", headers=auth)
    assert r.status_code == 500
    assert r.headers["content-type"].startswith("application/json")
    assert "content-disposition" not in r.headers
    assert r.json()["status"] == 500 and "nothing was sent" in r.json()["detail"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(migrated_copy):
    """A real server (uvicorn) over a migrated database of its own."""
    import uvicorn

    settings = migrated_copy.settings()
    engine = build_engine(settings)
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="critical")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", make_sessionmaker(engine)
    server.should_exit = True
    thread.join(10)
    engine.dispose()


@pytest.mark.parametrize("name", ["judgments.csv", "items.jsonl"])
def test_a_failure_mid_stream_ends_with_an_error_record_and_aborts(served, name):
    base, sessionmaker = served
    with sessionmaker() as session:
        broken_study(session, last=True)
        auth = _token(session)
        session.commit()
    body = []
    with (
        httpx.Client(base_url=base, timeout=30) as http,
        http.stream("GET", f"/api/v1/studies/broken/{name}", headers=auth) as r,
    ):
        assert r.status_code == 200  # sent with the first batch, before the failure
        with pytest.raises(httpx.RemoteProtocolError):  # the client sees a cut transfer
            for chunk in r.iter_text():
                body.append(chunk)
    lines = "".join(body).splitlines()
    header = 1 if name.endswith(".csv") else 0
    assert len(lines) == header + 2000 + 1
    last = lines[-1] if name.endswith(".csv") else json.loads(lines[-1])["error"]
    assert last.startswith("ERROR: the export failed after 2000 rows") and "incomplete" in last
