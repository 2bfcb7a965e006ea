"""Training drivers: where the variables live and which loop steps them.

- `ReplicatedDriver`: one device, or a tf.distribute strategy that replicates the variables
  (MirroredStrategy, MultiWorkerMirroredStrategy, TPUStrategy): loop.LanguageModelTrainer.
- `ParameterServerDriver`: ParameterServerStrategy, variables on ps tasks, steps scheduled on
  workers by a coordinator: ps_loop.ParameterServerTrainer. Graph-mode steps, no mixed float16,
  no conversations yet.
- `ShardedDriver`: a DTensor batch x model mesh over this host's devices (`training.sharding`):
  sharded_loop.ShardedTrainer; float32, graph mode, the weights gathered into an ordinary backbone
  for the export; no conversations yet.

`choose_driver` must run before TensorFlow runs any op: MultiWorkerMirroredStrategy configures its
collectives, and a sharded run on CPUs its logical devices, when they are created. Each driver
owns its branches (precision, XLA, the backbone and optimizer it builds, the loop and how batches
reach it); the training method (methods.py) only supplies global batches.
"""

from typing import Callable, Optional, Tuple

import tensorflow as tf

from components.trainer.checkpoint.hf_weights import stored_weight_dtypes
from components.trainer.model.backbone import build_backbone
from components.trainer.options import ModelOptions, TrainingOptions, check_sharding
from components.trainer.training import data, sharded_loop
from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
from components.trainer.training.methods import ContinuationMethod
from components.trainer.training.optimizer import make_optimizer
from components.trainer.training.precision import frozen_weight_dtype, resolve_jit_compile, resolve_precision
from components.trainer.training.ps_loop import ParameterServerTrainer, check_parameter_server_settings
from components.trainer.training.strategy import choose_strategy

MakeBatches = Callable[[Optional[int]], tf.data.Dataset]  # the step the run starts at -> global batches


class ReplicatedDriver:
    """The loop of one device or of replicated variables (see the module docstring)."""

    sharded = False

    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy

    def accepts(self, method: ContinuationMethod) -> None:
        """Raises ValueError when this driver cannot train `method`."""

    def precision(self, training: TrainingOptions, device: str) -> str:
        """The Keras policy name `training.precision` resolves to here."""
        return resolve_precision(training.precision, device)

    def check(self, training: TrainingOptions, policy_name: str) -> None:
        """Raises ValueError, naming the setting, for what this driver cannot run."""

    def jit_compile(self, training: TrainingOptions, device: str, policy_name: str) -> Tuple[bool, bool]:
        """(compile the step with XLA, fall back to graph mode where XLA cannot compile it). Not across
        workers: a failed step aborts MultiWorkerMirroredStrategy's collectives, so there the error
        names the setting instead."""
        jit = resolve_jit_compile(training.jit_compile, device, policy_name, training.recompute)
        multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        return jit, training.jit_compile == "auto" and not multi_worker

    def shuffle_seed(self, training: TrainingOptions, start_step: int) -> Optional[int]:
        """A resumed run reshuffles with a step-dependent seed rather than replaying the stream."""
        return training.seed + start_step

    def build(self, model: ModelOptions, vocab_size: int, training: TrainingOptions, policy_name: str):
        """(backbone, optimizer), built under the strategy's scope and the Keras policy."""
        stored = stored_weight_dtypes(model.checkpoint) if model.checkpoint else frozenset()
        frozen_dtype = self._frozen_dtype(training, policy_name, stored)
        backbone = build_backbone(model, vocab_size, training.lora, training.recompute, frozen_dtype)
        return backbone, make_optimizer(training, policy_name)

    def _frozen_dtype(self, training: TrainingOptions, policy_name: str, stored) -> Optional[tf.DType]:
        return frozen_weight_dtype(training.lora, policy_name, stored, training.warm_start)

    def trainer(self, backbone, optimizer, settings: LoopSettings, run_dirs: dict, train: MakeBatches, evaluate):
        """(trainer, make_train_iterator(start_step), make_eval_iterator()) over the global batches."""
        trainer = LanguageModelTrainer(backbone, optimizer, self.strategy, settings, **run_dirs)
        batch = settings.global_batch_size
        return (
            trainer,
            lambda start: iter(data.distributed_blocks(self.strategy, lambda: train(start), batch)),
            lambda: iter(data.distributed_blocks(self.strategy, evaluate, batch)),
        )

    def exported_backbone(self, trainer, backbone, model: ModelOptions, vocab_size: int):
        """The backbone the export writes."""
        return backbone


