"""Reading the project's Markdown as the docs tests need it: fenced code blocks (with their
language and title), the prose around them, the commands of shell blocks, headings' anchors
as GitHub makes them, and relative links."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

SHELLS = {"sh", "bash", "shell", "console"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    info: str
    text: str


def split_markdown(text: str, path: Path) -> tuple[list[Block], list[tuple[int, str]]]:
    """Fenced code blocks, and the numbered lines outside them."""
    blocks, prose = [], []
    fence = None
    body: list[str] = []
    start, info = 0, ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence, start, info, body = stripped[:3], number, stripped[3:].strip(), []
        elif fence is not None and stripped.startswith(fence) and not stripped[3:].strip():
            lang = info.split()[0] if info else ""
            blocks.append(Block(path, start, lang, info, "\n".join(body)))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append((number, line))
    assert fence is None, f"{path.name}: a code block opened at line {start} is never closed"
    return blocks, prose


def shell_commands(block: Block) -> list[tuple[int, list[str]]]:
    """The simple commands of a shell block: (line, argv), with continuation lines joined,
    comments, prompts and leading VAR=value assignments dropped, cut at a redirection."""
    found = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        number, line = block.line + 1 + i, lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i]
        i += 1
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        segment: list[str] = []
        for token in [*tokens, ";"]:
            if token and set(token) <= set(";&|()"):
                if segment:
                    found.append((number, segment))
                segment = []
            else:
                segment.append(token)
    commands = []
    for number, argv in found:
        for stop in ("<", ">", ">>", "2>", "2>&1"):
            if stop in argv:
                argv = argv[: argv.index(stop)]
        while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
            argv = argv[1:]
        if argv:
            commands.append((number, argv))
    return commands


def ebc_args(argv: list[str]) -> list[str] | None:
    """The arguments after `ebc` (or `.venv/bin/ebc`, `python -m app.cli`); None for other
    commands."""
    if Path(argv[0]).name == "ebc":
        return argv[1:]
    if (
        len(argv) > 2
        and Path(argv[0]).name.startswith("python")
        and argv[1:3]
        == [
            "-m",
            "app.cli",
        ]
    ):
        return argv[3:]
    return None


def github_slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    _, prose = split_markdown(path.read_text(encoding="utf-8"), path)
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose:
        match = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_slug(match.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
    return found


LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[tuple[int, str]]:
    _, prose = split_markdown(path.read_text(encoding="utf-8"), path)
    found = []
    for number, line in prose:
        line = re.sub(r"`[^`]*`", "", line)
        for target in LINK.findall(line):
            found.append((number, next(t for t in target if t)))
    return found
