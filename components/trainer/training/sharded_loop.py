"""The training loop's driver under sharded (DTensor) training (`training.sharding` with batch x model > 1).

The mesh covers this host's devices: its GPUs when it has any (at least batch x model of them), else
logical CPU devices, which can only be made before TensorFlow initialises its runtime
(`prepare_devices`: a Trainer in a fresh process can, before anything there ran a TensorFlow op;
the TFJob replica's `--logical-cpus N` does it up front). The backbone and AdamW's slots are laid
out over the mesh by sharding.py and each step is `sharding.ShardedTrainStep` (loss over the
global batch, gradients, clipping by global norm, AdamW with the same warm-up/cosine schedule and
weight decay as the ordinary loop), in float32 (`resolve_sharded_precision`).

Everything else is loop.py's: the driver, progress lines, TensorBoard summaries, eval-loss model
selection and early stopping, and checkpoints. `tf.train.Checkpoint` saves and restores the sharded
weights and optimizer slots (DVariables), so a restarted Trainer resumes from its latest
checkpoint, on a mesh of the same shape. Batches come from data.py as ordinary global batches and are
packed into DTensors with their rows over the `batch` axis. One step runs per tf.function call
(`training.steps_per_call` does not apply), in graph mode (no XLA).

At the end `exported_backbone` gathers the weights into an ordinary backbone (`sharding.gather_backbone`)
and checks its logits against the sharded model's on a probe batch before the usual export.

Single client only: one process drives the whole mesh. Multi-client DTensor (a mesh across nodes)
is not supported, so a TF_CONFIG cluster or a TPU is refused (`check_single_client`).
"""

import logging
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf
import tf_keras as keras
from tensorflow.experimental import dtensor

from components.trainer.model.backbone import GPTBackbone
from components.trainer.options import ModelOptions, ShardingOptions, TrainingOptions
from components.trainer.training import sharding
from components.trainer.training.loop import LanguageModelTrainer, LoopSettings, _token_loss_sum
from components.trainer.training.optimizer import make_optimizer
from components.trainer.training.strategy import resolve_distribution

# Largest gathered-vs-sharded logit difference accepted at export: the same float32 maths,
# summed in another order.
GATHER_TOLERANCE = 1e-4
_PROBE_LENGTH = 8


def check_single_client(distribution: str, tpu: str) -> None:
    """Raises ValueError when the environment asks for a multi-process run (TF_CONFIG cluster, TPU):
    the sharded loop is single-client DTensor, one process driving all of its host's devices."""
    choice = resolve_distribution(distribution, tpu)
    if choice in ("multi_worker", "parameter_server", "tpu"):
        raise ValueError(
            f"training.sharding trains in one process over this host's devices, but the environment asks for "
            f"{choice} training (TF_CONFIG or a TPU): multi-client DTensor is not supported; run one Trainer process "
            "(on Kubeflow: kubeflow.tfjob.workers=0 and parameter_servers=0, or no TFJob)"
        )


def prepare_devices(options: ShardingOptions) -> str:
    """Makes sure this host has the mesh's devices; returns their type ('GPU' or 'CPU').

    With GPUs, the mesh needs batch x model of them. Without, the CPU is split into that many
    logical devices, which TensorFlow allows only before its runtime starts: call this before any
    TensorFlow op. Raises ValueError saying how many devices exist and how many the mesh needs.
    """
    mesh = f"training.sharding (batch={options.batch} x model={options.model})"
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < options.devices:
            raise ValueError(f"{mesh} needs {options.devices} GPUs but this host has {len(gpus)}")
        return "GPU"
    try:
        sharding.use_logical_cpu_devices(options.devices)
    except RuntimeError as error:
        existing = len(tf.config.list_logical_devices("CPU"))
        raise ValueError(
            f"{mesh} needs {options.devices} devices; this host has no GPU and {existing} CPU device(s), and TensorFlow "
            "is already initialised in this process, so no logical CPU devices can be added: start the Trainer in a "
            "fresh process (e.g. python -m components.trainer.training.replica --logical-cpus "
            f"{options.devices}) or lower training.sharding"
        ) from error
    return "CPU"


def resolve_sharded_precision(precision: str) -> str:
    """The Keras policy for `training.precision` under sharding: float32, which auto means there
    (mixed precision is not supported: `options.check_sharding`)."""
    if precision not in ("auto", "float32"):
        raise ValueError(
            f"training.precision={precision} cannot be combined with training.sharding; use auto or float32"
        )
    return "float32"


