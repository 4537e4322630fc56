"""The architecture's import rules (DESIGN.md §3), checked on the source and at run time."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def _resolver(modules: dict[str, Path]):
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return resolve


def _imported(module: str, path: Path, node: ast.AST) -> list[tuple[str, str]]:
    """(module, name) pairs an import statement of `module` binds: ``from m import a`` gives
    ``(m, a)``, ``import m.n`` gives ``(m.n, "")``; relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        return [(alias.name, "") for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{anchor}.{base}".rstrip(".")
        return [(base, alias.name) for alias in node.names]
    return []


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports: at the top, inside a function, and under
    `if TYPE_CHECKING:` (an import only a type checker runs still ties the two modules)."""
    modules = {**_modules("app"), **_modules("worker")}
    resolve = _resolver(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for base, name in _imported(module, path, node):
                targets.add(resolve(f"{base}.{name}" if name else base))
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph`: its strongly connected components of more than one
    module (each sorted), so that a failure names them all at once."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            nxt = next(targets, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return sorted(found)


@pytest.mark.parametrize("package", ["app", "worker"])
def test_the_import_graph_has_no_cycle(package):
    """No import circle among the modules of `package` (one through the other package
    would show under both)."""
    touching = [c for c in _cycles(_import_graph()) if any(m.split(".")[0] == package for m in c)]
    assert touching == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}
    assert _cycles(graph) == [["a", "b"], ["c", "d"]]
    assert _cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_counts_imports_only_a_type_checker_runs(tmp_path, monkeypatch):
    """A circle through `if TYPE_CHECKING:` is a circle: the two modules still depend on
    each other, and the next runtime import between them closes it."""
    import tests.test_boundaries as me

    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from app.b import B\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.a import A\nB = 1\n"
    )
    (tmp_path / "worker").mkdir()
    monkeypatch.setattr(me, "ROOT", tmp_path)
    assert _cycles(_import_graph()) == [["app.a", "app.b"]]


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


# -- private names stay in their module ----------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


FIRST_PARTY = ("app", "worker")


def _private_imports(package: str) -> list[str]:
    """Where a module of `package` takes another module's private name: ``from m import _x``,
    ``import m._x``, or ``m._x`` on a module it imported, `m` one of ours (app, worker).
    What two modules share is public."""
    modules = {**_modules("app"), **_modules("worker")}
    found = []
    for module, path in sorted(_modules(package).items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            for base, name in _imported(module, path, node):
                full = f"{base}.{name}" if name else base
                if full.split(".")[0] not in FIRST_PARTY:
                    continue  # a library's private module is its own business (torch's)
                if (name and _private(name)) or any(_private(p) for p in full.split(".")):
                    found.append(f"{module} imports {full}")
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                for base, name in _imported(module, path, node):
                    as_module = f"{base}.{name}"
                    if as_module in modules:
                        alias = next(a for a in node.names if a.name == name)
                        aliases[alias.asname or name] = as_module
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and _private(node.attr)
            ):
                found.append(f"{module} uses {aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


@pytest.mark.parametrize("package", ["app", "worker"])
def test_no_module_takes_another_module_s_private_name(package):
    assert _private_imports(package) == []


def test_the_private_name_rule_catches_each_form(tmp_path, monkeypatch):
    import tests.test_boundaries as me

    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\ny = 2\n")
    (pkg / "b.py").write_text(
        "from app.a import _x, y as _y\nfrom app import a\nfrom . import a as alias\n"
        "from torch.utils._python_dispatch import TorchDispatchMode\n"  # a library's: its own
        "print(a._x, alias._x, a.y, a.__name__)\n"
    )
    (tmp_path / "worker").mkdir()
    monkeypatch.setattr(me, "ROOT", tmp_path)
    assert _private_imports("app") == [
        "app.b imports app.a._x",
        "app.b uses app.a._x",
    ]


# -- the study type is asked of the registry -------------------------------------------------

# Where a study's type may be named: the registry and the types' own packages.
TYPES_HOME = ("app.studytypes",)
TYPE_NAMES = ("nextword", "ratings")
_TYPE_WORDS = re.compile(r"\bis_ratings\b|\bis_nextword\b|\b_rates\b|\bStudyType\.\w+")


def _mentions_type(node: ast.AST) -> bool:
    """Does the expression name a study type, or read a study's type?"""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and inner.attr in ("study_type",):
            return True
        if isinstance(inner, ast.Attribute) and (
            isinstance(inner.value, ast.Name) and inner.value.id == "StudyType"
        ):
            return inner.attr in TYPE_NAMES
        if isinstance(inner, ast.Name) and _TYPE_WORDS.fullmatch(inner.id):
            return True
        if isinstance(inner, ast.Attribute) and _TYPE_WORDS.fullmatch(inner.attr):
            return True
    return False


def _names_a_type(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in TYPE_NAMES


def _branches(node: ast.AST) -> bool:
    """Does `node` branch on a study type (see `_type_branches_in`)?"""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        if any(_mentions_type(o) for o in operands):
            return True
        return any(_names_a_type(o) for o in operands) and any(
            "type" in ast.unparse(o) for o in operands
        )
    if isinstance(node, ast.If | ast.IfExp | ast.While):
        return _mentions_type(node.test)
    if isinstance(node, ast.Match):
        return _mentions_type(node.subject)
    if isinstance(node, ast.Call):
        return bool(_TYPE_WORDS.search(ast.unparse(node.func)))
    if isinstance(node, ast.Dict):
        return any(k is not None and (_mentions_type(k) or _names_a_type(k)) for k in node.keys)
    return False


def _type_branches_in(tree: ast.AST) -> list[int]:
    """Lines that branch on a study type: a comparison with a study's type or with a type's
    name, a test (`if`, a conditional expression, `match`) that reads one, a call of an
    `is_ratings`-like predicate, a mapping keyed by a type."""
    return sorted({node.lineno for node in ast.walk(tree) if _branches(node)})


TEMPLATE_TYPE = re.compile(r"study_type|\bis_ratings\b|[\"'](?:ratings|nextword)[\"']")


def _type_branches(package: str) -> list[str]:
    found = []
    for module, path in sorted(_modules(package).items()):
        if module.startswith(TYPES_HOME):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{module}:{line}" for line in _type_branches_in(tree)]
    if package == "app":
        for path in sorted((ROOT / "app").rglob("*.html")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("app", "studytypes"):
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if TEMPLATE_TYPE.search(line):
                    found.append(f"{rel}:{n}")
    return found


@pytest.mark.parametrize("package", ["app", "worker"])
def test_only_the_registry_and_the_types_branch_on_a_study_type(package):
    """Code outside `app.studytypes` asks the registry (`STUDY_TYPES[study.study_type]`) for
    what varies, and never names a type (templates included)."""
    assert _type_branches(package) == []


def test_the_type_branch_rule_catches_each_form():
    code = """
if study.study_type is StudyType.ratings: pass
x = a if is_ratings(study) else b
ok = view.study_type == "ratings"
{StudyType.nextword: 1}
match study.study_type:
    case _: pass
default = StudyType.nextword
plugin = STUDY_TYPES[study.study_type]
"""
    assert _type_branches_in(ast.parse(code)) == [2, 3, 4, 5, 6]


# -- one CSV writer ------------------------------------------------------------------------

CSV_HOME = Path("app/csvfiles.py")


def _csv_writers(root: Path, folder: str) -> list[str]:
    """Calls of `csv.writer` / `csv.DictWriter` (or imports of them) outside the one writer."""
    found = []
    for path in sorted((root / folder).rglob("*.py")):
        if path.relative_to(root) == CSV_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            direct = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "csv"
                and node.attr in ("writer", "DictWriter")
            )
            imported = (
                isinstance(node, ast.ImportFrom)
                and node.module == "csv"
                and any(a.name in ("writer", "DictWriter") for a in node.names)
            )
            if direct or imported:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_every_csv_file_is_written_by_the_one_writer():
    """Every export neutralises formulas the same way: app/csvfiles.py writes them all."""
    assert _csv_writers(ROOT, "app") == []


def test_the_csv_writer_rule_catches_each_form(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "a.py").write_text("import csv\nw = csv.writer(None)\n")
    (tmp_path / "app" / "b.py").write_text("from csv import DictWriter\n")
    (tmp_path / "app" / "csvfiles.py").write_text("import csv\nw = csv.writer(None)\n")
    assert _csv_writers(tmp_path, "app") == ["app/a.py:2", "app/b.py:1"]
