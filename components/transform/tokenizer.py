"""The tokenizer shared by Transform, the trainer, the evaluator and the serving signatures.

This foundation tokenizer is byte-level: every UTF-8 byte is one token, so any text round-trips
losslessly and there is no out-of-vocabulary case. It uses TF Text's `ByteSplitter` for the split
and plain TensorFlow ops for the way back, all of which load in stock TF Serving. The learned
subword tokenizer replaces it in a later issue behind the same two functions.

Token ids (the one place they are defined):
    PAD_ID = 0          padding, never a training target
    EOS_ID = 1          end of document; also the separator that precedes every document
    BYTE_OFFSET = 2     byte value b has id b + BYTE_OFFSET
    VOCAB_SIZE = 258
"""
import tensorflow as tf
import tensorflow_text as tf_text

PAD_ID = 0
EOS_ID = 1
BYTE_OFFSET = 2
VOCAB_SIZE = 256 + BYTE_OFFSET


def tokenize(texts: tf.Tensor) -> tf.RaggedTensor:
    """Maps a [batch] string tensor to ragged int64 token ids [batch, (tokens)]."""
    byte_values = tf_text.ByteSplitter().split(texts)
    return tf.cast(byte_values, tf.int64) + BYTE_OFFSET


def detokenize(token_ids: tf.RaggedTensor) -> tf.Tensor:
    """Maps ragged token ids [batch, (tokens)] back to a [batch] string tensor.

    Special tokens (PAD, EOS) are dropped; every byte token contributes its byte.
    """
    token_ids = tf.cast(token_ids, tf.int64)
    is_byte = token_ids >= BYTE_OFFSET
    byte_ids = tf.ragged.boolean_mask(token_ids, is_byte) - BYTE_OFFSET
    byte_strings = tf.constant([bytes([value]) for value in range(256)])
    pieces = tf.gather(byte_strings, byte_ids)
    return tf.strings.reduce_join(pieces, axis=-1)
