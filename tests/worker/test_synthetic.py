"""Synthetic EB-C (`worker.synthetic`): divergences against brute force, P_D = P_M, word-level
and subword pairs, padded vocabularies, translation pairs, refusals, corruption at c = 1.

The brute force runs each Hugging Face model directly on one context at a time (no padding, no
cache, no batching) and computes the divergences with numpy and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import MarianMTModel, PreTrainedTokenizerFast

from tests.worker.conftest import (
    WORDS,
    bpe_tokenizer,
    sp_tokenizer,
    tiny_gpt2,
    word_tokenizer,
)
from worker.fake import FakeCausalLM
from worker.hf import HFCausalLM
from worker.hf_seq2seq import HFSeq2SeqLM
from worker.prefixes import PrefixSpec, get_token_classes, make_items
from worker.synthetic import IncompatibleReference, check_pair, reference_records
from worker.tokens import decode_word, segment_words

SPEC = PrefixSpec(batch_size=8)


def brute_distribution(lm, ids: list[int], source: list[int] | None = None) -> np.ndarray:
    """P(.|ids) in float64 from one plain forward of the underlying model."""
    with torch.inference_mode():
        if source is None:
            logits = lm.model(torch.tensor([ids])).logits[0, -1]
        else:
            decoder = [lm.decoder_start_id, *ids]
            logits = lm.model(
                input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder])
            ).logits[0, -1]
    z = logits.double().numpy()
    p = np.exp(z - z.max())
    return p / p.sum()


def brute_divergences(p: np.ndarray, q: np.ndarray) -> tuple[float, float, int]:
    tv = 0.5 * float(np.abs(p - q).sum())
    js = float(jensenshannon(p, q, base=2)) ** 2  # scipy returns the square root
    return tv, js, int(np.argmax(p) != np.argmax(q))  # np.argmax: the first maximum


def check_record(item, record) -> None:
    """The contract's invariants of one record."""
    words = [w for w, _ in item.choices]
    probs = record["choice_probs"]
    assert len(probs) == len(words) and all(0 <= p <= 1 + 1e-9 for p in probs)
    assert record["none_prob"] == pytest.approx(max(0.0, 1 - sum(probs)))
    assert record["word_gd"] == int(record["reference_top_word"] != words[0])
    if record["reference_top_word"] in words:
        top = probs[words.index(record["reference_top_word"])]
        assert top == max(probs)
    assert set(record["token"]) == {"tv", "js", "gd", "vocab"}
    assert 0 <= record["token"]["js"] <= 1 and 0 <= record["token"]["tv"] <= 1


def test_token_divergences_on_a_small_vocabulary():
    """d_TV, d_JS and d_GD on hand-made distributions with zeros and tied maxima."""
    from worker.synthetic import token_divergences

    rng = np.random.default_rng(0)
    rows = [rng.dirichlet(np.ones(7)) for _ in range(20)]
    rows += [np.array([0.4, 0.4, 0.2, 0, 0, 0, 0]), np.array([0, 0, 0.2, 0.4, 0.4, 0, 0])]
    rows += [np.array([0.3, 0.3, 0.4, 0, 0, 0, 0]), np.array([0.1, 0.45, 0.45, 0, 0, 0, 0])]
    ps, qs = rows[0::2], rows[1::2]
    with np.errstate(divide="ignore"):
        p_lp = torch.tensor(np.log(np.stack(ps)), dtype=torch.float32)
        q_lp = torch.tensor(np.log(np.stack(qs)), dtype=torch.float32)
    tv, js, gd = token_divergences(p_lp, q_lp)
    assert tv.dtype == torch.float64
    for i, (p, q) in enumerate(zip(ps, qs, strict=True)):
        # float32 inputs, as the models give them: the renormalised float64 copies agree
        e_tv, e_js, e_gd = brute_divergences(p, q)
        assert float(tv[i]) == pytest.approx(e_tv, abs=1e-6)
        assert float(js[i]) == pytest.approx(e_js, abs=1e-6)
        assert int(gd[i]) == e_gd
    # The tie rule: [0.4, 0.4, ...] has argmax 0 (lowest id), [.., 0.4, 0.4, ..] argmax 3.
    assert int(gd[10]) == 1
    same, _, same_gd = token_divergences(p_lp[:1], p_lp[:1])
    assert float(same[0]) == 0 and int(same_gd[0]) == 0


def _pair(tokenizer_fn, seed_m: int, seed_d: int, init: float = 0.6):
    tok_m, tok_d = tokenizer_fn(), tokenizer_fn()
    model = HFCausalLM(tiny_gpt2(tok_m, seed=seed_m, init=init), tok_m, name=f"m{seed_m}")
    reference = HFCausalLM(tiny_gpt2(tok_d, seed=seed_d, init=init), tok_d, name=f"d{seed_d}")
    return model, reference


@pytest.mark.parametrize(
    ("tokenizer_fn", "init"), [(word_tokenizer, 0.2), (bpe_tokenizer, 0.6), (sp_tokenizer, 0.6)]
)
def test_divergences_against_brute_force(tokenizer_fn, init, text_dataset):
    model, reference = _pair(tokenizer_fn, 1, 7, init)
    gd_seen = set()
    for kind in ("data", "model", "random"):
        items = make_items(model, text_dataset, SPEC, 4, kind, 0, 8, seed=2, keep_roots=True)
        records = reference_records(model, reference, items, SPEC)
        for item, record in zip(items, records, strict=True):
            if item.skipped:
                assert record is None
                continue
            ids = item.context_ids
            if kind != "model":  # independently: the start token and the words' encoding
                assert ids == [model.start_token_id, *model.encode(item.text)]
            else:  # the sampled tokens are the prefix's words
                words = segment_words(ids[1:], get_token_classes(model))
                assert [decode_word(model.tokenizer, g) for g in words] == item.words
            p = brute_distribution(model, ids)
            q = brute_distribution(reference, ids)
            tv, js, gd = brute_divergences(p, q)
            assert record["token"]["tv"] == pytest.approx(tv, abs=2e-5)
            assert record["token"]["js"] == pytest.approx(js, abs=2e-5)
            assert record["token"]["gd"] == gd
            assert record["token"]["vocab"] == len(p)
            assert record["reference_model"] == reference.name
            check_record(item, record)
            gd_seen.add(gd)
    assert gd_seen == {0, 1} or gd_seen == {1}  # random models mostly disagree


def test_same_model_twice_gives_zero_everywhere(text_dataset):
    """P_D = P_M (the same weights loaded twice): token d_TV = d_JS = 0, d_GD = 0 and word-level
    d_GD = 0 on every item, and P_D's choice probabilities are the item's own."""
    for tokenizer_fn, init in ((word_tokenizer, 0.2), (bpe_tokenizer, 0.6), (sp_tokenizer, 0.6)):
        model, reference = _pair(tokenizer_fn, 3, 3, init)
        assert model.model is not reference.model
        for kind in ("data", "model", "data_shuffled", "model_corrupted@0.5"):
            items = make_items(model, text_dataset, SPEC, 5, kind, 0, 10, seed=4, keep_roots=True)
            records = reference_records(model, reference, items, SPEC)
            made = [(i, r) for i, r in zip(items, records, strict=True) if not i.skipped]
            assert made
            for item, record in made:
                assert record["token"]["tv"] < 1e-5 and record["token"]["js"] < 1e-6
                assert record["token"]["gd"] == 0 and record["word_gd"] == 0
                assert record["reference_top_word"] == item.choices[0][0]
                assert record["choice_probs"] == pytest.approx(
                    [p for _, p in item.choices], rel=1e-4
                )
                check_record(item, record)


def test_without_kept_roots_the_model_is_run_again(bpe_lm, text_dataset):
    """`make_items(keep_roots=True)` saves P_M's forward; without it the same records come out."""
    reference = HFCausalLM(tiny_gpt2(bpe_tokenizer(), seed=9), bpe_tokenizer(), name="d9")
    kept = make_items(bpe_lm, text_dataset, SPEC, 3, "model", 0, 6, seed=1, keep_roots=True)
    plain = make_items(bpe_lm, text_dataset, SPEC, 3, "model", 0, 6, seed=1)
    assert all(i.root is None for i in plain) and all(i.root is not None for i in kept)
    a = reference_records(bpe_lm, reference, kept, SPEC)
    b = reference_records(bpe_lm, reference, plain, SPEC)
    for x, y in zip(a, b, strict=True):
        assert x["token"]["tv"] == pytest.approx(y["token"]["tv"], abs=1e-5)
        assert x["choice_probs"] == pytest.approx(y["choice_probs"], rel=1e-4, abs=1e-9)
        assert x["reference_top_word"] == y["reference_top_word"]


