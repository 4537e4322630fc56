"""Synthetic results of a study with a reference model (``[reference]``: P_D is a second
model): the worker's per-item divergences (``items.reference``, via
``queries.load_references``) turned into CGD per cell and metric, EB-C per length, the
corruption ratios and each gap kind's EB-C_gap (the later paper's App. A eq. 9: CGD after
the distorted prefix of l words and the model's g words over CGD after the data prefix of
l + g words, exact with d_JS as the paper plots it), by
:func:`app.results.stats.synthetic_table`.

Pure given the loaded columns; the results document (``synthetic``) and the diagnostics
table (:mod:`~.diagnostics`) both take their numbers from :func:`synthetic_results` (the
results page computes it once for both), so the two agree for the same options.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from app.models import Study
from app.results.schemas import ResultQuery, SyntheticEbcRow, SyntheticOut
from app.results.stats import (
    DATA_KIND,
    METRIC_LABELS,
    METRICS,
    MODEL_KIND,
    SyntheticFigure,
    synthetic_table,
)
from app.studies.kinds import KINDS, KindParts, kind_parts
from app.studytypes.nextword.queries import References


def reference_model(study: Study) -> str | None:
    """The study's reference model (P_D), or None when it has none."""
    return (study.reference or {}).get("model") or None


def parts_of(kind: str) -> KindParts:
    """A kind's parts (`app.studies.kinds.kind_parts`); a name that is no prefix kind (the
    attention items', ``"other"``) as a base of its own without rate or gap."""
    try:
        return kind_parts(kind)
    except ValueError:
        return KindParts(kind, None, None, kind)


def corruption_reference(kind: str) -> str | None:
    """The kind a corrupted kind's corruption ratio is over (the kind it corrupts, at the same
    length); None for every other kind, a corrupted gap kind included (its ratio is EB-C_gap)."""
    parts = parts_of(kind)
    if parts.gap is not None or parts.base not in KINDS:
        return None
    return parts.info.corrupts


def gap_codes(kinds: list[str]) -> dict[int, int]:
    """The gap kinds among ``kinds`` by code, with their g (for EB-C_gap)."""
    return {code: g for code, kind in enumerate(kinds) if (g := parts_of(kind).gap)}


def ratio_pairs(kinds: list[str]) -> list[tuple[int, ...]]:
    """The ratios every synthetic table computes, as (numerator, denominator[, g]) kind
    codes: EB-C (model over data), each corrupted kind over the kind it corrupts (its
    corruption ratio), each gap kind over data at l + g (EB-C_gap)."""
    pairs: list[tuple[int, ...]] = [(MODEL_KIND, DATA_KIND)]
    for code, kind in enumerate(kinds):
        over = corruption_reference(kind)
        if over is not None and over in kinds:
            pairs.append((code, kinds.index(over)))
    pairs += [(code, DATA_KIND, g) for code, g in gap_codes(kinds).items()]
    return pairs


def _name(kinds: list[str], code: object) -> object:
    if isinstance(code, int | np.integer):
        return kinds[int(code)] if 0 <= int(code) < len(kinds) else "other"
    return code


def _named(f: SyntheticFigure, kinds: list[str]) -> SyntheticFigure:
    return replace(f, kind=_name(kinds, f.kind), reference_kind=_name(kinds, f.reference_kind))


def synthetic_results(study: Study, refs: References, query: ResultQuery) -> SyntheticOut | None:
    """Synthetic CGD, EB-C, corruption ratios and EB-C_gap of `study` from its items' divergences,
    with the results' options (``b``, ``seed``, ``level``); None without a reference model."""
    model = reference_model(study)
    if model is None:
        return None
    kinds = refs.kinds
    use = refs.computed & (refs.kind >= 0)
    table = synthetic_table(
        refs.length[use],
        refs.kind[use],
        refs.values[use],
        metrics=METRICS,
        pairs=ratio_pairs(kinds),
        b=query.b,
        seed=query.seed,
        level=query.level,
        kind_names=kinds,
    )
    cells = [
        replace(
            c,
            kind=_name(kinds, c.kind),
            cgd={m: _named(f, kinds) for m, f in c.cgd.items()},
        )
        for c in table.cells
    ]
    ratios = [_named(f, kinds) for f in table.ratios]
    warnings = list(table.warnings)
    pending = int(len(refs) - refs.computed.sum())
    if pending:
        warnings.append(
            f"{pending} of {len(refs)} items have no divergences from the reference model yet "
            "(precompute under way, or items made before the study had one): left out"
        )
    others = [m for m in refs.models if m != model]
    if others:
        warnings.append(
            f"items record the reference model(s) {', '.join(others)}, not only the study's {model}"
        )
    by_length: dict[int, dict[str, SyntheticFigure]] = {}
    for f in ratios:
        if f.name == "ebc":
            by_length.setdefault(f.length, {})[f.metric] = f
    return SyntheticOut(
        reference_model=model,
        item_models=refs.models,
        methods=refs.methods,
        n_items=int(use.sum()),
        n_items_pending=pending,
        metrics=list(METRICS),
        metric_labels=dict(METRIC_LABELS),
        b=table.b,
        seed=table.seed,
        level=table.level,
        interval=table.interval,
        cells=cells,
        ebc=[SyntheticEbcRow(length=ln, ebc=figs) for ln, figs in sorted(by_length.items())],
        corruption_ratios=[f for f in ratios if f.name == "ratio"],
        ebc_gap=[f for f in ratios if f.name == "ebc_gap"],
        warnings=warnings,
    )