class ParameterServerDriver(ReplicatedDriver):
    """Variables on ps tasks, steps on workers (see the module docstring)."""

    def accepts(self, method: ContinuationMethod) -> None:
        if method.conversational:
            raise ValueError(
                "conversation data trains with the ordinary loop only: a parameter-server cluster "
                "(TF_CONFIG with ps tasks) does not pack conversations yet"
            )

    def check(self, training: TrainingOptions, policy_name: str) -> None:
        check_parameter_server_settings(policy_name, training.jit_compile)

    def jit_compile(self, training: TrainingOptions, device: str, policy_name: str) -> Tuple[bool, bool]:
        return False, False  # XLA cannot read the variables on ps tasks (ps_loop.py): graph mode

    def shuffle_seed(self, training: TrainingOptions, start_step: int) -> Optional[int]:
        return None  # each worker shuffles unseeded, in its own order (ps_loop.py)

    def _frozen_dtype(self, training: TrainingOptions, policy_name: str, stored) -> Optional[tf.DType]:
        return None  # the placement of variables on ps tasks is not tested with mixed dtypes

    def trainer(self, backbone, optimizer, settings: LoopSettings, run_dirs: dict, train: MakeBatches, evaluate):
        trainer = ParameterServerTrainer(backbone, optimizer, self.strategy, settings, **run_dirs)
        return (
            trainer,
            lambda start: trainer.per_worker_iterator(lambda: train(start)),
            lambda: trainer.per_worker_iterator(evaluate),
        )


class ShardedDriver(ReplicatedDriver):
    """A DTensor mesh over this host's devices (see the module docstring)."""

    sharded = True

    def __init__(self, training: TrainingOptions, model: ModelOptions):
        check_sharding(training, model)
        sharded_loop.check_single_client(training.distribution, training.tpu)
        self.device_type = sharded_loop.prepare_devices(training.sharding)
        self.mesh = None
        super().__init__(tf.distribute.get_strategy())

    def accepts(self, method: ContinuationMethod) -> None:
        if method.conversational:
            raise ValueError(
                "conversation data trains with the ordinary loop only: training.sharding does not pack "
                "conversations yet"
            )

    def precision(self, training: TrainingOptions, device: str) -> str:
        return sharded_loop.resolve_sharded_precision(training.precision)

    def jit_compile(self, training: TrainingOptions, device: str, policy_name: str) -> Tuple[bool, bool]:
        return False, False  # auto means off under sharding (sharding.py)

    def build(self, model: ModelOptions, vocab_size: int, training: TrainingOptions, policy_name: str):
        self.mesh, backbone, optimizer = sharded_loop.build(model, vocab_size, training, policy_name, self.device_type)
        return backbone, optimizer

    def trainer(self, backbone, optimizer, settings: LoopSettings, run_dirs: dict, train: MakeBatches, evaluate):
        # Ordinary global batches: the sharded trainer packs them into DTensors.
        trainer = sharded_loop.ShardedTrainer(backbone, optimizer, self.mesh, settings, **run_dirs)
        return trainer, lambda start: iter(train(start)), lambda: iter(evaluate())

    def exported_backbone(self, trainer, backbone, model: ModelOptions, vocab_size: int):
        return trainer.exported_backbone(model, vocab_size)


def choose_driver(training: TrainingOptions, model: ModelOptions) -> ReplicatedDriver:
    """The driver `training.sharding` and `training.distribution` ask for; call before any TF op."""
    if training.sharding.enabled:
        return ShardedDriver(training, model)
    strategy = choose_strategy(training.distribution, training.tpu)
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return ParameterServerDriver(strategy)
    return ReplicatedDriver(strategy)
