"""Chooses the tf.distribute strategy for the machine the trainer runs on."""
import tensorflow as tf


def choose_strategy() -> tf.distribute.Strategy:
    """MirroredStrategy when more than one GPU is visible, the default strategy otherwise.

    Multi-worker and TPU selection from TF_CONFIG / config belong to the trainer issue.
    """
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()
