"""The README and docs/ say only what is true of the code: every `ebc` command they show parses
against the CLI's own command tree (its subcommand path, options and values), every `make`
target exists, every relative link and anchor resolves, and docs/cli.md is the text that
`python -m app.cli.docs` generates. The README stays a front door (at most 200 lines)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from app.cli.docs import command_tree, render, walk
from app.config import ROOT
from tests.markdown import (
    SHELLS,
    Block,
    anchors,
    ebc_args,
    github_slug,
    links,
    shell_commands,
    split_markdown,
)

README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The pages by audience that the README sends readers to (issue 31).
PAGES = (
    "getting-started",
    "crowd",
    "statistics",
    "benchmarks",
    "configuration",
    "cli",
    "operations",
    "design",
    "architecture",
)
MAX_README_LINES = 200
MAX_LINE = 100


def documents() -> list[Path]:
    return [README, ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


class CommandError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def parse_ebc(args: list[str]) -> tuple[str, ...]:
    """Parse `ebc ARGS` as the CLI would, running nothing: every command's callback is
    replaced by a recorder on a fresh command tree. Returns the command path that would run;
    raises CommandError with the parser's exception class name."""
    tree = command_tree()
    ran: list[tuple[str, ...]] = []
    for path, command in walk(tree):
        command.callback = (lambda p: lambda *a, **k: ran.append(p))(path)
    try:
        tree.main(args=list(args), prog_name="ebc", standalone_mode=False)
    except Exception as exc:  # the parser's own errors (typer's vendored click)
        raise CommandError(type(exc).__name__, str(exc)) from None
    assert ran, f"nothing would run for ebc {shlex.join(args)}"
    return ran[-1]


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][A-Za-z0-9_.-]*)\s*:(?!=)", makefile, re.M))


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every shell command line shown in a code block: (where, argv)."""
    found = []
    for path in documents():
        blocks, _ = split_markdown(path.read_text(encoding="utf-8"), path)
        for block in blocks:
            if block.lang in SHELLS:
                for number, argv in shell_commands(block):
                    found.append((f"{path.relative_to(ROOT)}:{number}", argv))
    return found


INLINE_EBC = re.compile(r"`((?:\.venv/bin/)?ebc(?: [^`]+)?)`")


def inline_commands() -> list[tuple[str, str]]:
    """`ebc ...` spans in the prose (placeholders allowed: the path and the option names are
    checked, not the values)."""
    found = []
    for path in documents():
        _, prose = split_markdown(path.read_text(encoding="utf-8"), path)
        for number, line in prose:
            for span in INLINE_EBC.findall(line):
                found.append((f"{path.relative_to(ROOT)}:{number}", span))
    return found


# --------------------------------------------------------------------------- the checks


def test_the_pages_by_audience_exist_and_the_readme_links_each():
    missing = [page for page in PAGES if not (DOCS / f"{page}.md").is_file()]
    assert missing == []
    targets = {target.split("#")[0] for _, target in links(README)}
    assert [p for p in PAGES if f"docs/{p}.md" not in targets] == []


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    text = "\n".join(lines)
    # The two commands of a fresh machine, as the Makefile defines them.
    assert re.search(r"^make demo\b", text, re.M) and re.search(r"^make test\b", text, re.M)


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_lines_are_readable(path):
    """Prose and code lines wrap at 100 characters; a table row cannot wrap, except in the
    README, whose tables are narrow. docs/design.md is the team's DESIGN.md as it is."""
    if path == DOCS / "design.md":
        return
    blocks, prose = split_markdown(path.read_text(encoding="utf-8"), path)
    long = [
        f"{path.name}:{n} ({len(line)})"
        for n, line in prose
        if len(line) > MAX_LINE and (path == README or not line.lstrip().startswith("|"))
    ]
    for block in blocks:
        if block.lang in ("json", "jsonl"):  # one record a line
            continue
        long += [
            f"{path.name}:{block.line + 1 + i} ({len(line)})"
            for i, line in enumerate(block.text.splitlines())
            if len(line) > MAX_LINE
        ]
    assert long == []


