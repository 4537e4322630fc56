"""Benchmark: the fault soak. Annotators keep working while workers die and the database goes away.

Run by hand (not a test), from the repository root, with PostgreSQL reachable on 127.0.0.1::

    .venv/bin/python benchmarks/soak.py            # about 7 minutes, 200 annotators
    .venv/bin/python benchmarks/soak.py --quick    # about 90 s: a smoke run

What it does:

1. creates a temporary database, migrates it and seeds one collecting study with one invite link
   per simulated annotator (``annotate_load.seed_study``: items inserted, HITs built with
   ``app.hits.service.build_hits``); the study's lease is shortened (``--lease-seconds``) so
   that dawdlers' late submissions happen within the run;
2. starts a TCP proxy in front of PostgreSQL (a child process, listening on 127.0.0.1 only) and
   the service, ``ebc serve --workers 2 --no-migrate`` (``annotate_load.Server``), whose
   ``DATABASE_URL`` points at the proxy;
3. drives ``--clients`` simulated annotators (asyncio + aiohttp on uvloop) through their invite
   links: page, think U(``--think``) s, submit, follow the 303 to the next HIT. A request that
   fails (connection error, timeout, 5xx) is retried with exponential backoff and jitter (at
   least a 503's ``Retry-After``); a submit is retried with the same form, which the service
   stores once and answers like the first time. A submission counts as acknowledged only when
   the server answered its 303 to ``?n=ok`` or ``?n=late``. On ``--slow-share`` of the HITs the
   annotator answers after the lease ran out (a late submission, kept and flagged);
4. meanwhile injects the faults of ``--schedule``: ``kill`` SIGKILLs one uvicorn worker
   (uvicorn's supervisor starts another; the script checks that it does, and how fast),
   ``outage:N`` cuts every database connection and refuses new ones for N s, ``stall:N`` keeps
   the connections open but forwards no byte for N s (a network stall);
5. after ``--seconds`` no annotator starts a HIT; those holding one keep retrying its submit for
   up to ``--grace`` s; then the service stops and the database is checked against what the
   clients were told (``annotate_load.check_study`` plus the flags on kept-but-uncounted work):
   acknowledged vs stored submissions and judgments, duplicates (judgment rows per (assignment,
   position) > 1, assignments per (HIT, annotator) > 1), HITs with more submitted assignments
   than replicas and annotators with more submitted HITs than their cap, each counted raw and
   without the assignments flagged ``extra_replica`` / ``over_cap``; then the database is
   dropped.

Per window (``--window`` s) it prints the submissions acknowledged, the 503s, the other 5xx by
code, connection errors, timeouts, requests given up, latency p50 / p99 of every answered
request, and which fault was active. It exits 1 if anything acknowledged was lost or stored
twice, if a HIT or an annotator went over its limit without a flag, if a stored submission is
incomplete, or if nothing at all was acknowledged.

Traffic goes to 127.0.0.1 only. Every loop is bounded in count and time; the whole soak is
bounded by its schedule plus a margin, after which it stops, kills the service and drops the
database by itself. The load generator and the proxy share the machine with the service and
PostgreSQL: the output gives the client's CPU time and the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import multiprocessing as mp
import os
import random
import re
import secrets
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
import uvloop
from annotate_load import (
    KIND,
    LENGTHS,
    Seeded,
    Server,
    check_study,
    create_database,
    drop_database,
    parse_hit,
    pct,
    raise_open_files,
    seed_study,
)
from sqlalchemy import Engine, case, create_engine, func, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.migrate import upgrade
from app.models import Annotator, Assignment, AssignmentStatus, Hit, Study

MAX_CLIENTS = 2000
MAX_SECONDS = 3600  # the soak's length
MAX_FAULTS = 20
MAX_FAULT_SECONDS = 60  # one outage or stall
MAX_ATTEMPTS = 16  # per request, the first included
BACKOFF_BASE, BACKOFF_MAX = 0.25, 8.0  # seconds: 0.25, 0.5, 1, ... 8, 8, ...
MAX_HITS = 10_000  # per annotator: far above any cap
RESTART_WAIT = 30.0  # seconds given to uvicorn to replace a killed worker
LOCAL_HOSTS = ("127.0.0.1", "localhost")
TITLE = re.compile(r"<title>(.*?)</title>", re.S)

FULL_SCHEDULE = "60:kill,120:outage:5,180:outage:5,240:outage:5,300:stall:20,360:kill"
QUICK_SCHEDULE = "15:kill,30:outage:5,45:stall:10,65:kill,75:outage:5"


# -- the fault schedule ------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start
    kind: str  # kill | outage | stall
    seconds: float = 0.0

    @property
    def end(self) -> float:
        return self.at + self.seconds

    def label(self) -> str:
        return self.kind if self.kind == "kill" else f"{self.kind} {self.seconds:g} s"


def parse_schedule(text: str, duration: float) -> list[Fault]:
    """``AT:kill``, ``AT:outage:SECONDS``, ``AT:stall:SECONDS``, comma-separated; ValueError."""
    faults = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        try:
            at = float(bits[0])
            kind = bits[1]
            seconds = float(bits[2]) if len(bits) > 2 else 0.0
        except (IndexError, ValueError):
            raise ValueError(
                f"bad fault {part!r}: AT:kill, AT:outage:SECONDS or AT:stall:SECONDS"
            ) from None
        if kind not in ("kill", "outage", "stall") or len(bits) != (2 if kind == "kill" else 3):
            raise ValueError(f"bad fault {part!r}: AT:kill, AT:outage:SECONDS or AT:stall:SECONDS")
        if kind != "kill" and not 1 <= seconds <= MAX_FAULT_SECONDS:
            raise ValueError(f"{part!r}: an outage or a stall lasts 1 to {MAX_FAULT_SECONDS} s")
        if at <= 0 or at + seconds >= duration:
            raise ValueError(f"{part!r}: a fault starts after 0 and ends before {duration:g} s")
        faults.append(Fault(at, kind, seconds))
    if len(faults) > MAX_FAULTS:
        raise ValueError(f"at most {MAX_FAULTS} faults")
    faults.sort(key=lambda f: f.at)
    network = [f for f in faults if f.kind != "kill"]
    for a, b in itertools.pairwise(network):
        if b.at < a.end + 1:
            raise ValueError(f"the {a.label()} at {a.at:g} s and the {b.kind} at {b.at:g} overlap")
    return faults


# -- the database proxy ------------------------------------------------------------------


class _Link:
    """One client connection and, once connected, its upstream twin."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.cut = False

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                if self.cut:
                    writer.transport.abort()  # a reset, as when the server's host goes away
                else:
                    writer.close()


