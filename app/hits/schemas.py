"""What building HITs reports back (CLI, dashboard)."""

from __future__ import annotations

from dataclasses import dataclass, field


class HitBuildError(ValueError):
    """The study cannot be turned into HITs (readable message)."""


@dataclass
class LengthReport:
    """One prefix length: HITs made and what was left over.

    `leftovers` counts the items of each kind that did not fill a whole HIT;
    they stay in the database, unplaced, and a later build with more items
    picks them up.
    """

    length: int
    hits: int = 0
    overlap_hits: int = 0
    attention_placed: int = 0
    attention_promoted: int = 0  # surplus data items turned into attention items
    attention_missing: int = 0  # attention slots left empty for want of items
    leftovers: dict[str, int] = field(default_factory=dict)


@dataclass
class BuildReport:
    study_slug: str
    lengths: list[LengthReport] = field(default_factory=list)

    @property
    def hits(self) -> int:
        return sum(r.hits for r in self.lengths)

    @property
    def leftovers(self) -> int:
        return sum(sum(r.leftovers.values()) for r in self.lengths)

    def lines(self) -> list[str]:
        out = [f"{self.study_slug}: {self.hits} HITs built"]
        for r in self.lengths:
            left = ", ".join(f"{k} {n}" for k, n in sorted(r.leftovers.items()) if n) or "none"
            line = (
                f"  l={r.length}: {r.hits} HITs ({r.overlap_hits} in the overlap subset), "
                f"attention items {r.attention_placed}"
            )
            if r.attention_promoted:
                line += f" ({r.attention_promoted} promoted from surplus data items)"
            if r.attention_missing:
                line += f", {r.attention_missing} attention slots empty (add attention items)"
            out.append(f"{line}; leftover items: {left}")
        return out
