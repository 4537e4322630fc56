"""The demo model: corpus reader (offline, on a hand-written R lazy-load database), tokenizer,
a tiny build from a corpus passed in, reloading through `worker.models.load_model`, the cache."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from worker import demo as dm
from worker.hf import HFCausalLM
from worker.models import load_model

# --- a tiny corpus -----------------------------------------------------------------------------

NAMES = ["Emma", "Anne", "Mr. Knightley", "Harriet", "Mrs. Weston", "Frank"]
VERBS = ["saw", "loved", "visited", "thanked", "pitied", "admired"]
PLACES = ["Highbury", "Hartfield", "Bath", "London"]


def tiny_corpus(n: int = 240, seed: int = 1) -> list[str]:
    rng = random.Random(seed)

    def sentence() -> str:
        a, b = rng.sample(NAMES, 2)
        form = rng.randrange(4)
        if form == 0:
            return f"{a} {rng.choice(VERBS)} {b} at {rng.choice(PLACES)}."
        if form == 1:
            return f'"I don\'t know," said {a}, "but {b} can\'t stay."'
        if form == 2:
            return f"{a}'s letter reached {rng.choice(PLACES)}; {b} was glad."
        return f"Did {a} see {b}? She did."

    return [" ".join(sentence() for _ in range(rng.randint(2, 5))) for _ in range(n)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return dm.build_demo_model(out, steps=40, max_seconds=300, vocab_size=200, corpus=tiny_corpus())


# --- tokenizer ---------------------------------------------------------------------------------


def test_tokenize_words_wiki103_style():
    assert dm.tokenize_words("Don't you think it's Mr. Darcy's?") == [
        "do", "n't", "you", "think", "it", "'s", "mr", ".", "darcy", "'s", "?",
    ]  # fmt: skip
    assert dm.tokenize_words("I can't--_indeed_ I won't.") == [
        "i", "ca", "n't", "--", "indeed", "i", "wo", "n't", ".",
    ]  # fmt: skip
    assert dm.tokenize_words('"Well," said she; "well-bred!"') == [
        '"', "well", ",", '"', "said", "she", ";", '"', "well", "-", "bred", "!", '"',
    ]  # fmt: skip


def test_tokenize_words_is_idempotent_on_saved_lines():
    text = "\"Don't,\" cried Elizabeth--'tis her sister's 1,000 pounds; they'll see."
    words = dm.tokenize_words(text)
    assert dm.tokenize_words(" ".join(words)) == words


# --- the build ---------------------------------------------------------------------------------


def test_build_saves_a_model_that_loads_through_load_model(built):
    assert not built.reused
    lm = load_model(str(built.model_dir), device="cpu")
    assert isinstance(lm, HFCausalLM)
    tok = lm.tokenizer
    assert tok.tokenize("Don't SEE, Emma.") == ["do", "n't", "see", ",", "emma", "."]
    assert tok.convert_ids_to_tokens(lm.encode("zebra")) == ["<unk>"]
    assert tok.convert_ids_to_tokens(lm.encode("Don't")) == ["do", "n't"]
    assert lm.start_token_id == tok.convert_tokens_to_ids("<eos>")
    assert tok.unk_token == "<unk>"
    logprobs, _ = lm.start([[lm.start_token_id, *lm.encode("Emma saw")]])
    assert logprobs.shape == (1, lm.vocab_size)
    config = json.loads((built.model_dir / "config.json").read_text())
    assert (config["n_layer"], config["n_embd"], config["n_head"], config["n_positions"]) == (
        2, 128, 4, 64,
    )  # fmt: skip


def test_datasets_are_tokenised_lowercased_and_disjoint(built):
    train = built.train_path.read_text().splitlines()
    heldout = built.heldout_path.read_text().splitlines()
    assert train and heldout
    assert not set(train) & set(heldout)
    assert len(set(heldout)) == len(heldout)
    for line in heldout + train[:50]:
        assert line == line.lower()
        assert dm.tokenize_words(line) == line.split()  # words are the tokenizer's words
    assert any(" do n't " in line for line in train)


def test_validation_loss_goes_down(built):
    m = built.metrics
    assert m["steps_done"] == 40 and m["completed"]
    assert m["val_loss"] < m["val_loss_start"] - 0.5
    assert m["val_perplexity"] == pytest.approx(2.718281828 ** m["val_loss"], rel=1e-3)
    assert m["trigram_val_perplexity"] is not None
    assert m["recipe_hash"] == dm.recipe_hash(m["recipe"])


def test_training_runs_on_the_faster_thread_count(built):
    """The build records how many steps each thread count trained; a plan probes each count
    for PROBE steps every REPROBE steps and trains on with the faster one."""
    used = built.metrics["training_steps_by_threads"]
    assert sum(used.values()) == 40 and "1" in used
    from worker.demo.build import PROBE, REPROBE, ThreadPlan

    plan = ThreadPlan([1, 2])
    slow = {1: 0.5, 2: 0.1}  # two threads faster: a quiet machine
    for step in range(REPROBE + 2 * PROBE):
        if step == REPROBE:
            slow = {1: 0.1, 2: 0.9}  # the machine got busy
        n = plan.threads(step)
        if step % REPROBE < 2 * PROBE:  # probing: each count in turn
            assert n == (1 if step % REPROBE < PROBE else 2)
        plan.took(step, n, slow[n])
        if step == 2 * PROBE:
            assert plan.best == 2
    assert plan.best == 1 and plan.threads(REPROBE + 2 * PROBE) == 1
    assert sum(plan.used.values()) == REPROBE + 2 * PROBE
    one = ThreadPlan([1, 1])  # a single count: no probing
    assert [one.threads(s) for s in range(3)] == [1, 1, 1]


def test_the_trigram_baseline_is_the_counted_one():
    """The numpy trigram baseline against the Counter one it replaced (kept here), on skewed
    random streams with unseen contexts, a tiny vocabulary, and a two-token evaluation."""
    rng = random.Random(0)
    for n, vocab in ((2000, 30), (20000, 500), (200, 5)):
        train = [min(int(rng.paretovariate(1.2)), vocab - 1) for _ in range(n)]
        held = [min(int(rng.paretovariate(1.2)), vocab - 1) for _ in range(n // 5)]
        held += [vocab - 1, 0, vocab - 2]
        want = counted_trigram(train, held, vocab)
        assert dm.build.trigram_perplexity(train, held, vocab) == pytest.approx(want, rel=1e-12)
    assert dm.build.trigram_perplexity([1, 2, 3], [1, 2], 4) == pytest.approx(
        counted_trigram([1, 2, 3], [1, 2], 4), rel=1e-12
    )


def counted_trigram(train_ids: Sequence[int], eval_ids: Sequence[int], vocab: int) -> float:
    """The baseline as first written (Python Counters), the reference of the test above."""
    d = dm.build.TRIGRAM_DISCOUNT
    c3 = Counter(zip(train_ids, train_ids[1:], train_ids[2:], strict=False))
    c2 = Counter(itertools.pairwise(train_ids))
    ctx2: Counter = Counter()  # c(a b .)
    types2: Counter = Counter()  # N1+(a b .)
    for (a, b, _), n in c3.items():
        ctx2[a, b] += n
        types2[a, b] += 1
    cont2: Counter = Counter()  # N1+(. b c) over bigram types
    cont_ctx: Counter = Counter()  # N1+(. b .)
    for a_b_c in c3:
        cont2[a_b_c[1], a_b_c[2]] += 1
        cont_ctx[a_b_c[1]] += 1
    types_after: Counter = Counter()  # N1+(b . ) among continuation bigrams
    for b, _ in cont2:
        types_after[b] += 1
    cont1: Counter = Counter(c for (_, c) in c2)  # N1+(. c)
    n_bigram_types = len(c2)

    def p1(c: int) -> float:
        return 0.99 * cont1[c] / n_bigram_types + 0.01 / vocab

    def p2(b: int, c: int) -> float:
        denom = cont_ctx[b]
        if not denom:
            return p1(c)
        return max(cont2[b, c] - d, 0) / denom + d * types_after[b] / denom * p1(c)

    total = 0.0
    for i in range(1, len(eval_ids)):
        c = eval_ids[i]
        b = eval_ids[i - 1]
        a = eval_ids[i - 2] if i >= 2 else None
        denom = ctx2[a, b] if a is not None else 0
        if denom:
            p = max(c3[a, b, c] - d, 0) / denom + d * types2[a, b] / denom * p2(b, c)
        else:
            p = p2(b, c)
        total -= math.log(p)
    return math.exp(total / max(len(eval_ids) - 1, 1))


def test_second_build_reuses_the_cache(built):
    out = built.model_dir.parent
    weights = next(built.model_dir.glob("*.safetensors"))
    stamp = weights.stat().st_mtime_ns
    again = dm.build_demo_model(
        out, steps=40, max_seconds=300, vocab_size=200, corpus=tiny_corpus()
    )
    assert again.reused
    assert again.metrics == built.metrics
    assert weights.stat().st_mtime_ns == stamp


def test_another_recipe_rebuilds(tmp_path):
    first = dm.build_demo_model(tmp_path, steps=3, vocab_size=200, corpus=tiny_corpus(60))
    assert not first.reused
    second = dm.build_demo_model(tmp_path, steps=4, vocab_size=200, corpus=tiny_corpus(60))
    assert not second.reused and second.metrics["steps_done"] == 4
    assert not list(tmp_path.glob(".build-*"))


def test_wall_clock_cap_stops_training(tmp_path):
    m = dm.build_demo_model(
        tmp_path, steps=1000, max_seconds=0, vocab_size=200, corpus=tiny_corpus(60)
    ).metrics
    assert m["steps_done"] == 0 and not m["completed"]


# --- the Austen reader, offline ----------------------------------------------------------------


class _RWriter:
    """Just enough of R's XDR serialization (format 2) to write a lazy-load database."""

    def __init__(self):
        self.out = bytearray(b"X\n") + struct.pack(">iii", 2, 0x040201, 0x020300)

    def i(self, *values: int) -> None:
        self.out += struct.pack(f">{len(values)}i", *values)

    def charsxp(self, s: str) -> None:
        data = s.encode("utf-8")
        self.i(9 | (64 << 12), len(data))  # CHARSXP, ASCII
        self.out += data

    def strsxp(self, values: list[str]) -> None:
        self.i(16, len(values))
        for v in values:
            self.charsxp(v)

    def named_list(self, items: dict) -> None:
        self.i(19 | (1 << 9), len(items))  # VECSXP with attributes
        for value in items.values():
            self.value(value)
        self.i(2 | (1 << 10))  # pairlist node with a tag: names = ...
        self.i(1)  # SYMSXP
        self.charsxp("names")
        self.strsxp(list(items))
        self.i(254)  # end of the pairlist

    def value(self, v) -> None:
        if isinstance(v, dict):
            if v:
                self.named_list(v)
            else:
                self.i(19, 0)
        elif isinstance(v, bool):
            self.i(10, 1, int(v))
        elif isinstance(v, tuple):
            self.i(13, len(v), *v)
        else:
            self.strsxp(v)


