"""Benchmark: the annotator's pages under load, on PostgreSQL, with a check of every judgment.

Run by hand (not a test), from the repository root, with PostgreSQL reachable::

    .venv/bin/python benchmarks/annotate_load.py            # both scenarios, defaults below

What it does:

1. creates a temporary database (``CREATE DATABASE`` through ``--pg``), migrates it, and inserts
   one study per scenario: items inserted directly (three prefix lengths; 5 ``data`` + 5
   ``model`` + 1 attention item per HIT, the default layout), HITs built with
   ``app.hits.service.build_hits`` (default replicas and 5 % overlap), the study opened, and one
   invited annotator (``create_local_annotators`` + ``invite_token``) per simulated annotator;
2. counts the SQL statements of one annotator cycle (page, then submit) with the app run in
   process on the same database (``count_statements``); then starts the service as a
   subprocess, ``ebc serve --workers N --no-migrate`` (uvicorn, as many workers as cores by
   default; ``EBC_ENV=production``, ``EBC_LOG_LEVEL=warning``);
3. drives simulated annotators with asyncio (uvloop) and one ``aiohttp.ClientSession`` (several
   times cheaper per request than httpx, which matters: the client shares the cores with the
   server): each fetches its invite link ``/a/{token}``, parses the form (the ``assignment``
   handle and the ``o{n}`` radio groups), waits, posts an answer for every text to
   ``/a/{token}/submit``, follows the 303 to its next HIT, and so on until the scenario's time
   is up (or it sees "no work" / "cap reached");
4. stops the service and checks the database: judgments stored = judgments acknowledged (a 303
   to ``?n=ok`` / ``?n=late``), no duplicate (assignment, position), no annotator twice on a HIT,
   no HIT over its replicas, no annotator over the cap; then drops the database.

Scenarios:

- **capacity**: ``--capacity-clients`` (50) annotators that never wait, for
  ``--capacity-seconds`` (30) after a ``--warmup`` (3 s, not counted): submissions per second
  (each one = a page fetch that leases an assignment + a submit of 11 judgments), server CPU
  milliseconds per submission (utime + stime from ``/proc`` of the uvicorn master and workers, and
  separately of the PostgreSQL backends serving the benchmark database), latencies.
- **crowd**: ``--crowd-size`` (1,000) annotators, each spending U(5, 30) s on a HIT, arriving
  uniformly over ``--crowd-ramp`` (10) s, for ``--crowd-seconds`` (90): page and submit latency
  p50/p99 over every request, errors, lost and duplicated judgments.

Beside each scenario a thread times ``fdatasync`` of 8 kB every 50 ms on a file next to
PostgreSQL's WAL (``DiskProbe``): every commit waits for such a flush, so a disk that stalls
shows up in the tail whatever the service does, and the report gives the disk's own p99 and max.

The load generator shares the machine with the server (and with whatever else runs there): the
output says so, gives the client's own CPU time and event-loop lag, and ``os.getloadavg()`` at
the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import re
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import uvloop
from sqlalchemy import create_engine, event, func, insert, select, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from app.annotation.identities import create_local_annotators, invite_token
from app.hits.service import build_hits
from app.migrate import upgrade
from app.models import (
    Assignment,
    AssignmentStatus,
    Hit,
    HitPosition,
    Item,
    Judgment,
    StudyStatus,
)
from app.studies.schemas import DatasetSection, HitSection, ModelSection, StudyConfig
from app.studies.service import create_study

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (10, 20, 30)
MAX_CLIENTS = 5000  # simulated annotators per scenario
MAX_SECONDS = 600  # per scenario
MAX_RATE = 250  # submissions/s the capacity study is sized for
GRACE = 30.0  # seconds given to requests in flight when a scenario's time is up
CLIENT_ERRORS = (aiohttp.ClientError, TimeoutError)
CLK_TCK = os.sysconf("SC_CLK_TCK")
TURKLE = "Turkle (issue 4's reference: Django, gunicorn, 4 workers)"

VOCAB_TEXT = (
    "the of and to in a is was for on that with as by at from his her it an were are which "
    "this be or has had not but their after first new two its one they been also who "
    "river stone light city quiet north glass winter market harbour village music season "
    "church station bridge army record album school film water island road war council "
    "between during under against while where when years later early most other some"
)
VOCAB = VOCAB_TEXT.split()

HIDDEN = re.compile(r'<input type="hidden" name="assignment" value="([^"]*)"')
RADIO = re.compile(r'<input type="radio" name="o(\d+)" value="(\d+)"')
KIND = re.compile(r'data-kind="(\w+)"')


# -- the database ------------------------------------------------------------------------


def create_database(admin_url: str) -> tuple[str, str]:
    """A fresh database next to `admin_url`'s; returns (its name, its URL)."""
    name = f"ebc_bench_{secrets.token_hex(4)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    return name, url