class Proxy:
    """A TCP proxy to PostgreSQL that can cut and refuse its connections, or stall them."""

    CHUNK = 65536

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.server: asyncio.Server | None = None
        self.links: set[_Link] = set()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.refusing = False
        self.counts: Counter = Counter()

    async def listen(self) -> None:
        for attempt in range(20):  # the port may linger a moment after an outage
            try:
                self.server = await asyncio.start_server(
                    self._serve, "127.0.0.1", self.port, backlog=1024
                )
                break
            except OSError:
                if attempt == 19:
                    raise
                await asyncio.sleep(0.1)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        if self.refusing:  # accepted just as the listener closed
            link.cut = True
            link.close()
            return
        self.links.add(link)
        self.counts["connections"] += 1
        try:
            try:
                up_reader, link.upstream = await asyncio.wait_for(
                    asyncio.open_connection(*self.upstream), 10
                )
            except (OSError, TimeoutError):
                self.counts["upstream failures"] += 1
                return
            if link.cut:
                return
            pumps = [
                asyncio.create_task(self._pump(reader, link.upstream)),
                asyncio.create_task(self._pump(up_reader, writer)),
            ]
            _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            self.links.discard(link)
            link.close()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await src.read(self.CHUNK):
                if not self.flowing.is_set():
                    await self.flowing.wait()  # a stall: bytes wait here, the sockets stay open
                dst.write(data)
                await dst.drain()

    async def outage(self, seconds: float) -> None:
        """Cut every connection and refuse new ones (the listener closed) for `seconds`."""
        self.refusing = True
        if self.server is not None:
            self.server.close()
        for link in list(self.links):
            link.cut = True
            link.close()
            self.counts["cut"] += 1
        await asyncio.sleep(seconds)
        await self.listen()
        self.refusing = False

    async def stall(self, seconds: float) -> None:
        self.flowing.clear()
        self.counts["stalled"] += len(self.links)
        await asyncio.sleep(seconds)
        self.flowing.set()

    def shut(self) -> None:
        if self.server is not None:
            self.server.close()
        for link in list(self.links):
            link.close()


def proxy_process(conn, upstream: tuple[str, int], lifetime: float) -> None:
    """The proxy's process: its own event loop, so that the annotators' load never slows it."""
    uvloop.run(_proxy_main(conn, upstream, lifetime))


async def _proxy_main(conn, upstream: tuple[str, int], lifetime: float) -> None:
    loop = asyncio.get_running_loop()
    proxy = Proxy(upstream)
    await proxy.listen()
    conn.send(proxy.port)
    inbox: asyncio.Queue = asyncio.Queue()

    def receive() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            inbox.put_nowait(None)

    loop.add_reader(conn.fileno(), receive)
    parent, deadline = os.getppid(), loop.time() + lifetime
    faults: set[asyncio.Task] = set()
    try:
        while loop.time() < deadline and os.getppid() == parent:
            try:
                command = await asyncio.wait_for(inbox.get(), 1.0)
            except TimeoutError:
                continue
            if command is None or command[0] == "quit":
                break
            if command[0] == "outage":
                faults.add(asyncio.create_task(proxy.outage(command[1])))
            elif command[0] == "stall":
                faults.add(asyncio.create_task(proxy.stall(command[1])))
            # Every command is answered with the counts (before a fault just started acts).
            conn.send(dict(proxy.counts) | {"open": len(proxy.links)})
    finally:
        loop.remove_reader(conn.fileno())
        for task in faults:
            task.cancel()
        proxy.shut()


class ProxyHandle:
    """The parent's side of the proxy process (forked before any thread or event loop)."""

    def __init__(self, upstream: tuple[str, int], lifetime: float) -> None:
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=proxy_process, args=(child, upstream, lifetime), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(15):
            self.stop()
            raise RuntimeError("the database proxy did not start")
        self.port: int = self.conn.recv()

    def command(self, *command) -> dict[str, int]:
        self.conn.send(command)
        return self.conn.recv() if self.conn.poll(5) else {}

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("quit",))
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# -- uvicorn's workers -------------------------------------------------------------------


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def uvicorn_workers(master: int) -> list[int]:
    """The live worker processes of a uvicorn master (spawned by multiprocessing), from /proc."""
    children: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{master}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{master}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
    # A killed worker not yet reaped is a zombie with an empty command line; the
    # resource tracker runs another module.
    return sorted(c for c in children if b"spawn_main" in _cmdline(c))


# -- the simulated annotators ------------------------------------------------------------


@dataclass
class Soak:
    """What the clients saw, each event with its loop time (windows are cut afterwards)."""

    client: aiohttp.ClientSession
    start: float
    stop_at: float  # no new HIT after this
    deadline: float  # no retry after this
    think: tuple[float, float]
    slow_share: float
    lease_seconds: float
    answered: list[tuple[float, float, int]] = field(default_factory=list)  # (t, ms, status)
    failed: list[tuple[float, str]] = field(default_factory=list)  # (t, connection | timeout)
    gave_up: list[tuple[float, str]] = field(default_factory=list)  # (t, page | submit)
    acks: list[float] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)  # assignment -> judgments acknowledged
    late: int = 0
    resubmitted: int = 0  # submits acknowledged after more than one attempt
    unexpected: Counter = field(default_factory=Counter)
    finished: Counter = field(default_factory=Counter)  # why annotators stopped early
    samples: dict[str, str] = field(default_factory=dict)  # one example per kind of failure
    faults: list[tuple[float, float, str, str]] = field(default_factory=list)  # start, end, ...
    killed: set[int] = field(default_factory=set)  # workers this script SIGKILLed
    workers: list[tuple[float, str, int]] = field(default_factory=list)  # (t, started | gone, pid)
    ended: float = 0.0

    def sample(self, what: str, detail: str) -> None:
        if len(self.samples) < 20 and what not in self.samples:
            title = TITLE.search(detail)  # an HTML page: its title says enough
            self.samples[what] = " ".join((title.group(1) if title else detail).split())[:300]

    async def call(
        self, method: str, url: str, rng: random.Random, form: dict[str, str] | None = None
    ) -> tuple[int, str, str, int] | None:
        """One request, retried on a connection error, a timeout or a 5xx.

        Returns (status, location, body, attempts) of the first answer below 500, or None
        when the attempts or the soak's deadline ran out.
        """
        loop = asyncio.get_running_loop()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            t0, retry_after = loop.time(), 0.0
            try:
                async with self.client.request(method, url, data=form, allow_redirects=False) as r:
                    status, location = r.status, r.headers.get("location", "")
                    body = "" if status == 303 else await r.text()
                    if status == 503:
                        with contextlib.suppress(ValueError):
                            retry_after = float(r.headers.get("retry-after", "0"))
            except TimeoutError as exc:
                self.failed.append((loop.time(), "timeout"))
                self.sample(f"{method} timeout", repr(exc))
            except aiohttp.ClientError as exc:
                self.failed.append((loop.time(), "connection"))
                self.sample(f"{method} {type(exc).__name__}", str(exc))
            else:
                t1 = loop.time()
                self.answered.append((t1, (t1 - t0) * 1000, status))
                if status < 500:
                    return status, location, body, attempt
                self.sample(f"{method} HTTP {status}", body)
            delay = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)
            delay = max(delay, min(retry_after, BACKOFF_MAX))
            if loop.time() + delay > self.deadline:
                break
            await asyncio.sleep(delay)
        return None


async def annotator(soak: Soak, token: str, rng: random.Random, start_after: float) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(start_after)
    link = f"/a/{token}"
    url = link
    for _ in range(MAX_HITS):
        if loop.time() >= soak.stop_at:
            return
        got = await soak.call("GET", url, rng)
        if got is None:
            soak.gave_up.append((loop.time(), "page"))
            url = link
            continue
        status, _, html, _ = got
        if status != 200:
            soak.unexpected[f"page: HTTP {status}"] += 1
            soak.sample(f"page: HTTP {status}", html)
            return
        hit = parse_hit(html)
        if hit is None:
            kind = KIND.search(html)
            soak.finished[kind.group(1) if kind else "unparsed page"] += 1
            return
        public_id, options = hit
        if rng.random() < soak.slow_share:
            wait = soak.lease_seconds + rng.uniform(1.0, 10.0)  # answered after the lease
        else:
            wait = rng.uniform(*soak.think)
        if loop.time() + wait >= soak.stop_at:
            return
        await asyncio.sleep(wait)
        per_item = round(wait * 1000 / max(1, len(options)))
        form = {"assignment": public_id}
        for pos, k in options.items():
            form[f"o{pos}"] = str(rng.randrange(k))
            form[f"ms{pos}"] = str(per_item)
        got = await soak.call("POST", f"{link}/submit", rng, form)  # the same form every time
        if got is None:
            soak.gave_up.append((loop.time(), "submit"))
            url = link
            continue
        status, location, body, attempts = got
        if status == 303 and location.endswith(("?n=ok", "?n=late")):
            soak.acked[public_id] = len(options)
            soak.acks.append(loop.time())
            soak.late += location.endswith("?n=late")
            soak.resubmitted += attempts > 1
            url = location
        else:
            soak.unexpected[f"submit: HTTP {status}"] += 1
            soak.sample(f"submit: HTTP {status}", location or body)
            url = link


async def run_faults(soak: Soak, faults: list[Fault], server: Server, proxy: ProxyHandle) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random("faults")
    for fault in faults:
        await asyncio.sleep(max(0.0, soak.start + fault.at - loop.time()))
        t = loop.time()
        if fault.kind == "kill":
            note = await kill_worker(soak, server.proc.pid, rng)
        else:
            counts = proxy.command(fault.kind, fault.seconds)
            note = (
                f"{counts.get('open', '?')} database connections open, "
                f"{counts.get('connections', '?')} opened so far"
            )
        soak.faults.append((t, t + fault.seconds, fault.label(), note))
        print(f"  {t - soak.start:6.1f} s  {fault.label()}: {note}")


async def kill_worker(soak: Soak, master: int, rng: random.Random) -> str:
    loop = asyncio.get_running_loop()
    before = uvicorn_workers(master)
    if not before:
        return "no uvicorn worker found"
    victim = rng.choice(before)
    soak.killed.add(victim)
    os.kill(victim, signal.SIGKILL)
    t0 = loop.time()
    while loop.time() - t0 < RESTART_WAIT:
        await asyncio.sleep(0.1)
        now = uvicorn_workers(master)
        if victim not in now and len(now) >= len(before):
            new = sorted(set(now) - set(before))
            return f"SIGKILL to worker {victim}; replacement {new} after {loop.time() - t0:.1f} s"
    return f"SIGKILL to worker {victim}; NOT REPLACED within {RESTART_WAIT:.0f} s"


async def watch_workers(soak: Soak, master: int, stop: asyncio.Event) -> None:
    """Every worker that appears or goes, whoever killed it (uvicorn replaces a worker that
    misses its health check, too)."""
    loop = asyncio.get_running_loop()
    known = set(uvicorn_workers(master))
    while not stop.is_set() and loop.time() < soak.deadline + 120:
        await asyncio.sleep(0.25)
        now = set(uvicorn_workers(master))
        soak.workers += [(loop.time(), "started", pid) for pid in sorted(now - known)]
        soak.workers += [(loop.time(), "gone", pid) for pid in sorted(known - now)]
        known = now


