"""Sharded training with DTensor: the backbone's weights and AdamW's slots split over a device mesh.

The mesh has two axes (`ShardingOptions`): `batch` (data parallelism: each batch row group on
its own devices) and `model` (tensor parallelism: the large matrices split over devices). Every
weight gets a `tf.experimental.dtensor.Layout` by its attribute path in the backbone
(`backbone_layouts`), the optimizer's slots copy their weight's layout (tf_keras's AdamW with
`mesh=`), and DTensor's SPMD expansion turns the ordinary single-device train step into per-device
programs with the collectives it needs; nothing here writes a collective by hand.

Layouts, for a mesh `batch=B,model=M` (M divides model_dim and mlp_dim):
  token/position/output embeddings [rows, model_dim]    columns (model_dim) over `model`
  attention qkv kernel [model_dim, (h + 2 kv) * d]      rows (input features) over `model`
  attention output kernel [h * d, model_dim]            rows (whole heads when M divides h) over `model`
  MLP in kernel [model_dim, mlp_dim] (+ bias)           columns (hidden units) over `model`
  MLP out kernel [mlp_dim, model_dim]                   rows (hidden units) over `model`
  SwiGLU: MLP in [model_dim, 2 * mlp_dim]               rows over `model`
          MLP out [mlp_dim, model_dim] (+ bias)         columns over `model`
  norms, other biases, optimizer step / learning rate   replicated
so weights plus optimizer state per device fall about as 1/M (norms and biases are small).

What DTensor in TF 2.16 cannot do, and how this module avoids it:
- It cannot split a tensor along a sharded axis ("Spliting over sharded dimension is not
  supported", tensorflow/dtensor/mlir/spmd_expander.cc). The fused Q/K/V output is split into
  q, k and v, and SwiGLU's fused gate/up into two, so those kernels are sharded over their input
  rows, not their output columns: each device multiplies its slice of the features and DTensor
  sums the partial products; the attention output kernel (and SwiGLU's down kernel) is sharded
  over its output columns, because with its rows sharded DTensor's layout propagation asks for
  the q/k/v split's input sharded by heads and fails the same way. Attention itself then runs on
  every device for all heads.
- A strided slice that adds an axis (`x[tf.newaxis]`, `x[:, tf.newaxis]`) of a DTensor fails or
  crashes the process; the backbone's training path uses `tf.expand_dims` instead. Key/value-cache
  decoding is not run under DTensor (the export is an ordinary model, `gather_backbone`).
- Sparse (IndexedSlices) embedding gradients: DTensor has no layout propagation for the scatter
  of a sparse optimizer update (`ResourceScatterAdd`), so the step densifies them.
- tf_keras's AdamW reads its moments back after writing them and, inside a DTensor train step,
  can read the old ones; the sharded optimizer is `optimizer.DataflowAdamW`.
- tf_keras's `Model.__call__` builds a LayoutMap model on `Input(x.shape)` (tf_keras
  src/engine/training.py, `__call__`), which adds a second batch axis to token ids; the model is
  built here on a correctly shaped `keras.Input` instead, and its variables are then replaced by
  DVariables with the function `Model.__call__` uses (`layout_map._map_subclass_model_variable`).
- The mixed_float16 loss-scale optimizer, LoRA adapters and XLA (`jit_compile`) are not supported
  with sharding. Nor is mixed_bfloat16: tf_keras's AdamW then cannot create the slots of the
  autocast sharded weights ("Neither layout nor DTensor initial value are provided", tried by hand
  on a 2 x 2 mesh); the sharded model trains in float32. `options.check_sharding`
  refuses these (and the other settings the Trainer's sharded loop does not support) in the config.

The Trainer trains with this module through training/sharded_loop.py (`training.sharding`).
"""

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow.experimental import dtensor
from tf_keras.src.dtensor import layout_map as keras_layout_map

from components.trainer.model.backbone import GPTBackbone, build_backbone
from components.trainer.options import ModelOptions, ShardingOptions, check_shardable  # noqa: F401 (part of this API)
from components.trainer.training.loop import _token_loss_sum

BATCH, MODEL = "batch", "model"
_U = dtensor.UNSHARDED


def use_logical_cpu_devices(count: int) -> None:
    """Splits the host CPU into `count` logical devices (a mesh to test sharding on one machine).

    Must run before TensorFlow initialises its runtime (before the first op); raises RuntimeError
    otherwise, unless that many CPU devices already exist.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:  # already initialised (listing logical devices initialises it, so ask after)
        if len(tf.config.list_logical_devices("CPU")) < count:
            raise


def make_mesh(sharding: ShardingOptions, device_type: Optional[str] = None) -> dtensor.Mesh:
    """The `batch` x `model` mesh over this host's devices (GPUs when present, else CPUs)."""
    if device_type is None:
        device_type = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    available = len(tf.config.list_logical_devices(device_type))
    if available < sharding.devices:
        raise ValueError(
            f"the sharding mesh asks for {sharding.devices} devices (batch={sharding.batch}, model={sharding.model}) "
            f"but this host has {available} {device_type} device(s)"
        )
    devices = [f"{device_type}:{index}" for index in range(sharding.devices)]
    return dtensor.create_mesh(
        [(BATCH, sharding.batch), (MODEL, sharding.model)], devices=devices, device_type=device_type
    )


def backbone_layouts(config: ModelOptions, mesh: dtensor.Mesh) -> Dict[str, dtensor.Layout]:
    """Regex on a weight's attribute path in GPTBackbone (`blocks.0.mlp_in.kernel`) -> its layout
    (the table in the module docstring); weights matching none are replicated."""
    columns = dtensor.Layout([_U, MODEL], mesh)
    rows = dtensor.Layout([MODEL, _U], mesh)
    block = r"blocks\.\d+\."
    layouts = {
        r"(token|position|output)_embedding\.embeddings": columns,
        block + r"attention\.qkv\.kernel": rows,
        block + r"attention\.output_projection\.kernel": columns,
        block + r"attention\.output_projection\.bias": dtensor.Layout([MODEL], mesh),
    }
    if config.mlp == "swiglu":
        # Neither side of the gate/up split may be sharded: contraction-sharded in, column-sharded out.
        layouts[block + r"mlp_in\.kernel"] = rows
        layouts[block + r"mlp_out\.kernel"] = columns
        layouts[block + r"mlp_out\.bias"] = dtensor.Layout([MODEL], mesh)
    else:
        layouts[block + r"mlp_out\.kernel"] = rows
        layouts[block + r"mlp_in\.kernel"] = columns
        layouts[block + r"mlp_in\.bias"] = dtensor.Layout([MODEL], mesh)
    return layouts


def build_sharded_backbone(config: ModelOptions, vocab_size: int, mesh: dtensor.Mesh) -> GPTBackbone:
    """A GPTBackbone whose weights are DVariables laid out by `backbone_layouts`.

    Each weight is initialised directly with its layout (no device ever holds a whole sharded
    weight). Keras's dropout then draws from tf.random.Generator, as DTensor requires.
    """
    keras.backend.experimental.enable_tf_random_generator()
    layout_map = keras.dtensor.experimental.LayoutMap(mesh=mesh)
    for pattern, layout in backbone_layouts(config, mesh).items():
        layout_map[pattern] = layout
    with layout_map.scope():
        model = GPTBackbone(config, vocab_size, name="gpt")
        # Symbolic build: the weights are created as lazy variables, not yet allocated.
        keras.layers.Layer.__call__(model, keras.Input(shape=[1], dtype=tf.int64))
    keras_layout_map._map_subclass_model_variable(model, layout_map)
    return model


def batch_layout(mesh: dtensor.Mesh, rank: int = 2) -> dtensor.Layout:
    """Token batches [batch, length]: rows over the mesh's `batch` axis, replicated over `model`."""
    return dtensor.Layout([BATCH] + [_U] * (rank - 1), mesh)


def to_mesh(values, layout: dtensor.Layout) -> tf.Tensor:
    """A host tensor or array as a DTensor with `layout` (copied replicated, then each device keeps its part)."""
    replicated = dtensor.copy_to_mesh(tf.convert_to_tensor(values), dtensor.Layout.replicated(layout.mesh, layout.rank))
    return dtensor.relayout(replicated, layout)


def to_batch(values, mesh: dtensor.Mesh) -> tf.Tensor:
    """Host token ids [batch, length] as an int64 DTensor with its rows over the mesh's `batch` axis."""
    return to_mesh(tf.cast(values, tf.int64), batch_layout(mesh))


def to_host(value: tf.Tensor) -> tf.Tensor:
    """A replicated DTensor result (a loss, a norm) as an ordinary tensor: one device's copy."""
    return dtensor.unpack(value)[0]


