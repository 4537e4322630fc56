"""What the Hugging Face backends share (`worker.hf`, `worker.hf_seq2seq`): dtypes, the
default device, the fused GELU, and what a tokenizer or model says of its padding,
end-of-text and cache keyword."""

from __future__ import annotations

import inspect

import torch

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def default_device() -> torch.device:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def fuse_gelu(model) -> int:
    """Replace ``model``'s tanh-approximation GELUs written out as elementwise operations
    (transformers' ``gelu_new`` and ``gelu_fast``: GPT-2, GPT-J, OpenAI GPT, T5 v1.1, ...) by
    transformers' ``GELUTanh``, the same function in one fused PyTorch kernel; returns how many
    modules it replaced.  The exact GELU is another function and is left alone, and so is a
    shared activation object itself (OpenAI GPT's MLPs hold one module-level instance): each
    module that holds it gets its own.

    In float32 the two forms agree to about one rounding step (at most 2.4e-7 on standard-normal
    inputs), so an item changes only where a sampled token or a word's rank was a near-tie, as
    with any change of kernel: 5 of 256 model items at l = 20 on the benchmark's model.  In
    bfloat16 or float16 the written-out form rounds after each of its eight or nine operations
    and the fused kernel computes in float32 inside: they differ by up to 0.016 in bfloat16 (the
    largest error against float64 0.0078 fused, 0.0089 written out), and more items change.

    On a CPU the written-out form makes eight passes (``gelu_fast``: nine) over the MLP's
    activation, [rows, 4 * width] for GPT-2: at 256 rows of GPT-2 small it took 4.0 against
    1.4 ms a layer, at 4,096 rows 237 against 44 ms (2-core AMD EPYC, 2026-11-26), and a cached
    decoding step of 256 rows 3 % less CPU (medians of 48 steps each, alternating; the fused one
    faster in 38 of 48).  On a GPU it is as many kernel launches a layer instead of one.
    """
    from transformers.activations import FastGELUActivation, GELUTanh, NewGELUActivation

    written_out = (NewGELUActivation, FastGELUActivation)
    swaps = [
        (parent, name, child.training)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) in written_out
    ]
    for parent, name, training in swaps:
        setattr(parent, name, GELUTanh().train(training))
    return len(swaps)


def pad_id_of(tokenizer) -> int:
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if tid is not None:
            return int(tid)
    return 0


def generation_eos(model) -> tuple[int, ...]:
    """End-of-text ids of a model's generation config (an id, a list, or none)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        return (eos,)
    return tuple(int(t) for t in eos or ())


def cache_keyword(module) -> str:
    """The keyword that takes the KV cache: ``cache`` from transformers 5.x releases that
    renamed it (``past_key_values`` is deprecated there and removed in 5.40), the old name
    before.  Passing ``cache`` to an older model would land in ``**kwargs`` and be ignored."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