async def run_soak(args: argparse.Namespace, server: Server, proxy: ProxyHandle, tokens) -> Soak:
    loop = asyncio.get_running_loop()
    n = len(tokens)
    connector = aiohttp.TCPConnector(limit=n + 10, keepalive_timeout=2.0)
    async with aiohttp.ClientSession(
        base_url=server.base_url,
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=args.request_timeout),
        cookie_jar=aiohttp.DummyCookieJar(),  # annotators carry no cookies
    ) as client:
        start = loop.time()
        soak = Soak(
            client,
            start,
            stop_at=start + args.seconds,
            deadline=start + args.seconds + args.grace,
            think=tuple(args.think),
            slow_share=args.slow_share,
            lease_seconds=args.lease_seconds,
        )
        rng = random.Random(f"{args.seed}:soak")
        tasks = [
            asyncio.create_task(
                annotator(soak, token, random.Random(rng.random()), rng.uniform(0, args.ramp))
            )
            for token in tokens
        ]
        faulter = asyncio.create_task(run_faults(soak, args.faults, server, proxy))
        watching = asyncio.Event()
        watcher = asyncio.create_task(watch_workers(soak, server.proc.pid, watching))
        # Every retry ends by the deadline; a request sent just before it has its timeout.
        budget = soak.deadline - loop.time() + args.request_timeout + 5
        done, pending = await asyncio.wait([*tasks, faulter], timeout=budget)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            if task.exception() is not None:
                exc = task.exception()
                soak.unexpected["client: " + type(exc).__name__] += 1
                soak.sample("client: " + type(exc).__name__, str(exc))
        if pending:
            soak.finished["still running at the end (cancelled)"] += len(pending)
        watching.set()
        await watcher
        soak.ended = loop.time()
    return soak


# -- the report --------------------------------------------------------------------------


@dataclass
class Window:
    start: float  # seconds after the soak's start
    end: float
    faults: list[str]
    acked: int = 0
    s503: int = 0
    other5xx: Counter = field(default_factory=Counter)
    connection: int = 0
    timeouts: int = 0
    gave_up: int = 0
    workers_gone: int = 0
    workers_started: int = 0
    ms: list[float] = field(default_factory=list)


def windows(soak: Soak, width: float, seconds: float, end: float) -> list[Window]:
    """Cut the events into windows of `width` s; what came after `seconds` is one last window."""
    edges = [i * width for i in range(math.ceil(seconds / width))] + [seconds, max(end, seconds)]
    rows = []
    for a, b in itertools.pairwise(edges):
        active = [
            f"{label} @{t - soak.start:.0f}"
            for t, t_end, label, _ in soak.faults
            if a <= t - soak.start < b or (t - soak.start < a < t_end - soak.start)
        ]
        rows.append(Window(a, b, active))

    def row(t: float) -> Window:
        x = t - soak.start
        for w in rows:
            if x < w.end:
                return w
        return rows[-1]

    for t in soak.acks:
        row(t).acked += 1
    for t, ms, status in soak.answered:
        w = row(t)
        w.ms.append(ms)
        if status == 503:
            w.s503 += 1
        elif status >= 500:
            w.other5xx[status] += 1
    for t, what in soak.failed:
        if what == "timeout":
            row(t).timeouts += 1
        else:
            row(t).connection += 1
    for t, _ in soak.gave_up:
        row(t).gave_up += 1
    for t, what, _ in soak.workers:
        if what == "gone":
            row(t).workers_gone += 1
        else:
            row(t).workers_started += 1
    return rows


