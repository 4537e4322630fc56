"""Forced-prefix samples as the papers print them (the first paper's Tables 1, 5, 8, 9; issue
34): per item its kind (with the paper's label: DATA, NORMAL, UNREL, RAND for translation), the
source (translation), the prompt, the forced prefix (marked) and what the model wrote after it.

Writers for CSV (text cells neutralised against spreadsheet formulas), LaTeX (the prefix
underlined, every text escaped) and HTML (the prefix in ``<u>``, every text escaped).  The rows
come from the worker (`worker.forced.samples_of`: a ratings study's continuations, or
translations after forced prefixes); no page or API serves them yet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from html import escape

from app.csvfiles import write_csv
from app.results.exports import tex_escape


@dataclass(frozen=True)
class Sample:
    """One forced-prefix sample: ``prefix`` is the forced words, ``continuation`` the model's."""

    kind: str
    label: str | None
    length: int
    index: int
    source: str | None
    prompt: str
    prefix: str
    continuation: str
    reference: str | None = None


SAMPLE_FIELDS = list(Sample.__dataclass_fields__)


def samples_csv(samples: list[Sample]) -> str:
    """One line per sample, text cells neutralised (`app.csvfiles`)."""
    return write_csv(SAMPLE_FIELDS, (asdict(s) for s in samples), lineterminator="\n")


def samples_latex(samples: list[Sample], caption: str) -> str:
    """One row per sample: kind (label), source when there is one, then prompt, the prefix
    underlined and the continuation as one text."""
    has_source = any(s.source for s in samples)
    cols = "lp{0.35\\linewidth}p{0.45\\linewidth}" if has_source else "lp{0.8\\linewidth}"
    head = "kind & source & translation \\\\" if has_source else "kind & text \\\\"
    out = ["\\begin{table}[t]", "\\centering", f"\\begin{{tabular}}{{{cols}}}", "\\toprule", head]
    out.append("\\midrule")
    for s in samples:
        kind = tex_escape(f"{s.label} ({s.kind})" if s.label else s.kind)
        text = " ".join(
            p
            for p in (
                tex_escape(s.prompt),
                f"\\underline{{{tex_escape(s.prefix)}}}" if s.prefix else "",
                tex_escape(s.continuation),
            )
            if p
        )
        cells = [kind, tex_escape(s.source or ""), text] if has_source else [kind, text]
        out.append(" & ".join(cells) + " \\\\")
    out += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{{tex_escape(caption)} The forced prefix is underlined.}}",
        "\\end{table}",
        "",
    ]
    return "\n".join(out)


def samples_html(samples: list[Sample]) -> str:
    """A table fragment: the prefix in ``<u>``, every text escaped."""
    rows = []
    for s in samples:
        kind = escape(f"{s.label} ({s.kind})" if s.label else s.kind)
        text = " ".join(
            p
            for p in (
                escape(s.prompt),
                f"<u>{escape(s.prefix)}</u>" if s.prefix else "",
                escape(s.continuation),
            )
            if p
        )
        source = f"<td>{escape(s.source)}</td>" if s.source is not None else ""
        rows.append(f"<tr><td>{kind}</td>{source}<td>{text}</td></tr>")
    return '<table class="grid compact samples">\n' + "\n".join(rows) + "\n</table>\n"
