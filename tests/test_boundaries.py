"""The architecture's import rules (DESIGN.md §3), checked on the source and at run time."""

import ast
import subprocess
import sys
from pathlib import Path

from app.config import ROOT


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(folder: str, banned: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for name in _imports(path):
            if any(name == b or name.startswith(b + ".") for b in banned):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_app_never_imports_torch_or_transformers():
    assert _violations("app", ("torch", "transformers", "worker")) == []


def test_worker_never_imports_the_web_layer():
    assert _violations("worker", ("app.web", "app.main", "fastapi", "starlette")) == []


def test_the_rule_itself_catches_an_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from torch import nn\n    import transformers.models\n")
    assert _imports(bad) == {"torch", "transformers.models"}


def test_starting_the_web_app_loads_no_torch():
    code = (
        "import sys; from app.main import create_app; import app.cli; create_app(); "
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
