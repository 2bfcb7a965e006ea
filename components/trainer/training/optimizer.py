"""The language-modelling task's optimiser: AdamW with warm-up and cosine decay."""

from typing import Optional

import tensorflow as tf
import tf_keras as keras

from components.trainer.options import TrainingOptions


def learning_rate_schedule(config: TrainingOptions) -> keras.optimizers.schedules.LearningRateSchedule:
    """Linear warm-up to `learning_rate`, then cosine decay to 10% of it at `train_steps`."""
    warmup = min(config.warmup_steps, config.train_steps - 1)
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else config.learning_rate,
        decay_steps=max(config.train_steps - warmup, 1),
        alpha=0.1,
        warmup_target=config.learning_rate if warmup else None,
        warmup_steps=warmup,
    )


class DataflowAdamW(keras.optimizers.AdamW):
    """tf_keras's AdamW with the update written as data flow, for DTensor (sharded) training.

    tf_keras's `update_step` assigns the new moments to their slot variables and then reads the
    slots again for the weight update, relying on the order tf.function gives a variable's write
    and later read. Inside a whole DTensor train step (TF 2.16) that read can see the old moments:
    measured on a 4-device mesh, the second update used the first step's moments (every weight
    moved by the same 0.735 x learning rate) while the moments themselves were right. Here the new
    moments are computed once as tensors, stored, and the weight update uses those tensors, so no
    read depends on ordering. Dense gradients only (the sharded step densifies them); same maths
    as AdamW (amsgrad off).
    """

    def update_step(self, gradient, variable):
        dtype = variable.dtype
        learning_rate = tf.cast(self.learning_rate, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        alpha = learning_rate * tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        index = self._index_dict[self._var_key(variable)]
        first, second = self._momentums[index], self._velocities[index]
        new_first = first + (gradient - first) * (1 - beta_1)
        new_second = second + (tf.square(gradient) - second) * (1 - beta_2)
        first.assign(new_first)
        second.assign(new_second)
        variable.assign_sub(new_first * alpha / (tf.sqrt(new_second) + self.epsilon))


def make_optimizer(
    config: TrainingOptions, policy_name: str, mesh: Optional[tf.experimental.dtensor.Mesh] = None
) -> keras.optimizers.Optimizer:
    """AdamW with decoupled weight decay (not applied to norms and biases).

    With a DTensor `mesh` (sharded training, training/sharding.py) its step counter and learning
    rate are replicated DVariables on the mesh, each slot is created with its weight's layout, and
    the update is `DataflowAdamW`'s.

    Under mixed_float16 it is wrapped in a dynamic LossScaleOptimizer. Gradient clipping happens in
    the training loop after the all-reduce, where the global norm is known (and logged).
    """
    optimizer_class = keras.optimizers.AdamW if mesh is None else DataflowAdamW
    optimizer = optimizer_class(
        learning_rate=learning_rate_schedule(config),
        weight_decay=config.weight_decay,
        beta_2=0.95,
        **({"mesh": mesh} if mesh is not None else {}),
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "norm"])
    if policy_name == "mixed_float16":
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer
