"""EB-M: exposure bias from automatic scores of continuations (the later paper's first
measure; docs/design.md "Second protocol"), with intervals over prompts.

Generation (the worker): a prompt C of data words, a prefix W of l words from the data
(kind ``data``) or sampled from the model given C (``model``; diagnostic kinds alike), then a
continuation of l_gen words sampled from the model given (C, W). For each length l and score
f (all higher-is-better, :mod:`.textscores`):

    EB-M(M, l, f) = f(continuations after data prefixes) / f(continuations after model prefixes)

each f computed against data: BLEU, NIST and METEOR against the **data continuation of the
same prompt** (the dataset line's own next l_gen words after C and l words: for a data
prefix, the true continuation of C + W); **backward-BLEU**, the BLEU of those data
continuations against the kind's continuations as one shared set of references (Shi et al.
2018; it falls when the continuations cover less of what the data says); and the **n-gram
entropy** of the continuations (diversity, no reference). Close to 1: the model continues its
own prefixes as well as the data's; above 1: exposure bias. Note that a data prefix is the
text its reference continues, so reference-based scores favour data prefixes somewhat by
construction; the trend over l is what the paper reads.

The first paper's sequence-level **EB-bleu** is also given: the BLEU of the continuations after
model prefixes against the continuations after data prefixes (all of them, one shared set of
references), a similarity of the two sets (it does not need the data continuations).

**EB-M_gap** (the later paper's self-recovery, eq. 5 / App. A eq. 9): after a shuffled or
corrupted data prefix of l words the model writes l_gap words itself, then the continuation;
EB-M_gap(l, l_gap, f) = f(continuations after the data prefix of l + l_gap words) /
f(continuations after the distorted prefix and the gap), both against the references of the
clean l + l_gap prefix (the dataset line's words after them). Close to 1: the model has
recovered from the distortion within l_gap words. A gap kind is resampled with the data kind
at l + l_gap, paired by prompt when they share them (a ratings study makes them so).

**Translation** (a seq2seq model's continuations: what it writes after a forced prefix of its
translation, the source intact): sacrebleu's corpus BLEU, its sentence BLEU averaged over the
continuations, and its corpus chrF, each against the reference's rest, and the n-gram entropy
(`TRANSLATION_SCORES`); the same resamples and intervals.

Error bars resample **prompts** (each with its prefix, continuation and data continuation), B
times with the seed, and recompute every score on each resample exactly as on the sample
(:mod:`.textscores` scores multisets); ratios and EB-bleu are computed inside each resample.
When the kinds at a length were made from the same prompts (every prompt once per kind), a
resample draws prompts once for all kinds (paired: what is common to a prompt cancels in the
ratio); otherwise each kind's prompts are drawn on their own. Assumes prompts are independent
draws from the data.

- BLEU, NIST, METEOR, sentence BLEU, chrF (sums over continuations): the **percentile
  bootstrap** (SE: the standard deviation of the resampled values).
- Backward-BLEU, the entropy and EB-bleu are not sums: a repeated continuation adds no new
  n-gram, so a resample with replacement (about 63% distinct prompts) lowers a set's entropy
  and its BLEU against a set of references (measured: the percentile interval of the entropy
  then misses its own estimate). They use the **delete-d jackknife** (Shao & Wu 1989): B
  random subsamples of the prompts without replacement, each leaving out ``d = n/10`` of them;
  the spread of the subsample values, times ``(n - d) / d``, estimates the variance (of the log
  value); the interval is normal on the log scale around the estimate,
  ``value * exp(+-z * SE_log)``, and SE is ``value * SE_log``. Against a set of references the
  estimate is conservative (the text at `DELETE_SHARE` says how much).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from .bootstrap import percentile_interval
from .figure import Figure
from .textscores import (
    BLEU_SETTINGS,
    CHRF_SETTINGS,
    ENTROPY_ORDER,
    METEOR_MATCHING,
    NIST_ORDER,
    Meteor,
    NgramEntropy,
    PairedBleu,
    PairedChrf,
    PairedNist,
    SentenceBleu,
    SharedBleu,
)

SCORES = ("bleu", "nist", "meteor", "backward_bleu", "entropy")
"""A language model's scores (the later paper's)."""
TRANSLATION_SCORES = ("bleu", "sentence_bleu", "chrf", "entropy")
"""A translation model's: sacrebleu's corpus and sentence BLEU and chrF against the reference."""
SCORE_SETS = {"lm": SCORES, "seq2seq": TRANSLATION_SCORES}
"""The scores of a study's continuations, by its task."""
SCORE_LABELS = {
    "bleu": "BLEU",
    "nist": "NIST",
    "meteor": "METEOR",
    "backward_bleu": "backward-BLEU",
    "entropy": f"entropy ({ENTROPY_ORDER}-grams)",
    "sentence_bleu": "sentence BLEU",
    "chrf": "chrF",
}
PAIRED = {
    "bleu": PairedBleu,
    "nist": PairedNist,
    "meteor": Meteor,
    "sentence_bleu": SentenceBleu,
    "chrf": PairedChrf,
}
"""Scores of each continuation against its own reference, summed over continuations."""
REFERENCED = (*PAIRED, "backward_bleu")
FEW_PROMPTS = 30
DATA_KIND = "data"
MODEL_KIND = "model"


@dataclass(frozen=True)
class KindTexts:
    """One kind's continuations at one length, one entry per prompt (item).

    ``references[i]``: the data continuation of prompt ``i`` (None: the dataset line ends
    before l_gen more words; such a continuation counts only in the entropy). ``prompts[i]``:
    the prompt's identity (e.g. its dataset line), which pairs kinds made from the same
    prompts.
    """

    continuations: Sequence[str]
    references: Sequence[str | None]
    prompts: Sequence[str]

    def __post_init__(self) -> None:
        n = len(self.continuations)
        if len(self.references) != n or len(self.prompts) != n:
            raise ValueError("one reference and one prompt per continuation")


@dataclass(frozen=True)
class TextScore:
    """Score ``score`` of the continuations after ``kind`` prefixes at ``length``.

    ``degenerate`` (with ``degenerate_reason``, a sentence) flags a score that says
    nothing (:func:`degenerate_reason`): the entropy stuck at its bound, or no spread
    over the resamples; its ``se``, ``low`` and ``high`` are then NaN rather than a
    zero-width interval."""

    length: int
    kind: str
    score: str
    value: Figure
    se: Figure
    low: Figure
    high: Figure
    n: int  # continuations counted: with a data continuation, except for the entropy
    method: str  # the interval's
    degenerate: bool = False
    degenerate_reason: str = ""


@dataclass(frozen=True)
class EBMRatio:
    """``f(data) / f(kind)`` at ``length``: EB-M when ``kind`` is ``model``. Degenerate
    (``se``, ``low``, ``high`` NaN, the reason said) when either score is, or the ratio
    does not vary over the resamples."""

    length: int
    score: str
    kind: str
    value: Figure
    se: Figure
    low: Figure
    high: Figure
    method: str
    degenerate: bool = False
    degenerate_reason: str = ""


@dataclass(frozen=True)
class EBMGapRatio:
    """EB-M_gap (the later paper's eq. 5): ``f(data at l + l_gap) / f(kind at l)`` for the
    gap kind ``kind`` (a distorted prefix of ``length`` = l words, then ``l_gap`` words the
    model wrote, then the continuation), both continuations scored against the same
    references (the data continuations after l + l_gap words). ``paired``: the two were
    resampled by shared prompts. Degenerate as `EBMRatio`."""

    length: int
    l_gap: int
    kind: str
    score: str
    value: Figure
    se: Figure
    low: Figure
    high: Figure
    method: str
    paired: bool = False
    degenerate: bool = False
    degenerate_reason: str = ""
    reference_length: int = 0  # l + l_gap: the data cell it is over


@dataclass(frozen=True)
class EBBleu:
    """The first paper's EB-bleu at ``length``: BLEU of the continuations after model
    prefixes against those after data prefixes (one shared set of references)."""

    length: int
    value: Figure
    se: Figure
    low: Figure
    high: Figure
    n_model: int
    n_data: int
    method: str


@dataclass(frozen=True)
class EBMScores:
    """Every score, ratio and EB-bleu of a study, with how they were resampled."""

    scores: list[TextScore]
    ratios: list[EBMRatio]
    eb_bleu: list[EBBleu]
    b: int
    seed: int
    level: float
    paired_lengths: list[int]  # lengths whose kinds share prompts (resampled together)
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=lambda: list(SCORES))  # the scores computed
    gap_ratios: list[EBMGapRatio] = field(default_factory=list)


def score_settings(names: Sequence[str] = SCORES) -> dict[str, Any]:
    """How the scores ``names`` (and EB-bleu) are computed (recorded with them)."""
    every = {
        "bleu": {**BLEU_SETTINGS, "library": "sacrebleu", "references": "paired"},
        "nist": {"n": NIST_ORDER, "library": "nltk", "references": "paired"},
        "meteor": {"library": "nltk", "matching": METEOR_MATCHING, "references": "paired"},
        "backward_bleu": {**BLEU_SETTINGS, "library": "sacrebleu", "references": "shared"},
        "entropy": {"n": ENTROPY_ORDER, "base": "e", "library": "scipy"},
        "sentence_bleu": {
            **BLEU_SETTINGS,
            "effective_order": True,
            "library": "sacrebleu",
            "references": "paired",
            "aggregate": "mean over continuations",
        },
        "chrf": {**CHRF_SETTINGS, "library": "sacrebleu", "references": "paired"},
    }
    out = {name: every[name] for name in names}
    out["eb_bleu"] = {**BLEU_SETTINGS, "library": "sacrebleu", "references": "shared"}
    return out


# Scores that a resample with replacement biases: a repeated text adds no new n-gram, so a
# set's entropy, and its BLEU against a set of references (an n-gram's clip is its largest
# count in any reference), fall with the number of distinct prompts drawn (about 63% of them).
SUBSAMPLED = ("backward_bleu", "entropy")
# Sums over continuations (the percentile bootstrap): every score in `PAIRED`.
BOOTSTRAP = "percentile bootstrap over prompts"
JACKKNIFE = "delete-d jackknife over prompts, d = n/10 (normal on the log scale)"


@dataclass(frozen=True)
class _Draws:
    """One length's resamples per kind (``B x n`` multiplicities): bootstrap draws, and
    delete-d jackknife subsamples without replacement (0/1, ``n - d`` ones) with their variance
    factor ``(n - d) / d``."""

    boot: dict[str, np.ndarray]
    sub: dict[str, np.ndarray]
    factor: dict[str, float]
    paired: bool


# Share of the prompts a delete-d jackknife subsample leaves out. Measured (60 simulated
# studies of 100 prompts a kind): the entropy's SE at d = n/10 matched its true spread (0.0048
# against 0.0048; d = n/2: 0.0036), the ratios covered 0.93-0.97; set BLEUs are conservative
# at any d (EB-bleu 1.76 against a true 1.15 at n/10; 2.23 at n/2).
DELETE_SHARE = 0.1


def _deleted(n: int) -> int:
    return min(max(1, round(n * DELETE_SHARE)), max(n - 1, 1))


def _factor(n: int) -> float:
    return (n - _deleted(n)) / _deleted(n)


def _subsamples(n: int, b: int, rng: np.random.Generator) -> np.ndarray:
    kept = n - _deleted(n)
    out = np.zeros((b, n))
    if kept > 0:
        pick = np.argsort(rng.random((b, n)), axis=1)[:, :kept]
        np.put_along_axis(out, pick, 1.0, axis=1)
    return out


def _draws(texts: Mapping[str, KindTexts], b: int, rng: np.random.Generator) -> _Draws:
    """Resamples per kind; kinds made from the same prompts (each once) are drawn together."""
    kinds = sorted(texts)
    keys = [list(texts[k].prompts) for k in kinds]
    first = keys[0]
    paired = (
        len(kinds) > 1
        and len(set(first)) == len(first)
        and all(len(k) == len(first) and set(k) == set(first) for k in keys[1:])
    )
    boot, sub, factor = {}, {}, {}
    if paired:
        n = len(first)
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=b)
        h = _subsamples(n, b, rng)
        where = {p: i for i, p in enumerate(first)}
        for k in kinds:
            cols = [where[p] for p in texts[k].prompts]
            boot[k], sub[k], factor[k] = w[:, cols], h[:, cols], _factor(n)
        return _Draws(boot, sub, factor, True)
    for k in kinds:
        n = len(texts[k].continuations)
        boot[k] = rng.multinomial(n, np.full(n, 1.0 / n), size=b)
        sub[k] = _subsamples(n, b, rng)
        factor[k] = _factor(n)
    return _Draws(boot, sub, factor, False)


def _percentile(point: float, boot: np.ndarray, level: float) -> tuple[float, ...]:
    finite = boot[np.isfinite(boot)]
    if not np.isfinite(point) or finite.size < 2:
        return float(point), np.nan, np.nan, np.nan
    low, high = percentile_interval(finite[:, None], level)
    return float(point), float(np.std(finite, ddof=1)), float(low[0]), float(high[0])


def _log_normal(point: float, log_dev: np.ndarray, level: float) -> tuple[float, ...]:
    """Point, SE and interval from subsample deviations of ``log(value)``, already centred
    and scaled by the square root of their variance factor."""
    finite = log_dev[np.isfinite(log_dev)]
    if not (np.isfinite(point) and point > 0) or finite.size < 2:
        return float(point), np.nan, np.nan, np.nan
    se_log = float(np.sqrt(np.mean(finite**2)))
    z = float(stats.norm.ppf(0.5 + level / 2))
    low, high = point * np.exp(-z * se_log), point * np.exp(z * se_log)
    return float(point), float(point * se_log), float(low), float(high)


def _log_dev(values: np.ndarray, factor: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(values > 0, np.log(values), np.nan)
    if not np.isfinite(logs).any():
        return logs
    return np.sqrt(factor) * (logs - np.nanmean(logs))


ENTROPY_AT_BOUND = (
    "every n-gram occurs once: the entropy is at its bound, the log of the number of "
    "n-grams, and measures how much text there is, not how diverse it is (too few "
    "continuations)"
)
NO_SPREAD = "the resamples do not vary (too few continuations): no interval can be given"


def degenerate_reason(
    name: str, point: float, se: float, entropy_bound: float | None = None
) -> str:
    """Why a score (or ratio) says nothing, or "": the entropy at its bound ``log(number
    of n-grams)`` (every n-gram distinct: it then grows with the amount of text alone,
    and a ratio of two such entropies is ~1 whatever the model does), or a finite value
    whose resamples do not vary (``se == 0``: a zero-width interval such as ``[1, 1]``
    would claim a precision the data do not have)."""
    if (
        name == "entropy"
        and entropy_bound is not None
        and np.isfinite(point)
        and point >= entropy_bound - 1e-9
    ):
        return ENTROPY_AT_BOUND
    if np.isfinite(point) and se == 0:
        return NO_SPREAD
    return ""


def _flagged(figs: tuple[float, ...], reason: str) -> tuple[tuple[float, ...], dict]:
    """The figures with their interval dropped when `reason` says they are degenerate."""
    if not reason:
        return figs, {}
    return (figs[0], np.nan, np.nan, np.nan), {"degenerate": True, "degenerate_reason": reason}


def _kind_scores(
    t: KindTexts, boot_m: np.ndarray, sub_m: np.ndarray, names: Sequence[str] = SCORES
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Point values and resampled values of the scores ``names`` of one kind: bootstrap
    values for the sums over continuations (`PAIRED`), delete-d jackknife values for
    `SUBSAMPLED`.  The entropy is always computed (its bound flags a degenerate score)."""
    has_ref = np.array([r is not None for r in t.references], dtype=bool)
    hyps = [c for c, ok in zip(t.continuations, has_ref, strict=True) if ok]
    refs = [r for r in t.references if r is not None]
    n = len(t.continuations)
    points: dict[str, float] = {}
    resampled: dict[str, np.ndarray] = {}
    if refs:
        ones = np.ones((1, len(refs)))
        for name in (x for x in names if x in PAIRED):
            scorer = PAIRED[name](hyps, refs)
            points[name] = float(scorer.scores(ones)[0])
            resampled[name] = scorer.scores(boot_m[:, has_ref])
        if "backward_bleu" in names:
            # The data continuations against the kind's continuations, both from the subsample.
            backward = SharedBleu(refs, list(t.continuations))
            points["backward_bleu"] = float(backward.scores(ones, np.ones((1, n)))[0])
            resampled["backward_bleu"] = backward.scores(sub_m[:, has_ref], sub_m)
    else:
        for name in (x for x in names if x in REFERENCED):
            points[name], resampled[name] = np.nan, np.full(boot_m.shape[0], np.nan)
    entropy = NgramEntropy(list(t.continuations))
    points["entropy"] = float(entropy.scores(np.ones((1, n)))[0])
    resampled["entropy"] = entropy.scores(sub_m)
    total = float(entropy.counts.sum())
    points["entropy_bound"] = float(np.log(total)) if total > 0 else np.nan
    return points, resampled


@dataclass
class _Group:
    """Kinds resampled together (one length's, or a gap kind with the data cell at l + g):
    their draws, and each kind's point and resampled values per score."""

    draws: _Draws
    points: dict[str, dict[str, float]]
    values: dict[str, dict[str, np.ndarray]]


def _score_group(
    texts: Mapping[str, KindTexts],
    rng: np.random.Generator,
    *,
    b: int,
    level: float,
    names: Sequence[str],
    lengths: Mapping[str, int],
    report: Sequence[str],
    scores: list[TextScore],
    warnings: list[str],
) -> _Group:
    """Draw the resamples of ``texts`` and score every kind; the kinds in ``report`` get
    their `TextScore` rows (at ``lengths[kind]``) and their warnings."""
    draws = _draws(texts, b, rng)
    group = _Group(draws, {}, {})
    for kind in sorted(texts):
        t = texts[kind]
        group.points[kind], group.values[kind] = _kind_scores(
            t, draws.boot[kind], draws.sub[kind], names
        )
        if kind not in report:
            continue
        length = lengths[kind]
        n_ref = sum(r is not None for r in t.references)
        n_all = len(t.continuations)
        if n_ref < n_all:
            warnings.append(
                f"l={length} {kind}: {n_all - n_ref} of {n_all} continuations have no data "
                "continuation (their dataset line ends too early) and count only in the "
                "entropy"
            )
        if n_all < FEW_PROMPTS:
            warnings.append(
                f"l={length} {kind}: {n_all} prompts; intervals over fewer than "
                f"{FEW_PROMPTS} prompts are rough"
            )
        for name in names:
            point, vals = group.points[kind][name], group.values[kind][name]
            if name in SUBSAMPLED:
                figs = _log_normal(point, _log_dev(vals, draws.factor[kind]), level)
            else:
                figs = _percentile(point, vals, level)
            n = n_all if name == "entropy" else n_ref
            method = JACKKNIFE if name in SUBSAMPLED else BOOTSTRAP
            why = degenerate_reason(name, figs[0], figs[1], group.points[kind]["entropy_bound"])
            if why:
                warnings.append(f"l={length} {kind}: {SCORE_LABELS[name]}: {why}")
            figs, flag = _flagged(figs, why)
            scores.append(TextScore(length, kind, name, *figs, n=n, method=method, **flag))
    return group


def _ratio(group: _Group, over: str, name: str, level: float) -> tuple[tuple, str, dict]:
    """``f(data) / f(over)`` of score ``name`` in ``group``: figures, method, degenerate flag."""
    points, values, draws = group.points, group.values, group.draws
    with np.errstate(divide="ignore", invalid="ignore"):
        # As a NumPy float: a score of 0 after `over` gives inf or NaN, not ZeroDivisionError.
        point = np.float64(points[DATA_KIND][name]) / points[over][name]
        ratio = values[DATA_KIND][name] / values[over][name]
    if name in SUBSAMPLED:
        factor = max(draws.factor[DATA_KIND], draws.factor[over])
        figs = _log_normal(point, _log_dev(ratio, factor), level)
    else:
        figs = _percentile(point, ratio, level)
    method = JACKKNIFE if name in SUBSAMPLED else BOOTSTRAP
    reasons = [
        degenerate_reason(name, points[k][name], 1.0, points[k]["entropy_bound"])
        for k in (DATA_KIND, over)
    ]
    if not points[over][name]:
        reasons.append(f"{SCORE_LABELS[name]} after {over} prefixes is 0: the ratio is not finite")
    why = next((r for r in reasons if r), "") or degenerate_reason(name, figs[0], figs[1])
    figs, flag = _flagged(figs, why)
    return figs, method, flag


def _gap_seed(seed: int, length: int, gap: int, kind: str) -> list[int]:
    return [seed, length, gap, zlib.crc32(kind.encode("utf-8"))]


def ebm_scores(
    cells: Mapping[int, Mapping[str, KindTexts]],
    *,
    b: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    names: Sequence[str] = SCORES,
    gaps: Mapping[str, int] | None = None,
) -> EBMScores:
    """EB-M per length and score, every kind's scores, EB-bleu and EB-M_gap (module
    docstring).

    ``cells[length][kind]``: the kind's continuations at that length (kinds without
    continuations left out). ``names``: the scores (`SCORE_SETS`: a language model's, or a
    translation model's). Ratios are ``f(data) / f(kind)`` for every kind other than
    ``data``; EB-bleu needs both ``data`` and ``model``. Resample ``r`` of length ``l``
    draws from ``numpy.random.default_rng([seed, l])``, so a length's intervals do not
    depend on the other lengths.

    ``gaps``: the gap kinds' g (``{"data_shuffled+gap@5": 5}``). A gap kind at length l is
    resampled with the ``data`` kind at length l + g (paired when they share their prompts,
    as a ratings study's items do), from ``default_rng([seed, l, g, crc32(kind)])``; its
    scores are reported at l, and EB-M_gap = f(data at l + g) / f(kind at l) with EB-M's
    intervals (`EBMGapRatio`). It never enters its length's EB-M resamples.
    """
    if b < 2:
        raise ValueError("at least 2 bootstrap resamples")
    unknown = [n for n in names if n not in SCORE_LABELS]
    if unknown:
        raise ValueError(f"unknown scores {unknown}")
    names = tuple(names)
    gaps = dict(gaps or {})
    scores: list[TextScore] = []
    ratios: list[EBMRatio] = []
    gap_ratios: list[EBMGapRatio] = []
    eb_bleu: list[EBBleu] = []
    paired_lengths: list[int] = []
    warnings: list[str] = []
    common = {"b": b, "level": level, "names": names, "scores": scores, "warnings": warnings}
    for length in sorted(cells):
        texts = {k: t for k, t in cells[length].items() if len(t.continuations) and k not in gaps}
        if not texts:
            continue
        rng = np.random.default_rng([seed, length])
        group = _score_group(
            texts, rng, lengths=dict.fromkeys(texts, length), report=list(texts), **common
        )
        if group.draws.paired:
            paired_lengths.append(length)
        if DATA_KIND in texts:
            for kind in sorted(k for k in texts if k != DATA_KIND):
                for name in names:
                    figs, method, flag = _ratio(group, kind, name, level)
                    ratios.append(EBMRatio(length, name, kind, *figs, method=method, **flag))
        if DATA_KIND in texts and MODEL_KIND in texts:
            model, data = texts[MODEL_KIND], texts[DATA_KIND]
            draws = group.draws
            shared = SharedBleu(list(model.continuations), list(data.continuations))
            nm, nd = len(model.continuations), len(data.continuations)
            point = float(shared.scores(np.ones((1, nm)), np.ones((1, nd)))[0])
            sub = shared.scores(draws.sub[MODEL_KIND], draws.sub[DATA_KIND])
            factor = max(draws.factor[DATA_KIND], draws.factor[MODEL_KIND])
            figs = _log_normal(point, _log_dev(sub, factor), level)
            eb_bleu.append(EBBleu(length, *figs, n_model=nm, n_data=nd, method=JACKKNIFE))
    for length in sorted(cells):
        for kind in sorted(k for k in cells[length] if k in gaps):
            gap_texts = cells[length][kind]
            if not len(gap_texts.continuations):
                continue
            g = gaps[kind]
            data = cells.get(length + g, {}).get(DATA_KIND)
            texts = {kind: gap_texts}
            if data is not None and len(data.continuations):
                texts[DATA_KIND] = data
            else:
                warnings.append(
                    f"l={length} {kind}: no EB-M_gap, the study has no data continuations at "
                    f"l + g = {length + g}"
                )
            rng = np.random.default_rng(_gap_seed(seed, length, g, kind))
            group = _score_group(texts, rng, lengths={kind: length}, report=[kind], **common)
            if DATA_KIND not in texts:
                continue
            for name in names:
                figs, method, flag = _ratio(group, kind, name, level)
                paired = group.draws.paired
                ratio = EBMGapRatio(
                    length, g, kind, name, *figs, method, paired, **flag,
                    reference_length=length + g,
                )  # fmt: skip
                gap_ratios.append(ratio)
    return EBMScores(
        scores=scores,
        ratios=ratios,
        eb_bleu=eb_bleu,
        b=b,
        seed=seed,
        level=level,
        paired_lengths=paired_lengths,
        settings=score_settings(names),
        warnings=warnings,
        names=list(names),
        gap_ratios=gap_ratios,
    )


__all__ = [
    "ENTROPY_AT_BOUND",
    "FEW_PROMPTS",
    "NO_SPREAD",
    "PAIRED",
    "SCORES",
    "SCORE_LABELS",
    "SCORE_SETS",
    "TRANSLATION_SCORES",
    "EBBleu",
    "EBMGapRatio",
    "EBMRatio",
    "EBMScores",
    "KindTexts",
    "TextScore",
    "degenerate_reason",
    "ebm_scores",
    "score_settings",
]
