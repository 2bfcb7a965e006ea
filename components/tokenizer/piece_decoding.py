"""Detokenizing SentencePiece-style pieces the way Hugging Face's Llama decoder does.

The decoder (`Replace('▁', ' ')`, `ByteFallback`, `Fuse`, optionally `Strip(' ', 1, 0)`) gives each
piece its text ('▁' as a space, byte pieces such as <0x0A> as their byte, special tokens as
nothing), decodes consecutive byte pieces together (one U+FFFD per byte when they are not valid
UTF-8: a generation can stop mid-character), joins everything, and with `Strip` removes exactly
one leading space (the dummy prefix). Shared by the graphs of a checkpoint's `tokenizer.model`
and of a SentencePiece-style `tokenizer.json`.
"""

import tensorflow as tf


def detokenize_pieces(token_ids, id_bytes: tf.Tensor, is_byte: tf.Tensor, strip_one_space: bool = True) -> tf.Tensor:
    """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings. `id_bytes`: each id's text (bytes,
    empty for special tokens); `is_byte`: whether each id is a byte piece."""
    if not isinstance(token_ids, tf.RaggedTensor):
        token_ids = tf.RaggedTensor.from_tensor(token_ids)
    size = tf.shape(id_bytes, out_type=tf.int64)[0]
    token_ids = tf.clip_by_value(tf.cast(token_ids, tf.int64), 0, size - 1)
    # Pieces without text go first, so byte pieces around them form one run.
    token_ids = tf.ragged.boolean_mask(
        token_ids, tf.gather(is_byte, token_ids) | tf.not_equal(tf.gather(id_bytes, token_ids), "")
    )
    flat = token_ids.flat_values
    texts = tf.gather(id_bytes, flat)
    byte = tf.gather(is_byte, flat)
    row = token_ids.value_rowids()
    # Runs of byte pieces within a row: a run starts at a byte piece whose predecessor is not a
    # byte piece of the same row.
    previous_is_byte = tf.concat([[False], byte[:-1] & tf.equal(row[:-1], row[1:])], axis=0)
    starts = byte & tf.logical_not(previous_is_byte)
    run = tf.cumsum(tf.cast(starts, tf.int64)) - 1
    num_runs = tf.reduce_sum(tf.cast(starts, tf.int64))
    run_of_byte = tf.boolean_mask(run, byte)
    joined_runs = tf.strings.unsorted_segment_join(tf.boolean_mask(texts, byte), run_of_byte, num_runs)
    valid = tf.equal(
        tf.strings.unicode_transcode(joined_runs, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD),
        joined_runs,
    )
    lengths = tf.strings.length(joined_runs)
    replaced = tf.strings.reduce_join(
        tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(lengths)], "\ufffd"), lengths), axis=1
    )
    run_texts = tf.where(valid, joined_runs, replaced)
    # The run's text goes on its first piece; its other pieces contribute nothing.
    run_texts = tf.concat([run_texts, [""]], axis=0)  # never empty: gathered for every piece below
    texts = tf.where(starts, tf.gather(run_texts, tf.maximum(run, 0)), tf.where(byte, "", texts))
    joined = tf.strings.reduce_join(token_ids.with_flat_values(texts), axis=1)
    if not strip_one_space:
        return joined
    return tf.strings.regex_replace(joined, "^ ", "", replace_global=False)
