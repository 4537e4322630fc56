"""The software record of the manifest and of every item's provenance (app.software)."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import version

import numpy
import scipy

from app import __version__
from app.config import ROOT
from app.software import git_revision, software


def _git(root, *args) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_software_names_python_the_project_and_the_libraries():
    made = software()
    assert made["python"] == platform.python_version() and made["ebc_judge"] == __version__
    packages = made["packages"]
    assert packages["numpy"] == numpy.__version__ and packages["scipy"] == scipy.__version__
    # Read from metadata: app/ never imports torch or transformers to learn their versions.
    assert packages["torch"] == version("torch")
    assert packages["transformers"] == version("transformers")
    if (ROOT / ".git").exists():
        assert made["git_revision"] == _git(ROOT, "rev-parse", "HEAD")
        assert isinstance(made["git_dirty"], bool)


def test_git_revision_of_a_checkout_and_of_anything_else(tmp_path):
    assert git_revision(tmp_path) == (None, None)  # e.g. an installed wheel
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "app")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    git_revision.cache_clear()
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_revision(tmp_path) == (head, False)
    (tmp_path / "app" / "__init__.py").write_text("changed = True\n")
    git_revision.cache_clear()
    assert git_revision(tmp_path) == (head, True)
    git_revision.cache_clear()
