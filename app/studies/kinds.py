"""The prefix kinds (docs/design.md, "Prefix kinds"): one registry and one grammar for the study
file, the worker and the results.

A kind is written ``base[@c][+gap@g]``: ``base`` names a registered kind (`KINDS`), ``@c`` its
corruption rate (kinds that take one: 0 < c <= 1), ``+gap@g`` the later paper's self-recovery
gap (kinds that take one: 1 <= g <= 1000): after the distorted prefix of l words the model
writes g words itself, and the next words are read after all l + g words.  What a kind is
compared with follows from its entry: a corrupted kind over the uncorrupted kind it corrupts at
the same length (the corruption ratio), a gap kind over ``data`` at length l + g (EB-C_gap).

`parse_kind` keeps its old answer, ``(base, rate)`` of the distorted prefix (so the worker's
distortions apply to a gap kind unchanged); `kind_parts` gives the gap too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_GAP = 1000  # words; as long as the longest prefix length


@dataclass(frozen=True)
class KindInfo:
    """One registered kind.

    ``source``: where its prefix's words come from (``"data"``, ``"model"``, ``"vocabulary"``,
    ``"other_row"``); ``tasks``: the tasks that take it; ``rate``: it takes (needs) ``@c``;
    ``gap``: it may take ``+gap@g``; ``corrupts``: the kind it is a corruption of (its
    corruption ratio's denominator); ``paper_label``: the first paper's name of the kind as a
    forced prefix of a translation (DATA, NORMAL, UNREL, RAND); ``bleu``: a translation after
    such a forced prefix is scored against the reference (DATA and NORMAL: after UNREL or RAND
    words BLEU means nothing, as the first paper warns)."""

    source: str
    tasks: tuple[str, ...] = ("lm", "seq2seq")
    rate: bool = False
    gap: bool = False
    corrupts: str | None = None
    paper_label: str | None = None
    bleu: bool = False


KINDS: dict[str, KindInfo] = {
    "data": KindInfo("data", paper_label="DATA", bleu=True),
    "model": KindInfo("model", paper_label="NORMAL", bleu=True),
    "data_shuffled": KindInfo("data", gap=True),
    "random": KindInfo("vocabulary", paper_label="RAND"),
    "unrelated": KindInfo("other_row", tasks=("seq2seq",), paper_label="UNREL"),
    "data_corrupted": KindInfo("data", rate=True, gap=True, corrupts="data"),
    "model_corrupted": KindInfo("model", rate=True, corrupts="model"),
}
"""Every prefix kind by its base name."""

GAP_TASKS = ("lm",)
"""The tasks that take a gap kind (the later paper's self-recovery is a language model's)."""

_GRAMMAR = re.compile(
    r"^(?P<base>[a-z_]+)(@(?P<rate>0(\.\d+)?|1(\.0+)?))?(\+gap@(?P<gap>[1-9]\d{0,3}))?$"
)


@dataclass(frozen=True)
class KindParts:
    """A kind read: its ``base`` (a `KINDS` key), corruption ``rate`` and ``gap`` (None: none);
    ``distorted`` is the kind without its gap (the prefix of l words before the gap)."""

    base: str
    rate: float | None
    gap: int | None
    distorted: str

    @property
    def info(self) -> KindInfo:
        return KINDS[self.base]


def _usage() -> str:
    return (
        "use data, model, data_shuffled, random, unrelated (translation), data_corrupted@c or "
        "model_corrupted@c with 0 < c <= 1, and data_shuffled+gap@g or data_corrupted@c+gap@g "
        f"with 1 <= g <= {MAX_GAP} (language models)"
    )


def kind_parts(kind: str) -> KindParts:
    """``"data_corrupted@0.3+gap@5"`` -> ``KindParts("data_corrupted", 0.3, 5,
    "data_corrupted@0.3")``; ValueError (a message for the researcher) when it is no kind."""
    if len(kind) > 64:  # the items' kind column
        raise ValueError(f"prefix kind {kind[:20]!r}... is longer than 64 characters")
    m = _GRAMMAR.fullmatch(kind)
    info = KINDS.get(m["base"]) if m else None
    if m is None or info is None:
        raise ValueError(f"unknown prefix kind {kind!r}: {_usage()}")
    rate = float(m["rate"]) if m["rate"] is not None else None
    if info.rate and rate is None:
        raise ValueError(f"prefix kind {kind!r} needs a corruption rate: {m['base']}@c")
    if not info.rate and m["rate"] is not None:
        raise ValueError(f"prefix kind {kind!r}: {m['base']} takes no corruption rate")
    if info.rate and not 0 < rate <= 1:
        raise ValueError(f"corruption rate of {kind!r} must be in (0, 1]")
    gap = int(m["gap"]) if m["gap"] is not None else None
    if gap is not None and not info.gap:
        raise ValueError(
            f"prefix kind {kind!r}: only a shuffled or corrupted data prefix takes a gap "
            "(data_shuffled+gap@g, data_corrupted@c+gap@g)"
        )
    if gap is not None and gap > MAX_GAP:
        raise ValueError(f"the gap of {kind!r} must be between 1 and {MAX_GAP} words")
    distorted = kind.partition("+")[0]
    return KindParts(m["base"], rate, gap, distorted)


def canonical_kind(kind: str) -> str:
    """The one spelling of ``kind`` (a rate without trailing zeros: ``data_corrupted@0.30`` ->
    ``data_corrupted@0.3``, ``@1.0`` -> ``@1``), so that a study cannot name one kind twice and
    the results pair each corrupted kind with its base by name.  ValueError as `kind_parts`."""
    parts = kind_parts(kind)
    if parts.rate is None:
        return kind
    rate = kind.partition("@")[2].partition("+")[0]
    rate = rate.rstrip("0").rstrip(".") if "." in rate else rate
    gap = "" if parts.gap is None else f"+gap@{parts.gap}"
    return f"{parts.base}@{rate}{gap}"


def check_kind_names(kinds: list[str], what: str = "prefix kinds") -> list[str]:
    """``kinds`` as a study file lists them: each a kind in its one spelling
    (`canonical_kind`), none twice; ValueError naming ``what`` otherwise."""
    for kind in kinds:
        if (canonical := canonical_kind(kind)) != kind:
            raise ValueError(f"write the prefix kind {kind!r} as {canonical!r}")
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"{what} must be distinct")
    return kinds


def parse_kind(kind: str) -> tuple[str, float | None]:
    """`"data_corrupted@0.3"` -> `("data_corrupted", 0.3)`; `"model"` -> `("model", None)`;
    a gap kind gives its distorted prefix's (`"data_shuffled+gap@5"` -> `("data_shuffled",
    None)`: `kind_parts` has the gap)."""
    parts = kind_parts(kind)
    return parts.base, parts.rate


def gap_of(kind: str) -> int | None:
    """The gap g of a gap kind (None for every other kind)."""
    return kind_parts(kind).gap


def task_only_kinds(task: str) -> tuple[str, ...]:
    """Base kinds that only ``task`` takes (translation: ``unrelated``)."""
    return tuple(b for b, info in KINDS.items() if info.tasks == (task,))


def kinds_refused(kinds: list[str], task: str) -> list[str]:
    """The kinds among ``kinds`` that a study of ``task`` cannot make."""
    out = []
    for kind in kinds:
        parts = kind_parts(kind)
        if task not in parts.info.tasks or (parts.gap is not None and task not in GAP_TASKS):
            out.append(kind)
    return out


def forced_translation_kind(kind: str) -> bool:
    """A kind the first paper forces on a translation (its ``paper_label``: DATA, NORMAL, UNREL,
    RAND), without a corruption rate or gap: what a translation's ratings study continues."""
    parts = kind_parts(kind)
    return parts.info.paper_label is not None and parts.rate is None and parts.gap is None
