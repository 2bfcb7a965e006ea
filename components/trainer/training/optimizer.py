"""The language-modelling task's optimiser: AdamW with warm-up and cosine decay."""
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


def make_optimizer(config: TrainingOptions, policy_name: str) -> keras.optimizers.Optimizer:
    """AdamW with decoupled weight decay (not applied to norms and biases).

    Under mixed_float16 it is wrapped in a dynamic LossScaleOptimizer. Gradient clipping happens in
    the training loop after the all-reduce, where the global norm is known (and logged).
    """
    optimizer = keras.optimizers.AdamW(
        learning_rate=learning_rate_schedule(config), weight_decay=config.weight_decay, beta_2=0.95
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "norm"])
    if policy_name == "mixed_float16":
        optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer
