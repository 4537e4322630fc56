"""A small word-level demo model, built locally and offline, for the README's demo study.

Nothing can be downloaded from a model hub on a fresh offline machine, so the demo trains its
own model once and caches it under ``./var/``:

1. **Corpus** (`fetch_austen`): Jane Austen's six novels (public domain) from Debian's
   ``r-cran-janeaustenr`` package: ``apt-get download`` + ``dpkg -x``, no R needed.  The novels
   sit in an R lazy-load database (``data/Rdata.rdx`` + ``.rdb``), read with the ``rdata``
   library (`read_lazyload_db`); lines are joined into paragraphs (`austen_paragraphs`), front
   matter, chapter and volume headings, footnotes and end notes dropped.  About 717k words.
2. **Tokenizer** (`train_tokenizer`): lower-cased, wiki-103-style words made by the tokenizer
   itself (a regex split pre-tokenizer: "Don't" -> ``do n't``, punctuation split off), a
   ``tokenizers`` WordLevel vocabulary (~8k words, ``<unk>`` and ``<eos>``) wrapped as a
   ``PreTrainedTokenizerFast``.  The saved datasets hold each paragraph as the tokenizer's
   words joined by single spaces (`tokenize_words`), one per line, so a whitespace-separated
   word of the dataset is exactly one pre-token of the tokenizer (out-of-vocabulary words stay
   as they are in the text and map to ``<unk>`` in the model).
3. **Model** (`build_demo_model`): a GPT-2 with 2 layers, width 128, 4 heads, context 64
   (~1.4M parameters) trained on the ``<eos>``-separated stream of the training paragraphs with
   AdamW, linear warm-up and cosine decay, a fixed number of steps with a wall-clock cap, seeded
   (when the cap would cut the run, the decay follows the clock so the model still ends annealed).
   Saved with ``save_pretrained`` (model and tokenizer) so it loads through
   ``worker.models.load_model`` like any Hugging Face model.

Layout of ``out_dir``: ``model/`` (the checkpoint, its tokenizer and ``ebc_demo.json`` with the
recipe, its hash and the metrics), ``train.txt`` and ``heldout.txt`` (distinct held-out
paragraphs, never trained on: the demo study's dataset and the validation set), ``austen/``
(the downloaded package and the extracted text).  A later call with the same recipe reuses it.

Modules: `worker.demo.corpus` (1), `worker.demo.tokenizer` (2), `worker.demo.build` (3).
Run by hand: ``python -m worker.demo.build var/demo``.
"""

from worker.demo.build import DemoModel, build_demo_model, demo_recipe, recipe_hash, top_next_words
from worker.demo.corpus import (
    AUSTEN_NOVELS,
    CorpusError,
    austen_paragraphs,
    fetch_austen,
    read_austen_novels,
    read_lazyload_db,
)
from worker.demo.tokenizer import tokenize_words, train_tokenizer

__all__ = [
    "AUSTEN_NOVELS",
    "CorpusError",
    "DemoModel",
    "austen_paragraphs",
    "build_demo_model",
    "demo_recipe",
    "fetch_austen",
    "read_austen_novels",
    "read_lazyload_db",
    "recipe_hash",
    "tokenize_words",
    "top_next_words",
    "train_tokenizer",
]
