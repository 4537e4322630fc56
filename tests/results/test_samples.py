"""The forced-prefix sample tables (app.results.samples) as LaTeX: one column per cell."""

from __future__ import annotations

import re

from app.results.samples import Sample, samples_latex


def _sample(source: str | None) -> Sample:
    return Sample(
        kind="random", label="RAND", length=3, index=0, source=source,
        prompt="", prefix="Le chat noir", continuation="dort sur le tapis.",
    )  # fmt: skip


def _columns(spec: str) -> int:
    """The columns a tabular's spec declares (l, c, r, p{...})."""
    return len(_one_line(spec)) + len(re.findall(r"p\{[^}]*\}", spec))


def _one_line(spec: str) -> list[str]:
    """The spec's columns that do not wrap (l, c, r)."""
    return re.findall(r"[lcr]", re.sub(r"p\{[^}]*\}", "", spec))


def test_every_row_fills_the_columns_it_declares_and_long_text_wraps():
    for source in ("The black cat sleeps on the rug, " * 4, None):
        tex = samples_latex([_sample(source)], "Samples.")
        spec = re.search(r"\\begin\{tabular\}\{(.*)\}\n", tex).group(1)
        body = [line for line in tex.splitlines() if line.endswith("\\\\")]
        cells = {line.count(" & ") + 1 for line in body}
        assert cells == {_columns(spec)}, (spec, cells)
        # only the kind is a one-line column: the source and the text wrap
        assert _one_line(spec) == ["l"] and spec.startswith("l")
