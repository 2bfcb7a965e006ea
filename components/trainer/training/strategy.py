"""Distribution: which tf.distribute strategy to train with, and who writes outputs.

`choose_strategy` is the one factory. With `distribution=auto` it picks, in order:
  TPUStrategy              a TPU is named (config `training.tpu` or the TPU_NAME variable);
  MultiWorkerMirrored      TF_CONFIG describes a cluster with more than one chief/worker task;
  MirroredStrategy         more than one GPU is visible;
  the default strategy     otherwise (one CPU or GPU).

Only the chief writes the exported model, checkpoints and summaries to the run's directories;
other workers write to temporary directories (collective saves need every worker to write) that
`writable_dir` creates and `cleanup_worker_dir` removes.
"""
import json
import logging
import os
import shutil
import tempfile

import tensorflow as tf

_TRAINING_TASK_TYPES = ("chief", "worker")


def cluster_size_from_tf_config() -> int:
    """Number of chief + worker tasks in the TF_CONFIG environment variable (0 when unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON: {exc}") from exc
    return sum(len(cluster.get(task_type, [])) for task_type in _TRAINING_TASK_TYPES)


def _tpu_strategy(tpu: str) -> tf.distribute.Strategy:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or None)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def resolve_distribution(distribution: str, tpu: str = "") -> str:
    """Turns `auto` into a concrete choice from the environment; other values pass through."""
    if distribution != "auto":
        return distribution
    if tpu or os.environ.get("TPU_NAME"):
        return "tpu"
    if cluster_size_from_tf_config() > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def choose_strategy(distribution: str = "auto", tpu: str = "") -> tf.distribute.Strategy:
    """Creates the strategy named by `distribution` (see the module docstring for `auto`)."""
    choice = resolve_distribution(distribution, tpu)
    if choice == "tpu":
        strategy = _tpu_strategy(tpu or os.environ.get("TPU_NAME", ""))
    elif choice == "multi_worker":
        if cluster_size_from_tf_config() < 1:
            raise ValueError("training.distribution=multi_worker needs TF_CONFIG describing the cluster")
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif choice == "mirrored":
        # Without GPUs, mirror over the logical CPU devices (one unless configured otherwise).
        cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
        strategy = tf.distribute.MirroredStrategy(None if tf.config.list_physical_devices("GPU") else cpus)
    else:
        strategy = tf.distribute.get_strategy()
    logging.info("Distribution: %s (%s) with %d replica(s)", choice, type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy


def task_identity(strategy: tf.distribute.Strategy) -> tuple:
    """(task_type, task_id) of this process; (None, None) outside a multi-worker cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or isinstance(strategy, tf.distribute.TPUStrategy):
        return None, None
    return resolver.task_type, resolver.task_id


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """The chief task, or worker 0 when the cluster has no chief, or any single-process run."""
    task_type, task_id = task_identity(strategy)
    if task_type is None or task_type == "chief":
        return True
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def writable_dir(directory: str, strategy: tf.distribute.Strategy) -> str:
    """`directory` on the chief; a fresh temporary directory on any other worker."""
    if is_chief(strategy):
        tf.io.gfile.makedirs(directory)
        return directory
    task_type, task_id = task_identity(strategy)
    return tempfile.mkdtemp(prefix=f"textgen-{task_type}-{task_id}-")


def cleanup_worker_dir(directory: str, strategy: tf.distribute.Strategy) -> None:
    """Removes a non-chief worker's temporary directory; the chief's outputs stay."""
    if not is_chief(strategy):
        shutil.rmtree(directory, ignore_errors=True)
