"""Autoregressive decoding in the TensorFlow graph (no Python per token).

`generate_tokens` is the serving path: one prefill pass over the prompts fills a key/value
cache, then a `tf.while_loop` adds one token per step, attending to the cache
(`backbone.prefill` / `backbone.decode_step`). Shapes are static per length bucket, so the loop
can be compiled once per bucket with XLA (`jit_compile=True`):

- prompts are right-padded to `P`, the smallest bucket holding the longest prompt;
- the token buffer holds `C` positions, the smallest bucket holding the longest prompt plus
  `max_new_tokens`; under XLA the cache holds all `C` from the start, in graph mode it starts at
  the prompts and grows towards `C` in steps of `CACHE_GROWTH` positions (`decode_with_cache`);
- with XLA the batch is padded to a power of two with finished dummy rows.

Buckets are powers of two from 16, capped at the context length. Each row keeps its own length:
its new token is written (and its key/value cached) at its own position, and it attends only to
its own positions, so prompts of different lengths share a batch and get exactly what they would
get alone.

Special ids come from the tokenizer (`special`, default: the learned tokenizer's): each prompt is
framed as the tokenizer frames a text (`prompt_prefix` / `prompt_suffix`: [EOS] before it for the
learned tokenizer, <s> for Llama, nothing for GPT-2), so a checkpoint answers as transformers does;
a prompt that frames to no tokens at all (an empty GPT-2 prompt) starts from the bos id, as
transformers' `generate` does without input ids. A row stops at the eos id, and finished or
padding positions hold the pad id.

Context limit: the total length (the framed prompt + new tokens) never exceeds the model's
context length (learned positions end there). The prompt keeps its last
`max(context_length - max_new_tokens, context_length // 2)` tokens (framing included), and a
row whose length reaches the context length stops, which `num_generated_tokens` reports.

`generate_tokens_without_cache` recomputes the whole prefix every step (sliding window of the last
`context_length` tokens); it is kept as the reference the cache is tested and benchmarked against.
"""

import functools
from typing import Sequence

import tensorflow as tf

from components.tokenizer.special import LEARNED, SpecialTokens
from components.trainer.model.sampling import sample_next_token

MIN_BUCKET = 16
CACHE_GROWTH = 64  # graph mode: positions the key/value cache grows by (see decode_with_cache)


def prepare_context(
    prompt_ids: tf.RaggedTensor, max_prompt_tokens=None, special: SpecialTokens = LEARNED
) -> tf.RaggedTensor:
    """Each prompt framed as the tokenizer frames a text (prompt_prefix + at most its last
    `max_prompt_tokens` tokens (None: all) + prompt_suffix), or [bos] where that is empty."""
    prompt_ids = tf.cast(prompt_ids, tf.int64)
    lengths = prompt_ids.row_lengths()
    kept = prompt_ids
    if max_prompt_tokens is not None:
        first_kept = tf.maximum(lengths - tf.cast(max_prompt_tokens, tf.int64), 0)
        positions = tf.ragged.range(lengths)
        kept = tf.ragged.boolean_mask(prompt_ids, positions >= first_kept[:, tf.newaxis])
    rows = prompt_ids.nrows()
    parts = [_tiled(special.prompt_prefix, rows), kept, _tiled(special.prompt_suffix, rows)]
    if not special.prompt_prefix and not special.prompt_suffix:
        empty = tf.equal(lengths, 0)
        parts.append(
            tf.RaggedTensor.from_row_lengths(
                tf.fill([tf.reduce_sum(tf.cast(empty, tf.int64))], tf.constant(special.bos_id, tf.int64)),
                tf.cast(empty, tf.int64),
            )
        )
    return tf.concat(parts, axis=1)


def framing_length(special: SpecialTokens) -> int:
    """Tokens the framing adds to every prompt (`prepare_context`)."""
    return len(special.prompt_prefix) + len(special.prompt_suffix)


def _tiled(ids, rows) -> tf.RaggedTensor:
    return tf.RaggedTensor.from_tensor(tf.tile(tf.constant(list(ids), tf.int64, shape=[1, len(ids)]), [rows, 1]))


