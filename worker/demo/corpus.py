"""The demo corpus: Jane Austen's six novels from Debian's ``r-cran-janeaustenr`` package, as
paragraphs (see `worker.demo`, step 1)."""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEB_PACKAGE = "r-cran-janeaustenr"
# The novels in the order of publication (the R package's variable names).
AUSTEN_NOVELS = (
    "sensesensibility",
    "prideprejudice",
    "mansfieldpark",
    "emma",
    "northangerabbey",
    "persuasion",
)
# Bump when the paragraph extraction or the tokenisation changes: it invalidates the caches.
TEXT_FORMAT = 1

_CHAPTER = re.compile(r"^(chapter|volume)\s+([ivxlc]+|\d+)\.?$", re.IGNORECASE)
_END = re.compile(r"^(the end|finis|a note on the text)\.?$", re.IGNORECASE)


class CorpusError(RuntimeError):
    """The corpus could not be fetched, read or used; the message says what to do."""


# What to do where Debian's package cannot be had (no apt-get: another distribution, macOS).
OWN_TEXT = (
    "To train the demo model on a plain-text file of your own instead (UTF-8 prose, one "
    "paragraph per line, a few hundred paragraphs or more), run `ebc demo --corpus FILE`."
)


def fetch_austen(cache_dir: Path) -> list[str]:
    """The paragraphs of Jane Austen's six novels, one string each (original case and spacing
    inside a paragraph collapsed to single spaces).

    Downloads Debian's ``r-cran-janeaustenr`` into ``cache_dir`` with ``apt-get download``
    (running ``apt-get update`` first when the package lists are empty or the download fails),
    unpacks it with ``dpkg -x`` and reads the R lazy-load data.  The paragraphs are cached in
    ``cache_dir/austen-paragraphs-v{TEXT_FORMAT}.txt``; later calls read that file only.
    Raises `CorpusError` with instructions when apt-get or dpkg is missing or fails.
    """
    cache_dir = Path(cache_dir).resolve()
    cached = cache_dir / f"austen-paragraphs-v{TEXT_FORMAT}.txt"
    if cached.exists():
        return [line for line in cached.read_text(encoding="utf-8").split("\n") if line]
    cache_dir.mkdir(parents=True, exist_ok=True)
    deb = _download_deb(cache_dir)
    root = cache_dir / "janeaustenr"
    shutil.rmtree(root, ignore_errors=True)
    _run(["dpkg", "-x", str(deb), str(root)], cache_dir, "unpack the package")
    novels = read_austen_novels(root)
    paragraphs = [p for name in AUSTEN_NOVELS for p in austen_paragraphs(novels[name])]
    tmp = cached.with_suffix(".tmp")
    tmp.write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    tmp.replace(cached)
    return paragraphs


def _run(cmd: list[str], cwd: Path, what: str) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None:
        raise CorpusError(
            f"`{cmd[0]}` is not available, so the demo cannot {what}: the demo model is trained "
            f"on Jane Austen's novels from Debian's {DEB_PACKAGE} package.  {OWN_TEXT}  (Or put "
            f"that package's .deb file, from any Debian mirror, into {cwd}.)"
        )
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _apt_lists_empty() -> bool:
    return not glob.glob("/var/lib/apt/lists/*Packages*")


def _download_deb(cache_dir: Path) -> Path:
    found = sorted(cache_dir.glob(f"{DEB_PACKAGE}_*.deb"))
    if found:
        return found[-1]
    download = ["apt-get", "download", DEB_PACKAGE]
    update = ["apt-get", "update"]
    tried_update = False
    if _apt_lists_empty():
        _run(update, cache_dir, "update the package lists")
        tried_update = True
    proc = _run(download, cache_dir, "download the corpus")
    if proc.returncode != 0 and not tried_update:
        upd = _run(update, cache_dir, "update the package lists")
        tried_update = True
        proc = _run(download, cache_dir, "download the corpus")
        if proc.returncode != 0 and upd.returncode != 0:
            proc.stderr += "\n(apt-get update also failed: " + upd.stderr.strip()[-500:] + ")"
    found = sorted(cache_dir.glob(f"{DEB_PACKAGE}_*.deb"))
    if proc.returncode != 0 or not found:
        raise CorpusError(
            f"`apt-get download {DEB_PACKAGE}` failed in {cache_dir} "
            f"(exit {proc.returncode}): {proc.stderr.strip()[-800:]}\n"
            f"The demo model is trained on Jane Austen's novels from that Debian package.  Run "
            f"`sudo apt-get update` and retry, or put the package's .deb file into {cache_dir} "
            f"(any Debian mirror has it).  {OWN_TEXT}"
        )
    return found[-1]