def build(
    model: ModelOptions, vocab_size: int, training: TrainingOptions, policy_name: str, device_type: str
) -> Tuple[dtensor.Mesh, GPTBackbone, keras.optimizers.Optimizer]:
    """The mesh, the sharded backbone and its AdamW (build under the Keras policy `policy_name`)."""
    mesh = sharding.make_mesh(training.sharding, device_type)
    backbone = sharding.build_sharded_backbone(model, vocab_size, mesh)
    optimizer = make_optimizer(training, policy_name, mesh=mesh)
    logging.info(
        "Sharded training on a %d-device %s mesh (batch=%d, model=%d)",
        training.sharding.devices,
        device_type,
        training.sharding.batch,
        training.sharding.model,
    )
    return mesh, backbone, optimizer


class ShardedTrainer(LanguageModelTrainer):
    """LanguageModelTrainer whose steps are DTensor steps on `mesh`; the iterators it takes yield
    ordinary global batches (inputs, targets) of data.packed_blocks."""

    def __init__(
        self,
        model: GPTBackbone,
        optimizer: keras.optimizers.Optimizer,
        mesh: dtensor.Mesh,
        settings: LoopSettings,
        checkpoint_dir: str,
        summary_dir: Optional[str] = None,
    ):
        if settings.accumulation != 1 or settings.jit_compile:
            raise ValueError("the sharded loop runs one micro-batch per step, without XLA")
        self.mesh = mesh
        super().__init__(model, optimizer, tf.distribute.get_strategy(), settings, checkpoint_dir, summary_dir)

    def _compile_train_steps(self, jit_compile: bool) -> None:
        self.jit_compile = False
        self._sharded_step = sharding.ShardedTrainStep(
            self.model,
            self.optimizer,
            self.settings.global_batch_size,
            self.settings.context_length,
            self.settings.clip_norm,
            self.mesh,
        )
        self._sharded_loss_sum = tf.function(
            lambda inputs, targets: _token_loss_sum(self.model, inputs, targets, training=False)
        )

    def _round_steps(self) -> int:
        # Steps run one per call from Python; a round ends only at a progress line or a checkpoint.
        return self.settings.total_steps

    def _run_train_steps(self, iterator, num_steps: int) -> tuple:
        """Runs `num_steps` sharded steps on the next global batches; returns their mean loss and the
        last gradient norm."""
        losses, gradient_norm = [], 0.0
        for _ in range(num_steps):
            inputs, targets = next(iterator)
            loss, gradient_norm = self._sharded_step(inputs, targets)
            losses.append(loss)
        return tf.constant(float(np.mean(losses))), tf.constant(gradient_norm)

    def _evaluate(self, eval_iterator) -> float:
        """Mean token loss over `eval_batches` global batches of the eval split, on the mesh."""
        total = 0.0
        for _ in range(self.settings.eval_batches):
            inputs, targets = next(eval_iterator)
            loss_sum = self._sharded_loss_sum(
                sharding.to_batch(inputs, self.mesh), sharding.to_batch(targets, self.mesh)
            )
            total += float(sharding.to_host(loss_sum).numpy())
        return total / (self.settings.eval_batches * self.settings.tokens_per_step)

    def exported_backbone(self, config: ModelOptions, vocab_size: int) -> GPTBackbone:
        """The trained weights gathered into an ordinary backbone, after checking its logits against
        the sharded model's on a probe batch; raises RuntimeError when they differ by more than
        GATHER_TOLERANCE."""
        gathered = sharding.gather_backbone(self.model, config, vocab_size)
        rows = self.mesh.dim_size(sharding.BATCH)
        probe = np.random.default_rng(0).integers(0, vocab_size, size=(rows, min(_PROBE_LENGTH, config.context_length)))
        difference = sharding.gathered_logits_difference(self.model, gathered, self.mesh, probe)
        tolerance = GATHER_TOLERANCE
        logging.info(
            "Gathered the sharded weights into an ordinary backbone; largest logit difference on a probe "
            "batch: %.3g (tolerance %g)",
            difference,
            tolerance,
        )
        if not difference <= tolerance:
            raise RuntimeError(
                f"the gathered backbone's logits differ from the sharded model's by {difference:.3g} "
                f"(more than {tolerance}): not exporting it"
            )
        return gathered
