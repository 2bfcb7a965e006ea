"""Conversations packed into training rows without contaminating each other.

Transform writes each conversation as `token_ids` with a parallel `loss_mask` (1 where the token
is part of a reply the model is trained to produce: components/tokenizer/chat_graph.py). Here
conversations are packed in order into rows of `context_length + 1` tokens, several to a row,
the rest of a row padded:

- each conversation in a row gets its own segment id (1, 2, ...; 0 is padding), and attention
  is restricted to the query's own segment (a block-diagonal causal mask in the backbone), so
  nothing of the conversation before it is visible; positions restart at 0 for each one;
- a row's inputs are its first `context_length` tokens and its targets the last ones (shifted by
  one); a target is weighted by the conversation's loss mask, and not at all where it starts a
  new segment (the first token of a conversation has no target from the one before it) or is
  padding;
- a conversation longer than a row is cut to the row's length (its start is kept); one left with
  no supervised token is dropped, and counted (`PackingStats`).

Batches are dicts: inputs, targets ([batch, context] int64), weights ([batch, context] float32),
segments and positions ([batch, context] int32). The training loop's loss is the weighted sum of
token losses divided by the sum of the weights over the global batch.
"""

from typing import Any, Dict, NamedTuple, Optional

import tensorflow as tf

from components.file_patterns import FilePatterns, matching_files
from components.transform.preprocessing import LOSS_MASK_KEY, TOKEN_IDS_KEY


def has_loss_mask(feature_spec: Dict[str, Any]) -> bool:
    """Whether the transformed examples are conversations (they carry a loss mask)."""
    return LOSS_MASK_KEY in feature_spec


def conversations(file_patterns: FilePatterns, feature_spec: Dict[str, Any], row_tokens: int) -> tf.data.Dataset:
    """(token ids [n], loss mask [n]) per conversation, cut to `row_tokens`, in file order; those
    with no supervised token left are dropped."""
    files = matching_files(file_patterns, "transformed conversations")
    spec = {TOKEN_IDS_KEY: feature_spec[TOKEN_IDS_KEY], LOSS_MASK_KEY: feature_spec[LOSS_MASK_KEY]}

    def rows(serialized: tf.Tensor) -> tf.data.Dataset:
        parsed = tf.io.parse_example(serialized, spec)
        ids, mask = (tf.cast(parsed[key], tf.int64)[:, :row_tokens] for key in (TOKEN_IDS_KEY, LOSS_MASK_KEY))
        keep = tf.reduce_sum(mask, axis=1) > 0
        ids, mask = tf.ragged.boolean_mask(ids, keep), tf.ragged.boolean_mask(mask, keep)
        bounds = (ids.row_starts(), ids.row_limits())
        return tf.data.Dataset.from_tensor_slices(bounds).map(
            lambda start, limit: (ids.flat_values[start:limit], mask.flat_values[start:limit])
        )

    return tf.data.TFRecordDataset(files, compression_type="GZIP").batch(256).flat_map(rows)


def pack(conversations_dataset: tf.data.Dataset, row_tokens: int) -> tf.data.Dataset:
    """Packs (ids, mask) conversations of at most `row_tokens` tokens, in order, into rows: dicts
    of tokens, mask, segments, positions, each [row_tokens]. The last partial row of a finite
    dataset is emitted too."""
    flush = tf.data.Dataset.from_tensors((tf.zeros([row_tokens + 1], tf.int64), tf.zeros([row_tokens + 1], tf.int64)))
    padded_to = row_tokens

    def empty_row():
        return (
            tf.zeros([padded_to], tf.int64),
            tf.zeros([padded_to], tf.int64),
            tf.zeros([padded_to], tf.int32),
            tf.zeros([padded_to], tf.int32),
            tf.constant(0, tf.int32),
            tf.constant(0, tf.int32),
        )

    def place(state, conversation):
        tokens, mask, segments, positions, fill, count = state
        ids, weights = conversation
        length = tf.shape(ids, out_type=tf.int32)[0]
        is_flush = length > padded_to
        full = (fill + length > padded_to) | is_flush
        emit = full & (fill > 0)
        row = {"tokens": tokens, "mask": mask, "segments": segments, "positions": positions}
        base_tokens, base_mask, base_segments, base_positions, base_fill, base_count = [
            tf.where(full, fresh, kept)
            for fresh, kept in zip(empty_row(), (tokens, mask, segments, positions, fill, count))
        ]
        length = tf.where(is_flush, 0, length)
        ids, weights = ids[:length], weights[:length]
        span = tf.range(base_fill, base_fill + length)[:, tf.newaxis]
        new_tokens = tf.tensor_scatter_nd_update(base_tokens, span, ids)
        new_mask = tf.tensor_scatter_nd_update(base_mask, span, weights)
        new_segments = tf.tensor_scatter_nd_update(base_segments, span, tf.fill([length], base_count + 1))
        new_positions = tf.tensor_scatter_nd_update(base_positions, span, tf.range(length))
        new_state = (
            new_tokens,
            new_mask,
            new_segments,
            new_positions,
            base_fill + length,
            base_count + tf.minimum(length, 1),
        )
        return new_state, (emit, row)

    packed = conversations_dataset.concatenate(flush).scan(empty_row(), place)
    return packed.filter(_is_emitted).map(_emitted_row)


