"""Forced-prefix samples as the papers print them (the first paper's Tables 1, 5, 8, 9; issue
34): per item its kind (with the paper's label: DATA, NORMAL, UNREL, RAND for translation), the
source (translation), the prompt, the forced prefix (marked) and what the model wrote after it.

Writers for CSV (text cells neutralised against spreadsheet formulas), LaTeX (the prefix
underlined, every text escaped) and HTML (the prefix in ``<u>``, every text escaped).  The rows
come from the worker (`worker.forced.samples_of`: a ratings study's continuations, or
translations after forced prefixes); a study's samples are stored by the worker
(`app.models.ForcedSample`) and served by the dashboard's samples page and the API.

BLEU (`sentence_bleu`, `corpus_bleu`): sacrebleu's, against the reference translation, for the
kinds whose BLEU means something (`app.studies.kinds.KindInfo.bleu`: DATA and NORMAL), with
EB-M's settings (`app.results.stats.textscores.BLEU_SETTINGS`: the texts are the dataset's
words, ``tokenize="none"``; 4-grams, "exp" smoothing; a sentence's with effective order).  The
hypothesis is the whole translation, forced prefix and continuation.  sacrebleu is imported
inside them: the worker computes them when it stores samples, a web request only reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from html import escape

from app.csvfiles import write_csv
from app.results.exports import tex_escape
from app.results.stats.textscores import bleu_metric
from app.studies.kinds import kind_parts

BLEU_NOTE = (
    "BLEU against the reference translation, for DATA and NORMAL prefixes only: after UNREL "
    "or RAND words the translation begins with words the reference cannot hold, so BLEU "
    "would measure the forced words rather than the model (the first paper's warning)."
)


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
    bleu: float | None = None  # sentence BLEU (`sentence_bleu`), where it means something

    @property
    def text(self) -> str:
        """The whole text after the prompt: forced prefix and continuation (BLEU's
        hypothesis for a translation)."""
        return " ".join(p for p in (self.prefix, self.continuation) if p)


SAMPLE_FIELDS = list(Sample.__dataclass_fields__)


def scored(kind: str, reference: str | None) -> bool:
    """Whether a sample of ``kind`` gets a BLEU: a translation (it has a reference) after a
    kind whose BLEU means something (DATA, NORMAL)."""
    return reference is not None and kind_parts(kind).info.bleu


def sentence_bleu(hypothesis: str, reference: str) -> float:
    """sacrebleu's sentence BLEU (0-100) of one translation against its reference."""
    return float(bleu_metric(effective_order=True).sentence_score(hypothesis, [reference]).score)


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """sacrebleu's corpus BLEU (0-100), one reference per hypothesis."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses and {len(references)} references")
    return float(bleu_metric(effective_order=False).corpus_score(hypotheses, [references]).score)


def cell_bleu(samples: list[Sample]) -> list[dict]:
    """Corpus BLEU per (length, kind) over the samples that get one (`scored`; skipped ones,
    without a continuation, are left out): ``[{"length", "kind", "n", "bleu"}]``."""
    cells: dict[tuple[int, str], list[Sample]] = {}
    for s in samples:
        if s.continuation is not None and scored(s.kind, s.reference):
            cells.setdefault((s.length, s.kind), []).append(s)
    return [
        {
            "length": length,
            "kind": kind,
            "n": len(group),
            "bleu": corpus_bleu([s.text for s in group], [s.reference for s in group]),
        }
        for (length, kind), group in sorted(cells.items())
    ]


def samples_csv(samples: list[Sample]) -> str:
    """One line per sample, text cells neutralised (`app.csvfiles`)."""
    return write_csv(SAMPLE_FIELDS, (asdict(s) for s in samples), lineterminator="\n")


def marked_text(s: Sample, esc: Callable[[str], str], mark: str) -> str:
    """Prompt, forced prefix and continuation as one text, each escaped by ``esc``, the prefix
    put into ``mark`` (a format string: ``"<u>{}</u>"``)."""
    prefix = mark.format(esc(s.prefix)) if s.prefix else ""
    return " ".join(p for p in (esc(s.prompt), prefix, esc(s.continuation)) if p)


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
        text = marked_text(s, tex_escape, "\\underline{{{}}}")
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
    """A table fragment: the prefix in ``<u>``, every text escaped; a BLEU column when a
    sample has one."""
    has_bleu = any(s.bleu is not None for s in samples)
    rows = []
    for s in samples:
        kind = escape(f"{s.label} ({s.kind})" if s.label else s.kind)
        text = marked_text(s, escape, "<u>{}</u>")
        source = f"<td>{escape(s.source)}</td>" if s.source is not None else ""
        bleu = "" if not has_bleu else f"<td>{'' if s.bleu is None else f'{s.bleu:.1f}'}</td>"
        rows.append(f"<tr><td>{kind}</td>{source}<td>{text}</td>{bleu}</tr>")
    return '<table class="grid compact samples">\n' + "\n".join(rows) + "\n</table>\n"


def stored_samples(rows) -> list[Sample]:
    """Stored samples (`app.models.ForcedSample` rows, or anything with their columns) as
    `Sample`s, skipped ones (no continuation) left out."""
    return [
        Sample(
            kind=r.kind,
            label=kind_parts(r.kind).info.paper_label if r.source is not None else None,
            length=r.length,
            index=r.index,
            source=r.source,
            prompt=r.prompt or "",
            prefix=r.prefix,
            continuation=r.continuation,
            reference=r.reference,
            bleu=(r.scores or {}).get("bleu"),
        )
        for r in rows
        if r.continuation is not None
    ]