def test_subword_choice_probabilities_against_brute_force(text_dataset):
    """A byte-level BPE pair: P_D's probability of each choice of at most 4 characters (so every
    tokenisation has at most 4 tokens) lies between the brute-force sum of the tokenisations
    within 0.05 of the best and the sum of all of them, renormalised without special tokens."""
    from tests.worker.test_word_probs import brute_tokenisations

    model, reference = _pair(bpe_tokenizer, 2, 8)
    items = make_items(model, text_dataset, SPEC, 3, "data", 0, 6, seed=3, keep_roots=True)
    records = reference_records(model, reference, items, SPEC)
    special = get_token_classes(reference).special.numpy()
    checked = 0
    for item, record in zip(items, records, strict=True):
        q = brute_distribution(reference, item.context_ids)
        scale = 1.0 / (1.0 - q[special].sum())
        for (word, _), value in zip(item.choices, record["choice_probs"], strict=True):
            if len(word) > 4:
                continue
            tokenisations = brute_tokenisations(reference, item.context_ids, word, 4)
            best = max(tokenisations, default=0.0)
            near = sum(t for t in tokenisations if t >= 0.05 * best) * scale
            assert near * (1 - 1e-3) <= value <= sum(tokenisations) * scale * (1 + 1e-3) + 1e-12
            checked += 1
        check_record(item, record)
        assert "word search" in record["method"]
    assert checked >= 10


def _permuted_word_tokenizer(order: list[str]) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(order)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def test_word_level_vocabularies_in_another_order_are_mapped(word_lm, text_dataset):
    """P_D = P_M with its vocabulary rows permuted (the same distribution over words under other
    ids): every divergence is 0.  A P_D with other weights matches brute force after mapping."""
    order = ["<unk>", "<eos>", *WORDS]
    shuffled = [order[i] for i in np.random.default_rng(1).permutation(len(order))]
    tok_d = _permuted_word_tokenizer(shuffled)
    perm = [order.index(w) for w in shuffled]  # P_D's id j is P_M's id perm[j]
    permuted = tiny_gpt2(tok_d, seed=1, init=0.2)
    permuted.load_state_dict(word_lm.model.state_dict())
    with torch.no_grad():
        permuted.transformer.wte.weight.copy_(word_lm.model.transformer.wte.weight[perm])
    twin = HFCausalLM(permuted, tok_d, name="permuted")
    pair = check_pair(word_lm, twin)
    assert pair.gather is not None and "mapped by string" in pair.token_method
    items = make_items(word_lm, text_dataset, SPEC, 4, "data", 0, 8, seed=1, keep_roots=True)
    for item, record in zip(items, reference_records(word_lm, twin, items, SPEC), strict=True):
        assert record["token"]["tv"] < 1e-5 and record["token"]["gd"] == 0
        assert record["word_gd"] == 0
        assert record["choice_probs"] == pytest.approx([p for _, p in item.choices], rel=1e-4)
        assert "compare directly" in record["method"]

    other = HFCausalLM(tiny_gpt2(tok_d, seed=5, init=0.2), tok_d, name="other-order")
    records = reference_records(word_lm, other, items, SPEC)
    for item, record in zip(items, records, strict=True):
        p = brute_distribution(word_lm, item.context_ids)
        q_own = brute_distribution(other, [shuffled.index(order[i]) for i in item.context_ids])
        q = q_own[[shuffled.index(w) for w in order]]  # into P_M's order
        tv, js, gd = brute_divergences(p, q)
        assert record["token"]["tv"] == pytest.approx(tv, abs=2e-5)
        assert record["token"]["js"] == pytest.approx(js, abs=2e-5)
        assert record["token"]["gd"] == gd
        special = [order.index("<unk>"), order.index("<eos>")]
        scale = 1.0 / (1.0 - q[special].sum())
        expected = [q[order.index(w)] * scale for w, _ in item.choices]
        assert record["choice_probs"] == pytest.approx(expected, rel=1e-4)
        best = max(
            (w for w in order if w not in ("<unk>", "<eos>")), key=lambda w: q[order.index(w)]
        )
        assert record["reference_top_word"] == best
        check_record(item, record)