def drop_database(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@dataclass
class Seeded:
    study_id: int
    slug: str
    hits: int
    replicas: int
    positions: int  # per HIT
    tokens: list[str]
    cap: int
    probe_token: str  # one more annotator, for the statement count (see count_statements)


def seed_study(
    engine: Engine,
    slug: str,
    per_length: int,
    replicas: int,
    n_annotators: int,
    secret: str,
    seed: int,
) -> Seeded:
    """A collecting study with `per_length` HITs per prefix length done `replicas` times each.

    The overlap share and its 3 replicas keep their defaults; `n_annotators` get invite links.
    """
    rng = random.Random(f"{seed}:{slug}")
    config = StudyConfig(
        slug=slug,
        title=f"Benchmark {slug}",
        model=ModelSection(name="gpt2"),
        dataset=DatasetSection(path="bench.txt"),
        prefix_lengths=list(LENGTHS),
        items_per_cell=per_length * 5,
        seed=seed,
        hits=HitSection(replicas=replicas, overlap_replicas=max(3, replicas)),
    )
    with Session(engine) as session:
        study = create_study(session, config)
        rows = []
        for length in LENGTHS:
            for kind, n, attention in (
                ("data", per_length * 5, False),
                ("model", per_length * 5, False),
                ("data", per_length, True),
            ):
                for i in range(n):
                    words = rng.sample(VOCAB, 5)
                    probs = (
                        [0.97, 0.01, 0.01, 0.005, 0.005]
                        if attention
                        else [0.4, 0.3, 0.15, 0.1, 0.05]
                    )
                    rows.append(
                        {
                            "study_id": study.id,
                            "length": length,
                            "kind": kind,
                            "index": i,
                            "is_attention": attention,
                            "words": " ".join(rng.choice(VOCAB) for _ in range(length)),
                            "true_next_word": words[0] if kind == "data" else None,
                            "choices": [
                                {"word": w, "prob": p} for w, p in zip(words, probs, strict=True)
                            ],
                            "provenance": {"made_by": "benchmarks/annotate_load.py"},
                        }
                    )
        for start in range(0, len(rows), 5000):
            session.execute(insert(Item), rows[start : start + 5000])
        build_hits(session, study)
        study.status = StudyStatus.collecting
        annotators = create_local_annotators(session, study, n_annotators + 1, label="bench")
        session.commit()
        *tokens, probe = [invite_token(secret, a) for a in annotators]
        hits = session.scalar(select(func.count()).where(Hit.study_id == study.id))
        first = session.scalar(select(func.min(Hit.id)).where(Hit.study_id == study.id))
        positions = session.scalar(select(func.count()).where(HitPosition.hit_id == first))
        return Seeded(
            study.id, slug, hits, replicas, positions, tokens, study.per_annotator_cap, probe
        )


def count_statements(url: str, secret: str, token: str) -> tuple[Counter, dict[str, int]]:
    """SQL statements of one annotator cycle (page, then submit), counted in process.

    The app runs in this process (Starlette's TestClient) on the benchmark's database,
    with a fresh HIT cache, so the page is the first of its HIT. Transaction control
    (BEGIN, COMMIT: one each per request) is not counted. Returns the counts and what was
    acknowledged (assignment handle -> judgments), for the database check.
    """
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    counts: Counter = Counter()
    phase = ["page"]

    def count(*_args) -> None:
        counts[phase[0]] += 1

    app = create_app(Settings(database_url=url, secret_key=secret, env="test"))
    with TestClient(app) as client:
        event.listen(Engine, "before_cursor_execute", count)
        try:
            page = client.get(f"/a/{token}")
            public_id, options = parse_hit(page.text) or ("", {})
            form = {"assignment": public_id}
            for pos in options:
                form |= {f"o{pos}": "0", f"ms{pos}": "2000"}
            phase[0] = "submit"
            sent = client.post(f"/a/{token}/submit", data=form, follow_redirects=False)
        finally:
            event.remove(Engine, "before_cursor_execute", count)
    if page.status_code != 200 or sent.status_code != 303 or not options:
        raise RuntimeError(f"the statement count's cycle failed: {page.status_code} {sent.text}")
    return counts, {public_id: len(options)}


def check_study(engine: Engine, seeded: Seeded, acked: dict[str, int]) -> dict[str, int]:
    """Compare the database with what the clients were told; count every broken rule."""
    sid = seeded.study_id
    with Session(engine) as s:
        in_study = select(Hit.id).where(Hit.study_id == sid)
        submitted = dict(
            s.execute(
                select(Assignment.public_id, func.count(Judgment.id))
                .outerjoin(Judgment, Judgment.assignment_id == Assignment.id)
                .where(
                    Assignment.hit_id.in_(in_study),
                    Assignment.status == AssignmentStatus.submitted,
                )
                .group_by(Assignment.public_id)
            ).all()
        )
        stored_judgments = s.scalar(
            select(func.count())
            .select_from(Judgment)
            .join(Assignment, Assignment.id == Judgment.assignment_id)
            .where(Assignment.hit_id.in_(in_study))
        )
        orphan = s.scalar(
            select(func.count())
            .select_from(Judgment)
            .join(Assignment, Assignment.id == Judgment.assignment_id)
            .where(
                Assignment.hit_id.in_(in_study),
                Assignment.status != AssignmentStatus.submitted,
            )
        )
        dup_positions = s.scalar(
            select(func.count()).select_from(
                select(Judgment.assignment_id)
                .join(Assignment, Assignment.id == Judgment.assignment_id)
                .where(Assignment.hit_id.in_(in_study))
                .group_by(Judgment.assignment_id, Judgment.position)
                .having(func.count() > 1)
                .subquery()
            )
        )
        same_hit_twice = s.scalar(
            select(func.count()).select_from(
                select(Assignment.annotator_id)
                .where(Assignment.hit_id.in_(in_study))
                .group_by(Assignment.annotator_id, Assignment.hit_id)
                .having(func.count() > 1)
                .subquery()
            )
        )
        held = (
            select(Assignment.hit_id, func.count().label("n"))
            .where(
                Assignment.hit_id.in_(in_study),
                Assignment.status.in_([AssignmentStatus.submitted, AssignmentStatus.leased]),
            )
            .group_by(Assignment.hit_id)
            .subquery()
        )
        over_replicas = s.scalar(
            select(func.count())
            .select_from(held)
            .join(Hit, Hit.id == held.c.hit_id)
            .where(held.c.n > Hit.replicas)
        )
        over_cap = s.scalar(
            select(func.count()).select_from(
                select(Assignment.annotator_id)
                .where(
                    Assignment.hit_id.in_(in_study),
                    Assignment.status == AssignmentStatus.submitted,
                )
                .group_by(Assignment.annotator_id)
                .having(func.count() > seeded.cap)
                .subquery()
            )
        )
    lost = sum(n - submitted.get(pid, 0) for pid, n in acked.items() if submitted.get(pid, 0) < n)
    incomplete = sum(1 for n in submitted.values() if n != seeded.positions)
    return {
        "acked_submissions": len(acked),
        "acked_judgments": sum(acked.values()),
        "stored_submissions": len(submitted),
        "stored_judgments": stored_judgments,
        "lost": lost,
        "stored_not_acked": sum(n for pid, n in submitted.items() if pid not in acked),
        "duplicated": dup_positions + same_hit_twice,
        "duplicate_positions": dup_positions,  # judgment rows per (assignment, position) > 1
        "same_hit_twice": same_hit_twice,  # assignments per (HIT, annotator) > 1
        "judgments_without_submit": orphan,
        "incomplete_submissions": incomplete,
        "hits_over_replicas": over_replicas,
        "annotators_over_cap": over_cap,
    }


# -- the server and CPU accounting -------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_ticks(pid: int) -> int:
    """utime + stime of one process, in clock ticks (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


class PgBackends:
    """CPU of the PostgreSQL backends serving one database, polled (they may come and go)."""

    def __init__(self, dbname: str) -> None:
        self.marker = f" {dbname} ".encode()
        self.base: dict[int, int] = {}
        self.last: dict[int, int] = {}

    def _scan(self) -> dict[int, int]:
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if cmd.startswith(b"postgres: ") and self.marker in cmd:
                out[int(entry)] = proc_ticks(int(entry))
        return out

    def start(self) -> None:
        self.base = self._scan()
        self.last = dict(self.base)

    def poll(self) -> None:
        self.last.update(self._scan())

    def seconds(self) -> float:
        self.poll()
        return sum(t - self.base.get(p, 0) for p, t in self.last.items()) / CLK_TCK


class DiskProbe:
    """fdatasync latency of the disk under PostgreSQL's WAL, sampled beside the load.

    Every commit waits for a WAL flush, so a disk whose flushes stall stalls every request with
    it, whatever the service does. The probe writes 8 kB and calls ``fdatasync`` every 50 ms on
    a temporary file in PostgreSQL's data directory (the system temp dir if that is not
    writable, which the report says), on a thread, so a run's tail can be read against its disk.
    """

    PERIOD = 0.05

    def __init__(self, directory: str | None) -> None:
        self.directory = directory if directory and os.access(directory, os.W_OK) else None
        self.samples_ms: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.samples_ms = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="disk-probe", daemon=True)
        self._thread.start()

    def stop(self) -> list[float]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.samples_ms

    def where(self) -> str:
        fallback = f"{tempfile.gettempdir()} (PostgreSQL's data directory is not writable)"
        return self.directory or fallback

    def _run(self) -> None:
        fd, path = tempfile.mkstemp(prefix="ebc-bench-fsync-", dir=self.directory)
        try:
            block, i = os.urandom(8192), 0
            while not self._stop.wait(self.PERIOD):
                os.pwrite(fd, block, (i % 64) * 8192)
                i += 1
                t = time.perf_counter()
                os.fdatasync(fd)
                self.samples_ms.append((time.perf_counter() - t) * 1000)
        finally:
            os.close(fd)
            os.unlink(path)


def data_directory(engine: Engine) -> str | None:
    """PostgreSQL's data directory, where its WAL lives (None if this role may not read it)."""
    try:
        with engine.connect() as conn:
            return conn.execute(text("SHOW data_directory")).scalar_one()
    except Exception:  # a role without pg_read_all_settings: fall back, and the report says so
        return None


