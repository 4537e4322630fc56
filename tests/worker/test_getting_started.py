"""docs/getting-started.md, run as written: its files and its commands, in order.

The page's titled code blocks (```toml title="study.toml"```) are written into a fresh
directory, and every command of its shell blocks runs there as a user runs it (`ebc ...`, a
subprocess on the default SQLite database of that directory), on a tiny word-level GPT-2
and a tiny Marian saved with `save_pretrained` where the page's study files expect them.
`ebc serve` runs in the background; a simulated crowd (`ebc simulate-http`) stands in for the
people the page sends the links to. The page's Python block (a download from the hub) and
`make` lines are the only ones not run here (`tests/test_docs.py` checks the targets exist).
"""

from __future__ import annotations

import csv
import os
import random
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from transformers import MarianConfig, MarianMTModel

from app.config import ROOT
from tests.markdown import SHELLS, ebc_args, shell_commands, split_markdown
from tests.worker.conftest import WORDS, sp_tokenizer, tiny_gpt2, word_tokenizer

PAGE = ROOT / "docs" / "getting-started.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(n: int, lo: int, hi: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


def _save_models_and_data(root: Path) -> None:
    """What the page's reader brings: a causal LM and a translation model saved by
    `save_pretrained`, a text dataset and a TSV of pairs, at the paths its study files name."""
    tok = word_tokenizer()
    tiny_gpt2(tok, seed=1, init=0.2).save_pretrained(root / "models/my-model")
    tok.save_pretrained(root / "models/my-model")
    sp = sp_tokenizer()
    torch.manual_seed(4)
    config = MarianConfig(
        vocab_size=len(sp), d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=sp.pad_token_id,
        eos_token_id=sp.eos_token_id, decoder_start_token_id=sp.pad_token_id,
        forced_eos_token_id=None, init_std=0.3,
    )  # fmt: skip
    marian = MarianMTModel(config).eval()
    marian.generation_config.decoder_start_token_id = sp.pad_token_id
    marian.save_pretrained(root / "models/my-mt")
    sp.save_pretrained(root / "models/my-mt")
    (root / "data").mkdir()
    (root / "data/lines.txt").write_text("\n".join(_lines(300, 22, 40, 0)) + "\n")
    sources, targets = _lines(120, 6, 14, 1), _lines(120, 12, 18, 2)
    pairs = [f"{s}\t{t}" for s, t in zip(sources, targets, strict=True)]
    (root / "data/pairs.tsv").write_text("\n".join(pairs) + "\n")


def _env(base_url: str) -> dict[str, str]:
    # The page's defaults: no DATABASE_URL (var/ebc.db in the working directory), development.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EBC_") and k != "DATABASE_URL"}
    env.update(
        EBC_BASE_URL=base_url,
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        # This checkout's code, whichever checkout the virtual environment was installed from.
        PYTHONPATH=str(ROOT),
    )
    return env


def _ebc(args: list[str], *, cwd: Path, env: dict, stdin: str | None = None):
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=cwd, env=env, input=stdin,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _wait_for(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"ebc serve exited: {proc.stdout.read()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.3)
    pytest.fail(f"{url} did not answer in {seconds} s")


def test_the_getting_started_recipe_runs_as_written(tmp_path):
    _save_models_and_data(tmp_path)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = _env(base)
    blocks, _ = split_markdown(PAGE.read_text(encoding="utf-8"), PAGE)
    out: dict[str, str] = {}
    ran: list[str] = []
    server = None
    try:
        for block in blocks:
            title = re.search(r'title="([^"]+)"', block.info)
            if title:
                (tmp_path / title.group(1)).write_text(block.text + "\n", encoding="utf-8")
                continue
            if block.lang not in SHELLS:
                continue
            for line, argv in shell_commands(block):
                if argv[0] == "make":
                    continue  # installing: this environment is installed already
                args = ebc_args(argv)
                assert args is not None, f"getting-started.md:{line}: not run by this test"
                command = shlex.join(["ebc", *args])
                if args[0] == "serve":
                    server = subprocess.Popen(
                        [sys.executable, "-m", "app.cli", *args, "--port", str(port)],
                        cwd=tmp_path, env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    )  # fmt: skip
                    _wait_for(f"{base}/healthz", server)
                    with open(tmp_path / "links.csv", newline="") as fh:
                        link = next(csv.DictReader(fh))["link"]
                    page = httpx.get(link, timeout=10)  # an invite link, as a browser opens it
                    assert page.status_code == 200
                    assert "None of the above is plausible" in page.text
                    # The people the links go to: a simulated crowd through the same pages.
                    crowd = _ebc(["simulate-http", "my-study", base], cwd=tmp_path, env=env)
                    assert crowd.returncode == 0, crowd.stdout + crowd.stderr
                    out["crowd"] = crowd.stdout
                    ran.append(command)
                    continue
                stdin = "a password long enough\n" if "--password" in args else None
                result = _ebc(args, cwd=tmp_path, env=env, stdin=stdin)
                assert result.returncode == 0, f"{command}:\n{result.stdout}{result.stderr}"
                full = block.text.splitlines()[line - block.line - 1]
                if ">" in full:  # the page redirects this one to a file
                    target = full.split(">", 1)[1].split()[0]
                    (tmp_path / target).write_text(result.stdout, encoding="utf-8")
                out[command] = result.stdout
                ran.append(command)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)

    # Every step of the page ran, in its order.
    assert ran[:3] == [
        "ebc db upgrade",
        "ebc admin create-user me --admin --password -",
        "ebc study create --config study.toml --owner me",
    ]
    assert "ebc serve" in ran and ran.index("ebc serve") < ran.index("ebc results my-study")
    # The study, its items and HITs.
    assert re.search(r"^my-study\t\w+\tlm\tl=10,20", out["ebc study list"], re.M)
    assert "power" in out["ebc simulate my-study"]
    assert re.search(r"job \d+: done, (\d+)/\1 items", out["ebc precompute my-study"])
    built = out["ebc hits build my-study --attention attention.jsonl"]
    assert re.search(r"my-study: \d+ HITs built", built)
    assert re.search(r"l=10: .*attention items [1-9]", built)  # the page's attention items
    # Invite links that a browser opens on a page of choices.
    with open(tmp_path / "links.csv", newline="") as fh:
        links = [row["link"] for row in csv.DictReader(fh)]
    assert len(links) == 20 and all(link.startswith(f"{base}/a/") for link in links)
    # Results from the judgments the crowd handed in, in the page's three formats.
    assert re.search(r"did \d+ HITs, ([1-9]\d*) judgments acknowledged", out["crowd"])
    table = out["ebc results my-study"]
    assert re.search(r"^\s+10\s+\d\.\d{3} \[", table, re.M)
    assert re.search(r"^\s+20\s+\d\.\d{3} \[", table, re.M)
    with open(tmp_path / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {row["length"] for row in rows} >= {"10", "20"}
    assert "\\begin{tabular}" in out["ebc results my-study --format latex"]
    # The translation study.
    assert re.search(r"job \d+: done, (\d+)/\1 items", out["ebc precompute my-mt-study"])
    assert re.search(r"my-mt-study: [1-9]\d* HITs built", out["ebc hits build my-mt-study"])