def read_lazyload_db(stem: Path, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Read the variables of an R lazy-load database ``stem.rdx`` + ``stem.rdb`` (as R writes
    for a package's ``R/`` code and ``data/``), converted by ``rdata`` (a character vector
    becomes a numpy array of str).

    Format: the ``.rdx`` is an RDS file (gzip-compressed R serialization) of a list with
    ``variables`` (name -> (offset, length) into the ``.rdb``), ``references`` (environments)
    and ``compressed``.  Each ``.rdb`` entry is a 4-byte big-endian uncompressed length, for
    ``compressed`` 2 or 3 a one-byte method (``Z`` zlib, ``2`` bzip2, ``X`` xz, ``0`` none),
    then the compressed R serialization (zlib when ``compressed`` is TRUE).
    ``names`` restricts the variables read (others may refer to environments).
    """
    import rdata

    stem = Path(stem)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = rdata.read_rds(stem.with_name(stem.name + ".rdx"))
    blob = stem.with_name(stem.name + ".rdb").read_bytes()
    compressed = int(_scalar(index.get("compressed", True)))
    out: dict[str, Any] = {}
    for name, where in index["variables"].items():
        name = str(name)
        if names is not None and name not in names:
            continue
        offset, length = (int(x) for x in where)
        entry = blob[offset : offset + length]
        size = int.from_bytes(entry[:4], "big")
        raw = _decompress(entry[4:], compressed)
        if len(raw) != size:
            raise CorpusError(f"{stem}.rdb: entry {name!r} has {len(raw)} bytes, expected {size}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = rdata.parser.parse_data(raw, extension=".rds")
            out[name] = rdata.conversion.convert(parsed)
    return out


def _scalar(value: Any) -> Any:
    try:
        return value[0]
    except (TypeError, IndexError, KeyError):
        return value


def _decompress(data: bytes, compressed: int) -> bytes:
    if compressed in (0, 1):
        return zlib.decompress(data) if compressed else data
    method, payload = data[:1], data[1:]
    if method == b"Z":
        return zlib.decompress(payload)
    if method == b"2":
        import bz2

        return bz2.decompress(payload)
    if method == b"X":
        import lzma

        return lzma.decompress(payload)
    if method == b"0":
        return payload
    raise CorpusError(f"unknown compression method {method!r} in an R lazy-load database")


def read_austen_novels(package_root: Path) -> dict[str, list[str]]:
    """The lines of each novel from an unpacked ``r-cran-janeaustenr`` (``dpkg -x`` output or
    an R library directory), keyed by the package's variable names (`AUSTEN_NOVELS`)."""
    package_root = Path(package_root)
    stems = sorted(
        p.with_suffix("")
        for p in package_root.rglob("*.rdx")
        if p.parent.name in ("data", "R") and p.with_suffix(".rdb").exists()
    )
    novels: dict[str, list[str]] = {}
    for stem in stems:
        try:
            found = read_lazyload_db(stem, names=AUSTEN_NOVELS)
        except Exception:  # the package's R code database may hold what rdata cannot convert
            continue
        for name, value in found.items():
            novels.setdefault(name, [str(x) if x is not None else "" for x in value])
    missing = [n for n in AUSTEN_NOVELS if n not in novels]
    if missing:
        raise CorpusError(
            f"{package_root}: no R lazy-load data with the novels {missing}; is it {DEB_PACKAGE}?"
        )
    return novels


def austen_paragraphs(lines: Sequence[str]) -> list[str]:
    """Paragraphs of one novel's lines (as in Project Gutenberg: blank lines between
    paragraphs): consecutive non-empty lines joined with single spaces.

    Dropped: front matter (everything before the first chapter heading), chapter and volume
    headings, footnotes (``*...``) and separators (``* * *``), and everything from the end mark
    on (``THE END``, ``FINIS``, the editor's "A NOTE ON THE TEXT").
    """
    blocks: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        line = line.strip()
        if line:
            current.append(line)
        elif current:
            blocks.append(" ".join(" ".join(current).split()))
            current = []
    out: list[str] = []
    started = False
    for block in blocks:
        if _CHAPTER.match(block):
            started = True
            continue
        if not started:
            continue
        if _END.match(block):
            break
        if block.startswith("*") or not re.search(r"[A-Za-z]", block):
            continue
        out.append(block)
    return out
