"""A study's forced-prefix samples (issue 34; the first paper's Tables 1, 5, 8, 9), made when its
items are done (`worker.runner.Worker`) and stored apart from them (`app.models.ForcedSample`).

For every length and kind of the study's ``[samples]`` section (`SamplesSection`), items
0..``per_kind`` - 1 are made as the worker makes any item of that cell (`make_items`, the
study's seed: deterministic, so a re-run makes the same samples), then continued:

- a language model samples ``words`` words after prompt + prefix, as a ratings study's
  continuations (`worker.continuations`: ancestral sampling, each item's own seed).  A ratings
  study with the same model, dataset, seed, prompt, lengths, kinds and continuation length makes
  these very continuations as its items (`app.studies.samples.ratings_config`; both
  take `SamplesSection.continuation`);
- a translation model translates on after the forced target prefix, the source intact
  (`worker.forced.translate_after`); the row's reference translation is kept for BLEU.

Both are made as a ratings study's items (the spec's ``continuation_words``: every kind's item i
reads the same dataset line), so that the ratings study of the samples (`ratings_config`) makes
these very items, for a translation model too.
"""

from __future__ import annotations

from dataclasses import replace

from app.precompute.datasets import Dataset
from app.studies.schemas import StudyConfig
from worker.prefixes import PrefixItem, PrefixSpec, make_items


def make_samples(
    model, dataset: Dataset, config: StudyConfig, spec: PrefixSpec, cells: list[tuple[int, str]]
) -> list[tuple[PrefixItem, str | None]]:
    """The samples of ``cells`` ((length, kind) pairs of ``config.samples``), each with its
    reference translation (None for a language model)."""
    section = config.samples
    lines = {row.line: row for row in dataset.rows}
    out: list[tuple[PrefixItem, str | None]] = []
    rated = continuation_spec(config, spec)
    for length, kind in cells:
        items = make_items(model, dataset, rated, length, kind, 0, section.per_kind, config.seed)
        out += [(i, _reference(lines, i)) for i in items]
    return out


def _reference(lines: dict, item: PrefixItem) -> str | None:
    """A translation's reference (its row's target), for BLEU; None for a language model."""
    if item.source is None:
        return None
    return " ".join(lines[item.provenance["line"]].words)


def continuation_spec(config: StudyConfig, spec: PrefixSpec) -> PrefixSpec:
    """The settings the samples are made with: the study's (``spec``), continued as
    `SamplesSection.continuation` says (whatever the study's own ratings say); a translation
    model reads only its length (it translates on to the end)."""
    return replace(spec, **config.samples.continuation())
