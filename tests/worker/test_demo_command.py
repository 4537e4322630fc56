"""The README's demo command, end to end in a temporary directory (tiny model, small counts)."""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

EBC = str(Path(sys.executable).with_name("ebc"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def corpus(tmp_path) -> Path:
    rng = random.Random(0)
    words = [
        "the",
        "of",
        "and",
        "to",
        "a",
        "in",
        "was",
        "she",
        "her",
        "it",
        "not",
        "be",
        "that",
        "he",
        "had",
        "his",
        "as",
        "for",
        "you",
        "with",
    ]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(24, 40))) for _ in range(400)]
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _start_demo(tmp_path, corpus, port):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'ebc.db'}",
        "EBC_DATA_DIR": str(tmp_path / "var"),
        "EBC_ENV": "development",
        "OMP_NUM_THREADS": "1",
    }
    args = ["demo", "--port", str(port), "--steps", "20", "--max-seconds", "60",
            "--corpus", str(corpus), "--items-per-cell", "10", "--simulated-crowd"]  # fmt: skip
    return subprocess.Popen(
        [EBC, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _read_until_serving(proc, seconds=300) -> str:
    out, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail("demo exited early:\n" + "".join(out))
        out.append(line)
        if "Uvicorn running" in line or "Application startup complete" in line:
            return "".join(out)
    pytest.fail("demo did not start serving:\n" + "".join(out))


def test_demo_runs_the_whole_loop_and_is_fast_the_second_time(tmp_path, corpus):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start_demo(tmp_path, corpus, port)
    try:
        out = _read_until_serving(proc)
        assert "job" in out and "done, " in out  # precompute ran
        assert "attention items added (the demo's attention file)" in out
        assert "SIMULATED crowd (sampler) over HTTP on demo-austen" in out
        done = re.search(r"simulated annotators did (\d+) HITs", out)
        # Of 4 HITs, the crowd leaves some for the newcomer's link (at most half of the
        # open assignments, at most DEMO_LEFT).
        assert done and 1 <= int(done.group(1)) < 4, out[-3000:]
        username, password = re.search(r"admin login:\s+(\S+) / (\S+)", out).groups()
        link = re.search(r"annotator link:\s+(\S+)", out).group(1)
        assert httpx.get(f"{base}/healthz").json()["status"] == "ok"
        page = httpx.get(link)
        assert page.status_code == 200 and "None of the above is plausible" in page.text
        # A results page on a loaded machine may take more than httpx's default 5 s.
        with httpx.Client(base_url=base, follow_redirects=True, timeout=120) as c:
            form = c.get("/login").text
            token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
            r = c.post("/login", data={"username": username, "password": password,
                                       "csrf_token": token, "next": "/dashboard"})  # fmt: skip
            assert r.status_code == 200 and "demo-austen" in r.text
            results = c.get("/dashboard/studies/demo-austen/results", params={"b": 200})
            assert results.status_code == 200 and "Power and budget planner" in results.text
            assert 'id="simulated"' in results.text and "from a simulated crowd" in results.text
            assert "CGD(M|D) data" in results.text and "data:image/svg+xml" in results.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    started = time.monotonic()
    proc = _start_demo(tmp_path, corpus, port)
    try:
        out = _read_until_serving(proc)
        elapsed = time.monotonic() - started
        assert "reusing the demo model" in out
        assert "simulated crowd: not run (it ran on an earlier start" in out
        assert httpx.get(f"{base}/healthz").status_code == 200
        print(f"second start: {elapsed:.1f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
