"""The training loop's driver under parameter-server training (training.distribution=parameter_server).

The chief runs this driver; it holds no training data itself. Variables (the model's weights, the
optimizer's slots and its step counter) live on the ps tasks, created there by
ParameterServerStrategy. The step function is the loop's own (`LanguageModelTrainer._train_steps`:
`steps_per_call` optimizer steps, each on one global batch), and a `ClusterCoordinator` schedules
it on whichever worker is free. Steps are asynchronous: a worker reads the weights, computes the
gradients of its batch and applies them on the ps tasks while other workers do the same, so a
gradient may be a few updates stale (with one worker, training is synchronous).

Progress lines, summaries and checkpoints are as in loop.py: the driver schedules the steps up to
the next progress line or checkpoint, waits for them (`join`), then reports or saves from the
chief. A checkpoint holds the variables read from the ps tasks; a restarted chief resumes from
the latest.

Each worker builds the whole input pipeline (`per_worker_iterator`): every scheduled step takes
one global batch from the iterator of the worker it runs on. Its shuffle is unseeded so that each
worker draws the data in its own order (ClusterCoordinator.create_per_worker_dataset: datasets
"may be shuffled differently if they contain a dataset.shuffle operation and a random seed is not
set").

Fault tolerance, as ClusterCoordinator documents it (tensorflow/python/distribute/coordinator/
cluster_coordinator.py, class ClusterCoordinator, "Handling Task Failure"): when a worker
becomes unavailable, the step it was running is put back in the queue and run by another worker
("it will be migrated to another worker"; `Worker._on_closure_failure`), and training continues
with the remaining workers; a recovered worker is used again once its dataset is rebuilt. A step
interrupted that way may already have applied some of its updates, so the step counter can end a
little past a boundary ("a function may be executed more than once"). A ps task that fails raises
UnavailableError from `join`: the chief must then be restarted, and resumes from the checkpoint.
"""

import contextlib
from typing import Callable

import tensorflow as tf
from tensorflow.python.eager import context as eager_context

from components.trainer.training import data
from components.trainer.training.loop import LanguageModelTrainer


@contextlib.contextmanager
def _without_global_seed():
    """Unsets the global random seed inside the block (so unseeded shuffles differ per run and per
    worker), then sets it back."""
    seed = eager_context.global_seed()
    tf.random.set_seed(None)
    try:
        yield
    finally:
        tf.random.set_seed(seed)


def check_parameter_server_settings(policy_name: str, jit_compile: str) -> None:
    """Raises, naming the setting, for what does not work under parameter-server training.

    Tried on a local cluster here (float32 in tests/test_parameter_server.py; mixed_bfloat16 and
    XLA by hand with the same loop): float32 and mixed_bfloat16 train; mixed_float16
    cannot, since Keras' LossScaleOptimizer accepts only strategies whose variables are replicated
    (tf_keras mixed_precision/loss_scale_optimizer.py, `strategy_supports_loss_scaling`); an
    XLA-compiled step fails on the worker ("Trying to access resource ... located in device
    /job:ps"): XLA cannot use variables held on another task. So steps run in graph mode, and
    training.jit_compile=auto means off here.
    """
    if policy_name == "mixed_float16":
        raise ValueError(
            "training.precision resolves to mixed_float16, which does not work with "
            "training.distribution=parameter_server (Keras' loss scaling needs replicated variables): "
            "set training.precision=mixed_bfloat16 or float32"
        )
    if jit_compile == "on":
        raise ValueError(
            "training.jit_compile=on does not work with training.distribution=parameter_server "
            "(XLA cannot read variables held on ps tasks): use auto or off"
        )


class ParameterServerTrainer(LanguageModelTrainer):
    """LanguageModelTrainer whose steps run on the workers of a ParameterServerStrategy cluster."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)

    def per_worker_iterator(self, make_global_batches: Callable[[], tf.data.Dataset]):
        """An iterator on every worker over `make_global_batches()` (pass it to the loop's `train`).

        Build the dataset without a shuffle seed: the function runs once on each worker, and a
        seeded shuffle would give every worker the same batches in the same order.
        """
        global_batch = self.settings.global_batch_size

        def worker_dataset():
            return data.distributed_blocks(self.strategy, make_global_batches, global_batch)

        with _without_global_seed():
            return iter(self.coordinator.create_per_worker_dataset(worker_dataset))

    def _round_steps(self) -> int:
        # A round ends only at a progress line or a checkpoint; within it the steps are spread over the workers.
        return self.settings.total_steps

    def _run_train_steps(self, iterator, num_steps: int) -> tuple:
        """Schedules `num_steps` steps in calls of `steps_per_call`, waits for all of them; returns
        their mean loss and the gradient norm of the last call scheduled."""
        per_call = self.settings.steps_per_call
        calls = [min(per_call, num_steps - first) for first in range(0, num_steps, per_call)]
        results = [self.coordinator.schedule(self._train_steps, args=(iterator, tf.constant(count))) for count in calls]
        self.coordinator.join()
        fetched = [result.fetch() for result in results]
        mean_loss = sum(float(loss) * count for (loss, _), count in zip(fetched, calls)) / num_steps
        return tf.constant(mean_loss), tf.constant(float(fetched[-1][1]))

    def _evaluate(self, eval_iterator) -> float:
        result = self.coordinator.schedule(
            self._eval_steps, args=(eval_iterator, tf.constant(self.settings.eval_batches))
        )
        return float(result.fetch())
