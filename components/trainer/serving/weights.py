"""The serving copy of a trained backbone: the weight layout that decoding reads fastest.

Batch-1 decoding reads every weight once per new token, so on a CPU its speed is the weights'
bytes over memory bandwidth. Training computes logits against a [vocab, model_dim] matrix used
transposed (the token embedding when tied, else the untied output embedding: see
`GPTBackbone.output_matrix`). The serving copy made here computes the same logits with:

- a pre-transposed output projection [model_dim, vocab]: the transposed matrix-vector product
  `matmul(h, embeddings, transpose_b=True)` is much slower on CPU than the plain one;
- with `weight_quantization="int8"`, int8 weights with one float32 scale per output channel
  (symmetric, round to nearest) for every Dense kernel and for the output projection,
  dequantized inside the matmul with core ops (Cast, MatMul, Mul), so stock TF Serving loads
  the model. The embedding lookup, norms and biases stay in float (a lookup reads one row).

A backbone trained with LoRA adapters (model/lora.py) is copied with the adapters merged into its
kernels, so the served graph is the same as a fully trained model's. The trained backbone is left
untouched (an untied model's output embedding stays in the copy, unused, so a warm start finds
every trained weight in the export). The copy computes in the trained policy's dtype, except that
a mixed_bfloat16 model (the CPU default where bfloat16 is native, see training/precision.py) is
served in float32: its variables are float32 either way, and a bfloat16 graph would cast every
weight again on every decoding step.
"""

from typing import Optional, Tuple

import tensorflow as tf
import tf_keras as keras

from components.trainer.model import lora
from components.trainer.model.backbone import GPTBackbone, build_backbone
from components.trainer.model.dtype_policy import keras_policy

WEIGHT_QUANTIZATIONS = ("none", "int8")
_INT8_MAX = 127.0


def quantize_per_channel(kernel: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Symmetric int8 quantization of `kernel` [in, out]: (int8 kernel, float32 scale [out]),
    with kernel ~= int8 kernel * scale column by column."""
    kernel = tf.cast(kernel, tf.float32)
    scale = tf.reduce_max(tf.abs(kernel), axis=0) / _INT8_MAX
    scale = tf.where(scale > 0.0, scale, 1.0)  # an all-zero column stays zero
    quantized = tf.clip_by_value(tf.round(kernel / scale), -_INT8_MAX, _INT8_MAX)
    return tf.cast(quantized, tf.int8), scale


def dequantizing_matmul(inputs: tf.Tensor, kernel: tf.Variable, scale: Optional[tf.Variable]) -> tf.Tensor:
    """inputs [..., in] @ kernel [in, out] in the inputs' dtype, as one 2-D MatMul.

    An int8 `kernel` is cast to the compute dtype inside the product and each output column is
    multiplied by its `scale` afterwards ((x @ q) * s == x @ (q * s) for a per-column s).
    """
    if inputs.shape.rank == 2:
        product = tf.matmul(inputs, tf.cast(kernel, inputs.dtype))
        return product if scale is None else product * tf.cast(scale, product.dtype)
    shape = tf.shape(inputs)
    product = dequantizing_matmul(tf.reshape(inputs, [-1, shape[-1]]), kernel, scale)
    return tf.reshape(product, tf.concat([shape[:-1], [kernel.shape[-1]]], axis=0))


class OutputProjection(keras.layers.Layer):
    """Hidden [..., model_dim] -> logits [..., vocab] with a [model_dim, vocab] kernel (float or int8),
    the transpose of the backbone's `output_matrix`."""

    def __init__(self, embeddings: tf.Tensor, quantize: bool, **kwargs):
        super().__init__(name="output_projection", **kwargs)
        transposed = tf.transpose(tf.cast(embeddings, tf.float32))
        if quantize:
            quantized, scale = quantize_per_channel(transposed)
            self.kernel = tf.Variable(quantized, trainable=False, name="kernel_int8")
            self.scale = tf.Variable(scale, trainable=False, name="kernel_scale")
        else:
            self.kernel = tf.Variable(transposed, trainable=False, name="kernel")
            self.scale = None

    def call(self, hidden: tf.Tensor) -> tf.Tensor:
        return dequantizing_matmul(hidden, self.kernel, self.scale)


class QuantizedDense(keras.layers.Layer):
    """The int8 serving twin of a trained `keras.layers.Dense` (same activation, float bias if it has one)."""

    def __init__(self, dense: keras.layers.Dense, **kwargs):
        super().__init__(name=dense.name, dtype=dense.dtype_policy, **kwargs)
        quantized, scale = quantize_per_channel(dense.kernel)
        self.kernel = tf.Variable(quantized, trainable=False, name="kernel_int8")
        self.scale = tf.Variable(scale, trainable=False, name="kernel_scale")
        self.bias = (
            None if dense.bias is None else tf.Variable(tf.cast(dense.bias, tf.float32), trainable=False, name="bias")
        )
        self.activation = dense.activation

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        outputs = dequantizing_matmul(inputs, self.kernel, self.scale)
        if self.bias is not None:
            outputs = outputs + tf.cast(self.bias, inputs.dtype)
        return self.activation(outputs)


def _quantize_dense_layers(backbone: GPTBackbone) -> None:
    """Replaces every Dense layer of every block with its int8 twin."""
    for block in backbone.blocks:
        block.attention.qkv = QuantizedDense(block.attention.qkv)
        block.attention.output_projection = QuantizedDense(block.attention.output_projection)
        block.mlp_in = QuantizedDense(block.mlp_in)
        block.mlp_out = QuantizedDense(block.mlp_out)


def serving_backbone(backbone: GPTBackbone, weight_quantization: str = "none") -> GPTBackbone:
    """A copy of `backbone` (same dtype policy and weights) laid out for decoding: see the module docstring."""
    if weight_quantization not in WEIGHT_QUANTIZATIONS:
        raise ValueError(f"weight_quantization must be one of {WEIGHT_QUANTIZATIONS}, not {weight_quantization!r}")
    policy = backbone.dtype_policy.name
    with keras_policy("float32" if policy == "mixed_bfloat16" else policy):
        copy = build_backbone(backbone.architecture, backbone.vocab_size)  # never with LoRA adapters
        if lora.adapter_layers(backbone):
            lora.copy_merged_weights(backbone, copy)  # the adapters merged into the kernels
        else:
            copy.set_weights(backbone.get_weights())
        quantize = weight_quantization == "int8"
        copy.output_projection = OutputProjection(copy.output_matrix(), quantize)
        if quantize:
            _quantize_dense_layers(copy)
    return copy