class Server:
    def __init__(self, database_url: str, secret: str, workers: int) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        fd, self.log_path = tempfile.mkstemp(prefix="ebc-bench-", suffix=".log")
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "EBC_SECRET_KEY": secret,
            "EBC_ENV": "production",
            "EBC_LOG_LEVEL": "warning",
            "EBC_BASE_URL": self.base_url,
        }
        ebc = Path(sys.executable).with_name("ebc")
        cmd = [str(ebc)] if ebc.exists() else [sys.executable, "-m", "app.cli"]
        cmd += ["serve", "--workers", str(workers), "--no-migrate"]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.cmd = " ".join(cmd[-9:])
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fd, stderr=subprocess.STDOUT)
        os.close(fd)
        self.workers = workers

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                # several probes, so that every worker has started and answered
                if (
                    all(
                        httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200
                        for _ in range(4 * self.workers)
                    )
                    and len(descendants(self.proc.pid)) > self.workers
                ):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the server did not answer /healthz in {timeout:.0f} s:\n{self.tail()}")

    def cpu_seconds(self) -> float:
        return sum(proc_ticks(p) for p in descendants(self.proc.pid)) / CLK_TCK

    def tail(self, n: int = 30) -> str:
        lines = Path(self.log_path).read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def stop(self) -> None:
        """Stop the master and its workers (its own process group: no worker is left behind)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # a worker that did not follow the master


# -- the simulated annotators ------------------------------------------------------------


@dataclass
class Stats:
    window: tuple[float, float] = (0.0, math.inf)  # loop times counted in the rates
    page_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)  # assignment -> judgments acknowledged
    acked_in_window: int = 0
    errors: Counter = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    finished: Counter = field(default_factory=Counter)  # why annotators stopped early
    late: int = 0

    def error(self, what: str, detail: str) -> None:
        self.errors[what] += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(f"{what}: {detail[:300]}")


def parse_hit(html: str) -> tuple[str, dict[int, int]] | None:
    """The assignment handle and, per position, its number of options; None if no HIT form."""
    handle = HIDDEN.search(html)
    if handle is None:
        return None
    options: dict[int, int] = {}
    for pos, value in RADIO.findall(html):
        options[int(pos)] = max(options.get(int(pos), 0), int(value) + 1)
    return handle.group(1), options


async def annotator(
    client: aiohttp.ClientSession,
    token: str,
    stats: Stats,
    stop_at: float,
    think: tuple[float, float],
    start_after: float,
    rng: random.Random,
) -> None:
    loop = asyncio.get_running_loop()
    if start_after:
        await asyncio.sleep(start_after)
    link = f"/a/{token}"
    url = link
    while loop.time() < stop_at:
        t0 = loop.time()
        try:
            async with client.get(url) as page:
                status, html = page.status, await page.text()
        except CLIENT_ERRORS as exc:
            stats.error("page: " + type(exc).__name__, str(exc))
            return
        t1 = loop.time()
        if stats.window[0] <= t0 < stats.window[1]:
            stats.page_ms.append((t1 - t0) * 1000)
        if status != 200:
            stats.error(f"page: HTTP {status}", html)
            return
        hit = parse_hit(html)
        if hit is None:
            kind = KIND.search(html)
            stats.finished[kind.group(1) if kind else "unparsed page"] += 1
            return
        public_id, options = hit
        wait = rng.uniform(*think)
        if t1 + wait >= stop_at:
            return  # the scenario ends before this annotator would have answered
        if wait:
            await asyncio.sleep(wait)
        per_item = round(wait * 1000 / max(1, len(options)))
        form = {"assignment": public_id}
        for pos, k in options.items():
            form[f"o{pos}"] = str(rng.randrange(k))
            form[f"ms{pos}"] = str(per_item)
        t2 = loop.time()
        try:
            async with client.post(f"{link}/submit", data=form, allow_redirects=False) as sent:
                status, location = sent.status, sent.headers.get("location", "")
                body = "" if status == 303 else await sent.text()
        except CLIENT_ERRORS as exc:
            stats.error("submit: " + type(exc).__name__, str(exc))
            return
        t3 = loop.time()
        if status != 303 or not location.endswith(("?n=ok", "?n=late")):
            stats.error(f"submit: HTTP {status}", location or body)
            return
        stats.acked[public_id] = len(options)
        stats.late += location.endswith("?n=late")
        if stats.window[0] <= t2 < stats.window[1]:
            stats.submit_ms.append((t3 - t2) * 1000)
        if stats.window[0] <= t3 < stats.window[1]:
            stats.acked_in_window += 1
        url = location


async def loop_lag(samples: list[float], stop: asyncio.Event) -> None:
    """How late a 10 ms sleep wakes up: the client's own contribution to measured latency."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(0.01)
        samples.append((loop.time() - t - 0.01) * 1000)


