"""Quality and sanity figures from the judgment columns (docs/design.md §1, "Quality and sanity").

Coding as elsewhere: ``choice`` is the model rank of the chosen word, ``1..k`` for
the k shown words and any other code (0 or k+1) for "none"; ``position`` is the
screen position ``0..k-1`` of the chosen word (ignored for "none", which is always
shown last). Choices are shuffled on screen, so an attentive annotator's positions
are uniform; a preference for a position is inattention.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from .assistance import ASSIST_FDR, assistance_signal
from .columns import DATA_KIND, cells, first_index, unique_inverse, unique_values
from .figure import Figure

ROBUST_Z = 3.5
"""|robust z| above which a per-annotator figure is out of line (Iglewicz & Hoaglin)."""


def is_none(choice: np.ndarray, k: int = 5) -> np.ndarray:
    """True where the choice is "none" (any code outside ``1..k``)."""
    choice = np.asarray(choice)
    return (choice < 1) | (choice > k)


def robust_z(x: np.ndarray) -> np.ndarray:
    """``z = 0.6745 (x - median) / MAD`` over the finite values (NaN elsewhere, and
    everywhere when MAD = 0)."""
    x = np.asarray(x, dtype=float)
    ok = np.isfinite(x)
    if ok.sum() < 3:
        return np.full_like(x, np.nan)
    med = np.median(x[ok])
    mad = np.median(np.abs(x[ok] - med))
    if mad == 0:
        return np.full_like(x, np.nan)
    return 0.6745 * (x - med) / mad


def _group_median(group: np.ndarray, n_groups: int, x: np.ndarray) -> np.ndarray:
    """Median of ``x`` per group (vectorised: sort by value, then stably by group; a
    stable sort of small integer codes is a radix sort). NaN sorts last within a group
    and makes that group's median NaN only when it falls in the middle."""
    order = np.argsort(x, kind="stable")
    g = group[order]
    code = np.uint16 if n_groups <= 1 << 16 else np.int64
    order = order[np.argsort(g.astype(code), kind="stable")]
    xs, n = x[order], np.bincount(group, minlength=n_groups)
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    out = np.full(n_groups, np.nan)
    has = n > 0
    lo = start[has] + (n[has] - 1) // 2
    hi = start[has] + n[has] // 2
    out[has] = 0.5 * (xs[lo] + xs[hi])
    return out


