"""`ebc demo` (what `make demo` runs) on a machine without apt-get: a message that names
the alternative, `ebc demo --corpus FILE`, and no traceback."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from app.cli import cli, load_plugins


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """Runs `ebc demo --no-serve ARGS` in this process with a PATH that has no apt-get or
    dpkg (as on macOS or Fedora) and a data folder of its own."""
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'ebc.db'}")
    monkeypatch.setenv("EBC_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("EBC_ENV", "development")
    monkeypatch.chdir(tmp_path)
    load_plugins()  # `ebc demo` joins the CLI through the worker's entry point
    return lambda *args: CliRunner().invoke(cli, ["demo", "--no-serve", *args])


def test_without_apt_get_the_demo_names_the_alternative(demo):
    done = demo()
    assert done.exit_code == 1 and not isinstance(done.exception, RuntimeError)
    assert "error: `apt-get` is not available" in done.stderr
    assert "ebc demo --corpus FILE" in done.stderr


def test_a_missing_corpus_file_is_a_usage_error(demo, tmp_path):
    done = demo("--corpus", str(tmp_path / "nope.txt"))
    # The usage error's box wraps a long path at the terminal's width: read it unwrapped.
    flat = re.sub(r"[\s│╭╮╰╯─]", "", done.stderr)
    assert done.exit_code == 2 and "nope.txt" in flat and "doesnotexist" in flat


def test_a_corpus_too_small_to_train_on_is_a_message(demo, tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("one two three\nfour five\n", encoding="utf-8")
    done = demo("--corpus", str(tiny), "--steps", "2")
    assert done.exit_code == 1 and not isinstance(done.exception, ValueError)
    assert "the demo corpus is too small" in done.stderr and "--corpus FILE" in done.stderr
