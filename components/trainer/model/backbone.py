"""The decoder-only Transformer backbone (GPT-2 and Llama families): token ids in, next-token logits out.

Pre-norm blocks with causal self-attention and an MLP, learned or rotary positions. The options
(`ModelOptions`) choose what the two families differ in: LayerNorm or RMSNorm, an exact-GELU,
tanh-GELU or SwiGLU MLP, grouped-query attention (fewer key/value heads than query heads; the
key/value cache holds only those), biases on or off, the rotary base and Llama 3's frequency
scaling, and logits tied to the token embedding or from a separate output matrix. The defaults
are this project's own model (exact GELU, LayerNorm, biases, tied). Pure network: no loss, no
tokenizer, no decoding loop.

Written for speed and for every execution mode the trainer uses:
- one fused Q/K/V projection per block and explicit attention maths (`project_qkv`, `attend`), so
  the graph is a few large matmuls that XLA compiles well, and a key/value cache can reuse the
  same projections one position at a time;
- mixed precision: layers compute in the global Keras policy's dtype (bfloat16 or float16);
  attention softmax and the output logits are float32, so the loss is stable.
"""

import math
from typing import NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf
import tf_keras as keras

from components.trainer import keras_autograph  # noqa: F401  (keeps AutoGraph out of tf_keras)
from components.trainer.model import lora
from components.trainer.model.recompute import causal_attention_in_chunks, recompute_in_backward
from components.trainer.options import LoraOptions, ModelOptions, RopeScaling, check_recompute

_NEG_INF = -1e9  # additive mask value; finite so fully masked rows stay NaN-free


def rotary_inverse_frequency(
    head_dim: int, theta: float = 10000.0, scaling: Optional[RopeScaling] = None
) -> np.ndarray:
    """The rotation speed of each dimension pair i < head_dim/2: theta^(-2i/head_dim) radians per position.

    With Llama 3's `scaling`, a pair whose wavelength (2 pi / speed) is longer than
    original_max_position_embeddings / low_freq_factor turns `factor` times slower, one shorter than
    original_max_position_embeddings / high_freq_factor is unchanged, and one in between is
    interpolated between the two by where its wavelength falls.
    """
    frequency = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return frequency.astype(np.float32)
    original = scaling.original_max_position_embeddings
    wavelength = 2.0 * math.pi / frequency
    # 0 at the long-wavelength edge (slowed by `factor`), 1 at the short one (kept).
    blend = np.clip(
        (original / wavelength - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor),
        0.0,
        1.0,
    )
    return ((1.0 - blend) * frequency / scaling.factor + blend * frequency).astype(np.float32)


def rotate_positions(
    heads: tf.Tensor, positions: tf.Tensor, inverse_frequency: Optional[np.ndarray] = None
) -> tf.Tensor:
    """Rotary position embedding of `heads` [batch, heads, length, head_dim] at `positions`.

    `positions` is [length] or [batch, length] (int). Each pair of dimensions (i, i + head_dim/2)
    is rotated by the angle position * inverse_frequency[i] (default 10000^(-2i/head_dim), see
    `rotary_inverse_frequency`), so query-key dot products depend only on relative position.
    """
    head_dim = heads.shape[-1]
    half = head_dim // 2
    if inverse_frequency is None:
        inverse_frequency = rotary_inverse_frequency(head_dim)
    angles = tf.cast(positions, tf.float32)[..., tf.newaxis] * tf.constant(inverse_frequency)  # [(batch,) length, half]
    if angles.shape.rank == 3:
        angles = angles[:, tf.newaxis]  # broadcast over heads
    cos = tf.cast(tf.cos(angles), heads.dtype)
    sin = tf.cast(tf.sin(angles), heads.dtype)
    first, second = heads[..., :half], heads[..., half:]
    return tf.concat([first * cos - second * sin, first * sin + second * cos], axis=-1)


def causal_mask(length: tf.Tensor) -> tf.Tensor:
    """[length, length] bool: position i may attend to positions <= i."""
    return tf.cast(tf.linalg.band_part(tf.ones([length, length]), -1, 0), tf.bool)


def segment_causal_mask(segment_ids: tf.Tensor) -> tf.Tensor:
    """[batch, 1, length, length] bool for packed rows (`segment_ids` [batch, length]): position i
    may attend to positions <= i of its own segment only (a block-diagonal causal mask), so
    examples packed into one row never see each other (training/packing.py)."""
    same = tf.equal(segment_ids[:, :, tf.newaxis], segment_ids[:, tf.newaxis, :])
    return (same & causal_mask(tf.shape(segment_ids)[1])[tf.newaxis])[:, tf.newaxis]


class DecodeSlots(NamedTuple):
    """Where one decoding step writes each row's new key/value and which cache positions it reads.
    Every block's cache has the same shape, so this is computed once per step and shared."""

    positions: tf.Tensor  # [batch] int32: each row's new position
    mask: tf.Tensor  # [batch, 1, cache_length] float32 added to the scores: 0 at positions <= the row's own, -1e9 after
    write_at: tf.Tensor  # in place: row ids [batch * heads] of a cache viewed as [-1, head_dim]; else scatter indices
    in_place: bool


def decode_slots(cache: tf.Tensor, positions: tf.Tensor, in_place: bool) -> DecodeSlots:
    """The slots of one step for caches shaped like `cache` [batch, kv_heads, cache_length, head_dim].

    `in_place` (graph or eager execution): writes go into the cache's own buffer (`InplaceUpdate`,
    a core op stock TF Serving has, on a reshaped view of it), so a cache passed to
    `write_cache_position` is consumed and must not be read again; a `tensor_scatter_nd_update`
    there copies the whole cache on every decoding step. Under XLA, which has no `InplaceUpdate`
    kernel, the scatter is used: XLA updates it in place itself.
    """
    shape = tf.shape(cache)
    batch, heads, length = shape[0], cache.shape[1] or shape[1], shape[2]
    if in_place:
        rows = (tf.range(batch)[:, tf.newaxis] * heads + tf.range(heads)[tf.newaxis, :]) * length + positions[
            :, tf.newaxis
        ]
        write_at = tf.reshape(rows, [-1])
    else:
        rows, head_ids = tf.meshgrid(tf.range(batch), tf.range(heads), indexing="ij")
        write_at = tf.stack([rows, head_ids, tf.broadcast_to(positions[:, tf.newaxis], [batch, heads])], axis=-1)
    visible = tf.range(length)[tf.newaxis, :] <= positions[:, tf.newaxis]
    mask = tf.where(visible, 0.0, _NEG_INF)[:, tf.newaxis, :]
    return DecodeSlots(positions, mask, write_at, in_place)


def write_cache_position(cache: tf.Tensor, slots: DecodeSlots, new: tf.Tensor) -> tf.Tensor:
    """Writes `new` [batch, heads, head_dim] into `cache` [batch, heads, cache_length, head_dim]
    at each row's position and returns the cache (consumed when `slots.in_place`, see `decode_slots`)."""
    if not slots.in_place:
        return tf.tensor_scatter_nd_update(cache, slots.write_at, new)
    head_dim = cache.shape[3] or tf.shape(cache)[3]
    flat = tf.raw_ops.InplaceUpdate(
        x=tf.reshape(cache, [-1, head_dim]), i=slots.write_at, v=tf.reshape(new, [-1, head_dim])
    )
    return tf.reshape(flat, tf.shape(cache))