def _serialize(value) -> bytes:
    w = _RWriter()
    w.value(value)
    return bytes(w.out)


def write_lazyload_db(stem: Path, variables: dict[str, list[str]]) -> None:
    blob, index = bytearray(), {}
    for name, value in variables.items():
        raw = _serialize(value)
        entry = struct.pack(">I", len(raw)) + zlib.compress(raw)
        index[name] = (len(blob), len(entry))
        blob += entry
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_name(stem.name + ".rdb").write_bytes(bytes(blob))
    rdx = {"variables": index, "references": {}, "compressed": True}
    stem.with_name(stem.name + ".rdx").write_bytes(gzip.compress(_serialize(rdx)))


NOVEL = [
    "EMMA", "", "By Jane Austen", "", "", "VOLUME I", "", "", "CHAPTER I", "", "",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
    "and happy disposition, seemed to unite some of the best blessings.", "",
    "She was the youngest of the two daughters.", "", "* * * * *", "",
    "*A footnote.", "", "CHAPTER 2", "", "\"Don't,\" said she.", "", "THE END", "",
    "Transcriber's notes.",
]  # fmt: skip


def test_austen_paragraphs_drop_headings_and_end_matter():
    assert dm.austen_paragraphs(NOVEL) == [
        "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy "
        "disposition, seemed to unite some of the best blessings.",
        "She was the youngest of the two daughters.",
        '"Don\'t," said she.',
    ]


