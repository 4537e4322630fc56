"""The software a result was made with, so that it can be made again: Python, this project
(version and git revision) and the libraries that shape the figures.

Versions come from the installed packages' metadata: `app` learns torch's and transformers'
versions without importing them (None where a package is not installed, as torch in the web
image). The worker records the same in every item's provenance at precompute time.
"""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from app import __version__
from app.config import ROOT

PACKAGES = ("numpy", "scipy", "torch", "transformers", "tokenizers", "sqlalchemy")


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


@cache
def git_revision(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """(HEAD, whether tracked files have uncommitted changes) when the code runs from a git
    checkout at `root`; (None, None) otherwise (an installed wheel, whose folder may lie
    inside some other repository, is not asked). Once per process: the code that runs is
    the code that was loaded."""
    if not (root / ".git").exists() or not (root / "app" / "__init__.py").exists():
        return None, None
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None, None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return head, None if status is None else bool(status)


def software() -> dict:
    """Python, ebc-judge (version, git revision, local changes) and `PACKAGES`' versions."""
    head, dirty = git_revision()
    return {
        "python": platform.python_version(),
        "ebc_judge": __version__,
        "git_revision": head,
        "git_dirty": dirty,
        "packages": {name: package_version(name) for name in PACKAGES},
    }