class RMSNormalization(keras.layers.Layer):
    """RMSNorm (Llama): x / sqrt(mean(x^2) + epsilon) * scale over the last axis, computed in
    float32 and returned in the input's dtype; no mean subtraction and no offset."""

    def __init__(self, epsilon: float, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.gamma = self.add_weight("gamma", shape=[input_shape[-1]], initializer="ones")
        super().build(input_shape)

    def call(self, hidden: tf.Tensor) -> tf.Tensor:
        rows = tf.cast(hidden, tf.float32)
        normalized = rows * tf.math.rsqrt(tf.reduce_mean(tf.square(rows), axis=-1, keepdims=True) + self.epsilon)
        return tf.cast(normalized * tf.cast(self.gamma, tf.float32), hidden.dtype)


Norm = Union[keras.layers.LayerNormalization, RMSNormalization]


def make_norm(config: ModelOptions, name: str) -> Norm:
    """The configured norm layer (`config.norm`, `config.norm_epsilon`)."""
    if config.norm == "rms":
        return RMSNormalization(config.norm_epsilon, name=name)
    return keras.layers.LayerNormalization(epsilon=config.norm_epsilon, name=name)


def normalize_rows(norm: Norm, hidden: tf.Tensor) -> tf.Tensor:
    """Applies a norm built on [batch, length, dim] inputs to rows [batch, dim].

    For a LayerNormalization, the same operations, in the same dtypes, as the layer's own
    (non-fused: epsilon 1e-5 is below fused_batch_norm's minimum) call, without the layer call's
    reshapes and slices: a decoding step normalises 2L + 1 times. RMSNorm's maths is rank-free.
    """
    if isinstance(norm, RMSNormalization):
        return norm.call(hidden)
    compute_dtype = hidden.dtype
    rows = (
        tf.cast(hidden, tf.float32)
        if compute_dtype in (tf.float16, tf.bfloat16) and norm.dtype == "float32"
        else hidden
    )
    mean, variance = tf.nn.moments(rows, [-1], keepdims=True)
    normalized = tf.nn.batch_normalization(
        rows, mean, variance, offset=norm.beta, scale=norm.gamma, variance_epsilon=norm.epsilon
    )
    return tf.cast(normalized, compute_dtype)


class CausalSelfAttention(keras.layers.Layer):
    """Self-attention with a fused Q/K/V projection and `kv_heads` key/value heads (grouped-query
    attention when fewer than `num_heads`: query head h reads key/value head h // (num_heads / kv_heads)).

    The fused kernel's output columns are all query heads, then all key heads, then all value heads.
    With `recompute_core`, a training call recomputes the attention core in query chunks in the
    backward pass (`training.recompute`, model/recompute.py).
    """

    def __init__(
        self,
        config: ModelOptions,
        lora_options: Optional[LoraOptions] = None,
        recompute_core: bool = False,
        frozen_dtype: Optional[str] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.recompute_core = recompute_core
        self.context_length = config.context_length
        self.num_heads = config.num_heads
        self.kv_heads = config.kv_heads
        self.groups = config.num_heads // config.kv_heads
        self.head_dim = config.model_dim // config.num_heads
        self.inverse_frequency = (
            rotary_inverse_frequency(self.head_dim, config.rope_theta, config.rope_scaling)
            if config.position_encoding == "rotary"
            else None
        )
        width = (config.num_heads + 2 * config.kv_heads) * self.head_dim
        self.qkv = lora.projection(
            width, "qkv", lora.ATTENTION, lora_options, frozen_dtype, use_bias=config.attention_bias
        )
        self.output_projection = lora.projection(
            config.model_dim, "output", lora.ATTENTION, lora_options, frozen_dtype, use_bias=config.attention_bias
        )
        self.attention_dropout = keras.layers.Dropout(config.dropout)

    def _split_heads(self, qkv: tf.Tensor) -> tuple:
        """[..., heads + 2 kv_heads, head_dim] -> (query [..., heads, d], key and value [..., kv_heads, d])."""
        return tf.split(qkv, [self.num_heads, self.kv_heads, self.kv_heads], axis=-2)

    def _rotate(self, heads: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        return rotate_positions(heads, positions, self.inverse_frequency)

    def project_qkv(self, hidden: tf.Tensor, positions: tf.Tensor) -> tuple:
        """hidden [batch, length, model_dim] -> query [batch, heads, length, head_dim], key and value
        [batch, kv_heads, length, head_dim]."""
        batch, length = tf.shape(hidden)[0], tf.shape(hidden)[1]
        qkv = tf.reshape(self.qkv(hidden), [batch, length, self.num_heads + 2 * self.kv_heads, self.head_dim])
        query, key, value = (tf.transpose(part, [0, 2, 1, 3]) for part in self._split_heads(qkv))
        if self.inverse_frequency is not None:
            query, key = self._rotate(query, positions), self._rotate(key, positions)
        return query, key, value

    def attend(
        self, query: tf.Tensor, key: tf.Tensor, value: tf.Tensor, mask: tf.Tensor, training: bool = False
    ) -> tf.Tensor:
        """Scaled dot-product attention and the output projection; `mask` (bool, broadcastable to
        [batch, heads, q_len, k_len]) marks the key positions each query may see. Returns [batch, q_len, model_dim]."""
        return self.output_projection(self.weigh_values(query, key, value, mask, training))

    def weigh_values(
        self, query: tf.Tensor, key: tf.Tensor, value: tf.Tensor, mask: tf.Tensor, training: bool = False
    ) -> tf.Tensor:
        """The attention core: softmax of the masked, scaled query-key scores, times the values.
        Returns [batch, q_len, heads * head_dim] (before the output projection)."""
        # Explicit lengths in the reshapes: an empty sequence (length 0) leaves -1 undetermined.
        batch, length, key_length = tf.shape(query)[0], tf.shape(query)[2], tf.shape(key)[2]
        grouped = tf.reshape(query, [batch, self.kv_heads, self.groups, length, self.head_dim])
        scores = tf.einsum("bkgqd,bkld->bkgql", grouped, key) * tf.cast(1.0 / math.sqrt(self.head_dim), query.dtype)
        scores = tf.reshape(scores, [batch, self.num_heads, length, key_length])
        scores = tf.where(mask, tf.cast(scores, tf.float32), _NEG_INF)
        weights = self.attention_dropout(tf.cast(tf.nn.softmax(scores, axis=-1), value.dtype), training=training)
        weights = tf.reshape(weights, [batch, self.kv_heads, self.groups, length, key_length])
        attended = tf.einsum("bkgql,bkld->bqkgd", weights, value)
        return tf.reshape(attended, [batch, length, self.num_heads * self.head_dim])

    def decode(self, hidden: tf.Tensor, slots: DecodeSlots, cache: tuple) -> tuple:
        """Attention of one new position per row: normalised hidden [batch, model_dim] at
        `slots.positions` -> (attended [batch, model_dim], cache with this position's key/value written).

        The query attends to the cache positions <= its own. Two-dimensional throughout, so each
        projection is a single MatMul and a decoding step runs few ops.
        """
        qkv = tf.reshape(self.qkv(hidden), [-1, self.num_heads + 2 * self.kv_heads, self.head_dim])
        query, key, value = self._split_heads(qkv)  # [batch, heads or kv_heads, head_dim]
        if self.inverse_frequency is not None:
            positions = slots.positions[:, tf.newaxis]
            query = self._rotate(query[:, :, tf.newaxis], positions)[:, :, 0]
            key = self._rotate(key[:, :, tf.newaxis], positions)[:, :, 0]
        keys = write_cache_position(cache[0], slots, key)
        values = write_cache_position(cache[1], slots, value)
        grouped = tf.reshape(query, [-1, self.kv_heads, self.groups, self.head_dim])
        scores = tf.einsum("bkgd,bkld->bkgl", grouped, keys) * tf.cast(1.0 / math.sqrt(self.head_dim), query.dtype)
        weights = tf.cast(
            tf.nn.softmax(tf.cast(scores, tf.float32) + slots.mask[:, :, tf.newaxis], axis=-1), values.dtype
        )
        attended = tf.einsum("bkgl,bkld->bkgd", weights, values)
        return self.output_projection(tf.reshape(attended, [-1, self.num_heads * self.head_dim])), (keys, values)

    def call(
        self, hidden: tf.Tensor, positions: tf.Tensor, training: bool = False, segment_ids: Optional[tf.Tensor] = None
    ) -> tf.Tensor:
        """`segment_ids` [batch, length]: attention stays inside each packed example's segment."""
        query, key, value = self.project_qkv(hidden, positions)
        if training and self.recompute_core:  # dropout is 0 here (options.check_recompute)
            attended = causal_attention_in_chunks(
                self.weigh_values, query, key, value, self.context_length, segment_ids=segment_ids
            )
            return self.output_projection(attended)
        mask = causal_mask(tf.shape(hidden)[1]) if segment_ids is None else segment_causal_mask(segment_ids)
        return self.attend(query, key, value, mask, training=training)


def gelu_tanh(hidden: tf.Tensor) -> tf.Tensor:
    """GELU with the tanh approximation (GPT-2's `gelu_new`)."""
    return tf.nn.gelu(hidden, approximate=True)


def swiglu(gate_and_up: tf.Tensor) -> tf.Tensor:
    """SwiGLU of a fused [..., 2 * mlp_dim] projection: silu(gate) * up (gate first, as in Llama)."""
    gate, up = tf.split(gate_and_up, 2, axis=-1)
    return tf.nn.silu(gate) * up


class DecoderBlock(keras.layers.Layer):
    """One pre-norm Transformer block: x + attn(norm(x)), then x + mlp(norm(x)).

    The MLP is `mlp_out(activation(mlp_in(x)))`; for SwiGLU `mlp_in` is the gate and up
    projections fused ([model_dim, 2 * mlp_dim], gate columns first). The exact GELU stays inside
    `mlp_in` (a Dense with activation="gelu", as the project's models always had it).
    """

    def __init__(
        self,
        config: ModelOptions,
        lora_options: Optional[LoraOptions] = None,
        recompute_core: bool = False,
        frozen_dtype: Optional[str] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_norm = make_norm(config, "attention_norm")
        self.attention = CausalSelfAttention(config, lora_options, recompute_core, frozen_dtype, name="attention")
        self.mlp_norm = make_norm(config, "mlp_norm")
        fused = 2 if config.mlp == "swiglu" else 1
        self.mlp_in = lora.projection(
            fused * config.mlp_dim,
            "mlp_in",
            lora.MLP,
            lora_options,
            frozen_dtype,
            activation="gelu" if config.mlp == "gelu" else None,
            use_bias=config.mlp_bias,
        )
        self.mlp_activation = {"gelu": None, "gelu_tanh": gelu_tanh, "swiglu": swiglu}[config.mlp]
        self.mlp_out = lora.projection(
            config.model_dim, "mlp_out", lora.MLP, lora_options, frozen_dtype, use_bias=config.mlp_bias
        )
        self.dropout = keras.layers.Dropout(config.dropout)

    def feed_forward(self, normalized: tf.Tensor) -> tf.Tensor:
        """The MLP on normalised hidden states (any rank)."""
        inner = self.mlp_in(normalized)
        return self.mlp_out(inner if self.mlp_activation is None else self.mlp_activation(inner))

    def mlp(self, hidden: tf.Tensor, training: bool = False) -> tf.Tensor:
        """The residual MLP half of the block."""
        return hidden + self.dropout(self.feed_forward(self.mlp_norm(hidden)), training=training)

    def call(
        self, hidden: tf.Tensor, positions: tf.Tensor, training: bool = False, segment_ids: Optional[tf.Tensor] = None
    ) -> tf.Tensor:
        attended = self.attention(self.attention_norm(hidden), positions, training=training, segment_ids=segment_ids)
        return self.mlp(hidden + self.dropout(attended, training=training), training=training)

    def prefill(self, hidden: tf.Tensor, cache_length: tf.Tensor) -> tuple:
        """Inference pass over a whole prompt [batch, length, model_dim]; also returns this block's
        key and value, zero-padded to [batch, kv_heads, cache_length, head_dim] (the cache)."""
        length = tf.shape(hidden)[1]
        positions = tf.range(length)
        query, key, value = self.attention.project_qkv(self.attention_norm(hidden), positions)
        hidden = self.mlp(hidden + self.attention.attend(query, key, value, causal_mask(length)))
        padding = [[0, 0], [0, 0], [0, cache_length - length], [0, 0]]
        return hidden, (tf.pad(key, padding), tf.pad(value, padding))

    def decode_step(self, hidden: tf.Tensor, slots: DecodeSlots, cache: tuple) -> tuple:
        """One new token per row (hidden [batch, model_dim]) at its own position (`slots`): writes
        its key/value into the cache at that position and attends to positions <= it."""
        attended, cache = self.attention.decode(normalize_rows(self.attention_norm, hidden), slots, cache)
        hidden = hidden + attended
        return hidden + self.feed_forward(normalize_rows(self.mlp_norm, hidden)), cache


class OutputEmbedding(keras.layers.Layer):
    """An untied output matrix [vocab_size, model_dim] (a Hugging Face `lm_head.weight`, as stored):
    logits are the hidden state's dot product with each row, like the tied token embedding's."""

    def __init__(self, vocab_size: int, model_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.model_dim = vocab_size, model_dim

    def build(self, input_shape):
        self.embeddings = self.add_weight("embeddings", shape=[self.vocab_size, self.model_dim], initializer="uniform")
        super().build(input_shape)

    def call(self, hidden: tf.Tensor) -> tf.Tensor:
        return tf.matmul(hidden, tf.cast(self.embeddings, hidden.dtype), transpose_b=True)


class GPTBackbone(keras.Model):
    """Token ids [batch, length] -> float32 logits [batch, length, vocab_size] (length <= context_length)."""

    def __init__(
        self,
        config: ModelOptions,
        vocab_size: int,
        lora_options: Optional[LoraOptions] = None,
        recompute: str = "off",
        frozen_dtype: Optional[str] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_recompute(recompute, config)
        self.architecture = config
        self.recompute = recompute
        self.lora = lora_options if lora_options is not None and lora_options.rank > 0 else None
        # Under LoRA every weight but the adapters (and the tiny norms) is frozen: stored in
        # `frozen_dtype` when given (training/precision.py `frozen_weight_dtype`).
        self.frozen_dtype = frozen_dtype if self.lora is not None else None
        frozen = {"dtype": self.frozen_dtype} if self.frozen_dtype else {}
        self.context_length = config.context_length
        self.vocab_size = vocab_size
        rotary = config.position_encoding == "rotary"
        self.token_embedding = keras.layers.Embedding(vocab_size, config.model_dim, name="token_embedding", **frozen)
        self.position_embedding = (
            None
            if rotary
            else keras.layers.Embedding(config.context_length, config.model_dim, name="position_embedding", **frozen)
        )
        self.blocks = [
            DecoderBlock(config, self.lora, recompute != "off", self.frozen_dtype, name=f"block_{index}")
            for index in range(config.num_layers)
        ]
        self.final_norm = make_norm(config, "final_norm")
        # Created last, so a tied model's variables keep their order and names.
        self.output_embedding = (
            None
            if config.tie_embeddings
            else OutputEmbedding(vocab_size, config.model_dim, name="output_embedding", **frozen)
        )
        self.embedding_dropout = keras.layers.Dropout(config.dropout)
        # Set only on serving copies (serving/weights.py): a separate output projection
        # (pre-transposed, optionally int8) computing the same logits as `output_matrix`.
        self.output_projection = None

    def output_matrix(self) -> tf.Variable:
        """The [vocab, model_dim] matrix the logits are dot products with: the token embedding when
        tied, else the untied output embedding."""
        return self.token_embedding.embeddings if self.output_embedding is None else self.output_embedding.embeddings

    def embed(self, token_ids: tf.Tensor, positions: tf.Tensor, training: bool = False) -> tf.Tensor:
        """Token (+ learned position) embeddings of `token_ids` [batch, length] (`positions` [length] or
        [batch, length]) or [batch] (`positions` [batch])."""
        hidden = self.token_embedding(token_ids)
        if self.position_embedding is not None:
            position_vectors = self.position_embedding(positions)
            same_rank = position_vectors.shape.rank == hidden.shape.rank
            # expand_dims, not [tf.newaxis]: DTensor (TF 2.16) cannot lay out a strided slice that
            # adds an axis to a DTensor (training/sharding.py).
            hidden = hidden + (position_vectors if same_rank else tf.expand_dims(position_vectors, 0))
        return self.embedding_dropout(hidden, training=training)

    def logits(self, hidden: tf.Tensor) -> tf.Tensor:
        """Final norm and the output projection (similarity with each row of `output_matrix`), in
        float32; `hidden` is [batch, length, model_dim] or [batch, model_dim]."""
        hidden = self.final_norm(hidden) if hidden.shape.rank == 3 else normalize_rows(self.final_norm, hidden)
        if self.output_projection is not None:
            return tf.cast(self.output_projection(hidden), tf.float32)
        if self.output_embedding is not None:
            return tf.cast(self.output_embedding(hidden), tf.float32)
        embeddings = tf.cast(self.token_embedding.embeddings, hidden.dtype)
        return tf.cast(tf.matmul(hidden, embeddings, transpose_b=True), tf.float32)

    def call(
        self,
        token_ids: tf.Tensor,
        training: bool = False,
        positions: Optional[tf.Tensor] = None,
        segment_ids: Optional[tf.Tensor] = None,
    ) -> tf.Tensor:
        """`positions` ([length] or [batch, length]; default 0..length-1) and `segment_ids`
        ([batch, length]: packed examples, each attending only within its own segment)."""
        if positions is None:
            positions = tf.range(tf.shape(token_ids)[1])
        hidden = self.embed(token_ids, positions, training=training)
        for block in self.blocks:
            if training and self.recompute == "block":  # only this block's input is kept for the backward pass
                run_block = lambda block_input, block=block: block(
                    block_input,
                    positions,
                    training=True,
                    segment_ids=segment_ids,
                )
                hidden = recompute_in_backward(run_block)(hidden)
            else:
                hidden = block(hidden, positions, training=training, segment_ids=segment_ids)
        return self.logits(hidden)

    # Key/value-cache inference (decoding.py): the cache is one (keys, values) pair per block,
    # each [batch, kv_heads, cache_length, head_dim] in the compute dtype.

    def prefill(self, token_ids: tf.Tensor, cache_length: tf.Tensor, last_positions: tf.Tensor) -> tuple:
        """Runs right-padded prompts [batch, length] once; returns (float32 logits [batch, vocab] at
        each row's `last_positions` [batch], the cache holding positions 0..length-1)."""
        hidden = self.embed(token_ids, tf.range(tf.shape(token_ids)[1]))
        cache = []
        for block in self.blocks:
            hidden, block_cache = block.prefill(hidden, cache_length)
            cache.append(block_cache)
        last_hidden = tf.gather(hidden, last_positions[:, tf.newaxis], batch_dims=1)  # [batch, 1, model_dim]
        return self.logits(last_hidden)[:, 0], tuple(cache)

    def decode_step(self, token_ids: tf.Tensor, positions: tf.Tensor, cache: tuple, in_place: bool = True) -> tuple:
        """One token per row [batch] at `positions` [batch]; returns (float32 logits [batch, vocab],
        the cache with this token's keys/values added). `in_place` writes into the cache's buffers
        (it is consumed); pass False under XLA (see `decode_slots`)."""
        hidden = self.embed(token_ids, positions)  # [batch, model_dim]
        slots = decode_slots(cache[0][0], positions, in_place)
        new_cache = []
        for block, block_cache in zip(self.blocks, cache):
            hidden, block_cache = block.decode_step(hidden, slots, block_cache)
            new_cache.append(block_cache)
        return self.logits(hidden), tuple(new_cache)


def build_backbone(
    config: ModelOptions,
    vocab_size: int,
    lora_options: Optional[LoraOptions] = None,
    recompute: str = "off",
    frozen_dtype: Optional[str] = None,
) -> GPTBackbone:
    """Creates the backbone and its weights (by calling it once on a one-token batch: no weight's
    shape depends on the length, and a full-context call would allocate [context, vocab] logits and
    [heads, context, context] scores just to be thrown away, which a large checkpoint's import feels).

    `recompute` is `training.recompute`: "attention" recomputes the attention core, "block" each
    block's activations, in the backward pass of a training call (model/recompute.py); inference and
    the serving copies never do.

    `frozen_dtype` (with LoRA only): the dtype the frozen weights are stored in (training/precision.py
    `frozen_weight_dtype`); None keeps them in the policy's variable dtype (float32)."""
    model = GPTBackbone(config, vocab_size, lora_options, recompute, frozen_dtype, name="gpt")
    model(tf.zeros([1, 1], tf.int64))
    return model
