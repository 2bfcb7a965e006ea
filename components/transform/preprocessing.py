"""TF Transform `preprocessing_fn`: raw documents to token ids.

Transform runs this over the data with Beam: the analyze phase learns the WordPiece vocabulary
from the train split, and the saved transform graph (with the vocabulary as an asset) is what the
trainer, the evaluator and the exported serving model call, so tokenization is the same
everywhere.

Outputs per document:
    token_ids          ragged int64   the tokens (no separators; the trainer adds them)
    num_tokens         int64          len(token_ids)
    byte_token_fraction float32       share of tokens that are single-byte fallbacks
    bytes_per_token    float32        UTF-8 bytes / tokens (compression), 0 for empty text
"""
from typing import Any, Dict, Optional

import tensorflow as tf

from components.transform import tokenizer, vocabulary

RAW_TEXT_KEY = "text"
TOKEN_IDS_KEY = "token_ids"
NUM_TOKENS_KEY = "num_tokens"
BYTE_TOKEN_FRACTION_KEY = "byte_token_fraction"
BYTES_PER_TOKEN_KEY = "bytes_per_token"
VOCAB_SIZE_CONFIG_KEY = "vocab_size"  # Transform's custom_config key, set from config.transform


def preprocessing_fn(inputs: Dict[str, tf.Tensor], custom_config: Optional[Dict[str, Any]] = None) -> Dict[str, tf.Tensor]:
    """Learns the vocabulary (analyze phase) and tokenizes `text` with it (see module docstring)."""
    if not custom_config or VOCAB_SIZE_CONFIG_KEY not in custom_config:
        raise ValueError(f"preprocessing_fn needs custom_config['{VOCAB_SIZE_CONFIG_KEY}'] (config transform.vocab_size)")
    vocab_size = int(custom_config[VOCAB_SIZE_CONFIG_KEY])
    text = tf.reshape(inputs[RAW_TEXT_KEY], [-1])
    pretokens = tokenizer.pretokenize(text)
    vocabulary_file = vocabulary.learn_vocabulary(pretokens, vocab_size)
    token_ids = tokenizer.tokenize_pretokens(pretokens, tokenizer.piece_to_id_table(vocabulary_file))
    num_tokens = token_ids.row_lengths()
    is_byte_token = tf.logical_and(token_ids >= tokenizer.FIRST_BYTE_ID, token_ids < tokenizer.NUM_BASE_TOKENS)
    byte_tokens = tf.reduce_sum(tf.cast(is_byte_token, tf.float32), axis=1)
    safe_count = tf.maximum(tf.cast(num_tokens, tf.float32), 1.0)
    return {
        TOKEN_IDS_KEY: token_ids,
        NUM_TOKENS_KEY: num_tokens,
        BYTE_TOKEN_FRACTION_KEY: byte_tokens / safe_count,
        BYTES_PER_TOKEN_KEY: tf.cast(tf.strings.length(text), tf.float32) / safe_count,
    }
