"""Benchmark: EB-M scoring time (`app.results.stats.ebm`) for 3 lengths x 2 kinds x 250
continuations of l_gen = 20 words, with B = 1,000 bootstrap resamples over prompts.

Texts: Jane Austen's paragraphs (the demo corpus, `worker.demo.corpus.fetch_austen`, cached
under ``var/demo``; Debian's ``r-cran-janeaustenr``) or ``--corpus FILE`` (one paragraph a
line); without either, a corpus-like generator (Zipf-distributed words over a 5,000-word
vocabulary). For each length l (20, 40, 60) a prompt is a paragraph's first 20 words; the
reference is the paragraph's words after the prompt and l more; a continuation after a data
prefix is that reference with half its words replaced by words drawn from the corpus' unigram
distribution, one after a model prefix 20 words drawn from it (the scores' cost depends on the
texts' n-gram statistics, not on where they came from).

Measured: each score on its own (building its statistics, the point estimate and the B
resamples -- bootstrap draws for BLEU, NIST and METEOR, delete-d jackknife subsamples for
backward-BLEU, the entropy and EB-bleu, as the job draws them -- over the 6 cells; EB-bleu over
the 3 lengths), then ``ebm_scores`` end to end (the results job's statistics: every score, the
ratios, the intervals). Wall clock and CPU time of
this process. Run: ``python benchmarks/ebm.py`` (about 10 s on a 2-core machine).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import time
from collections import Counter
from pathlib import Path

import numpy as np

from app.results.stats.ebm import KindTexts, _draws, ebm_scores
from app.results.stats.textscores import Meteor, NgramEntropy, PairedBleu, PairedNist, SharedBleu
from app.software import package_version

PROMPT, L_GEN = 20, 20


def paragraphs(corpus: str | None) -> tuple[list[list[str]], str]:
    if corpus:
        lines = Path(corpus).read_text(encoding="utf-8").splitlines()
        return [line.split() for line in lines if line.strip()], corpus
    try:
        from worker.demo.corpus import fetch_austen

        cache = Path(__file__).resolve().parents[1] / "var" / "demo"
        return [p.split() for p in fetch_austen(cache)], "Austen (demo corpus)"
    except Exception as exc:  # no apt-get here: the generator stands in
        print(f"(demo corpus unavailable: {exc}; using the Zipf generator)")
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(5000)]
    p = 1.0 / np.arange(1, 5001) ** 1.1
    p /= p.sum()
    return [
        [vocab[i] for i in rng.choice(5000, size=int(rng.integers(60, 200)), p=p)]
        for _ in range(2000)
    ], "Zipf generator (5,000 words, s = 1.1)"


def cells(paras: list[list[str]], n: int, lengths: list[int], seed: int) -> dict:
    rng = random.Random(seed)
    counts = Counter(w for p in paras for w in p)
    words, weights = zip(*counts.items(), strict=True)

    def draw(k: int) -> list[str]:
        return rng.choices(words, weights, k=k)

    out: dict = {}
    for length in lengths:
        long = [p for p in paras if len(p) >= PROMPT + length + L_GEN]
        if len(long) < 2 * n:
            raise SystemExit(f"only {len(long)} paragraphs of {PROMPT + length + L_GEN}+ words")
        chosen = rng.sample(long, 2 * n)
        out[length] = {}
        for k, kind in enumerate(("data", "model")):
            conts, refs, keys = [], [], []
            for i, p in enumerate(chosen[k * n : (k + 1) * n]):
                ref = p[PROMPT + length : PROMPT + length + L_GEN]
                if kind == "data":
                    cont = [w if rng.random() < 0.5 else draw(1)[0] for w in ref]
                else:
                    cont = draw(L_GEN)
                conts.append(" ".join(cont))
                refs.append(" ".join(ref))
                keys.append(f"{kind}{i}")
            out[length][kind] = KindTexts(conts, refs, keys)
    return out


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def per_score(data: dict, b: int, seed: int) -> dict[str, tuple[float, float]]:
    """Each score alone, as the job computes it: the sums over continuations on bootstrap
    draws, the others on delete-d jackknife subsamples (hypotheses and references both)."""
    draws = {ln: _draws(kinds, b, np.random.default_rng([seed, ln])) for ln, kinds in data.items()}

    def paired(make):
        def go():
            for ln, kinds in data.items():
                for k, t in kinds.items():
                    scorer, m = make(t), draws[ln].boot[k]
                    scorer.scores(np.ones((1, m.shape[1]))), scorer.scores(m)

        return go

    def backward():
        for ln, kinds in data.items():
            for k, t in kinds.items():
                scorer, m = SharedBleu(t.references, t.continuations), draws[ln].sub[k]
                ones = np.ones((1, m.shape[1]))
                scorer.scores(ones, ones), scorer.scores(m, m)

    def entropy():
        for ln, kinds in data.items():
            for k, t in kinds.items():
                scorer, m = NgramEntropy(t.continuations), draws[ln].sub[k]
                scorer.scores(np.ones((1, m.shape[1]))), scorer.scores(m)

    def eb_bleu():
        for ln, kinds in data.items():
            model, dat = kinds["model"], kinds["data"]
            s = SharedBleu(model.continuations, dat.continuations)
            mm, md = draws[ln].sub["model"], draws[ln].sub["data"]
            s.scores(np.ones((1, mm.shape[1])), np.ones((1, md.shape[1])))
            s.scores(mm, md)

    return {
        "BLEU": timed(paired(lambda t: PairedBleu(t.continuations, t.references))),
        "NIST": timed(paired(lambda t: PairedNist(t.continuations, t.references))),
        "METEOR": timed(paired(lambda t: Meteor(t.continuations, t.references))),
        "backward-BLEU": timed(backward),
        "entropy (4-grams)": timed(entropy),
        "EB-bleu": timed(eb_bleu),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", help="a plain-text file, one paragraph a line")
    ap.add_argument("--items", type=int, default=250, help="continuations per length and kind")
    ap.add_argument("--lengths", default="20,40,60")
    ap.add_argument("--b", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    paras, source = paragraphs(args.corpus)
    data = cells(paras, args.items, lengths, args.seed)
    n = len(lengths) * 2 * args.items
    # The libraries' imports (NLTK's ~1 s) once, outside the timings.
    Meteor(["a b"], ["a b"]), PairedNist(["a b"], ["a b"]), PairedBleu(["a"], ["a"])
    parts = per_score(data, args.b, args.seed)
    total = timed(lambda: ebm_scores(data, b=args.b, seed=args.seed))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"EB-M scoring, {len(lengths)} lengths x 2 kinds x {args.items} continuations "
        f"({n:,}), l_gen = {L_GEN}, B = {args.b:,}; texts: {source}"
    )
    print(
        f"{datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, load {load:.1f}, "
        f"Python {platform.python_version()}, sacrebleu {package_version('sacrebleu')}, "
        f"nltk {package_version('nltk')}, numpy {np.__version__}"
    )
    print(f"{'score':<20} {'wall s':>8} {'CPU s':>8} {'share':>7}")
    summed = sum(w for w, _ in parts.values())
    for name, (wall, cpu) in parts.items():
        print(f"{name:<20} {wall:>8.2f} {cpu:>8.2f} {wall / summed:>7.1%}")
    print(f"{'sum of the parts':<20} {summed:>8.2f} {sum(c for _, c in parts.values()):>8.2f}")
    print(f"{'ebm_scores (total)':<20} {total[0]:>8.2f} {total[1]:>8.2f}")


if __name__ == "__main__":
    main()