def gathered_logits_difference(sharded: GPTBackbone, gathered: GPTBackbone, mesh: dtensor.Mesh, probe) -> float:
    """Largest absolute difference between the sharded and the gathered model's logits on the token
    ids `probe` [batch, length] (its rows must divide over the mesh's `batch` axis)."""
    sharded_logits = tf.function(lambda ids: sharded(ids))(to_batch(probe, mesh))
    whole = to_host(dtensor.relayout(sharded_logits, dtensor.Layout.replicated(mesh, 3)))
    ordinary = gathered(tf.cast(probe, tf.int64))
    return float(np.max(np.abs(tf.cast(whole, tf.float32).numpy() - tf.cast(ordinary, tf.float32).numpy())))


def gathered_value(variable: tf.Variable) -> np.ndarray:
    """The whole value of a (possibly sharded) DVariable, gathered to the host."""
    value = variable.read_value()
    whole = dtensor.relayout(value, dtensor.Layout.replicated(dtensor.fetch_layout(value).mesh, value.shape.rank))
    return dtensor.unpack(whole)[0].numpy()


def bytes_per_device(variables: Sequence[tf.Variable]) -> List[int]:
    """Bytes each mesh device holds for `variables` (DVariables), summed from their per-device
    components (`dtensor.unpack`), in the mesh's device order."""
    totals: Optional[List[int]] = None
    for variable in variables:
        components = dtensor.unpack(variable.read_value())
        sizes = [int(part.shape.num_elements()) * part.dtype.size for part in components]
        totals = sizes if totals is None else [total + size for total, size in zip(totals, sizes)]
    return totals or []


def weight_paths(model: keras.Model) -> Dict[str, tf.Variable]:
    """Variable name (without `:0`) -> variable, for matching a sharded and an ordinary backbone."""
    return {re.sub(r":\d+$", "", variable.name): variable for variable in model.weights}


def gather_backbone(sharded: GPTBackbone, config: ModelOptions, vocab_size: int) -> GPTBackbone:
    """An ordinary (single-device) GPTBackbone holding the sharded model's current weights: what
    the existing serving export (`serving/export.py`) and checkpoints take, unchanged."""
    model = build_backbone(config, vocab_size)
    source, target = weight_paths(sharded), weight_paths(model)
    if set(source) != set(target):
        raise ValueError(f"sharded and ordinary backbones differ in weights: {sorted(set(source) ^ set(target))}")
    for name, variable in target.items():
        variable.assign(gathered_value(source[name]))
    return model


class ShardedTrainStep:
    """One optimizer step on a sharded model: the loss (token losses summed over the global batch,
    divided by its tokens, as loop.py), gradients, clipping by global norm, AdamW update.

    The same Python runs unsharded on an ordinary model and optimizer (mesh None), which is what
    the sharded run is compared with.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        global_batch_size: int,
        context_length: int,
        clip_norm: float,
        mesh: Optional[dtensor.Mesh] = None,
    ):
        if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
            raise ValueError(
                "sharded training does not support mixed_float16 (loss scaling); use float32 or mixed_bfloat16"
            )
        self.model, self.optimizer, self.mesh = model, optimizer, mesh
        self.tokens = float(global_batch_size * context_length)
        self.clip_norm = clip_norm
        self.optimizer.build(model.trainable_variables)
        self._step = tf.function(self._step_fn)

    def _step_fn(self, inputs: tf.Tensor, targets: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            loss = _token_loss_sum(self.model, inputs, targets, training=True) / self.tokens
        # Dense: DTensor has no layout propagation for the scatter of a sparse (embedding) update.
        gradients = [tf.convert_to_tensor(gradient) for gradient in tape.gradient(loss, variables)]
        gradient_norm = tf.linalg.global_norm(gradients)
        gradients, _ = tf.clip_by_global_norm(gradients, self.clip_norm, use_norm=gradient_norm)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return loss, gradient_norm

    def __call__(self, inputs, targets) -> Tuple[float, float]:
        """Runs one step on host token batches [batch, length]; returns (loss, gradient norm)."""
        if self.mesh is not None:
            inputs, targets = to_batch(inputs, self.mesh), to_batch(targets, self.mesh)
        loss, gradient_norm = self._step(inputs, targets)
        if self.mesh is not None:
            loss, gradient_norm = to_host(loss), to_host(gradient_norm)
        return float(loss.numpy()), float(gradient_norm.numpy())
