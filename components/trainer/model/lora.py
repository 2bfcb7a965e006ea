"""Low-rank adaptation (LoRA) of the backbone's projections, and merging the adapters away.

With LoRA a projection computes `x @ W + b + (alpha / rank) * (x @ A) @ B`: the pretrained `W`
and `b` are frozen, and only `A` [in, rank] and `B` [rank, out] train. `B` starts at zero, so
training starts from exactly the pretrained model, and the optimizer state is that of the small
adapters only.

Under mixed_bfloat16 the frozen weights may be stored as bfloat16 instead of float32 (`frozen_dtype`
of `projection`; the rule is training/precision.py `frozen_weight_dtype`): half the memory, the
same computation, since the graph reads them as bfloat16 anyway.

Before export the adapters are merged into the kernels (`W + (alpha / rank) * A @ B`), so the
serving graph is the same as a fully trained model's: no extra ops, no extra latency, and the
exported model knows nothing about LoRA (`merged_weights`).

The backbone asks `projection()` for each of its Dense projections; which ones get adapters is
`training.lora.targets` (`attention`: the fused query/key/value and the attention output;
`mlp`: every projection of the MLP). A fused query/key/value projection gets one adapter, which
is the same as separate adapters on query, key and value that share `A`.
"""

from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf
import tf_keras as keras

from components.trainer.options import LoraOptions

ATTENTION, MLP = "attention", "mlp"


class LoraDense(keras.layers.Dense):
    """A Dense layer whose kernel and bias are frozen and which adds a trainable low-rank update.

    Same variables as `keras.layers.Dense` (`kernel`, `bias`, with the same names, so checkpoint
    import and warm start address it like any Dense), plus `lora_a` and `lora_b`. `frozen_dtype`
    stores the frozen kernel and bias in that dtype; the adapters keep the layer's variable dtype
    (float32).
    """

    def __init__(self, units: int, rank: int, alpha: float, frozen_dtype: Optional[str] = None, **kwargs):
        super().__init__(units, **kwargs)
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, not {rank}")
        self.rank = rank
        self.scale = alpha / rank
        self.frozen_dtype = frozen_dtype

    def build(self, input_shape) -> None:
        input_dim = int(input_shape[-1])
        frozen = self.frozen_dtype or self.dtype
        self.kernel = self.add_weight(
            "kernel", shape=[input_dim, self.units], initializer=self.kernel_initializer, dtype=frozen, trainable=False
        )
        self.bias = (
            self.add_weight(
                "bias", shape=[self.units], initializer=self.bias_initializer, dtype=frozen, trainable=False
            )
            if self.use_bias
            else None
        )
        # A random, B zero: the update starts at zero, so step 0 is the pretrained model.
        self.lora_a = self.add_weight(
            "lora_a", shape=[input_dim, self.rank], initializer=keras.initializers.HeUniform(seed=0), dtype=self.dtype
        )
        self.lora_b = self.add_weight("lora_b", shape=[self.rank, self.units], initializer="zeros", dtype=self.dtype)
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_dim})
        self.built = True

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        outputs = _matmul_last_axis(inputs, self.kernel)
        update = _matmul_last_axis(_matmul_last_axis(inputs, self.lora_a), self.lora_b)
        outputs = outputs + update * tf.cast(self.scale, outputs.dtype)
        if self.bias is not None:
            outputs = outputs + self.bias
        return self.activation(outputs) if self.activation is not None else outputs

    def merged_kernel(self) -> np.ndarray:
        """The frozen kernel with the adapters' update added (float32 [in, out])."""
        kernel = np.asarray(self.kernel.numpy(), np.float32)
        update = np.asarray(self.lora_a.numpy(), np.float32) @ np.asarray(self.lora_b.numpy(), np.float32)
        return kernel + self.scale * update


def _matmul_last_axis(inputs: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """inputs [..., in] @ kernel [in, out] (the product Dense computes, without bias or activation)."""
    kernel = tf.cast(kernel, inputs.dtype)
    if inputs.shape.rank == 2:
        return tf.matmul(inputs, kernel)
    return tf.tensordot(inputs, kernel, [[inputs.shape.rank - 1], [0]])


def projection(
    units: int, name: str, target: str, lora: Optional[LoraOptions], frozen_dtype: Optional[str] = None, **dense_kwargs
) -> keras.layers.Dense:
    """The Dense projection `name` of kind `target` (ATTENTION or MLP): a LoraDense when `lora` is
    enabled for that kind, else a plain Dense, which under LoRA is frozen whole and so stored in
    `frozen_dtype` (when given). Used by the backbone for every block projection."""
    if lora is not None and lora.rank > 0 and target in lora.targets:
        return LoraDense(units, lora.rank, lora.alpha, frozen_dtype, name=name, **dense_kwargs)
    if frozen_dtype:
        dense_kwargs["dtype"] = frozen_dtype
    return keras.layers.Dense(units, name=name, **dense_kwargs)


def adapter_layers(model: keras.Model) -> List[LoraDense]:
    """Every LoraDense inside `model`."""
    return [layer for layer in model.submodules if isinstance(layer, LoraDense)]


def freeze_all_but_adapters(model: keras.Model) -> None:
    """Makes every weight of `model` except the LoRA adapters non-trainable (embeddings, norms and
    projections without adapters included). LoraDense's own kernel and bias are frozen already."""
    adapted = set(id(layer) for layer in adapter_layers(model))
    for layer in model.submodules:
        if not isinstance(layer, keras.layers.Layer) or id(layer) in adapted:
            continue
        if not list(layer._flatten_layers(include_self=False, recursive=False)):  # a leaf: its own weights only
            layer.trainable = False


def is_adapter_variable(variable: tf.Variable) -> bool:
    """True for a LoRA `lora_a` / `lora_b` variable."""
    leaf = variable.name.split("/")[-1].split(":")[0]
    return leaf in ("lora_a", "lora_b")


def merged_weights(model: keras.Model) -> Dict[str, np.ndarray]:
    """`model`'s weights by variable name, with the adapters merged into their kernels and left
    out: the weights of the same backbone built without LoRA (see `copy_merged_weights`)."""
    merged = {id(layer.kernel): layer.merged_kernel() for layer in adapter_layers(model)}
    return {
        weight.name: merged[id(weight)] if id(weight) in merged else weight.numpy()
        for weight in model.weights
        if not is_adapter_variable(weight)
    }


def copy_merged_weights(source: keras.Model, target: keras.Model) -> None:
    """Assigns `source`'s weights, adapters merged, to `target`, the same architecture built
    without LoRA. Matched by variable name, not by list order: freezing changes the order in which
    Keras lists weights (trainable first)."""
    weights = merged_weights(source)
    missing = [weight.name for weight in target.weights if weight.name not in weights]
    if missing or len(weights) != len(target.weights):
        extra = sorted(set(weights) - {weight.name for weight in target.weights})
        raise ValueError(
            f"cannot copy weights between different architectures: missing {missing[:3]}, extra {extra[:3]}"
        )
    for weight in target.weights:
        weight.assign(tf.cast(weights[weight.name], weight.dtype))
