"""Distribution: which tf.distribute strategy to train with, and who writes outputs.

`choose_strategy` is the one factory. With `distribution=auto` it picks, in order:
  TPUStrategy              a TPU is named (config `training.tpu` or the TPU_NAME variable);
  ParameterServerStrategy  TF_CONFIG describes a cluster with `ps` tasks;
  MultiWorkerMirrored      TF_CONFIG describes a cluster with more than one chief/worker task;
  MirroredStrategy         more than one GPU is visible;
  the default strategy     otherwise (one CPU or GPU).

Only the chief writes the exported model, checkpoints and summaries to the run's directories;
other workers write to temporary directories (collective saves need every worker to write) that
`writable_dir` creates and `cleanup_worker_dir` removes.

Parameter-server training: the `chief` task is the coordinator and runs the training loop
(ps_loop.py); `worker` and `ps` tasks only serve (`serve_parameter_server_task`: a
tf.distribute.Server that runs what the chief sends it until the process is ended).
"""

import json
import logging
import os
import shutil
import tempfile

import tensorflow as tf

_TRAINING_TASK_TYPES = ("chief", "worker")
PARAMETER_SERVER = "parameter_server"
# Tasks of a parameter-server cluster that serve instead of running the loop.
SERVING_TASK_TYPES = ("worker", "ps")


def _tf_config() -> dict:
    """The TF_CONFIG environment variable parsed ({} when unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON: {exc}") from exc


def cluster_size_from_tf_config() -> int:
    """Number of chief + worker tasks in the TF_CONFIG environment variable (0 when unset)."""
    cluster = _tf_config().get("cluster", {})
    return sum(len(cluster.get(task_type, [])) for task_type in _TRAINING_TASK_TYPES)


def _check_parameter_server_cluster() -> dict:
    """TF_CONFIG's cluster, checked to hold what ParameterServerStrategy needs; raises naming the setting."""
    cluster = _tf_config().get("cluster", {})
    counts = {task_type: len(cluster.get(task_type, [])) for task_type in ("chief", "worker", "ps")}
    if counts["chief"] != 1 or counts["worker"] < 1 or counts["ps"] < 1:
        raise ValueError(
            "training.distribution=parameter_server needs TF_CONFIG with one chief, at least one worker and at "
            f"least one ps task (found {counts['chief']} chief, {counts['worker']} worker, {counts['ps']} ps)"
        )
    return cluster


def parameter_server_role(distribution: str) -> str:
    """`worker` or `ps` when this process is such a task of a parameter-server cluster, else ""."""
    if resolve_distribution(distribution) != PARAMETER_SERVER:
        return ""
    task_type = _tf_config().get("task", {}).get("type", "")
    return task_type if task_type in SERVING_TASK_TYPES else ""


def serve_parameter_server_task() -> None:
    """Runs this worker or ps task's tf.distribute.Server until the process is ended (never returns).

    The chief creates the variables on the ps tasks and sends each worker the steps to run;
    on Kubeflow the TFJob finishes when the chief does, and the operator removes these pods.
    """
    _check_parameter_server_cluster()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    logging.info(
        "Parameter-server cluster: %s task %d serving at %s", resolver.task_type, resolver.task_id, server.target
    )
    server.join()


def _parameter_server_strategy() -> tf.distribute.Strategy:
    """ParameterServerStrategy over TF_CONFIG's cluster (this process must be its chief); each
    variable lives whole on one ps task, placed round-robin."""
    _check_parameter_server_cluster()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type != "chief":
        raise ValueError(
            f"training.distribution=parameter_server trains in the chief task, not in a {resolver.task_type} task"
        )
    return tf.distribute.ParameterServerStrategy(resolver)


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
    if _tf_config().get("cluster", {}).get("ps"):
        return PARAMETER_SERVER
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
    elif choice == PARAMETER_SERVER:
        strategy = _parameter_server_strategy()
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
    logging.info(
        "Distribution: %s (%s) with %d replica(s)", choice, type(strategy).__name__, strategy.num_replicas_in_sync
    )
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
