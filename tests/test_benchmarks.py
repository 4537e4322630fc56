"""Every script under benchmarks/ still imports: they share helpers (most from
`benchmarks/precompute.py`) and are run by hand, so a renamed helper would otherwise break one
unnoticed until someone needs its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_every_benchmark_script_imports():
    names = sorted(p.stem for p in BENCHMARKS.glob("*.py"))
    assert {"precompute", "continuations", "synthetic"} <= set(names)
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(BENCHMARKS)!r})\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BENCHMARKS.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
