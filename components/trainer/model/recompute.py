"""Activation recomputation (`training.recompute`): trade recomputed work for memory.

Without it, the backward pass reads every activation the forward pass made: per block the
normalised inputs, Q/K/V, the [heads, length, length] attention scores and weights, the MLP's
[length, mlp_dim] inner activations. Two modes recompute some of them in the backward pass:

- `attention` (selective recomputation, as in Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models"): only the attention core (scores, softmax, weighted
  values) is recomputed, the part of a block whose memory grows with the square of the context
  and whose compute is small. `causal_attention_in_chunks` also runs it in query chunks of
  `ATTENTION_QUERY_CHUNK` positions, each against the keys up to its own last position, one chunk
  after another, so at most one chunk's [heads, chunk, length] scores exist at a time, in the
  forward and in the backward pass. Chunks skip the keys a causal mask would hide, which pays for
  most of the recomputation.
- `block`: the forward pass keeps only each block's input; the backward pass runs the block's
  forward again from that input, just before it needs the block's activations, so only one block's
  activations are alive at a time (`recompute_in_backward`, which is `tf.recompute_grad`), and its
  attention core runs in chunks as in `attention`. The cost is about one more forward pass.

Recomputations depend on the incoming gradient through a data dependency (not a control
dependency, which XLA ignores), so neither Grappler nor XLA can schedule them in the forward pass;
the chunks are chained the same way, so they run one after another.

Only deterministic functions can be recomputed: dropout draws a new mask on every call, so the
recomputed activations would not be those of the forward pass and the gradients would be wrong;
`options.check_recompute` refuses that combination.
"""

from typing import Callable, List, Optional, Tuple

import tensorflow as tf

# Query positions per attention chunk: scores of [heads, 512, length] floats at a time (at a
# 16k context and 12 heads, 400 MB in float32 instead of 12.9 GB for the whole [length, length]).
ATTENTION_QUERY_CHUNK = 512

# weigh_values(query [batch, heads, q_len, head_dim], key and value [batch, kv_heads, k_len,
# head_dim], mask [q_len, k_len] bool) -> attended values [batch, q_len, heads * head_dim].
AttentionCore = Callable[[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor], tf.Tensor]


def recompute_in_backward(function: Callable[[tf.Tensor], tf.Tensor]) -> Callable[[tf.Tensor], tf.Tensor]:
    """`function` (one tensor in, one out; the variables it reads get gradients too) with its
    intermediate activations recomputed in the backward pass instead of kept from the forward pass."""
    return tf.recompute_grad(function)


def query_spans(length, longest: int, chunk: int) -> List[Tuple]:
    """The [start, end) query positions of each chunk of `length` positions (a Python int, or a
    scalar tensor when the step is traced for any length up to `longest`: then every chunk of
    `longest` positions has a span, clamped to `length`, and those past it are empty)."""
    if isinstance(length, int):
        return [(start, min(start + chunk, length)) for start in range(0, length, chunk)] or [(0, 0)]
    return [
        (tf.minimum(start, length), tf.minimum(start + chunk, length)) for start in range(0, max(longest, 1), chunk)
    ]


def causal_rows(start, end) -> tf.Tensor:
    """[end - start, end] bool: query position start + i may attend to key positions <= start + i."""
    return tf.range(end)[tf.newaxis, :] <= tf.range(start, end)[:, tf.newaxis]


def after(tensor: tf.Tensor, previous: tf.Tensor) -> tf.Tensor:
    """`tensor`, unchanged, but computed only once `previous` is: adds a zero that reads `previous`'s
    first element (a data dependency; the NaN branch, never taken, keeps it from being folded away)."""
    flag = tf.cast(tf.reshape(previous, [-1])[:1], tf.bool)
    return tensor + tf.cast(tf.where(tf.reduce_all(tf.equal(flag, flag)), 0.0, float("nan")), tensor.dtype)


def chunk_mask(start, end, segment_ids: Optional[tf.Tensor]) -> tf.Tensor:
    """The mask of query positions [start, end) over keys [0, end): causal, and within each
    query's own segment when `segment_ids` ([batch, length]) are given (packed examples)."""
    causal = causal_rows(start, end)
    if segment_ids is None:
        return causal
    same = tf.equal(segment_ids[:, start:end, tf.newaxis], segment_ids[:, tf.newaxis, :end])
    return (same & causal[tf.newaxis])[:, tf.newaxis]


def causal_attention_in_chunks(
    weigh_values: AttentionCore,
    query: tf.Tensor,
    key: tf.Tensor,
    value: tf.Tensor,
    longest: int,
    chunk: Optional[int] = None,
    segment_ids: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    """Causal self-attention (`weigh_values` on every query position, each seeing the keys up to its
    own, within its own segment when `segment_ids` [batch, length] are given) whose attention core
    is recomputed, chunk by chunk (`chunk` query positions, default ATTENTION_QUERY_CHUNK), in the
    backward pass: the forward pass keeps only `query`, `key` and `value` ([batch, heads or
    kv_heads, length, head_dim], length at most `longest`, the model's context). Returns
    [batch, length, heads * head_dim]."""
    length = query.shape[2] if query.shape[2] is not None else tf.shape(query)[2]
    spans = query_spans(length, longest, chunk or ATTENTION_QUERY_CHUNK)

    @tf.custom_gradient
    def attention(query, key, value):
        pieces = []
        for start, end in spans:
            query_chunk = query[:, :, start:end] if not pieces else after(query[:, :, start:end], pieces[-1])
            pieces.append(
                weigh_values(query_chunk, key[:, :, :end], value[:, :, :end], chunk_mask(start, end, segment_ids))
            )

        def gradient(d_attended):
            length = tf.shape(key)[2]
            d_key, d_value = tf.zeros(tf.shape(key), tf.float32), tf.zeros(tf.shape(value), tf.float32)
            d_queries = []
            for start, end in reversed(spans):  # the last chunk's gradient is complete first
                d_chunk = d_attended[:, start:end]
                # After the incoming gradient (so not in the forward pass) and after the previous chunk.
                query_chunk = after(after(query[:, :, start:end], d_chunk), d_key)
                keys, values = key[:, :, :end], value[:, :, :end]
                with tf.GradientTape() as tape:
                    tape.watch([query_chunk, keys, values])
                    attended = weigh_values(query_chunk, keys, values, chunk_mask(start, end, segment_ids))
                d_query, d_keys, d_values = tape.gradient(
                    attended, [query_chunk, keys, values], output_gradients=d_chunk
                )
                padding = [[0, 0], [0, 0], [0, length - end], [0, 0]]
                d_key += tf.pad(tf.cast(d_keys, tf.float32), padding)
                d_value += tf.pad(tf.cast(d_values, tf.float32), padding)
                d_queries.append(d_query)
            return tf.concat(d_queries[::-1], axis=2), tf.cast(d_key, key.dtype), tf.cast(d_value, value.dtype)

        return tf.concat(pieces, axis=1), gradient

    return attention(query, key, value)