def window_table(rows: list[Window], seconds: float) -> str:
    lines = [
        "| window (s) | fault | acknowledged | 503 | other 5xx | connection errors | timeouts "
        "| given up | workers gone / started | p50 / p99 ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in rows:
        if w.start >= seconds:
            span = f"{w.start:.0f}+ (grace, {w.end - w.start:.0f} s)"
        else:
            span = f"{w.start:.0f}-{w.end:.0f}"
        other = ", ".join(f"{k}: {v}" for k, v in sorted(w.other5xx.items())) or "0"
        lines.append(
            f"| {span} | {', '.join(w.faults) or '-'} | {w.acked} | {w.s503} | {other} "
            f"| {w.connection} | {w.timeouts} | {w.gave_up} "
            f"| {w.workers_gone} / {w.workers_started} "
            f"| {pct(w.ms, 0.5):.0f} / {pct(w.ms, 0.99):.0f} |"
        )
    return "\n".join(lines)


def check_limits(engine: Engine, seeded: Seeded) -> dict[str, int]:
    """HITs over their replicas and annotators over their cap, raw and without flagged work."""
    sid = seeded.study_id
    submitted = Assignment.status == AssignmentStatus.submitted
    in_study = select(Hit.id).where(Hit.study_id == sid)
    with Session(engine) as s:
        study_cap = s.scalar(select(Study.per_annotator_cap).where(Study.id == sid))
        per_hit = (
            select(
                Assignment.hit_id,
                func.count().label("n"),
                func.sum(case((Assignment.extra_replica, 0), else_=1)).label("counted"),
            )
            .where(Assignment.hit_id.in_(in_study), submitted)
            .group_by(Assignment.hit_id)
            .subquery()
        )
        over_hit = select(func.count()).select_from(per_hit).join(Hit, Hit.id == per_hit.c.hit_id)
        per_annotator = (
            select(
                Assignment.annotator_id,
                func.count().label("n"),
                func.sum(case((Assignment.over_cap, 0), else_=1)).label("counted"),
            )
            .where(Assignment.hit_id.in_(in_study), submitted)
            .group_by(Assignment.annotator_id)
            .subquery()
        )
        cap = func.coalesce(Annotator.hit_cap, study_cap)
        over_annotator = (
            select(func.count())
            .select_from(per_annotator)
            .join(Annotator, Annotator.id == per_annotator.c.annotator_id)
        )

        def flagged(flag) -> int:
            return s.scalar(
                select(func.count()).where(Assignment.hit_id.in_(in_study), submitted, flag)
            )

        return {
            "hits_over_replicas": s.scalar(over_hit.where(per_hit.c.n > Hit.replicas)),
            "hits_over_replicas_unflagged": s.scalar(
                over_hit.where(per_hit.c.counted > Hit.replicas)
            ),
            "annotators_over_cap": s.scalar(over_annotator.where(per_annotator.c.n > cap)),
            "annotators_over_cap_unflagged": s.scalar(
                over_annotator.where(per_annotator.c.counted > cap)
            ),
            "flagged_extra_replica": flagged(Assignment.extra_replica),
            "flagged_over_cap": flagged(Assignment.over_cap),
            "stored_late": flagged(Assignment.late),
        }


FAILURES = (
    "lost",
    "duplicate_positions",
    "same_hit_twice",
    "judgments_without_submit",
    "incomplete_submissions",
    "hits_over_replicas_unflagged",
    "annotators_over_cap_unflagged",
)


def summary_row(args, soak: Soak, check: dict[str, int], load: tuple[float, float]) -> str:
    answered = Counter(status for _, _, status in soak.answered)
    other5xx = sum(v for k, v in answered.items() if k >= 500 and k != 503)
    failed = Counter(what for _, what in soak.failed)
    dup = check["duplicate_positions"] + check["same_hit_twice"]
    return (
        "| date | annotators, seconds | faults | acknowledged (judgments) | stored (judgments) "
        "| lost | stored twice | HITs over replicas raw / unflagged "
        "| annotators over cap raw / unflagged | 503 | other 5xx | connection errors "
        "| timeouts | load average start / end |\n"
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | --- |\n"
        f"| {datetime.now(UTC):%Y-%m-%d} | {args.clients}, {args.seconds:g} "
        f"| {args.schedule} "
        f"| {check['acked_submissions']:,} ({check['acked_judgments']:,}) "
        f"| {check['stored_submissions']:,} ({check['stored_judgments']:,}) "
        f"| {check['lost']} | {dup} "
        f"| {check['hits_over_replicas']} / {check['hits_over_replicas_unflagged']} "
        f"| {check['annotators_over_cap']} / {check['annotators_over_cap_unflagged']} "
        f"| {answered[503]} | {other5xx} | {failed['connection']} | {failed['timeout']} "
        f"| {load[0]:.2f} / {load[1]:.2f} |"
    )


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="an existing database on 127.0.0.1, for CREATE/DROP DATABASE; the proxy forwards "
        "to its host and port",
    )
    p.add_argument("--quick", action="store_true", help=f"90 s, schedule {QUICK_SCHEDULE}")
    p.add_argument("--seconds", type=float, help="the soak's length (420; --quick 90)")
    p.add_argument(
        "--schedule",
        help=f"faults: AT:kill, AT:outage:SECONDS, AT:stall:SECONDS (default {FULL_SCHEDULE})",
    )
    p.add_argument("--window", type=float, help="seconds per row of the table (30; --quick 15)")
    p.add_argument("--clients", type=int, default=200, help="simulated annotators")
    p.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    p.add_argument(
        "--think",
        type=float,
        nargs=2,
        default=(1.0, 5.0),
        metavar=("MIN", "MAX"),
        help="seconds per HIT, uniform",
    )
    p.add_argument("--ramp", type=float, default=10.0, help="annotators arrive over this many s")
    p.add_argument("--slow-share", type=float, default=0.005, help="HITs answered after the lease")
    p.add_argument("--lease-seconds", type=int, default=60, help="the study's lease")
    p.add_argument("--cap", type=int, default=0, help="HITs per annotator (0: the study default)")
    p.add_argument("--replicas", type=int, default=5)
    p.add_argument(
        "--hits-per-length",
        type=int,
        default=0,
        help=f"HITs per prefix length ({len(LENGTHS)} lengths); 0: 1.5 times the expected work",
    )
    p.add_argument("--request-timeout", type=float, default=30.0, help="seconds per attempt")
    p.add_argument("--grace", type=float, default=90.0, help="seconds to finish held HITs")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    args = p.parse_args(argv)
    args.seconds = args.seconds or (90.0 if args.quick else 420.0)
    args.window = args.window or min(args.seconds, 15.0 if args.quick else 30.0)
    if args.schedule is None:
        args.schedule = QUICK_SCHEDULE if args.quick else FULL_SCHEDULE
    if not 10 <= args.seconds <= MAX_SECONDS:
        p.error(f"--seconds must be between 10 and {MAX_SECONDS}")
    try:
        args.faults = parse_schedule(args.schedule, args.seconds)
    except ValueError as exc:
        p.error(str(exc))
    if not 1 <= args.clients <= MAX_CLIENTS or not 1 <= args.workers <= 16:
        p.error(f"--clients must be between 1 and {MAX_CLIENTS}, --workers between 1 and 16")
    if not 0 <= args.think[0] <= args.think[1] <= 600 or not 0 <= args.ramp <= args.seconds:
        p.error("bad --think or --ramp")
    if not 0 <= args.slow_share <= 1 or not 10 <= args.lease_seconds <= 3600:
        p.error("--slow-share is a share (0 to 1), --lease-seconds 10 to 3600")
    if not 1 <= args.replicas <= 50 or not 0 <= args.hits_per_length <= 5000 or args.cap < 0:
        p.error("--replicas 1 to 50, --hits-per-length 0 to 5000, --cap 0 or more")
    if not 1 <= args.request_timeout <= 120 or not 0 <= args.grace <= 600:
        p.error("--request-timeout 1 to 120, --grace 0 to 600")
    if not 1 <= args.window <= args.seconds:
        p.error("--window between 1 and --seconds")
    if make_url(args.pg).host not in LOCAL_HOSTS:
        p.error("--pg must be on 127.0.0.1: the soak cuts and stalls its connections")
    return args


