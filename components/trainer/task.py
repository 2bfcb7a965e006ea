"""The language-modelling task on top of the backbone: loss, optimiser, and the fit loop."""
import math

import tensorflow as tf
import tf_keras as keras

from pipeline.config import TrainingConfig


def learning_rate_schedule(config: TrainingConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """Linear warm-up to `learning_rate`, then cosine decay to 10% of it at `train_steps`."""
    warmup = min(config.warmup_steps, config.train_steps - 1)
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else config.learning_rate,
        decay_steps=max(config.train_steps - warmup, 1),
        alpha=0.1,
        warmup_target=config.learning_rate if warmup else None,
        warmup_steps=warmup,
    )


def compile_for_language_modelling(model: keras.Model, config: TrainingConfig) -> None:
    """AdamW with decoupled weight decay and global-norm clipping; next-token cross-entropy."""
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate_schedule(config),
        weight_decay=config.weight_decay,
        beta_2=0.95,
        global_clipnorm=1.0,
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=False,
    )


class ThroughputLogger(keras.callbacks.Callback):
    """Adds tokens/s to each epoch's logs (shown in the progress line and TensorBoard)."""

    def __init__(self, tokens_per_step: int):
        super().__init__()
        self.tokens_per_step = tokens_per_step
        self._start = 0.0
        self._steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = tf.timestamp().numpy()
        self._steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1

    def on_epoch_end(self, epoch, logs=None):
        elapsed = max(tf.timestamp().numpy() - self._start, 1e-9)
        if logs is not None:
            logs["tokens_per_sec"] = self._steps * self.tokens_per_step / elapsed


def log_intervals(train_steps: int, target_lines: int = 10) -> tuple:
    """Splits `train_steps` exactly into (epochs, steps_per_epoch), about `target_lines` epochs.

    Keras prints one progress line per epoch, so this sets how often training reports.
    """
    steps_per_epoch = next(
        size for size in range(max(1, math.ceil(train_steps / target_lines)), train_steps + 1) if train_steps % size == 0
    )
    return train_steps // steps_per_epoch, steps_per_epoch