def test_padded_output_rows_compare_the_tokenizer_ids_renormalised(bpe_lm, text_dataset):
    tok = bpe_tokenizer()
    padded_model = tiny_gpt2(tok, seed=6)
    padded_model.resize_token_embeddings(len(tok) + 8)  # e.g. a multiple-of-8 embedding
    padded = HFCausalLM(padded_model, tok, name="padded")
    assert padded.vocab_size == len(tok) + 8 != bpe_lm.vocab_size
    pair = check_pair(bpe_lm, padded)
    assert pair.n == len(tok) and "renormalised" in pair.token_method
    items = make_items(bpe_lm, text_dataset, SPEC, 3, "data", 0, 5, seed=1, keep_roots=True)
    for item, record in zip(items, reference_records(bpe_lm, padded, items, SPEC), strict=True):
        p = brute_distribution(bpe_lm, item.context_ids)
        q = brute_distribution(padded, item.context_ids)[: len(tok)]
        tv, js, gd = brute_divergences(p, q / q.sum())
        assert record["token"]["tv"] == pytest.approx(tv, abs=2e-5)
        assert record["token"]["js"] == pytest.approx(js, abs=2e-5)
        assert record["token"]["vocab"] == len(tok) and record["token"]["gd"] == gd
        assert "renormalised" in record["method"]


def test_fake_models_compare_directly():
    """The fake backend (the demo's and the simulated crowd's models): one tokenizer for
    every seed; P_D = P_M gives zeros."""
    model, reference = FakeCausalLM(1), FakeCausalLM(2)
    items = make_items(model, None, SPEC, 4, "model", 0, 12, seed=1, keep_roots=True)
    records = reference_records(model, reference, items, SPEC)
    assert any(r["token"]["gd"] for r in records) and any(r["word_gd"] for r in records)
    for item, record in zip(items, records, strict=True):
        check_record(item, record)
        q = reference._logprobs[item.context_ids[-1]].double().exp().numpy()
        p = model._logprobs[item.context_ids[-1]].double().exp().numpy()
        tv, js, gd = brute_divergences(p / p.sum(), q / q.sum())
        assert record["token"]["tv"] == pytest.approx(tv, abs=1e-6)
        assert record["token"]["js"] == pytest.approx(js, abs=1e-6)
        assert record["token"]["gd"] == gd
    same = reference_records(model, FakeCausalLM(1), items, SPEC)
    assert all(r["token"]["tv"] == 0 and r["word_gd"] == 0 for r in same)


@pytest.mark.parametrize(
    ("other", "reason"),
    [
        ("bpe", "tokenizers differ"),
        ("sp", "tokenizers differ"),
        ("words", "not over the same words"),
        ("fake", "tokenizers differ"),
    ],
)
def test_mismatched_tokenizers_are_refused(word_lm, other, reason):
    if other == "bpe":
        reference = HFCausalLM(tiny_gpt2(bpe_tokenizer(), seed=1), bpe_tokenizer(), name="bpe")
    elif other == "sp":
        reference = HFCausalLM(tiny_gpt2(sp_tokenizer(), seed=1), sp_tokenizer(), name="sp")
    elif other == "words":
        tok = _permuted_word_tokenizer(["<unk>", "<eos>", *WORDS[:-1], "zebra"])
        reference = HFCausalLM(tiny_gpt2(tok, seed=1), tok, name="zebra")
    else:
        reference = FakeCausalLM(1)
    with pytest.raises(IncompatibleReference) as caught:
        check_pair(word_lm, reference)
    message = str(caught.value)
    assert reason in message
    assert repr(word_lm.name) in message and repr(reference.name) in message
    with pytest.raises(IncompatibleReference):
        reference_records(word_lm, reference, [], SPEC)


def test_a_translation_reference_for_a_language_model_is_refused(word_lm, marian):
    with pytest.raises(IncompatibleReference, match="a lm model and a seq2seq reference"):
        check_pair(word_lm, marian)