def length_buckets(maximum: int) -> list:
    """The static lengths shapes are rounded up to: powers of two from MIN_BUCKET, then `maximum`."""
    buckets, size = [], MIN_BUCKET
    while size < maximum:
        buckets.append(size)
        size *= 2
    return buckets + [maximum]


def round_up_to_bucket(length: tf.Tensor, buckets: list) -> tf.Tensor:
    """The smallest bucket >= `length` (the largest bucket if none is)."""
    buckets = tf.constant(buckets, tf.int32)
    length = tf.cast(length, tf.int32)
    return tf.reduce_min(tf.where(buckets >= length, buckets, buckets[-1]))


def _next_power_of_two(value: tf.Tensor) -> tf.Tensor:
    value = tf.cast(value, tf.float32)
    return tf.cast(tf.pow(2.0, tf.math.ceil(tf.math.log(value) / tf.math.log(2.0))), tf.int32)


def is_stop(next_ids: tf.Tensor, eos_id: int, stop_ids: Sequence[int] = ()) -> tf.Tensor:
    """Whether each new token ends its row: the eos id or one of `stop_ids`."""
    ids = sorted({int(eos_id), *(int(i) for i in stop_ids)})
    if len(ids) == 1:
        return tf.equal(next_ids, ids[0])
    return tf.reduce_any(tf.equal(next_ids[:, tf.newaxis], tf.constant(ids, next_ids.dtype)[tf.newaxis, :]), axis=1)


def decode_with_cache(
    backbone,
    prompt_tokens,
    buffer,
    lengths,
    done,
    max_new_tokens,
    temperature,
    top_k,
    top_p,
    seed,
    grow_cache=True,
    eos_id=LEARNED.eos_id,
    pad_id=LEARNED.pad_id,
    stop_ids=(),
):
    """The prefill + cached `tf.while_loop`; every shape comes from the inputs' (static) shapes.

    `grow_cache` (graph mode): the key/value cache starts just large enough for the prompts and
    grows by `CACHE_GROWTH` positions (one copy) whenever the longest row fills it, up to the
    bucket's length, so each step's attention reads about the positions written so far instead of
    the whole bucket; each step writes its keys/values into the cache buffers without copying them.
    The XLA variant passes False: static shapes, the whole bucket from the start, and scatter
    writes (XLA has no kernel for the in-place op and updates in place itself).

    prompt_tokens [B, P] right-padded prompts; buffer [B, C] the same tokens padded to the cache
    length; lengths [B] int32 prompt lengths; done [B] rows that must not generate (padding).
    eos_id / pad_id: the tokenizer's stop token and what finished rows write; `stop_ids`: more
    tokens a row stops at (a chat template's end-of-turn token).
    Returns (buffer with the new tokens written after each prompt, new lengths).
    """
    cache_length = tf.shape(buffer)[1]
    rows = tf.range(tf.shape(buffer)[0])
    seed = tf.cast(seed, tf.int64)
    first_size = _grown_size(tf.shape(prompt_tokens)[1], cache_length) if grow_cache else cache_length
    next_logits, cache = backbone.prefill(prompt_tokens, first_size, lengths - 1)

    def keep_going(step, buffer, lengths, done, next_logits, cache):
        return tf.logical_and(step < max_new_tokens, tf.logical_not(tf.reduce_all(done)))

    def one_token(step, buffer, lengths, done, next_logits, cache):
        step_seed = tf.stack([seed, tf.cast(step, tf.int64)])
        next_ids = sample_next_token(next_logits, temperature, top_k, top_p, step_seed)
        next_ids = tf.where(done, tf.constant(pad_id, tf.int64), next_ids)
        write_at = tf.minimum(lengths, cache_length - 1)
        buffer = tf.tensor_scatter_nd_update(buffer, tf.stack([rows, write_at], axis=1), next_ids)
        lengths = lengths + tf.cast(tf.logical_not(done), tf.int32)
        done = done | is_stop(next_ids, eos_id, stop_ids) | (lengths >= cache_length)
        next_logits, cache = backbone.decode_step(
            next_ids, tf.minimum(lengths - 1, cache_length - 1), cache, grow_cache
        )
        return step + 1, buffer, lengths, done, next_logits, cache

    loop_vars = (tf.constant(0, tf.int32), buffer, lengths, done, next_logits, cache)
    if not grow_cache:
        _, buffer, lengths, _, _, _ = tf.while_loop(keep_going, one_token, loop_vars)
        return buffer, lengths

    def cache_has_room(step, buffer, lengths, done, next_logits, cache):
        size = tf.shape(cache[0][0])[2]
        # The next step writes at each row's length; at the full bucket, rows stop themselves.
        has_room = (size >= cache_length) | (tf.reduce_max(lengths) < size)
        return tf.logical_and(keep_going(step, buffer, lengths, done, next_logits, cache), has_room)

    def grow_then_decode(step, buffer, lengths, done, next_logits, cache):
        size = tf.shape(cache[0][0])[2]
        new_size = tf.where(tf.reduce_max(lengths) < size, size, _grown_size(size, cache_length))
        padding = [[0, 0], [0, 0], [0, new_size - size], [0, 0]]
        cache = tf.nest.map_structure(lambda tensor: tf.pad(tensor, padding), cache)
        return tf.while_loop(cache_has_room, one_token, (step, buffer, lengths, done, next_logits, cache))

    invariants = tf.nest.map_structure(lambda tensor: tensor.shape, loop_vars[:-1]) + (
        tf.nest.map_structure(
            lambda tensor: tf.TensorShape([tensor.shape[0], tensor.shape[1], None, tensor.shape[3]]), cache
        ),
    )
    _, buffer, lengths, _, _, _ = tf.while_loop(keep_going, grow_then_decode, loop_vars, shape_invariants=invariants)
    return buffer, lengths