@dataclass
class Result:
    name: str
    clients: int
    seconds: float
    stats: Stats
    server_cpu: float
    pg_cpu: float
    pg_backends: int  # PostgreSQL backends seen in the window: more than the pools hold = churn
    client_cpu: float
    lag_ms: list[float]
    unfinished: int
    fsync_ms: list[float] = field(default_factory=list)
    check: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.stats.acked_in_window / self.seconds


async def run_scenario(
    name: str,
    server: Server,
    pg: PgBackends,
    disk: DiskProbe,
    tokens: list[str],
    *,
    seconds: float,
    warmup: float,
    think: tuple[float, float],
    ramp: float,
    seed: int,
) -> Result:
    loop = asyncio.get_running_loop()
    n = len(tokens)
    stats = Stats()
    # Expire idle connections well before uvicorn does (5 s): no request races a close.
    connector = aiohttp.TCPConnector(limit=n + 10, keepalive_timeout=2.0)
    async with aiohttp.ClientSession(
        base_url=server.base_url,
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=GRACE),
        cookie_jar=aiohttp.DummyCookieJar(),  # annotators carry no cookies
    ) as client:
        start = loop.time()
        stats.window = (start + warmup, start + warmup + seconds)
        stop_at = stats.window[1]
        rng = random.Random(f"{seed}:{name}")
        tasks = [
            asyncio.create_task(
                annotator(
                    client,
                    token,
                    stats,
                    stop_at,
                    think,
                    rng.uniform(0, ramp) if ramp else 0.0,
                    random.Random(rng.random()),
                )
            )
            for token in tokens
        ]
        lags: list[float] = []
        stop = asyncio.Event()
        lagger = asyncio.create_task(loop_lag(lags, stop))
        await asyncio.sleep(max(0.0, stats.window[0] - loop.time()))
        cpu0, client0 = server.cpu_seconds(), time.process_time()
        pg.start()
        disk.start()
        while loop.time() < stop_at:
            await asyncio.sleep(min(1.0, max(0.0, stop_at - loop.time())))
            pg.poll()
        server_cpu = server.cpu_seconds() - cpu0
        pg_cpu = pg.seconds()
        pg_backends = len(pg.last)
        client_cpu = time.process_time() - client0
        fsync_ms = disk.stop()
        stop.set()
        done, pending = await asyncio.wait(tasks, timeout=GRACE)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, lagger, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                stats.error("client: " + type(task.exception()).__name__, str(task.exception()))
    return Result(
        name,
        n,
        seconds,
        stats,
        server_cpu,
        pg_cpu,
        pg_backends,
        client_cpu,
        lags,
        unfinished=len(pending),
        fsync_ms=fsync_ms,
    )