def stop_server(server: Server) -> None:
    """Stop the service; then SIGKILL any of its workers that outlived the master."""
    workers = uvicorn_workers(server.proc.pid)
    server.stop()
    for pid in workers:
        if b"spawn_main" in _cmdline(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _terminate(*_) -> None:
    raise KeyboardInterrupt  # the cleanup in `main` runs on SIGTERM as on Ctrl-C


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Even where started with SIGINT ignored (a background job), an interrupt cleans up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    sys.stdout.reconfigure(line_buffering=True)
    raise_open_files(2 * args.clients + 1024)
    load0 = os.getloadavg()[0]
    print(f"# soak: {' '.join(sys.argv)}")
    print(
        f"machine: {os.cpu_count()} CPUs, shared by the server ({args.workers} uvicorn workers), "
        f"PostgreSQL, the proxy and this load generator; other processes may be running too"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    pg = make_url(args.pg)
    lifetime = args.ramp + args.seconds + args.grace + args.request_timeout + 600
    # Forked first: no thread, engine or event loop exists yet.
    proxy = ProxyHandle((pg.host, pg.port or 5432), lifetime)
    secret = secrets.token_urlsafe(48)
    dbname, url = create_database(args.pg)
    print(f"database: {dbname} (temporary), reached by the service through 127.0.0.1:{proxy.port}")
    engine = create_engine(url)
    server: Server | None = None
    soak: Soak | None = None
    ok = False
    try:
        with engine.begin() as conn:
            upgrade(conn)
        t = time.monotonic()
        mean_think = (args.think[0] + args.think[1]) / 2 + 0.1
        expected = args.clients * args.seconds / mean_think
        per_length = args.hits_per_length or math.ceil(
            1.5 * expected / (len(LENGTHS) * args.replicas)
        )
        seeded = seed_study(
            engine,
            "soak",
            per_length,
            args.replicas,
            args.clients,
            secret,
            args.seed,
        )
        with Session(engine) as s:
            values = {"lease_seconds": args.lease_seconds}
            if args.cap:
                values["per_annotator_cap"] = args.cap
            s.execute(update(Study).where(Study.id == seeded.study_id).values(**values))
            s.commit()
            cap = s.scalar(select(Study.per_annotator_cap).where(Study.id == seeded.study_id))
        print(
            f"study: {seeded.hits} HITs of {seeded.positions} texts, {seeded.replicas} replicas, "
            f"{len(seeded.tokens)} annotators, cap {cap} HITs each, lease {args.lease_seconds} s; "
            f"seeded in {time.monotonic() - t:.1f} s"
        )
        proxy_url = (
            make_url(url)
            .set(host="127.0.0.1", port=proxy.port)
            .render_as_string(hide_password=False)
        )
        server = Server(proxy_url, secret, args.workers)
        server.wait_ready()
        print(
            f"server: {server.cmd} (pid {server.proc.pid}; workers "
            f"{uvicorn_workers(server.proc.pid)})"
        )
        print(
            f"soak: {args.clients} annotators over {args.seconds:g} s (+ up to {args.grace:g} s "
            f"to finish held HITs), think U({args.think[0]:g}, {args.think[1]:g}) s, "
            f"{args.slow_share:.1%} of HITs answered after the lease; faults: {args.schedule}"
        )
        cpu0 = time.process_time()
        soak = uvloop.run(run_soak(args, server, proxy, seeded.tokens))
        client_cpu = time.process_time() - cpu0
        proxy_counts = proxy.command("counts")
        stop_server(server)
        check = check_study(engine, seeded, soak.acked) | check_limits(engine, seeded)
        rows = windows(soak, args.window, args.seconds, soak.ended - soak.start)
        print()
        print(window_table(rows, args.seconds))
        answered = Counter(status for _, _, status in soak.answered)
        print(
            f"\nrequests answered: {len(soak.answered)} "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(answered.items()))}); "
            f"p50 {pct([m for _, m, _ in soak.answered], 0.5):.0f} ms, "
            f"p99 {pct([m for _, m, _ in soak.answered], 0.99):.0f} ms"
        )
        print(
            f"submissions acknowledged: {len(soak.acked)} ({soak.late} late, {soak.resubmitted} "
            f"after a retry); given up: {dict(Counter(w for _, w in soak.gave_up)) or 0}; "
            f"unexpected answers: {dict(soak.unexpected) or 0}; annotators stopped early: "
            f"{dict(soak.finished) or 'none'}"
        )
        print(f"proxy: {proxy_counts}")
        gone = [pid for _, what, pid in soak.workers if what == "gone"]
        others = [pid for pid in gone if pid not in soak.killed]
        print(
            f"uvicorn workers: {len(soak.killed)} SIGKILLed by this script, {len(gone)} gone, "
            f"{sum(what == 'started' for _, what, _ in soak.workers)} started"
            + (f"; WARNING: {len(others)} went without our SIGKILL: {others}" if others else "")
        )
        print(
            f"load generator CPU: {client_cpu:.1f} s = "
            f"{client_cpu * 1000 / max(1, len(soak.acked)):.2f} ms per acknowledged submission"
        )
        for what, detail in soak.samples.items():
            print(f"  sample {what}: {detail}")
        print("\ndatabase: " + ", ".join(f"{k} {v}" for k, v in check.items()))
        bad = {k: check[k] for k in FAILURES if check[k]}
        ok = not bad and check["acked_submissions"] > 0
        load = (load0, os.getloadavg()[0])
        print()
        print(summary_row(args, soak, check, load))
        if ok:
            print("\nOK: every acknowledged submission stored exactly once; no limit broken")
        else:
            print(f"\nFAILED: {bad or 'nothing was acknowledged'}")
    finally:
        if server is not None:
            stop_server(server)
            if not ok:
                print(f"server log: {server.log_path}\n{server.tail()}")
            else:
                os.unlink(server.log_path)
        proxy.stop()
        engine.dispose()
        if args.keep_db:
            print(f"kept database {dbname}")
        else:
            drop_database(args.pg, dbname)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
