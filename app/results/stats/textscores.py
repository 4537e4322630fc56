"""Automatic text scores of sets of continuations (EB-M), as resamplable statistics.

A scorer takes its texts once; ``scores(m)`` then gives the score of every multiset of them
described by a row of ``m`` (``B x N``: text ``i`` counted ``m[b, i]`` times), which is how
:mod:`.ebm` resamples prompts (bootstrap multiplicities, or 0/1 jackknife subsamples). With
``m`` all ones each score is the library's own value on the texts, and with any ``m`` the
library's value on the corpus with the texts repeated (tests/results/stats/test_textscores.py
checks both):

- **BLEU** (Papineni et al. 2002): sacrebleu's corpus BLEU, 4-grams, brevity penalty, its
  corpus default smoothing ("exp"), ``tokenize="none"``: the texts are already the study's
  words (docs/design.md §1), so no tokenizer splits them again. Per-hypothesis match counts add
  up; ``BLEU.compute_bleu`` turns a resample's sums into its score.
  :class:`PairedBleu`: one reference per hypothesis (the data continuation of the same
  prompt). :class:`SharedBleu`: every hypothesis against one whole set of references (the
  text-GAN literature's "test BLEU"; backward-BLEU swaps the sets; EB-bleu): an n-gram's
  clip is its largest count in any reference of the set, so a resample's clip depends only
  on which references it drew.
- **NIST** (Doddington 2002): NLTK's ``corpus_nist`` (n = 5). Its information weights,
  ``log2(#(w_1..w_{n-1}) / #(w_1..w_n))`` over the reference corpus (unigrams: total
  reference words over the word's count), are recomputed in every resample from the
  resampled references, as the library would on the expanded corpus. An order that no
  hypothesis is long enough for contributes 0 (NLTK divides by zero there).
- **METEOR** (Banerjee & Lavie 2005): NLTK's ``single_meteor_score`` (alpha 0.9, beta 3,
  gamma 0.5, lower-cased), per continuation against its reference, averaged over the
  continuations (METEOR is a sentence-level score; Hugging Face ``evaluate``'s METEOR
  averages the same way). **Exact and Porter-stem matches only**: NLTK's synonym stage needs
  the WordNet corpus, which NLTK downloads from the network at run time; Debian's
  ``wordnet-base`` lacks the ``lexnames`` file NLTK's reader opens, and NLTK 3.10 refuses
  corpus paths outside its data directories. A WordNet stand-in with no synonyms
  (:data:`NO_SYNONYMS`) takes its place; the scores say so (:data:`METEOR_MATCHING`).
- **Sentence BLEU** (translations): sacrebleu's ``sentence_bleu`` of each hypothesis against its
  reference (``BLEU.sentence_score``: effective order, "exp" smoothing, ``tokenize="none"``),
  averaged over the continuations (:class:`SentenceBleu`).
- **chrF** (Popović 2015; translations): sacrebleu's corpus chrF (character 6-grams, beta 2, no
  word n-grams), from its per-sentence statistics (hypothesis, reference and matched n-grams
  per order), which add up as BLEU's do: a resample's chrF is the library's F-score of its sums
  (:class:`PairedChrf`; ``CHRF._extract_corpus_statistics`` and ``_compute_score_from_stats``,
  the methods sacrebleu's own paired significance test resamples with).
- **n-gram entropy** (Zhang et al. 2018, "Ent-n"): ``-sum_g p(g) ln p(g)`` of the n-gram
  distribution pooled over the set (``p(g)``: the share of n-gram ``g`` among all n-grams of
  the texts), in nats, by ``scipy.stats.entropy``. A diversity score; no reference.

Why these libraries rather than Hugging Face ``evaluate``: ``evaluate.load`` fetches each
metric's script from the Hub at run time (offline it raises FileNotFoundError; checked with
evaluate 0.4.6) and pulls in datasets, pyarrow and pandas, while its bleu, sacrebleu and
meteor scripts wrap these same two libraries. Both are imported inside the scorers: the web
app, which only shows stored scores, never loads them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse, stats

BLEU_ORDER = 4
NIST_ORDER = 5
ENTROPY_ORDER = 4
METEOR_MATCHING = "exact + Porter stem (no WordNet synonyms: WordNet data is not installable)"
BLEU_SETTINGS = {"tokenize": "none", "smooth_method": "exp", "max_ngram_order": BLEU_ORDER}
CHRF_SETTINGS = {"char_order": 6, "word_order": 0, "beta": 2}

# Bound on a block of resamples times n-gram entries held at once (a few MB).
_BLOCK_ELEMENTS = 1 << 20


class _NoSynonyms:
    """A WordNet stand-in for NLTK's METEOR: no word has a synset, so only exact and stem
    matches align."""

    def synsets(self, *args, **kwargs) -> list:
        return []


NO_SYNONYMS = _NoSynonyms()


def _blocks(b: int, width: int):
    step = max(1, _BLOCK_ELEMENTS // max(width, 1))
    for start in range(0, b, step):
        yield slice(start, min(b, start + step))


def _ngram_counts(text: str, low: int, high: int):
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    return extract_all_word_ngrams(text, low, high)


def _as_matrix(m: np.ndarray, n: int) -> np.ndarray:
    m = np.atleast_2d(np.asarray(m, dtype=float))
    if m.shape[1] != n:
        raise ValueError(f"multiplicities of {m.shape[1]} texts for {n}")
    return m


def _bleu(correct: np.ndarray, total: np.ndarray, sys_len: float, ref_len: float) -> float:
    from sacrebleu.metrics.bleu import BLEU

    # Sums of counts, exact in float64; sacrebleu's formula takes integers.
    return BLEU.compute_bleu(
        [round(float(c)) for c in correct],
        [round(float(t)) for t in total],
        round(float(sys_len)),
        round(float(ref_len)),
        smooth_method=BLEU_SETTINGS["smooth_method"],
        max_ngram_order=BLEU_ORDER,
    ).score


def bleu_metric(*, effective_order: bool):
    """sacrebleu's BLEU with `BLEU_SETTINGS`: the one place every BLEU here is built
    (corpus and sentence BLEU, `PairedBleu`'s statistics, the forced-prefix samples')."""
    from sacrebleu.metrics.bleu import BLEU

    return BLEU(**BLEU_SETTINGS, effective_order=effective_order)


def _check_pairs(hyps: Sequence[str], refs: Sequence[str]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses and {len(refs)} references")


class PairedBleu:
    """Corpus BLEU of ``hyps[i]`` against its one reference ``refs[i]``.

    Sufficient statistics per pair (sacrebleu's sentence statistics: hypothesis length,
    reference length, matches and totals per order); a resample's BLEU is
    ``BLEU.compute_bleu`` of ``m @ stats``.
    """

    def __init__(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        _check_pairs(hyps, refs)
        # effective_order only changes a sentence's own score (unused here), not its counts,
        # and keeps sacrebleu from warning once per sentence.
        bleu = bleu_metric(effective_order=True)
        rows = []
        for h, r in zip(hyps, refs, strict=True):
            s = bleu.sentence_score(h, [r])
            rows.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
        self.n = len(hyps)
        self.stats = np.array(rows, dtype=float).reshape(self.n, 2 + 2 * BLEU_ORDER)

    def scores(self, m: np.ndarray) -> np.ndarray:
        sums = _as_matrix(m, self.n) @ self.stats
        k = BLEU_ORDER
        return np.array([_bleu(s[2 : 2 + k], s[2 + k :], s[0], s[1]) for s in sums])


class SharedBleu:
    """Corpus BLEU of every hypothesis against the whole set of references.

    ``scores(mh, mr)``: hypothesis multiplicities ``mh`` (``B x len(hyps)``) and reference
    multiplicities ``mr`` (``B x len(refs)``); a reference drawn at least once is in the
    set. Per n-gram of the hypotheses, its clip is the largest count in a drawn reference
    (sacrebleu's multi-reference rule); the reference length of a hypothesis is the drawn
    reference length closest to its own (ties: the shorter), as sacrebleu chooses it.
    """

    def __init__(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        if not refs:
            raise ValueError("no references")
        types: dict[tuple, int] = {}
        e_hyp, e_type, e_count, e_order = [], [], [], []
        self.n_hyps, self.n_refs = len(hyps), len(refs)
        totals = np.zeros((self.n_hyps, BLEU_ORDER))
        hyp_len = np.zeros(self.n_hyps)
        for i, h in enumerate(hyps):
            counts, hyp_len[i] = _ngram_counts(h, 1, BLEU_ORDER)
            for g, c in counts.items():
                e_hyp.append(i)
                e_type.append(types.setdefault(g, len(types)))
                e_count.append(c)
                e_order.append(len(g) - 1)
                totals[i, len(g) - 1] += c
        r_ref, r_type, r_count = [], [], []
        ref_len = np.zeros(self.n_refs, dtype=int)
        for j, r in enumerate(refs):
            counts, ref_len[j] = _ngram_counts(r, 1, BLEU_ORDER)
            for g, c in counts.items():
                t = types.get(g)
                if t is not None:
                    r_ref.append(j)
                    r_type.append(t)
                    r_count.append(c)
        self.n_types = len(types)
        self.e_hyp = np.array(e_hyp, dtype=np.int64)
        self.e_type = np.array(e_type, dtype=np.int64)
        self.e_count = np.array(e_count, dtype=float)
        self.e_order = np.array(e_order, dtype=np.int64)
        self.order_onehot = np.eye(BLEU_ORDER)[self.e_order]
        self.totals, self.hyp_len = totals, hyp_len
        # Reference entries sorted by type, so one reduceat gives each type's largest count.
        order = np.lexsort((np.array(r_count), np.array(r_type, dtype=np.int64)))
        self.r_ref = np.array(r_ref, dtype=np.int64)[order]
        r_type_sorted = np.array(r_type, dtype=np.int64)[order]
        self.r_count = np.array(r_count, dtype=float)[order]
        self.r_types, self.r_starts = np.unique(r_type_sorted, return_index=True)
        # Only hypothesis n-grams found in some reference can match: their entries, with the
        # position of their type among the references' types.
        where = np.full(self.n_types, -1, dtype=np.int64)
        where[self.r_types] = np.arange(len(self.r_types))
        found = where[self.e_type] >= 0 if len(self.e_type) else np.zeros(0, dtype=bool)
        self.m_hyp, self.m_pos = self.e_hyp[found], where[self.e_type[found]]
        self.m_count, self.m_order = self.e_count[found], self.e_order[found]
        self.m_onehot = self.order_onehot[found]
        # Closest reference length: distinct hypothesis and reference lengths.
        self.hyp_lengths, self.hyp_length_of = np.unique(hyp_len.astype(int), return_inverse=True)
        self.ref_lengths, self.ref_length_of = np.unique(ref_len, return_inverse=True)
        diff = np.abs(self.hyp_lengths[:, None] - self.ref_lengths[None, :])
        # Smaller difference first, then the shorter reference (ref_lengths ascend).
        self.closeness = diff * (len(self.ref_lengths) + 1) + np.arange(len(self.ref_lengths))

    def scores(self, mh: np.ndarray, mr: np.ndarray) -> np.ndarray:
        mh = _as_matrix(mh, self.n_hyps)
        mr = _as_matrix(mr, self.n_refs)
        if mh.shape[0] != mr.shape[0]:
            raise ValueError("as many rows of hypothesis and reference multiplicities")
        out = np.empty(mh.shape[0])
        width = max(len(self.m_count), len(self.r_count), 1)
        for blk in _blocks(mh.shape[0], width):
            out[blk] = self._block(mh[blk], mr[blk])
        return out

    def _block(self, mh: np.ndarray, mr: np.ndarray) -> np.ndarray:
        drawn = mr > 0
        same = bool(np.all(drawn == drawn[:1]))  # one reference set for every row
        rows = drawn[:1] if same else drawn
        if len(self.r_count):  # each type's largest count in a drawn reference
            vals = rows[:, self.r_ref] * self.r_count
            clip = np.maximum.reduceat(vals, self.r_starts, axis=1)
        else:
            clip = np.zeros((rows.shape[0], 0))
        if same:  # matches per hypothesis and order once, then weighted by each row
            per_entry = np.minimum(self.m_count, clip[0, self.m_pos])
            per_hyp = np.zeros((self.n_hyps, BLEU_ORDER))
            np.add.at(per_hyp, (self.m_hyp, self.m_order), per_entry)
            correct = mh @ per_hyp
        else:
            matched = np.minimum(self.m_count, clip[:, self.m_pos]) * mh[:, self.m_hyp]
            correct = matched @ self.m_onehot
        total = mh @ self.totals
        sys_len = mh @ self.hyp_len
        # Which reference lengths each resample drew, then the closest per hypothesis length.
        has_len = (drawn.astype(float) @ np.eye(len(self.ref_lengths))[self.ref_length_of]) > 0
        cost = np.where(has_len[:, None, :], self.closeness[None, :, :], np.iinfo(np.int64).max)
        closest = self.ref_lengths[np.argmin(cost, axis=2)]  # B x distinct hypothesis lengths
        per_length = mh @ np.eye(len(self.hyp_lengths))[self.hyp_length_of]
        ref_len = np.sum(per_length * closest, axis=1)
        return np.array(
            [
                _bleu(correct[r], total[r], sys_len[r], ref_len[r]) if drawn[r].any() else np.nan
                for r in range(mh.shape[0])
            ]
        )


class SentenceBleu:
    """sacrebleu's sentence BLEU of each ``hyps[i]`` against ``refs[i]``, averaged: a
    resample's score is ``m @ s / sum(m)``."""

    def __init__(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        _check_pairs(hyps, refs)
        bleu = bleu_metric(effective_order=True)
        self.n = len(hyps)
        self.sentence = np.array(
            [bleu.sentence_score(h, [r]).score for h, r in zip(hyps, refs, strict=True)],
            dtype=float,
        )

    def scores(self, m: np.ndarray) -> np.ndarray:
        m = _as_matrix(m, self.n)
        size = m.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(size > 0, (m @ self.sentence) / size, np.nan)


class PairedChrf:
    """sacrebleu's corpus chrF of ``hyps[i]`` against its one reference ``refs[i]``: the
    per-sentence statistics summed with the multiplicities, then the library's F-score."""

    def __init__(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        from sacrebleu.metrics.chrf import CHRF

        _check_pairs(hyps, refs)
        self.chrf = CHRF(**CHRF_SETTINGS)
        self.n = len(hyps)
        rows = self.chrf._extract_corpus_statistics(list(hyps), [list(refs)]) if hyps else []
        width = 3 * (self.chrf.char_order + self.chrf.word_order)
        self.stats = np.array(rows, dtype=float).reshape(self.n, width)

    def scores(self, m: np.ndarray) -> np.ndarray:
        sums = _as_matrix(m, self.n) @ self.stats
        return np.array(
            [
                self.chrf._compute_score_from_stats([round(float(x)) for x in s]).score
                if s.any()
                else np.nan
                for s in sums
            ]
        )


class PairedNist:
    """NLTK's corpus NIST of ``hyps[i]`` against its one reference ``refs[i]`` (n = 5).

    ``NIST = sum_k [sum_i info-weighted matches_ik / sum_i k-grams of hyp_i] * BP``, with
    ``BP = exp(beta ln^2 min(L_hyp / L_ref, 1))`` (``beta`` so that BP = 0.5 at 2/3 of the
    reference length) and the information weights of the resampled reference corpus.
    """

    def __init__(self, hyps: Sequence[str], refs: Sequence[str], n: int = NIST_ORDER) -> None:
        _check_pairs(hyps, refs)
        self.n, self.order = len(hyps), n
        hyp_counts = [_ngram_counts(h, 1, n) for h in hyps]
        ref_counts = [_ngram_counts(r, 1, n) for r in refs]
        self.hyp_len = np.array([c[1] for c in hyp_counts], dtype=float)
        self.ref_len = np.array([c[1] for c in ref_counts], dtype=float)
        # The n-gram types that matter: those matched somewhere (a matched n-gram's prefix
        # is matched too, so every weight's numerator is among them).
        types: dict[tuple, int] = {}
        e_pair, e_type, e_count = [], [], []
        for i, ((hc, _), (rc, _)) in enumerate(zip(hyp_counts, ref_counts, strict=True)):
            for g, c in hc.items():
                if g in rc:
                    e_pair.append(i)
                    e_type.append(types.setdefault(g, len(types)))
                    e_count.append(min(c, rc[g]))
        self.n_types = len(types)
        by_index = list(types)
        self.type_order = np.array([len(g) for g in by_index], dtype=np.int64)
        self.parent = np.array(
            [types[g[:-1]] if len(g) > 1 else -1 for g in by_index], dtype=np.int64
        )
        rows, cols, vals = [], [], []
        for i, (rc, _) in enumerate(ref_counts):
            for g, c in rc.items():
                t = types.get(g)
                if t is not None:
                    rows.append(i)
                    cols.append(t)
                    vals.append(c)
        self.ref_freq = sparse.csr_matrix(
            (np.array(vals, dtype=float), (rows, cols)), shape=(self.n, self.n_types)
        )
        self.e_pair = np.array(e_pair, dtype=np.int64)
        self.e_type = np.array(e_type, dtype=np.int64)
        self.e_count = np.array(e_count, dtype=float)
        self.e_onehot = np.eye(n)[self.type_order[self.e_type] - 1] if e_type else np.zeros((0, n))
        orders = np.arange(1, n + 1)
        self.hyp_totals = np.maximum(self.hyp_len[:, None] - orders[None, :] + 1, 0)

    def scores(self, m: np.ndarray) -> np.ndarray:
        from nltk.translate.nist_score import nist_length_penalty

        m = _as_matrix(m, self.n)
        out = np.empty(m.shape[0])
        for blk in _blocks(m.shape[0], max(self.n_types, len(self.e_count), 1)):
            mb = m[blk]
            freq = np.asarray((self.ref_freq.T @ mb.T).T)  # B x types
            words = mb @ self.ref_len
            numer = np.where(self.parent >= 0, freq[:, np.maximum(self.parent, 0)], words[:, None])
            with np.errstate(divide="ignore", invalid="ignore"):
                info = np.where(freq > 0, np.log2(numer / freq), 0.0)
            weighted = mb[:, self.e_pair] * self.e_count * info[:, self.e_type]
            num = weighted @ self.e_onehot
            den = mb @ self.hyp_totals
            with np.errstate(divide="ignore", invalid="ignore"):
                precision = np.where(den > 0, num / den, 0.0)
            sys_len = mb @ self.hyp_len
            out[blk] = [
                p * nist_length_penalty(rl, sl) if rl > 0 else np.nan
                for p, rl, sl in zip(precision.sum(axis=1), words, sys_len, strict=True)
            ]
        return out


class Meteor:
    """NLTK's METEOR of each ``hyps[i]`` against ``refs[i]`` (exact and stem matches: see
    the module's docstring), averaged: a resample's score is ``m @ s / sum(m)``."""

    def __init__(self, hyps: Sequence[str], refs: Sequence[str]) -> None:
        from nltk.translate.meteor_score import single_meteor_score

        _check_pairs(hyps, refs)
        self.n = len(hyps)
        self.sentence = np.array(
            [
                single_meteor_score(r.split(), h.split(), wordnet=NO_SYNONYMS)
                if h.split() and r.split()
                else 0.0
                for h, r in zip(hyps, refs, strict=True)
            ],
            dtype=float,
        )

    def scores(self, m: np.ndarray) -> np.ndarray:
        m = _as_matrix(m, self.n)
        size = m.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(size > 0, (m @ self.sentence) / size, np.nan)


class NgramEntropy:
    """Entropy (nats) of the pooled n-gram distribution of the texts (``scipy.stats.entropy``
    of the resample's n-gram counts)."""

    def __init__(self, texts: Sequence[str], n: int = ENTROPY_ORDER) -> None:
        self.n_texts, self.order = len(texts), n
        types: dict[tuple, int] = {}
        rows, cols, vals = [], [], []
        for i, text in enumerate(texts):
            counts, _ = _ngram_counts(text, n, n)
            for g, c in counts.items():
                rows.append(i)
                cols.append(types.setdefault(g, len(types)))
                vals.append(c)
        self.counts = sparse.csr_matrix(
            (np.array(vals, dtype=float), (rows, cols)), shape=(self.n_texts, len(types))
        )

    def scores(self, m: np.ndarray) -> np.ndarray:
        m = _as_matrix(m, self.n_texts)
        out = np.full(m.shape[0], np.nan)
        if self.counts.shape[1] == 0:
            return out
        for blk in _blocks(m.shape[0], self.counts.shape[1]):
            freq = np.asarray((self.counts.T @ m[blk].T).T)
            total = freq.sum(axis=1)
            with np.errstate(divide="ignore", invalid="ignore"):
                ent = stats.entropy(freq, axis=1)
            out[blk] = np.where(total > 0, ent, np.nan)
        return out


__all__ = [
    "BLEU_ORDER",
    "BLEU_SETTINGS",
    "CHRF_SETTINGS",
    "ENTROPY_ORDER",
    "METEOR_MATCHING",
    "NIST_ORDER",
    "NO_SYNONYMS",
    "Meteor",
    "NgramEntropy",
    "PairedBleu",
    "PairedChrf",
    "PairedNist",
    "SentenceBleu",
    "SharedBleu",
]
