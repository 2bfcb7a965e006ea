"""Reading ExampleGen's product back: the documents of the tf.Example records it writes (the
Tokenizer samples them, the Evaluator scores the raw eval text with them)."""

from typing import Iterable

import tensorflow as tf


def document_texts(serialized: bytes, text_feature: str) -> Iterable[str]:
    """The documents (the `text_feature` bytes feature) of one serialized tf.Example."""
    example = tf.train.Example.FromString(serialized)
    for value in example.features.feature[text_feature].bytes_list.value:
        yield value.decode("utf-8", "replace")