# -- the report --------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def describe(r: Result, workers: int) -> str:
    s, c = r.stats, r.check
    subs = max(1, s.acked_in_window)
    lines = [
        f"## {r.name}: {r.clients} annotators, {r.seconds:.0f} s measured",
        f"- submissions acknowledged in the window: {s.acked_in_window} ({r.rate:.1f}/s); "
        f"late: {s.late}",
        f"- server CPU: uvicorn ({workers} workers + master) {r.server_cpu:.1f} s = "
        f"{r.server_cpu * 1000 / subs:.2f} ms/submission; PostgreSQL backends "
        f"{r.pg_cpu:.1f} s = {r.pg_cpu * 1000 / subs:.2f} ms/submission ({r.pg_backends} "
        f"backends seen)",
        f"- load generator (same machine): {r.client_cpu:.1f} s CPU = "
        f"{r.client_cpu * 1000 / subs:.2f} ms/submission; event-loop lag p50 "
        f"{pct(r.lag_ms, 0.5):.1f} ms, p99 {pct(r.lag_ms, 0.99):.1f} ms, "
        f"max {max(r.lag_ms, default=math.nan):.1f} ms",
        f"- page: n={len(s.page_ms)}, p50 {pct(s.page_ms, 0.5):.1f} ms, "
        f"p90 {pct(s.page_ms, 0.9):.1f}, p99 {pct(s.page_ms, 0.99):.1f}, "
        f"max {max(s.page_ms, default=math.nan):.1f}",
        f"- submit: n={len(s.submit_ms)}, p50 {pct(s.submit_ms, 0.5):.1f} ms, "
        f"p90 {pct(s.submit_ms, 0.9):.1f}, p99 {pct(s.submit_ms, 0.99):.1f}, "
        f"max {max(s.submit_ms, default=math.nan):.1f}",
        f"- errors: {sum(s.errors.values())} {dict(s.errors) or ''}; annotators stopped early: "
        f"{dict(s.finished) or 'none'}; still in flight after {GRACE:.0f} s grace: "
        f"{r.unfinished}",
        f"- disk (fdatasync of 8 kB beside the WAL, every {DiskProbe.PERIOD * 1000:.0f} ms): "
        f"n={len(r.fsync_ms)}, p50 {pct(r.fsync_ms, 0.5):.2f} ms, "
        f"p99 {pct(r.fsync_ms, 0.99):.2f}, max {max(r.fsync_ms, default=math.nan):.1f}, "
        f"over 100 ms: {sum(x > 100 for x in r.fsync_ms)}",
        "- database: " + ", ".join(f"{k} {v}" for k, v in c.items()),
    ]
    lines += [f"  - sample error: {e}" for e in s.error_samples]
    return "\n".join(lines)


