"""Numeric precision and compilation choices per device.

`auto` precision is mixed_float16 on GPUs (with dynamic loss scaling), mixed_bfloat16 on TPUs, and
float32 on CPUs. On CPUs mixed_bfloat16 is opt-in (`training.precision=mixed_bfloat16`): the model
is exported with the policy it was trained under, so a bfloat16-trained model also decodes in
bfloat16, while the decoding and serving tests validate float32; and the gain measured on this
project's development CPU (AVX2, no native bfloat16 units) was small and noisy (see
benchmarks/README.md, "Training").
`auto` XLA is on everywhere: the standard win on GPUs and TPUs; on the development CPU it measured
between 9% slower and 30% faster than plain graph mode (within that machine's noise).
"""
import contextlib
from typing import Iterator

import tensorflow as tf
from tf_keras import mixed_precision


def accelerator_kind(strategy: tf.distribute.Strategy) -> str:
    """'tpu', 'gpu' or 'cpu': what the strategy's replicas run on."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


def resolve_precision(precision: str, device: str) -> str:
    """The Keras policy name for `precision` ('auto' chooses per `device`)."""
    if precision != "auto":
        return precision
    return {"gpu": "mixed_float16", "tpu": "mixed_bfloat16"}.get(device, "float32")


def resolve_jit_compile(jit_compile: str) -> bool:
    """Whether to XLA-compile the train step ('auto' = on)."""
    return jit_compile != "off"


@contextlib.contextmanager
def keras_policy(policy_name: str) -> Iterator[None]:
    """Sets the global Keras dtype policy for the models built inside, restoring it afterwards.

    The policy is process-global and the local runner runs other components in this process, so
    it must not leak out of the trainer.
    """
    previous = mixed_precision.global_policy()
    mixed_precision.set_global_policy(policy_name)
    try:
        yield
    finally:
        mixed_precision.set_global_policy(previous)
