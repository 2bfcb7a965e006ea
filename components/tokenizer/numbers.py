"""How a tokenizer splits numbers, measured on the sample it is used for.

A model copies a number from its prompt token by token. When every digit is a token of its own,
copying `50440` is five lookups among ten tokens the model sees everywhere; when digits merge
(`▁504` `40:`), every number is a different pair out of about a thousand pieces, which a model
can only memorise, and replies come back right in every word but the number. The learned
tokenizer splits digits (`tokenizer.split_digits`); a checkpoint's, pinned or reused tokenizer
may not, so the Tokenizer stage measures every tokenizer it writes, records the result on the
artifact (`number_splitting`) and warns when digits merge.

What is measured: the sample's chunks that hold a digit (at most MAX_TEXTS) and EXAMPLES are
tokenized with the tokenizer's own graph, each token is decoded alone, and a digit counts as
*alone* when its token decodes to that one digit and nothing else (no space, letter, punctuation
or other digit).
"""

import json
import re
from typing import Dict, List, NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from components.tokenizer.agreement import graph_ids

DIGIT = re.compile("[0-9]")
MAX_TEXTS = 256  # sample chunks with a digit that are tokenized for the check
# Numbers as support replies, reports, prescriptions and code carry them; shown split on the artifact.
EXAMPLES = (
    "Your order 50440 ships on 2026-12-06.",
    "Total: $1,299.99 for 3 items.",
    "Take 250 mg every 8 hours.",
    "See line 42 of main.py.",
)


class NumberSplitting(NamedTuple):
    """What the check found (see the module docstring)."""

    texts: int  # texts tokenized: sample chunks with a digit, then EXAMPLES
    digits: int  # digits in their tokens
    digits_alone: int  # digits that are a token by themselves
    examples: Dict[str, List[str]]  # each of EXAMPLES as the texts of its tokens

    @property
    def merges_digits(self) -> bool:
        return self.digits_alone < self.digits

    @property
    def alone_fraction(self) -> float:
        return self.digits_alone / self.digits if self.digits else 1.0

    def to_json(self) -> str:
        return json.dumps(
            {
                **self._asdict(),
                "alone_fraction": round(self.alone_fraction, 4),
                "merges_digits": self.merges_digits,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    def summary(self) -> str:
        """One line: every digit alone, or how many merge and an example of it."""
        if not self.merges_digits:
            return f"every digit is a token of its own ({self.digits:,} digits in {self.texts} texts)"
        merged = next(
            (f"{text!r} -> {' | '.join(tokens)}" for text, tokens in self.examples.items() if _merged(tokens)), ""
        )
        return (
            f"digits merge: {1 - self.alone_fraction:.0%} of {self.digits:,} digits in {self.texts} texts share a "
            f"token with another character ({merged}); models copy numbers poorly with such a tokenizer "
            "(docs/tokenizers.md, Numbers)"
        )


def _merged(tokens: Sequence[str]) -> bool:
    return any(DIGIT.search(token) and len(token) > 1 for token in tokens)


def measure(graph: tf.Module, sample: Sequence[str]) -> NumberSplitting:
    """Tokenizes the sample's chunks that hold a digit and EXAMPLES with `graph` (a tokenizer
    graph: `tokenize` and `detokenize`) and counts the digits that are tokens of their own."""
    texts = [text for text in sample if DIGIT.search(text)][:MAX_TEXTS] + list(EXAMPLES)
    rows = graph_ids(graph, texts)
    token_text = _token_texts(graph, sorted({token for row in rows for token in row}))
    digits = alone = 0
    for row in rows:
        for token in row:
            text = token_text[token]
            in_token = len(DIGIT.findall(text))
            digits += in_token
            alone += in_token == 1 and len(text) == 1
    examples = {text: [token_text[token] for token in row] for text, row in zip(EXAMPLES, rows[-len(EXAMPLES) :])}
    return NumberSplitting(len(texts), digits, alone, examples)


def _token_texts(graph: tf.Module, token_ids: List[int]) -> Dict[int, str]:
    """Each id decoded alone (a byte of a longer character decodes to U+FFFD, which holds no digit)."""
    if not token_ids:
        return {}
    alone = tf.RaggedTensor.from_row_lengths(tf.constant(token_ids, tf.int64), tf.ones([len(token_ids)], tf.int64))
    decoded = graph.detokenize(alone).numpy()
    return {token: text.decode("utf-8", "replace") for token, text in zip(token_ids, np.atleast_1d(decoded))}