def _is_emitted(emit: tf.Tensor, row: Dict[str, tf.Tensor]) -> tf.Tensor:
    return emit


def _emitted_row(emit: tf.Tensor, row: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    return row


def _shifted(row: Dict[str, tf.Tensor], loss_on: str = "assistant") -> Dict[str, tf.Tensor]:
    """A packed row [..., context + 1] -> the model's inputs and weighted targets (module
    docstring); with `loss_on="all"` every target inside its conversation weighs 1."""
    segments = row["segments"]
    same_segment = tf.equal(segments[..., 1:], segments[..., :-1]) & (segments[..., 1:] > 0)
    mask = row["mask"][..., 1:] if loss_on == "assistant" else tf.ones_like(row["mask"][..., 1:])
    weights = tf.cast(mask, tf.float32) * tf.cast(same_segment, tf.float32)
    return {
        "inputs": row["tokens"][..., :-1],
        "targets": row["tokens"][..., 1:],
        "weights": weights,
        "segments": segments[..., :-1],
        "positions": row["positions"][..., :-1],
    }


def packed_batches(
    file_patterns: FilePatterns,
    feature_spec: Dict[str, Any],
    context_length: int,
    batch_size: int,
    shuffle_buffer: Optional[int] = None,
    seed: Optional[int] = None,
    repeat: bool = False,
    loss_on: str = "assistant",
) -> tf.data.Dataset:
    """Batches of packed conversations (module docstring), like data.packed_blocks for text:
    conversations shuffled before packing (anew each pass) when `shuffle_buffer`, repeated
    before packing when `repeat`; `loss_on` is `training.loss_on`."""
    row_tokens = context_length + 1
    source = conversations(file_patterns, feature_spec, row_tokens)
    if shuffle_buffer:
        source = source.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        source = source.repeat()
    rows = pack(source, row_tokens)
    if shuffle_buffer:
        rows = rows.shuffle(shuffle_buffer, seed=None if seed is None else seed + 1, reshuffle_each_iteration=True)
    return (
        rows.batch(batch_size, drop_remainder=repeat)
        .map(lambda row: _shifted(row, loss_on), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


class PackingStats(NamedTuple):
    """One pass over a split: what packing keeps and how full its rows are."""

    conversations: int
    dropped_without_supervised_tokens: int  # after cutting to the row length
    truncated: int
    rows: int
    real_tokens: int  # conversation tokens in the rows (the rest is padding)
    supervised_tokens: int  # tokens trained on (weighted targets)
    row_tokens: int

    @property
    def real_fraction(self) -> float:
        return self.real_tokens / max(self.rows * self.row_tokens, 1)

    @property
    def supervised_fraction(self) -> float:
        return self.supervised_tokens / max(self.rows * (self.row_tokens - 1), 1)

    def to_dict(self) -> dict:
        return dict(
            self._asdict(),
            real_fraction=round(self.real_fraction, 4),
            supervised_fraction=round(self.supervised_fraction, 4),
        )


def packing_stats(file_patterns: FilePatterns, feature_spec: Dict[str, Any], context_length: int) -> PackingStats:
    """Counts one pass over the conversations of `file_patterns` packed into rows (no shuffle)."""
    row_tokens = context_length + 1
    files = matching_files(file_patterns, "transformed conversations")
    spec = {TOKEN_IDS_KEY: feature_spec[TOKEN_IDS_KEY], LOSS_MASK_KEY: feature_spec[LOSS_MASK_KEY]}
    total = dropped = truncated = 0
    for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1024):
        parsed = tf.io.parse_example(serialized, spec)
        lengths = parsed[TOKEN_IDS_KEY].row_lengths().numpy()
        kept_mask = tf.cast(parsed[LOSS_MASK_KEY], tf.int64)[:, :row_tokens]
        total += len(lengths)
        truncated += int((lengths > row_tokens).sum())
        dropped += int((tf.reduce_sum(kept_mask, axis=1).numpy() == 0).sum())
    rows = real = supervised = 0
    for row in pack(conversations(file_patterns, feature_spec, row_tokens), row_tokens).batch(1024):
        shifted = _shifted(row)
        rows += int(row["tokens"].shape[0])
        real += int(tf.reduce_sum(tf.cast(row["segments"] > 0, tf.int64)).numpy())
        supervised += int(tf.reduce_sum(shifted["weights"]).numpy())
    return PackingStats(total, dropped, truncated, rows, real, supervised, row_tokens)