def table(results: list[Result]) -> str:
    rows = [
        "| scenario | submissions/s | server CPU ms/submission (uvicorn + PostgreSQL) "
        "| page p50 / p99 ms | submit p50 / p99 ms | errors | lost | duplicated "
        "| disk fdatasync p99 / max ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        s, subs = r.stats, max(1, r.stats.acked_in_window)
        app_ms, pg_ms = r.server_cpu * 1000 / subs, r.pg_cpu * 1000 / subs
        rows.append(
            f"| {r.name} | {r.rate:.1f} | {app_ms:.1f} + {pg_ms:.1f} = {app_ms + pg_ms:.1f} "
            f"| {pct(s.page_ms, 0.5):.0f} / {pct(s.page_ms, 0.99):.0f} "
            f"| {pct(s.submit_ms, 0.5):.0f} / {pct(s.submit_ms, 0.99):.0f} "
            f"| {sum(s.errors.values())} | {r.check.get('lost', '?')} "
            f"| {r.check.get('duplicated', '?')} "
            f"| {pct(r.fsync_ms, 0.99):.1f} / {max(r.fsync_ms, default=math.nan):.1f} |"
        )
    rows.append(f"| {TURKLE} | 4 to 8 | 100 to 200 | - | - | - | - | - | - |")
    return "\n".join(rows)


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="an existing database to connect to for CREATE/DROP DATABASE",
    )
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="uvicorn workers")
    p.add_argument("--capacity-seconds", type=float, default=30.0, help="0 skips it")
    p.add_argument("--capacity-clients", type=int, default=50)
    p.add_argument("--warmup", type=float, default=3.0, help="capacity: seconds not counted")
    p.add_argument("--crowd-seconds", type=float, default=90.0, help="0 skips it")
    p.add_argument("--crowd-size", type=int, default=1000)
    p.add_argument(
        "--crowd-ramp",
        type=float,
        default=10.0,
        help="crowd annotators arrive uniformly over this many seconds",
    )
    p.add_argument(
        "--think",
        type=float,
        nargs=2,
        default=(5.0, 30.0),
        metavar=("MIN", "MAX"),
        help="crowd: seconds per HIT, uniform",
    )
    p.add_argument(
        "--hits-per-length",
        type=int,
        default=600,
        help="HITs per prefix length (3 lengths); 600 = the paper's 3,000 items per cell",
    )
    p.add_argument("--replicas", type=int, default=0, help="0: enough for the scenario")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    args = p.parse_args(argv)
    for name in ("capacity_clients", "crowd_size"):
        if not 1 <= getattr(args, name) <= MAX_CLIENTS:
            p.error(f"--{name.replace('_', '-')} must be between 1 and {MAX_CLIENTS}")
    for name in ("capacity_seconds", "crowd_seconds", "warmup", "crowd_ramp"):
        if not 0 <= getattr(args, name) <= MAX_SECONDS:
            p.error(f"--{name.replace('_', '-')} must be between 0 and {MAX_SECONDS}")
    if not 0 <= args.think[0] <= args.think[1] <= MAX_SECONDS or not 1 <= args.workers <= 64:
        p.error("bad --think or --workers")
    return args


