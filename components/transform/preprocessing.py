"""TF Transform `preprocessing_fn`: raw documents to token ids.

The tokenizer is the Tokenizer stage's: the tokenizing Transform (`component.py`) puts the
artifact's directory in `custom_config[TOKENIZER_MODEL_KEY]` (a learned SentencePiece model file
path works too). Its files are read here, at trace time, and embedded in the transform graph
(TF Text's SentencePiece op, or the byte-level BPE graph with its vocabulary and merges as
constants), so the trainer, the evaluator and the exported serving model tokenize exactly as
Transform did. There is no analyze phase.

Outputs per document:
    token_ids           ragged int64   the tokens (no separators; the trainer adds them)
    num_tokens          int64          len(token_ids)
    byte_token_fraction float32        share of tokens that stand for one byte (byte-fallback pieces;
                                       for byte-level BPE, the 256 unmerged byte symbols)
    bytes_per_token     float32        UTF-8 bytes / tokens (compression), 0 for empty text
    special_tokens      int64          tokens that are ids the pipeline places itself (bos, eos, pad,
                                       framing) or the unknown token (special.py): the transformed
                                       schema allows none, so the TokenGate refuses such data
"""
from typing import Any, Dict, Optional

import tensorflow as tf

from components.tokenizer import loaded

RAW_TEXT_KEY = "text"
TOKEN_IDS_KEY = "token_ids"
NUM_TOKENS_KEY = "num_tokens"
BYTE_TOKEN_FRACTION_KEY = "byte_token_fraction"
BYTES_PER_TOKEN_KEY = "bytes_per_token"
SPECIAL_TOKENS_KEY = "special_tokens"
TOKENIZER_MODEL_KEY = "tokenizer_model"  # custom_config key: a tokenizer directory or learned model file


def preprocessing_fn(inputs: Dict[str, tf.Tensor], custom_config: Optional[Dict[str, Any]] = None) -> Dict[str, tf.Tensor]:
    """Tokenizes `text` with the configured tokenizer (see module docstring)."""
    if not custom_config or not custom_config.get(TOKENIZER_MODEL_KEY):
        raise ValueError(f"preprocessing_fn needs custom_config['{TOKENIZER_MODEL_KEY}'], the tokenizer directory "
                         "or model file (the tokenizing Transform component sets it from its `tokenizer` input)")
    loaded_tokenizer = loaded.load(custom_config[TOKENIZER_MODEL_KEY])
    tokenizer = loaded_tokenizer.graph()
    text = tf.reshape(inputs[RAW_TEXT_KEY], [-1])
    token_ids = tokenizer.tokenize(text)
    num_tokens = token_ids.row_lengths()
    is_byte_token = _is_byte_token(token_ids, loaded_tokenizer)
    byte_tokens = tf.reduce_sum(tf.cast(is_byte_token, tf.float32), axis=1)
    safe_count = tf.maximum(tf.cast(num_tokens, tf.float32), 1.0)
    return {
        TOKEN_IDS_KEY: token_ids,
        NUM_TOKENS_KEY: num_tokens,
        BYTE_TOKEN_FRACTION_KEY: byte_tokens / safe_count,
        BYTES_PER_TOKEN_KEY: tf.cast(tf.strings.length(text), tf.float32) / safe_count,
        SPECIAL_TOKENS_KEY: count_forbidden(token_ids, loaded_tokenizer.document_forbidden_ids()),
    }


def count_forbidden(token_ids: tf.RaggedTensor, forbidden) -> tf.Tensor:
    """[batch] int64: how many of each document's tokens are in `forbidden` (ids)."""
    forbidden = tf.constant(sorted(forbidden) or [-1], tf.int64)
    flat = tf.cast(token_ids.flat_values, tf.int64)
    hit = tf.reduce_any(tf.equal(flat[:, tf.newaxis], forbidden[tf.newaxis, :]), axis=1)
    return tf.reduce_sum(tf.cast(token_ids.with_flat_values(hit), tf.int64), axis=1)


def _is_byte_token(token_ids: tf.RaggedTensor, tokenizer: loaded.Tokenizer) -> tf.RaggedTensor:
    """Whether each token stands for one byte (a contiguous id range where it is one, as in the
    learned layout and Llama's; else a lookup in a constant mask over the vocabulary)."""
    byte_ids = tokenizer.byte_token_ids()
    if byte_ids == list(range(byte_ids[0], byte_ids[-1] + 1)):
        return (token_ids >= byte_ids[0]) & (token_ids <= byte_ids[-1])
    mask = [False] * tokenizer.vocab_size
    for index in byte_ids:
        mask[index] = True
    return tf.ragged.map_flat_values(tf.gather, tf.constant(mask), token_ids)
