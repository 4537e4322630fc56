"""Honest under faults: when the database cannot be reached, an annotator gets a 503 page
that says their answers were not saved, with Retry-After and the same answers ready to
send again; the connection stays open; a resend after the outage stores them once.

PostgreSQL: the service talks to the real server through a small TCP proxy in this test,
which is cut (every connection closed, new ones closed at once) and then restored.
SQLite: an engine whose every connection fails (the database file cannot be opened).
Both: a pool whose every connection is held elsewhere (a pool timeout).
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import time
from urllib.parse import urlencode

import pytest
import uvicorn
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from app.annotation.identities import invite_token
from app.config import Settings
from app.db import build_engine, make_sessionmaker
from app.main import create_app
from app.models import HitPosition, Judgment
from tests.hits.factory import annotator, make_study


class CuttableProxy:
    """Forwards 127.0.0.1:<port> to a TCP server; `cut()` closes every connection and
    closes new ones at once (a database outage), `restore()` forwards again."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = False
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.down = True
        with self.lock:
            sockets, self.open = self.open, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def restore(self) -> None:
        self.down = False

    def close(self) -> None:
        self.cut()
        self.listener.close()


def _seed(url: str, secret_key: str):
    engine = build_engine(Settings(database_url=url, env="test"))
    sm = make_sessionmaker(engine)
    with sm() as s, s.begin():
        study = make_study(s, per_cell=5, lengths=(10,), min_ms_per_item=0)
        link = f"/a/{invite_token(secret_key, annotator(s, study))}"
    return engine, sm, link


def _answers(sm, html: str) -> dict[str, str]:
    public_id = re.search(r'name="assignment" value="([^"]+)"', html).group(1)
    with sm() as s:
        rows = s.execute(select(HitPosition.position, HitPosition.choice_order)).all()
    return {"assignment": public_id, **{f"o{p}": str(order.index(0)) for p, order in rows}}


def _resend_fields(html: str) -> dict[str, str]:
    form = html[html.index('id="resend"') :]
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form))


@pytest.mark.postgres
def test_a_database_outage_gives_a_503_that_keeps_the_answers(migrated_copy, backend):
    """Through uvicorn, so the keep-alive connection is the real one."""
    settings = migrated_copy.settings()
    engine, sm, link = _seed(migrated_copy.url, settings.secret_key)
    url = make_url(migrated_copy.url)
    proxy = CuttableProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    app = create_app(Settings(database_url=proxied, env="test", db_pool_size=2))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)

        def request(method, path, form=None):
            body = urlencode(form) if form is not None else None
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if form else {}
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return r, r.read().decode()

        r, html = request("GET", link)
        assert r.status == 200
        form = _answers(sm, html)
        proxy.cut()
        r, html = request("POST", f"{link}/submit", form)
        assert r.status == 503 and r.getheader("Retry-After") == "5"
        assert r.getheader("Content-Type").startswith("text/html")
        assert "Your answers were not saved" in html and "Send again" in html
        resend = _resend_fields(html)
        assert resend == form  # the same answers, ready to go again
        r, html = request("GET", link)  # the same connection: it was kept open
        assert r.status == 503 and "reload this page" in html
        with sm() as s:
            assert s.scalar(select(func.count()).select_from(Judgment)) == 0
        proxy.restore()
        r, _ = request("POST", f"{link}/submit", resend)  # "Send again"
        assert r.status == 303 and r.getheader("Location").endswith("?n=ok")
        r, _ = request("POST", f"{link}/submit", form)  # and once more: stored once
        assert r.status == 303
        conn.close()
        with sm() as s:
            assert s.scalar(select(func.count()).select_from(Judgment)) == 11
    finally:
        server.should_exit = True
        thread.join(10)
        proxy.close()
        engine.dispose()


@pytest.mark.sqlite
def test_an_engine_that_cannot_connect_gives_503_pages(migrated_copy, tmp_path, backend):
    secret = Settings(env="test").secret_key
    _, sm, link = _seed(migrated_copy.url, secret)
    with sm() as s:
        rows = s.execute(select(HitPosition.position, HitPosition.choice_order)).all()
    form = {"assignment": "x" * 32, **{f"o{p}": str(order.index(0)) for p, order in rows}}
    # A directory is no database file: every connection fails.
    broken = Settings(database_url=f"sqlite:///{tmp_path}", env="test")
    with TestClient(create_app(broken)) as client:
        r = client.get(link)
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.template.name == "annotate/message.html" and "reload this page" in r.text
        r = client.post(f"{link}/submit", data=form)
        assert r.status_code == 503 and "Your answers were not saved" in r.text
        assert _resend_fields(r.text) == form
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
        r = client.post(f"{link}/return", data={"assignment": form["assignment"]})
        assert r.status_code == 503 and "was not given back" in r.text
        assert _resend_fields(r.text) == {"assignment": form["assignment"]}


def test_a_pool_with_no_free_connection_gives_503_pages(migrated_copy):
    """Every pooled connection held elsewhere (real connections, checked out): the page
    waits `db_pool_timeout`, then says to try again instead of failing with a 500."""
    settings = migrated_copy.settings(db_pool_size=1, db_pool_timeout=0.3)
    engine, _sm, link = _seed(migrated_copy.url, settings.secret_key)
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get(link).status_code == 200
            pool = client.app.state.engine.pool
            held = [
                client.app.state.engine.connect() for _ in range(pool.size() + pool._max_overflow)
            ]
            try:
                started = time.monotonic()
                r = client.get(link)
                assert r.status_code == 503 and r.headers["retry-after"] == "5"
                assert "reload this page" in r.text and time.monotonic() - started < 10
            finally:
                for conn in held:
                    conn.close()
            assert client.get(link).status_code == 200
    finally:
        engine.dispose()
