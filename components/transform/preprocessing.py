"""TF Transform `preprocessing_fn`: raw documents to token ids.

Transform runs this once over the data with Beam and saves it as the transform graph, which the
trainer, the evaluator and the exported serving model all call, so tokenization is the same
everywhere.
"""
from typing import Dict

import tensorflow as tf

from components.transform import tokenizer

RAW_TEXT_KEY = "text"
TOKEN_IDS_KEY = "token_ids"
NUM_TOKENS_KEY = "num_tokens"


def preprocessing_fn(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Tokenizes the `text` feature; outputs ragged `token_ids` and their count per document."""
    text = tf.reshape(inputs[RAW_TEXT_KEY], [-1])
    token_ids = tokenizer.tokenize(text)
    return {
        TOKEN_IDS_KEY: token_ids,
        NUM_TOKENS_KEY: token_ids.row_lengths(),
    }