def test_every_command_in_a_code_block_exists_in_the_cli():
    commands = documented_commands()
    ebc_lines = [(where, args) for where, argv in commands if (args := ebc_args(argv)) is not None]
    assert len(ebc_lines) >= 20  # the recipe, the crowd channels, operations
    failures = []
    for where, args in ebc_lines:
        try:
            parse_ebc(args)
        except CommandError as exc:
            if "does not exist" in str(exc):  # a file of the reader's, e.g. Batch_results.csv
                continue
            failures.append(f"{where}: ebc {shlex.join(args)}: {exc}")
    assert failures == []


def test_every_make_target_shown_exists():
    targets = make_targets()
    shown = [
        (where, t)
        for where, argv in documented_commands()
        if argv[0] == "make"
        for t in argv[1:]
        if not t.startswith("-") and "=" not in t
    ]
    assert {t for _, t in shown} >= {"demo", "test"}
    assert [f"{where}: make {t}" for where, t in shown if t not in targets] == []


def test_every_ebc_span_in_the_prose_names_a_real_command_and_options():
    # A span may use placeholders (`--cents N`) and name a group (`ebc crowd`): only an
    # unknown command, an unknown option or a stray argument is wrong.
    spans = inline_commands()
    assert len(spans) >= 10
    wrong = []
    for where, span in spans:
        args = shlex.split(span)[1:]
        try:
            parse_ebc(args)
        except CommandError as exc:
            message = str(exc)
            if exc.kind == "NoSuchOption" or (
                "No such command" in message or "unexpected extra argument" in message
            ):
                wrong.append(f"{where}: {span}: {message}")
    assert wrong == []


def test_the_command_check_can_fail():
    """The checker itself: a misspelt subcommand, an unknown option, a bad value, a missing
    argument and a bare group are refused; the results group's `ebc results STUDY` form and a
    plugin command (the worker's) are found."""
    for args, kind in [
        (["crowd", "publsh", "s"], "UsageError"),
        (["hits", "build", "s", "--atention", "f.jsonl"], "NoSuchOption"),
        (["annotators", "invite", "s", "--count", "many"], "BadParameter"),
        (["study", "share", "s"], "MissingParameter"),
        (["crowd"], "UsageError"),
    ]:
        with pytest.raises(CommandError) as caught:
            parse_ebc(args)
        assert caught.value.kind == kind, (args, str(caught.value))
    assert parse_ebc(["results", "my-study", "--format", "csv"]) == ("ebc", "results", "show")
    assert parse_ebc(["results", "score", "s"]) == ("ebc", "results", "score")
    assert parse_ebc(["worker", "--once", "--device", "cpu"]) == ("ebc", "worker")
    block = Block(README, 1, "sh", "sh", "X=1 ebc db upgrade && ebc serve \\\n  --port 9 # c")
    assert shell_commands(block) == [
        (2, ["ebc", "db", "upgrade"]),
        (2, ["ebc", "serve", "--port", "9"]),
    ]


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for path in documents():
        for number, target in links(path):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no such heading)")
    assert broken == []


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n## `ebc crowd publish`\n\nSee [x](#a-title).\n")
    assert anchors(page) == {"a-title", "ebc-crowd-publish"}
    assert links(page) == [(5, "#a-title")]
    assert github_slug("Crowd channels: what works where") == "crowd-channels-what-works-where"


def test_every_study_file_shown_is_valid():
    from app.studies.service import StudyError, parse_config

    shown, wrong = 0, []
    for path in documents():
        blocks, _ = split_markdown(path.read_text(encoding="utf-8"), path)
        for block in blocks:
            if block.lang == "toml":
                shown += 1
                try:
                    parse_config(block.text, f"{path.relative_to(ROOT)}:{block.line}")
                except StudyError as exc:
                    wrong.append(str(exc))
    assert shown >= 4 and wrong == []


def test_docs_cli_md_is_the_generated_reference():
    committed = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/cli.md is stale: python -m app.cli.docs > docs/cli.md"


def test_the_generated_reference_lists_every_command_and_option():
    text = render()
    for path, _command in walk(command_tree())[1:]:
        assert f"`{' '.join(path)}`" in text
    assert "### `ebc results score`" in text and "### `ebc results ebm`" in text
    assert "- `--shards-per-claim` (int ≥ 1)" in text
