"""Checking a checkpoint tokenizer's TF graph against Hugging Face `tokenizers` on its tokenizer.json.

The graph (bpe_graph.py, sentencepiece_bpe_graph.py) reimplements what `tokenizers` does with a
`tokenizer.json`, and the checkpoint was trained on `tokenizers`' ids. The Tokenizer stage runs
both on a probe set, the corpus sample plus `FIXED_PROBES` (leading words, newlines, runs of
spaces, CJK, byte fallback, literal special-token text), and stops the run at the first text on
which they differ: a model must not be fine-tuned, evaluated and served on ids it was never
trained on. `tokenizers` runs with `encode_special_tokens=True` and no special tokens added: the
graph never makes special tokens from text, and framing is added apart (special.py).
"""

import json
from typing import List, NamedTuple, Sequence

import tensorflow as tf

from components.tokenizer import hf_files

FIXED_PROBES = (
    "KING HENRY:\nNow",
    "Now is the winter of our discontent",
    "春眠不觉晓，处处闻啼鸟。",
    "runs  of   spaces    and\ttabs\t\there",
    "   leading spaces",
    "trailing spaces   ",
    "\n\nlines\n\n\n  indented\n",
    "emoji 🙂👍🏽 and 👩‍👩‍👧 (byte fallback)",
    "naïve café — “quotes” … ½",
    "digits 0123456789 3.14159 1,000,000",
    "it's we'll they've I'm you'd",
    "<s> </s> <unk> <|endoftext|> as text",
    "Ｆｕｌｌ-width ＡＢＣ",
    " ",
    "",
)
BATCH = 64
SHOWN_IDS = 12  # ids of each list shown around the first difference


class TokenizerMismatch(ValueError):
    """The graph and `tokenizers` give different ids; the message is one line."""


class Agreement(NamedTuple):
    """What was checked: the texts (from the sample and fixed) and the library's version."""

    sample_texts: int
    fixed_texts: int
    tokenizers_version: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "equal": True,
                "sample_texts": self.sample_texts,
                "fixed_texts": self.fixed_texts,
                "tokenizers_version": self.tokenizers_version,
                "file": hf_files.TOKENIZER_JSON,
            },
            sort_keys=True,
        )


def reference_ids(tokenizer_json: bytes, texts: Sequence[str]) -> List[List[int]]:
    """`tokenizers`' ids for `texts` from a tokenizer.json (special tokens neither parsed nor added)."""
    from tokenizers import Tokenizer as HfTokenizer

    reference = HfTokenizer.from_str(tokenizer_json.decode("utf-8"))
    reference.encode_special_tokens = True
    reference.no_truncation()  # as transformers encodes: the file's truncation and padding do not apply
    reference.no_padding()
    return [encoding.ids for encoding in reference.encode_batch(list(texts), add_special_tokens=False)]


def graph_ids(graph: tf.Module, texts: Sequence[str]) -> List[List[int]]:
    """The graph's ids for `texts`, traced once, BATCH texts per call."""
    tokenize = tf.function(graph.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    found: List[List[int]] = []
    for start in range(0, len(texts), BATCH):
        found += tokenize(tf.constant(list(texts[start : start + BATCH]), tf.string)).to_list()
    return found


def _window(ids: List[int], at: int) -> str:
    start = max(0, at - SHOWN_IDS // 2)
    shown = ids[start : start + SHOWN_IDS]
    return (
        f"[{'..., ' if start else ''}{', '.join(map(str, shown))}"
        f"{', ...' if start + SHOWN_IDS < len(ids) else ''}] ({len(ids)} ids)"
    )


def check(graph: tf.Module, tokenizer_json: bytes, sample: Sequence[str], source: str) -> Agreement:
    """Compares the graph with `tokenizers` on `sample` + FIXED_PROBES; raises TokenizerMismatch
    naming the first differing text and both id lists (around the first differing id)."""
    import tokenizers

    texts = list(FIXED_PROBES) + list(sample)
    for text, ours, theirs in zip(texts, graph_ids(graph, texts), reference_ids(tokenizer_json, texts)):
        if ours != theirs:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            quoted = json.dumps(text if len(text) <= 120 else text[:120] + "...", ensure_ascii=False)
            raise TokenizerMismatch(
                f"{source}: the tokenizer graph's ids differ from Hugging Face tokenizers' (tokenizer.json) on {quoted} "
                f"(first difference at token {at}): graph {_window(ours, at)}, tokenizers {_window(theirs, at)}; "
                "the checkpoint was trained on tokenizers' ids, so the run stops"
            )
    return Agreement(len(sample), len(FIXED_PROBES), tokenizers.__version__)
