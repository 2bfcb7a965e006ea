"""Autoregressive decoding in the TensorFlow graph (no Python per token).

`generate_tokens` runs a `tf.while_loop` (via AutoGraph) over a token buffer with room for the
prompt and every new token: each step runs the backbone on each sequence's window of its last
`context_length` tokens, reads the logits at the sequence's end, samples the next token and
writes it in place. Sequences of different
prompt lengths share a batch; each stops at EOS or the token limit. This recomputes the prefix at
every step; a key/value cache replaces that in the generation issue.
"""
import tensorflow as tf

from components.transform import tokenizer


def sample_next_token(logits: tf.Tensor, temperature: tf.Tensor, top_k: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Picks one token id per row of `logits` [batch, vocab].

    temperature == 0 is greedy (argmax); otherwise logits are restricted to the `top_k` largest
    (0 = no restriction), divided by the temperature and sampled with the stateless `seed` [2].
    """
    vocab_size = tf.shape(logits)[-1]
    greedy = tf.argmax(logits, axis=-1)
    k = tf.where(top_k > 0, tf.minimum(top_k, vocab_size), vocab_size)
    kth_largest = tf.math.top_k(logits, k=k).values[:, -1:]
    filtered = tf.where(logits < kth_largest, tf.constant(-1e9, logits.dtype), logits)
    scaled = filtered / tf.maximum(tf.cast(temperature, logits.dtype), 1e-6)
    sampled = tf.random.stateless_categorical(scaled, 1, seed=seed, dtype=tf.int64)[:, 0]
    return tf.where(temperature > 0, sampled, greedy)


def prepare_context(prompt_ids: tf.RaggedTensor, max_prompt_tokens: tf.Tensor) -> tf.RaggedTensor:
    """EOS (the document separator) followed by at most the last `max_prompt_tokens` prompt tokens."""
    prompt_ids = tf.cast(prompt_ids, tf.int64)
    lengths = prompt_ids.row_lengths()
    first_kept = tf.maximum(lengths - tf.cast(max_prompt_tokens, tf.int64), 0)
    positions = tf.ragged.range(lengths)
    kept = tf.ragged.boolean_mask(prompt_ids, positions >= first_kept[:, tf.newaxis])
    separators = tf.fill([prompt_ids.nrows(), 1], tf.constant(tokenizer.EOS_ID, tf.int64))
    return tf.concat([separators, kept], axis=1)


def generate_tokens(
    backbone,
    prompt_ids: tf.RaggedTensor,
    max_new_tokens: tf.Tensor,
    temperature: tf.Tensor,
    top_k: tf.Tensor,
    seed: tf.Tensor,
) -> tuple:
    """Continues each prompt; returns (new token ids as ragged [batch, (n)], n per row as int32).

    The model sees a sliding window of its last `context_length` tokens, so prompts keep their
    context and generations may run past the context length.
    """
    context_length = backbone.context_length
    max_new_tokens = tf.maximum(tf.cast(max_new_tokens, tf.int32), 1)
    context = prepare_context(prompt_ids, context_length - 1)
    prompt_lengths = tf.cast(context.row_lengths(), tf.int32)
    buffer = tf.pad(context.to_tensor(default_value=tokenizer.PAD_ID), [[0, 0], [0, max_new_tokens]])
    total_length = tf.shape(buffer)[1]
    window_width = tf.minimum(context_length, total_length)
    batch_size = tf.shape(buffer)[0]
    rows = tf.range(batch_size)
    lengths = prompt_lengths
    done = tf.zeros([batch_size], tf.bool)
    seed = tf.cast(seed, tf.int64)
    for step in tf.range(max_new_tokens):
        if tf.reduce_all(done):
            break
        # Each row's window ends at its last token; positions after it are masked by causality.
        window_starts = tf.maximum(lengths - window_width, 0)
        window_positions = tf.minimum(window_starts[:, tf.newaxis] + tf.range(window_width)[tf.newaxis, :], total_length - 1)
        logits = backbone(tf.gather(buffer, window_positions, batch_dims=1), training=False)
        last_logits = tf.gather(logits, lengths - 1 - window_starts, batch_dims=1)
        step_seed = tf.stack([seed, tf.cast(step, tf.int64)])
        next_ids = sample_next_token(last_logits, temperature, top_k, step_seed)
        next_ids = tf.where(done, tf.constant(tokenizer.PAD_ID, tf.int64), next_ids)
        buffer = tf.tensor_scatter_nd_update(buffer, tf.stack([rows, lengths], axis=1), next_ids)
        lengths = lengths + tf.cast(tf.logical_not(done), tf.int32)
        done = tf.logical_or(done, tf.equal(next_ids, tokenizer.EOS_ID))
    positions = tf.range(total_length)[tf.newaxis, :]
    is_new = tf.logical_and(positions >= prompt_lengths[:, tf.newaxis], positions < lengths[:, tf.newaxis])
    return tf.ragged.boolean_mask(buffer, is_new), lengths - prompt_lengths
