"""What the training hardware does: measured peak matmul throughput (the denominator of model
FLOPs utilisation, MFU) and peak memory in use."""

import resource
import time
from typing import Tuple

import tensorflow as tf


def measure_matmul_flops(dtype: tf.DType = tf.float32, size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of a square `size` matmul chain on the default device, after one warm-up call.

    2 * size^3 FLOPs per matmul. A chain of `repeats` dependent matmuls inside one tf.function keeps
    dispatch overhead out of the measurement.
    """
    a = tf.random.stateless_normal([size, size], seed=[1, 2], dtype=tf.float32)
    a = tf.cast(a / tf.sqrt(float(size)), dtype)

    @tf.function
    def chain(x):
        for _ in range(repeats):
            x = tf.matmul(x, a)
        return tf.reduce_sum(tf.cast(x[:1, :1], tf.float32))

    chain(a).numpy()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        chain(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 * repeats / best


def peak_memory() -> Tuple[float, str]:
    """(bytes, where): the peak memory TensorFlow allocated on the first GPU or TPU since the
    process started, or on a CPU-only machine the process's peak resident set size (Linux
    reports ru_maxrss in KiB)."""
    for kind in ("GPU", "TPU"):
        if tf.config.list_logical_devices(kind):
            return float(tf.config.experimental.get_memory_info(f"{kind}:0")["peak"]), kind
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0, "CPU (process RSS)"
