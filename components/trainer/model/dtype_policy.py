"""The Keras dtype policy a model is built under, set for one block and restored after it.

Training builds its backbone under the run's policy (training/precision.py chooses it per
device); the exports build the serving copy under the policy it is served in (serving/weights.py,
serving/export_process.py). Both use this one context manager, so it lives with the model they
build.
"""

import contextlib
from typing import Iterator

from tf_keras import mixed_precision


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
