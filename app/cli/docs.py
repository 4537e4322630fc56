"""`python -m app.cli.docs > docs/cli.md`: the CLI reference, generated from the Typer app.

The reference is the command tree itself (every group, command, argument and option, with its
help, type and default), so it cannot drift from the code: `tests/test_docs.py` compares the
committed `docs/cli.md` with `render()`. The worker's commands join through the `ebc.cli`
entry points, as they do for `ebc` itself.
"""

from __future__ import annotations

import inspect
import sys
import textwrap

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

WIDTH = 100
HEADER = """\
# The `ebc` command line

Generated from the Typer app by `python -m app.cli.docs > docs/cli.md`; do not edit by hand
(a test compares this file with the generated text). `--help` after any command prints the
same.
Every command is one unit of work on the database named by `DATABASE_URL`
([configuration](configuration.md)); the CLI acts as an administrator.
"""


def command_tree() -> TyperGroup:
    """The `ebc` command as click sees it, the worker's plugin commands included."""
    from app.cli import cli, load_plugins

    load_plugins()
    return typer.main.get_command(cli)


def walk(command, path: tuple[str, ...] = ("ebc",)) -> list[tuple[tuple[str, ...], object]]:
    """Every command and group under `command`, depth first, in `--help` order."""
    found = [(path, command)]
    if isinstance(command, TyperGroup):
        ctx = typer.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            found += walk(command.commands[name], (*path, name))
        hidden = [n for n in command.commands if n not in command.list_commands(ctx)]
        for name in hidden:
            found += walk(command.commands[name], (*path, name))
    return found


def _help(command) -> str:
    return inspect.cleandoc(command.help or command.short_help or "")


def _wrap(text: str, first: str, rest: str = "  ") -> list[str]:
    return textwrap.wrap(
        " ".join(text.split()),
        WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _type(param, ctx) -> str:
    """The parameter's type as `--help` shows it (`int`, `path`, `a|b`), with its bounds;
    nothing for a flag."""
    if isinstance(param, TyperOption) and param.is_flag:
        return ""
    shown = param.display_type(ctx).strip("<>")
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is None and high is None:
        return shown
    base = shown.removesuffix(" range")
    if high is None:
        return f"{base} ≥ {low}"
    if low is None:
        return f"{base} ≤ {high}"
    return f"{base} in [{low}, {high}]"


def _default(param) -> str:
    default = param.default
    if default is None or callable(default) or param.required:
        return ""
    if isinstance(param, TyperOption) and param.is_flag and param.secondary_opts:
        return param.opts[0] if default else param.secondary_opts[0]
    if isinstance(param, TyperOption) and param.is_flag:
        return "" if not default else "on"
    if isinstance(default, (list, tuple)):
        return ", ".join(str(d) for d in default) if default else ""
    return str(getattr(default, "value", default))


def _param_lines(param, ctx) -> list[str]:
    if isinstance(param, TyperArgument):
        name = f"`{(param.metavar or param.name).upper()}`"
    else:
        names = [*param.opts, *param.secondary_opts]
        name = " / ".join(f"`{n}`" for n in names)
    kind = _type(param, ctx)
    facts = [kind] if kind else []
    if default := _default(param):
        facts.append(f"default `{default}`")
    if param.required:
        facts.append("required")
    if getattr(param, "multiple", False):
        facts.append("repeatable")
    help_text = getattr(param, "help", None) or ""
    line = f"{name}" + (f" ({'; '.join(facts)})" if facts else "")
    return _wrap(f"{line}{': ' + help_text if help_text else ''}", "- ")


def _usage(path: tuple[str, ...], command) -> str:
    ctx = typer.Context(command, info_name=path[-1])
    pieces = ["[OPTIONS]"]
    for param in command.get_params(ctx):
        if isinstance(param, TyperArgument):
            name = (param.metavar or param.name).upper()
            name += "..." if param.nargs == -1 else ""
            pieces.append(name if param.required else f"[{name}]")
    if isinstance(command, TyperGroup):
        pieces.append("COMMAND [ARGS]...")
    return " ".join([*path, *pieces])


def render() -> str:
    """docs/cli.md as it should read."""
    root = command_tree()
    lines = [HEADER]
    entries = walk(root)
    lines.append("## Contents\n")
    for path, _command in entries[1:]:
        depth = len(path) - 2
        anchor = "-".join(path)
        lines.append(f"{'  ' * depth}- [`{' '.join(path)}`](#{anchor})")
    lines.append("")
    for path, command in entries[1:]:
        ctx = typer.Context(command, info_name=path[-1])
        level = "##" if len(path) == 2 else "###"
        lines.append(f"{level} `{' '.join(path)}`\n")
        if getattr(command, "hidden", False):
            lines.append("*Hidden from `--help`.*\n")
        if help_text := _help(command):
            for paragraph in help_text.split("\n\n"):
                lines += _wrap(paragraph, "", "")
                lines.append("")
        lines += ["```text", _usage(path, command), "```", ""]
        params = [p for p in command.get_params(ctx) if p.name != "help" and not p.hidden]
        params = [p for p in params if p.name not in ("install_completion", "show_completion")]
        if params:
            for param in params:
                lines += _param_lines(param, ctx)
            lines.append("")
        if isinstance(command, TyperGroup):
            subs = command.list_commands(ctx)
            if subs:
                links = ", ".join(f"[`{s}`](#{'-'.join((*path, s))})" for s in subs)
                lines += _wrap(f"Commands: {links}.", "", "")
                lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