def test_two_translation_models(marian, pair_dataset):
    """P(.|source, target prefix) of two Marian models, against brute force."""
    torch.manual_seed(11)
    other = MarianMTModel(marian.model.config).eval()
    reference = HFSeq2SeqLM(other, sp_tokenizer(), name="marian-2")
    for kind in ("data", "model", "unrelated", "random"):
        items = make_items(marian, pair_dataset, SPEC, 3, kind, 0, 5, seed=1, keep_roots=True)
        records = reference_records(marian, reference, items, SPEC)
        same = reference_records(marian, marian, items, SPEC)
        for item, record, zero in zip(items, records, same, strict=True):
            if item.skipped:
                assert record is None
                continue
            assert item.source_ids == marian.encode_source(item.source)
            p = brute_distribution(marian, item.context_ids, item.source_ids)
            q = brute_distribution(reference, item.context_ids, item.source_ids)
            tv, js, gd = brute_divergences(p, q)
            assert record["token"]["tv"] == pytest.approx(tv, abs=2e-5)
            assert record["token"]["js"] == pytest.approx(js, abs=2e-5)
            assert record["token"]["gd"] == gd
            check_record(item, record)
            assert zero["token"]["tv"] < 1e-5 and zero["word_gd"] == 0


def test_corruption_at_one_is_the_random_kind(word_lm, text_dataset, monkeypatch):
    """data_corrupted@1 draws its words as `random` does: with the same item seeds the two
    kinds make the same words and the same synthetic values; with their own seeds their
    synthetic CGDs agree within sampling error."""
    import worker.prefixes as prefixes

    reference = HFCausalLM(tiny_gpt2(word_tokenizer(), seed=8, init=0.2), word_tokenizer())
    vocab = text_dataset.vocabulary()
    a = prefixes._corrupt(["x"] * 6, 1.0, vocab, np.random.default_rng(5))
    b = prefixes._random_words(6, vocab, np.random.default_rng(5))
    assert a == (b, list(range(6)))

    def cgd(kind: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        items = make_items(word_lm, text_dataset, SPEC, 4, kind, 0, n, seed=3, keep_roots=True)
        records = reference_records(word_lm, reference, items, SPEC)
        return (
            np.array([r["token"]["gd"] for r in records]),
            np.array([r["word_gd"] for r in records]),
            [i.words for i in items],
        )

    real_seed = prefixes.item_seed
    monkeypatch.setattr(
        prefixes,
        "item_seed",
        lambda s, length, kind, i, attempt=0: real_seed(s, length, "any", i, attempt),
    )
    tok_c, word_c, words_c = cgd("data_corrupted@1", 12)
    tok_r, word_r, words_r = cgd("random", 12)
    assert words_c == words_r
    assert (tok_c == tok_r).all() and (word_c == word_r).all()
    monkeypatch.setattr(prefixes, "item_seed", real_seed)

    n = 60
    tok_c, word_c, words_c = cgd("data_corrupted@1", n)
    tok_r, word_r, words_r = cgd("random", n)
    assert words_c != words_r  # their own seeds
    for x, y in ((tok_c, tok_r), (word_c, word_r)):
        pooled = (x.mean() + y.mean()) / 2
        se = math.sqrt(max(pooled * (1 - pooled), 1 / n) * 2 / n)
        assert abs(x.mean() - y.mean()) <= 4 * se


@pytest.mark.parametrize("length, tokens, room", [(3, 84, 3), (2, 127, 1)])
def test_the_reference_s_search_stays_within_its_context(tmp_path, length, tokens, room):
    """A data prefix that leaves ``room`` of the 256 positions, with P_D = P_M (the same
    weights loaded twice): P_D's search leaves out words longer than the room as the item's
    own search does (its partial words would be scored at positions the model does not have,
    which its forward refuses), so P_D's choice probabilities are the item's own."""
    from app.precompute.datasets import load_dataset
    from tests.worker.conftest import corpus_lines
    from tests.worker.test_prefixes import long_words_lm

    model, reference = long_words_lm(), long_words_lm()
    word = "s" * tokens  # one token a letter
    lines = corpus_lines(6)
    lines[0] = " ".join([word] * (length + 1))
    path = tmp_path / "edge.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    dataset = load_dataset(path)
    items = make_items(model, dataset, SPEC, length, "data", 0, 6, seed=1, keep_roots=True)
    records = reference_records(model, reference, items, SPEC)
    edge = next(j for j, i in enumerate(items) if i.words == [word] * length)
    assert model.max_positions - items[edge].provenance["context_tokens"] == room
    assert records[edge]["reference_top_word"] == items[edge].choices[0][0]
    assert records[edge]["choice_probs"] == pytest.approx(
        [p for _, p in items[edge].choices], rel=1e-4
    )
