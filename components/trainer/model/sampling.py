"""Choosing the next token from logits: greedy, or temperature + top-k + top-p (nucleus) sampling.

Everything here is XLA-compilable: no op needs a value known only at run time as a shape (top-k
is a threshold read from one descending sort, not `tf.math.top_k` with a tensor `k`).
"""

import tensorflow as tf

# Logit given to filtered-out tokens: exp() of it underflows to exactly 0 in float32.
_FILTERED_LOGIT = -1e9


def allowed_token_mask(logits: tf.Tensor, top_k: tf.Tensor, top_p: tf.Tensor) -> tf.Tensor:
    """Which tokens of `logits` [batch, vocab] (already temperature-scaled) may be sampled.

    top-k keeps the `top_k` largest logits (0 = all). top-p then keeps the smallest set of those,
    taken in descending order, whose probability (renormalised over the top-k set) reaches
    `top_p` (>= 1 or <= 0 = all). Tokens tied with the last kept logit are kept too. The most
    likely token is always allowed.
    """
    vocab_size = tf.shape(logits)[-1]
    descending = tf.sort(logits, axis=-1, direction="DESCENDING")
    top_k = tf.cast(top_k, tf.int32)
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab_size), vocab_size)
    rank = tf.range(vocab_size)[tf.newaxis, :]
    in_top_k = rank < k
    probabilities = tf.nn.softmax(tf.where(in_top_k, descending, _FILTERED_LOGIT), axis=-1)
    probability_before = tf.math.cumsum(probabilities, axis=-1, exclusive=True)
    top_p = tf.cast(top_p, probabilities.dtype)
    nucleus_off = tf.logical_or(top_p <= 0.0, top_p >= 1.0)
    kept = tf.logical_and(in_top_k, tf.logical_or(nucleus_off, probability_before < top_p))
    num_kept = tf.maximum(tf.reduce_sum(tf.cast(kept, tf.int32), axis=-1, keepdims=True), 1)
    threshold = tf.gather(descending, num_kept - 1, batch_dims=1)
    return logits >= threshold


def sample_next_token(
    logits: tf.Tensor, temperature: tf.Tensor, top_k: tf.Tensor, top_p: tf.Tensor, seed: tf.Tensor
) -> tf.Tensor:
    """One token id (int64) per row of `logits` [batch, vocab].

    temperature == 0 is greedy (argmax, and no sorting is paid for). Otherwise the logits are
    divided by the temperature, restricted by `allowed_token_mask` and sampled with the stateless
    `seed` [2] int64, so a seed gives the same tokens on every run.
    """
    logits = tf.cast(logits, tf.float32)
    temperature = tf.cast(temperature, tf.float32)

    def greedy():
        return tf.argmax(logits, axis=-1, output_type=tf.int64)

    def sample():
        scaled = logits / tf.maximum(temperature, 1e-6)
        filtered = tf.where(allowed_token_mask(scaled, top_k, top_p), scaled, _FILTERED_LOGIT)
        # Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits). Unlike
        # StatelessMultinomial, it has an XLA kernel for int64 seeds.
        uniform = tf.random.stateless_uniform(tf.shape(filtered), seed=seed, minval=1e-20, maxval=1.0)
        return tf.argmax(filtered - tf.math.log(-tf.math.log(uniform)), axis=-1, output_type=tf.int64)

    return tf.cond(temperature > 0.0, sample, greedy)