def _grown_size(filled: tf.Tensor, cache_length: tf.Tensor) -> tf.Tensor:
    """The cache size after `filled` positions: the next multiple of CACHE_GROWTH above it, capped at `cache_length`."""
    return tf.minimum((filled // CACHE_GROWTH + 1) * CACHE_GROWTH, cache_length)


_decode_graph = tf.function(decode_with_cache, autograph=False)
_decode_xla = tf.function(functools.partial(decode_with_cache, grow_cache=False), autograph=False, jit_compile=True)


def generate_tokens(
    backbone,
    prompt_ids: tf.RaggedTensor,
    max_new_tokens: tf.Tensor,
    temperature: tf.Tensor,
    top_k: tf.Tensor,
    top_p: tf.Tensor,
    seed: tf.Tensor,
    jit_compile: bool = False,
    special: SpecialTokens = LEARNED,
    stop_ids: Sequence[int] = (),
) -> tuple:
    """Continues each prompt with the key/value cache; returns (new ids as ragged [batch, (n)], n as int32).

    See the module docstring for buckets and the context limit. `jit_compile` compiles the
    prefill and the loop with XLA (one compilation per batch/prompt/cache bucket). A row stops at
    the eos id or at one of `stop_ids` (a chat template's end-of-turn token), which is kept.
    """
    context_length = backbone.context_length
    max_new_tokens = tf.clip_by_value(tf.cast(max_new_tokens, tf.int32), 1, context_length - 1)
    max_prompt_tokens = tf.maximum(context_length - max_new_tokens, context_length // 2)
    context = prepare_context(prompt_ids, max_prompt_tokens - framing_length(special), special)
    lengths = tf.cast(context.row_lengths(), tf.int32)
    batch_size = tf.shape(lengths)[0]
    longest = tf.reduce_max(lengths)
    buckets = length_buckets(context_length)
    prompt_width = round_up_to_bucket(longest, buckets)
    cache_length = round_up_to_bucket(longest + max_new_tokens, buckets)
    padded_batch = _next_power_of_two(batch_size) if jit_compile else batch_size
    extra_rows = padded_batch - batch_size
    pad_id = special.pad_id
    dense = context.to_tensor(default_value=pad_id)
    prompt_tokens = tf.pad(dense, [[0, extra_rows], [0, prompt_width - longest]], constant_values=pad_id)
    buffer = tf.pad(prompt_tokens, [[0, 0], [0, cache_length - prompt_width]], constant_values=pad_id)
    padded_lengths = tf.pad(lengths, [[0, extra_rows]], constant_values=1)
    done = tf.range(padded_batch) >= batch_size
    decode = _decode_xla if jit_compile else _decode_graph
    buffer, new_lengths = decode(
        backbone,
        prompt_tokens,
        buffer,
        padded_lengths,
        done,
        max_new_tokens,
        tf.cast(temperature, tf.float32),
        tf.cast(top_k, tf.int32),
        tf.cast(top_p, tf.float32),
        tf.cast(seed, tf.int64),
        eos_id=special.eos_id,
        pad_id=pad_id,
        stop_ids=tuple(stop_ids),
    )
    buffer, new_lengths = buffer[:batch_size], new_lengths[:batch_size]
    return _new_tokens(buffer, lengths, new_lengths)


def _new_tokens(buffer: tf.Tensor, prompt_lengths: tf.Tensor, lengths: tf.Tensor) -> tuple:
    """(ragged ids at positions [prompt_length, length) of each row, their count as int32)."""
    positions = tf.range(tf.shape(buffer)[1])[tf.newaxis, :]
    is_new = tf.logical_and(positions >= prompt_lengths[:, tf.newaxis], positions < lengths[:, tf.newaxis])
    return tf.ragged.boolean_mask(buffer, is_new), lengths - prompt_lengths


def generate_tokens_without_cache(
    backbone,
    prompt_ids: tf.RaggedTensor,
    max_new_tokens: tf.Tensor,
    temperature: tf.Tensor,
    top_k: tf.Tensor,
    top_p: tf.Tensor,
    seed: tf.Tensor,
    special: SpecialTokens = LEARNED,
    stop_ids: Sequence[int] = (),
) -> tuple:
    """The no-cache reference: each step runs the backbone on each row's last `context_length` tokens.

    Same sampling and stopping as `generate_tokens`, but it recomputes the whole prefix per token
    and slides its window past the context length instead of stopping there.
    """
    context_length = backbone.context_length
    max_new_tokens = tf.maximum(tf.cast(max_new_tokens, tf.int32), 1)
    context = prepare_context(prompt_ids, context_length - framing_length(special), special)
    prompt_lengths = tf.cast(context.row_lengths(), tf.int32)
    pad_id, eos_id = special.pad_id, special.eos_id
    buffer = tf.pad(context.to_tensor(default_value=pad_id), [[0, 0], [0, max_new_tokens]], constant_values=pad_id)
    total_length = tf.shape(buffer)[1]
    window_width = tf.minimum(context_length, total_length)
    rows = tf.range(tf.shape(buffer)[0])
    seed = tf.cast(seed, tf.int64)

    def keep_going(step, buffer, lengths, done):
        return tf.logical_and(step < max_new_tokens, tf.logical_not(tf.reduce_all(done)))

    def one_token(step, buffer, lengths, done):
        # Each row's window ends at its last token; positions after it are masked by causality.
        window_starts = tf.maximum(lengths - window_width, 0)
        window_positions = tf.minimum(
            window_starts[:, tf.newaxis] + tf.range(window_width)[tf.newaxis, :], total_length - 1
        )
        logits = backbone(tf.gather(buffer, window_positions, batch_dims=1), training=False)
        last_logits = tf.gather(logits, lengths - 1 - window_starts, batch_dims=1)
        step_seed = tf.stack([seed, tf.cast(step, tf.int64)])
        next_ids = sample_next_token(last_logits, temperature, top_k, top_p, step_seed)
        next_ids = tf.where(done, tf.constant(pad_id, tf.int64), next_ids)
        buffer = tf.tensor_scatter_nd_update(buffer, tf.stack([rows, lengths], axis=1), next_ids)
        lengths = lengths + tf.cast(tf.logical_not(done), tf.int32)
        done = tf.logical_or(done, is_stop(next_ids, eos_id, stop_ids))
        return step + 1, buffer, lengths, done

    done = tf.zeros_like(prompt_lengths, tf.bool)
    _, buffer, lengths, _ = tf.while_loop(
        keep_going,
        one_token,
        (tf.constant(0, tf.int32), buffer, prompt_lengths, done),
        shape_invariants=(
            tf.TensorShape([]),
            tf.TensorShape([None, None]),
            tf.TensorShape([None]),
            tf.TensorShape([None]),
        ),
    )
    return _new_tokens(buffer, prompt_lengths, lengths)