def _fake_package(root: Path) -> None:
    novels = {name: [*NOVEL[:11], f"{name} text.", *NOVEL[11:]] for name in dm.AUSTEN_NOVELS}
    write_lazyload_db(root / "usr/lib/R/site-library/janeaustenr/data/Rdata", novels)


def test_read_lazyload_db_and_novels(tmp_path):
    _fake_package(tmp_path)
    stem = tmp_path / "usr/lib/R/site-library/janeaustenr/data/Rdata"
    found = dm.read_lazyload_db(stem, names=["emma"])
    assert list(found) == ["emma"]
    assert list(found["emma"])[8] == "CHAPTER I"
    novels = dm.read_austen_novels(tmp_path)
    assert sorted(novels) == sorted(dm.AUSTEN_NOVELS)
    assert "persuasion text." in novels["persuasion"]


def test_fetch_austen_from_a_cached_deb(tmp_path):
    pkg = tmp_path / "pkg"
    _fake_package(pkg)
    (pkg / "DEBIAN").mkdir()
    (pkg / "DEBIAN/control").write_text(
        "Package: r-cran-janeaustenr\nVersion: 1.0.0-1\nArchitecture: all\n"
        "Maintainer: test <t@example.org>\nDescription: test\n"
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    subprocess.run(
        ["dpkg-deb", "--build", str(pkg), str(cache / "r-cran-janeaustenr_1.0.0-1_all.deb")],
        check=True,
        capture_output=True,
    )
    paragraphs = dm.fetch_austen(cache)  # the .deb is there: no apt-get
    assert len(paragraphs) == 6 * 3
    assert paragraphs[0].startswith("sensesensibility text. Emma Woodhouse")
    shutil.rmtree(cache / "janeaustenr")
    (cache / "r-cran-janeaustenr_1.0.0-1_all.deb").unlink()
    assert dm.fetch_austen(cache) == paragraphs  # from the cached text file


def test_fetch_austen_explains_an_apt_failure(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text(
        "#!/bin/sh\necho 'E: Unable to locate package r-cran-janeaustenr' >&2\nexit 100\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    with pytest.raises(dm.CorpusError, match=r"(?s)apt-get download r-cran-janeaustenr.*Unable"):
        dm.fetch_austen(tmp_path / "cache")