def position_chi2(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pearson chi-square of selection counts by screen position against uniform, per row:
    ``X^2 = sum_p (O_p - n/k)^2 / (n/k)``, ``p = P[chi2_(k-1) >= X^2]`` (NaN when n = 0).
    The chi-square approximation wants ``n/k >= 5``."""
    counts = np.asarray(counts, dtype=float)
    n = counts.sum(axis=-1, keepdims=True)
    k = counts.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        e = n / k
        x2 = np.sum((counts - e) ** 2 / e, axis=-1)
    return x2, stats.chi2.sf(x2, k - 1)


@dataclass(frozen=True)
class AnnotatorQuality:
    """Per-annotator figures, one entry per annotator (columns as arrays).

    ``top1_rate[kind]``: share of the annotator's judgments on items of that kind that
    chose the model's top-1 word. ``plurality_agreement``: share of judgments on items
    with other judgments whose choice is among the others' modal choices (NaN without
    overlap). ``attention_accuracy``: share of attention items answered correctly (NaN
    without any). ``position_p``: chi-square p-value of the position counts against
    uniform. ``reference_rate``: share of regular judgments choosing the reference
    model's argmax, ``reference_expected`` the crowd's rate on the same cells,
    ``assist_p`` / ``assist_q`` the LLM-assistance test's p-value and its BH adjustment,
    ``assisted`` its flag (:func:`app.results.stats.assistance.assistance_signal`).
    ``flagged`` and ``reasons`` say which figures are out of line.
    """

    annotator: np.ndarray
    n_judgments: np.ndarray
    n_hits: np.ndarray
    median_seconds: np.ndarray
    share_none: np.ndarray
    top1_rate: dict[int, np.ndarray]
    plurality_agreement: np.ndarray
    attention_accuracy: np.ndarray
    position_chi2: np.ndarray
    position_p: np.ndarray
    flagged: np.ndarray
    reasons: list[list[str]] = field(default_factory=list)
    reference_rate: np.ndarray | None = None
    reference_expected: np.ndarray | None = None
    assist_p: np.ndarray | None = None
    assist_q: np.ndarray | None = None
    assisted: np.ndarray | None = None

    def rows(self) -> list[dict]:
        """One dict per annotator (for an API or a table)."""
        out = []
        for i, a in enumerate(self.annotator):
            out.append(
                {
                    "annotator": a.item() if hasattr(a, "item") else a,
                    "n_judgments": int(self.n_judgments[i]),
                    "n_hits": int(self.n_hits[i]),
                    "median_seconds": float(self.median_seconds[i]),
                    "share_none": float(self.share_none[i]),
                    "top1_rate": {int(k): float(v[i]) for k, v in self.top1_rate.items()},
                    "plurality_agreement": float(self.plurality_agreement[i]),
                    "attention_accuracy": float(self.attention_accuracy[i]),
                    "position_chi2": float(self.position_chi2[i]),
                    "position_p": float(self.position_p[i]),
                    "flagged": bool(self.flagged[i]),
                    "reasons": list(self.reasons[i]),
                }
            )
            if self.assisted is not None:
                out[-1] |= {
                    "reference_rate": float(self.reference_rate[i]),
                    "reference_expected": float(self.reference_expected[i]),
                    "assist_p": float(self.assist_p[i]),
                    "assist_q": float(self.assist_q[i]),
                    "assisted": bool(self.assisted[i]),
                }
        return out


def annotator_quality(
    annotator: np.ndarray,
    hit: np.ndarray,
    item: np.ndarray,
    kind: np.ndarray,
    choice: np.ndarray,
    position: np.ndarray,
    seconds: np.ndarray,
    *,
    attention: np.ndarray | None = None,
    attention_correct: np.ndarray | None = None,
    k: int = 5,
    min_seconds: float = 2.0,
    min_attention: float = 0.8,
    position_alpha: float = 0.001,
    z_limit: float = ROBUST_Z,
    data_kind: int = DATA_KIND,
    length: np.ndarray | None = None,
    reference_agrees: np.ndarray | None = None,
    assist_fdr: float = ASSIST_FDR,
) -> AnnotatorQuality:
    """Per-annotator quality figures and an out-of-line flag.

    Rules (documented thresholds, all parameters): flagged when the median seconds per
    item is below ``min_seconds``; attention accuracy below ``min_attention``; the
    position chi-square p-value below ``position_alpha`` (with at least ``5 k`` word
    choices); or any of median seconds (low side), share of none (high side), top-1 rate
    on ``data`` items and plurality agreement (low side) has a robust z-score beyond
    ``z_limit`` against the other annotators (``z = 0.6745 (x - median) / MAD``).
    Attention items count for attention accuracy only.

    LLM assistance: ``reference_agrees`` says per judgment whether the choice is the
    reference model's argmax (default: the studied model's top-1, ``choice == 1``); the
    per-annotator test against the crowd on the same cells (prefix ``length`` x kind)
    with Benjamini-Hochberg at ``assist_fdr`` flags "agrees with the reference far
    beyond the crowd". A flag, never an exclusion.
    """
    annotator, hit, item = np.asarray(annotator), np.asarray(hit), np.asarray(item)
    kind, choice = np.asarray(kind), np.asarray(choice)
    position, seconds = np.asarray(position), np.asarray(seconds, dtype=float)
    att = np.zeros(annotator.size, bool) if attention is None else np.asarray(attention, bool)
    ids, a = unique_inverse(annotator)
    n_a = ids.size
    none = is_none(choice, k)
    reg = ~att

    def rate(num_mask: np.ndarray, den_mask: np.ndarray) -> np.ndarray:
        num = np.bincount(a, weights=num_mask & den_mask, minlength=n_a)
        den = np.bincount(a, weights=den_mask, minlength=n_a)
        with np.errstate(invalid="ignore", divide="ignore"):
            return num / den

    n_judg = np.bincount(a, minlength=n_a)
    hit_ids, hc = unique_inverse(hit)
    pair_ids = unique_values(a.astype(np.int64) * max(hit_ids.size, 1) + hc)
    n_hits = np.bincount(pair_ids // max(hit_ids.size, 1), minlength=n_a)
    med_sec = _group_median(a, n_a, seconds)
    share_none = rate(none, reg)
    top1 = {int(kd): rate(choice == 1, reg & (kind == kd)) for kd in unique_values(kind[reg])}

    # Agreement with the plurality of the *other* judgments on the same item: the others'
    # counts are the item's counts less one on the judgment's own choice, so their
    # largest count is the item's largest, unless the own choice is its unique largest
    # (then the larger of that count less one and the second largest). Only items with
    # other judgments (the overlap subset) can agree or count.
    _, ii = unique_inverse(item)
    shared = np.flatnonzero(np.bincount(ii)[ii] >= 2)
    mx = np.zeros(ii.size, dtype=np.int64)
    agree = np.zeros(ii.size, dtype=bool)
    if shared.size:
        _, si = unique_inverse(ii[shared])
        cats, cc = unique_inverse(np.where(none[shared], -1, choice[shared]))
        counts = np.bincount(si * cats.size + cc, minlength=(si.max() + 1) * cats.size)
        counts = counts.reshape(-1, cats.size)
        first = counts.max(axis=1)
        rest = counts.copy()
        rest[np.arange(rest.shape[0]), counts.argmax(axis=1)] = -1
        second = np.maximum(rest.max(axis=1), 0)  # 0 when there is one category
        own = counts.ravel()[si * cats.size + cc]
        unique_top = (own == first[si]) & (second[si] < own)
        mx[shared] = np.where(unique_top, np.maximum(own - 1, second[si]), first[si])
        agree[shared] = (own - 1 == mx[shared]) & (mx[shared] > 0)
    plur = rate(agree, reg & (mx > 0))

    if attention_correct is None:
        att_acc = np.full(n_a, np.nan)
    else:
        att_acc = rate(np.asarray(attention_correct, bool), att)

    words = reg & ~none
    pos_counts = np.bincount(
        a[words] * k + position[words].astype(np.int64), minlength=n_a * k
    ).reshape(n_a, k)
    x2, p_pos = position_chi2(pos_counts)

    z_sec, z_none = robust_z(med_sec), robust_z(share_none)
    z_top1 = robust_z(top1.get(data_kind, np.full(n_a, np.nan)))
    z_plur = robust_z(plur)
    checks = [
        (med_sec < min_seconds, f"median time per item below {min_seconds:g} s"),
        (att_acc < min_attention, f"attention accuracy below {min_attention:g}"),
        ((p_pos < position_alpha) & (pos_counts.sum(axis=1) >= 5 * k), "prefers a screen position"),
        (z_sec < -z_limit, "answers much faster than others"),
        (z_none > z_limit, "chooses 'none' much more than others"),
        (np.abs(z_top1) > z_limit, "top-1 rate on data items out of line"),
        (z_plur < -z_limit, "agrees with the plurality much less than others"),
    ]
    agrees = choice == 1 if reference_agrees is None else np.asarray(reference_agrees, bool)
    cell = kind if length is None else cells(np.asarray(length), kind)[1]
    ref_rate, ref_exp, a_p, a_q = (np.full(n_a, np.nan) for _ in range(4))
    assisted = np.zeros(n_a, bool)
    if reg.any():
        sig = assistance_signal(a[reg], cell[reg], agrees[reg], fdr=assist_fdr)
        at = sig.annotator  # codes into ids: annotators with regular judgments
        ref_rate[at], ref_exp[at] = sig.rate, sig.expected
        a_p[at], a_q[at], assisted[at] = sig.p_value, sig.q_value, sig.flagged
    checks.append(
        (assisted, f"agrees with the reference model's top-1 far beyond the crowd "
         f"(BH q <= {assist_fdr:g})")
    )  # fmt: skip
    reasons: list[list[str]] = [[] for _ in range(n_a)]
    flagged = np.zeros(n_a, bool)
    for mask, why in checks:
        for i in np.flatnonzero(mask):
            reasons[i].append(why)
        flagged |= mask
    return AnnotatorQuality(
        annotator=ids,
        n_judgments=n_judg,
        n_hits=n_hits,
        median_seconds=med_sec,
        share_none=share_none,
        top1_rate=top1,
        plurality_agreement=plur,
        attention_accuracy=att_acc,
        position_chi2=x2,
        position_p=p_pos,
        flagged=flagged,
        reasons=reasons,
        reference_rate=ref_rate,
        reference_expected=ref_exp,
        assist_p=a_p,
        assist_q=a_q,
        assisted=assisted,
    )


@dataclass(frozen=True)
class PositionBias:
    """Selection rate by screen position (word choices only) and the share of none."""

    counts: list[int]
    rates: list[Figure]
    share_none: Figure
    chi2: Figure
    p_value: Figure


def position_bias(position: np.ndarray, choice: np.ndarray, *, k: int = 5) -> PositionBias:
    """Study-wide position bias: ``rate_p = #{word choices at screen position p} / #{word
    choices}``, with the chi-square test against ``1/k`` each (see :func:`position_chi2`).
    Under shuffled display and attentive annotators the rates are uniform whatever
    the model or prefix."""
    choice = np.asarray(choice)
    none = is_none(choice, k)
    counts = np.bincount(np.asarray(position)[~none].astype(np.int64), minlength=k)[:k]
    x2, p = position_chi2(counts)
    total = counts.sum()
    return PositionBias(
        counts=counts.tolist(),
        rates=(counts / total if total else counts * np.nan).tolist(),
        share_none=float(none.mean()) if none.size else float("nan"),
        chi2=float(x2),
        p_value=float(p),
    )


def none_share_by_cell(
    choice: np.ndarray, length: np.ndarray, kind: np.ndarray, *, k: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """Share of "none" per cell. Returns ``(cells, share)`` with ``cells`` rows
    ``(length, kind)``."""
    present, cell = cells(np.asarray(length), np.asarray(kind))
    none = is_none(choice, k)
    n = np.bincount(cell, minlength=present.shape[0])
    return present, np.bincount(cell, weights=none, minlength=present.shape[0]) / n


@dataclass(frozen=True)
class Sanity:
    """Sanity figures on ``data`` prefixes.

    ``top1_is_true``: share of data items whose model top-1 is the true next word;
    ``true_shown``: share of data items whose true next word is among the choices;
    ``people_pick_true``: share of judgments on items showing the true next word that
    chose it; ``people_pick_top1_when_true``: share choosing top-1 when top-1 is true.
    """

    n_items: int
    top1_is_true: Figure
    true_shown: Figure
    people_pick_true: Figure
    people_pick_top1_when_true: Figure
    n_judgments_true_shown: int


def sanity(
    item: np.ndarray,
    kind: np.ndarray,
    choice: np.ndarray,
    true_rank: np.ndarray,
    *,
    data_kind: int = DATA_KIND,
) -> Sanity:
    """Sanity checks from ``true_rank``: per judgment, the model rank (1..k) of the true
    next word of its item among the shown choices, 0 when it is not shown (only
    meaningful for ``data`` prefixes; other kinds are ignored)."""
    item, kind = np.asarray(item), np.asarray(kind)
    choice, true_rank = np.asarray(choice), np.asarray(true_rank)
    on = kind == data_kind
    item_ids, codes = unique_inverse(item[on])
    first = first_index(codes, item_ids.size)
    tr_item = true_rank[on][first]
    shown = on & (true_rank > 0)
    top1_true = on & (true_rank == 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return Sanity(
            n_items=int(first.size),
            top1_is_true=float(np.mean(tr_item == 1)) if first.size else float("nan"),
            true_shown=float(np.mean(tr_item > 0)) if first.size else float("nan"),
            people_pick_true=float(np.sum(choice[shown] == true_rank[shown]) / shown.sum()),
            people_pick_top1_when_true=float(np.sum(choice[top1_true] == 1) / top1_true.sum()),
            n_judgments_true_shown=int(shown.sum()),
        )
