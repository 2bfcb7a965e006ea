"""TF Transform `preprocessing_fn`: raw documents to token ids.

The tokenizer is the Tokenizer stage's SentencePiece model; the tokenizing Transform
(`component.py`) puts its path in `custom_config[TOKENIZER_MODEL_KEY]`. The model's bytes are read
here, at trace time, and embedded in the transform graph by TF Text's SentencePiece op, so the
trainer, the evaluator and the exported serving model tokenize exactly as Transform did. There is
no analyze phase.

Outputs per document:
    token_ids           ragged int64   the tokens (no separators; the trainer adds them)
    num_tokens          int64          len(token_ids)
    byte_token_fraction float32        share of tokens that are byte-fallback pieces
    bytes_per_token     float32        UTF-8 bytes / tokens (compression), 0 for empty text
"""
from typing import Any, Dict, Optional

import tensorflow as tf

from components.tokenizer import ids, model_file
from components.tokenizer.graph import GraphTokenizer

RAW_TEXT_KEY = "text"
TOKEN_IDS_KEY = "token_ids"
NUM_TOKENS_KEY = "num_tokens"
BYTE_TOKEN_FRACTION_KEY = "byte_token_fraction"
BYTES_PER_TOKEN_KEY = "bytes_per_token"
TOKENIZER_MODEL_KEY = "tokenizer_model"  # custom_config key: path of the SentencePiece model file


def preprocessing_fn(inputs: Dict[str, tf.Tensor], custom_config: Optional[Dict[str, Any]] = None) -> Dict[str, tf.Tensor]:
    """Tokenizes `text` with the configured SentencePiece model (see module docstring)."""
    if not custom_config or not custom_config.get(TOKENIZER_MODEL_KEY):
        raise ValueError(f"preprocessing_fn needs custom_config['{TOKENIZER_MODEL_KEY}'], the SentencePiece model "
                         "file (the tokenizing Transform component sets it from its `tokenizer` input)")
    tokenizer = GraphTokenizer(model_file.read_model(custom_config[TOKENIZER_MODEL_KEY]).proto)
    text = tf.reshape(inputs[RAW_TEXT_KEY], [-1])
    token_ids = tokenizer.tokenize(text)
    num_tokens = token_ids.row_lengths()
    is_byte_token = (token_ids >= ids.FIRST_BYTE_ID) & (token_ids < ids.FIRST_LEARNED_ID)
    byte_tokens = tf.reduce_sum(tf.cast(is_byte_token, tf.float32), axis=1)
    safe_count = tf.maximum(tf.cast(num_tokens, tf.float32), 1.0)
    return {
        TOKEN_IDS_KEY: token_ids,
        NUM_TOKENS_KEY: num_tokens,
        BYTE_TOKEN_FRACTION_KEY: byte_tokens / safe_count,
        BYTES_PER_TOKEN_KEY: tf.cast(tf.strings.length(text), tf.float32) / safe_count,
    }