def raise_open_files(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, needed)) if hard != resource.RLIM_INFINITY else max(soft, needed)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < needed:
        print(f"warning: only {want} open files allowed; {needed} wanted", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    raise_open_files(2 * max(args.crowd_size, args.capacity_clients) + 1024)
    print(f"# annotate_load: {' '.join(sys.argv)}")
    print(
        f"machine: {os.cpu_count()} CPUs, shared by the server ({args.workers} uvicorn workers), "
        f"PostgreSQL and this load generator (one Python process, asyncio + aiohttp on uvloop); "
        f"other processes may be running too"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    secret = secrets.token_urlsafe(48)
    dbname, url = create_database(args.pg)
    print(f"database: {dbname} (temporary)")
    engine = create_engine(url)
    server: Server | None = None
    results: list[Result] = []
    seeded: dict[str, Seeded] = {}
    ok = True
    try:
        with engine.begin() as conn:
            upgrade(conn)
        t = time.monotonic()
        # A study of the paper's size (3,000 items per cell: 600 HITs per length) by default;
        # replicas so that nobody runs out of work: capacity at up to `MAX_RATE` submissions/s,
        # every crowd annotator finishing a HIT every `think[0]` seconds.
        hits = len(LENGTHS) * args.hits_per_length
        if args.capacity_seconds:
            need = MAX_RATE * (args.capacity_seconds + args.warmup) + args.capacity_clients
            seeded["capacity"] = seed_study(
                engine,
                "bench-capacity",
                args.hits_per_length,
                args.replicas or min(50, math.ceil(need / hits)),
                args.capacity_clients,
                secret,
                args.seed,
            )
        if args.crowd_seconds:
            per = math.ceil(args.crowd_seconds / max(args.think[0], 1.0)) + 1
            seeded["crowd"] = seed_study(
                engine,
                "bench-crowd",
                args.hits_per_length,
                args.replicas or min(50, math.ceil(args.crowd_size * per / hits)),
                args.crowd_size,
                secret,
                args.seed,
            )
        for sd in seeded.values():
            print(
                f"study {sd.slug}: {sd.hits} HITs of {sd.positions} texts, {sd.replicas} replicas "
                f"(5 % overlap: 3 or more), "
                f"{len(sd.tokens)} annotators, cap {sd.cap} HITs each"
            )
        print(f"seeded in {time.monotonic() - t:.1f} s")
        probe_acked: dict[str, int] = {}
        first = next(iter(seeded.values()), None)
        if first is not None:
            counts, probe_acked = count_statements(url, secret, first.probe_token)
            print(
                f"SQL statements per cycle (in process, first page of its HIT; BEGIN and "
                f"COMMIT not counted): page {counts['page']} + submit {counts['submit']} = "
                f"{counts.total()}"
            )
        server = Server(url, secret, args.workers)
        server.wait_ready()
        print(
            f"server: {server.cmd} (pid {server.proc.pid}; workers "
            f"{descendants(server.proc.pid)[1:]})\n"
        )
        pg = PgBackends(dbname)
        disk = DiskProbe(data_directory(engine))
        print(f"disk probe: {disk.where()}")
        if "capacity" in seeded:
            results.append(
                uvloop.run(
                    run_scenario(
                        "capacity",
                        server,
                        pg,
                        disk,
                        seeded["capacity"].tokens,
                        seconds=args.capacity_seconds,
                        warmup=args.warmup,
                        think=(0.0, 0.0),
                        ramp=0.0,
                        seed=args.seed,
                    )
                )
            )
        if "crowd" in seeded:
            results.append(
                uvloop.run(
                    run_scenario(
                        "crowd",
                        server,
                        pg,
                        disk,
                        seeded["crowd"].tokens,
                        seconds=args.crowd_seconds,
                        warmup=0.0,
                        think=tuple(args.think),
                        ramp=args.crowd_ramp,
                        seed=args.seed,
                    )
                )
            )
        server.stop()
        for r in results:
            acked = r.stats.acked | (probe_acked if seeded[r.name] is first else {})
            r.check = check_study(engine, seeded[r.name], acked)
            print(describe(r, args.workers) + "\n")
        print(table(results))
        print(
            "\nTargets (issue 4): capacity >= 100 submissions/s at < 10 ms CPU each; crowd p99 "
            "< 150 ms for page and submit, no errors, nothing lost or duplicated."
        )
        for r in results:
            c = r.check
            bad = {
                k: c[k]
                for k in (
                    "lost",
                    "duplicated",
                    "judgments_without_submit",
                    "incomplete_submissions",
                    "hits_over_replicas",
                    "annotators_over_cap",
                )
                if c[k]
            }
            if bad or r.stats.errors:
                ok = False
                print(f"FAILED ({r.name}): {bad} errors {dict(r.stats.errors)}")
    finally:
        if server is not None:
            server.stop()
            if not ok or any(r.stats.errors for r in results):
                print(f"server log: {server.log_path}\n{server.tail()}")
            else:
                os.unlink(server.log_path)
        engine.dispose()
        if args.keep_db:
            print(f"kept database {dbname}")
        else:
            drop_database(args.pg, dbname)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
