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


def _modules(folder: str) -> dict[str, Path]:
    """Module name -> file, for every module of the package `folder` (not Alembic's scripts,
    which run only inside a migration, nor `__main__`, which runs when imported)."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "migrations" in path.relative_to(ROOT).parts or path.name == "__main__.py":
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _loads_none_of(packages: tuple[str, ...], banned: tuple[str, ...]) -> list[str]:
    """Import every module of `packages` in a fresh interpreter; the banned ones it loaded."""
    names = sorted(m for p in packages for m in _modules(p))
    code = (
        f"import importlib, sys\nfor m in {names!r}:\n    importlib.import_module(m)\n"
        f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(banned)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


def test_the_worker_loads_no_web_framework_even_indirectly():
    assert _loads_none_of(("worker",), ("fastapi", "starlette")) == []


def test_the_app_loads_no_torch_even_indirectly():
    assert _loads_none_of(("app",), ("torch", "transformers", "worker")) == []


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (at the top or inside a function; not
    under `if TYPE_CHECKING:`, which never runs)."""
    modules = {**_modules("app"), **_modules("worker")}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str | None] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                targets.update(resolve(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}".rstrip(".")
                targets.update(resolve(f"{base}.{alias.name}") for alias in node.names)
        graph[module] = {t for t in targets if t and t != module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (as a path that ends where it starts), or []."""
    done: set[str] = set()
    for start in sorted(set(graph) - done):
        path, on_path, stack = [start], {start}, [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                node = path.pop()
                on_path.discard(node)
                done.add(node)
                stack.pop()
                continue
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return []


def test_the_import_graph_has_no_cycle():
    assert _cycle(_import_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def _wait_policy(env: dict[str, str]) -> str:
    """OMP_WAIT_POLICY as torch found it when it loaded, in a process that starts as ``ebc``
    does (the CLI, then the worker's commands as a plugin, then a model)."""
    import os

    code = (
        "import os, sys; from app.cli import load_plugins; load_plugins(); "
        "assert 'torch' not in sys.modules, 'torch loaded before the worker could set it'; "
        "seen = os.environ.get('OMP_WAIT_POLICY'); import worker.hf; "
        "assert 'torch' in sys.modules; print(seen)"
    )
    run_env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=run_env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def test_the_worker_s_torch_loads_with_sleeping_openmp_threads():
    """The worker sets ``OMP_WAIT_POLICY=PASSIVE`` (`worker/__init__.py`) before anything of
    the ``ebc`` process loads torch (libgomp reads it then, once); an operator's own value
    wins."""
    assert _wait_policy({}) == "PASSIVE"
    assert _wait_policy({"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
