"""Distributed training on Kubeflow: run the Trainer as a Training Operator TFJob.

The TFX Trainer only runs in one pod. With `kubeflow.tfjob.enabled`, the Trainer's pod becomes a
launcher (`launch`, called by `run_fn`): it writes the run's `FnArgs` as JSON next to the model
run directory (shared storage), creates a `kubeflow.org/v1` TFJob whose chief and workers all run
`replica_command` (`python -m components.trainer.training.replica --fn-args <that file>`: the
same `run_fn`; the operator sets `TF_CONFIG` on each replica, from which the strategy builds
MultiWorkerMirroredStrategy and lets only the chief export), waits for it while logging every
status change, and raises `TFJobFailed` naming the replica type and the operator's message as
soon as a replica fails that the operator does not restart, or the job fails.

With `parameter_servers` > 0 the TFJob also has PS replicas (same image and command, no GPUs):
the replicas' TF_CONFIG then lists `ps` tasks, the chief trains with ParameterServerStrategy and
the worker and PS replicas serve it (replica.py); the job succeeds when the chief does.

Restarts (`restart_budget`). Facts from the Training Operator's source (kubeflow/training-operator,
branch release-1.9), which this module relies on:
- pkg/util/train/train_util.go `IsRetryableExitCode`: exit code >= 128 is retryable, 1-127 is
  permanent (also pkg/apis/kubeflow.org/v1/common_types.go, `RestartPolicyExitCode`).
- pkg/controller.v1/common/pod.go `ReconcilePods`: a pod in phase Failed whose replica has
  `restartPolicy` Always/OnFailure, or ExitCode with a retryable code, is deleted (and recreated on
  the next pass) and the job gets a `Restarting` condition; ExitCode with a permanent code sets
  the job's `Failed` condition. Either way that pass counts the pod in `replicaStatuses[type].failed`
  (pkg/core/status.go, recomputed from the pods on every pass). An ExitCode replica's pods get
  `restartPolicy: Never` (pkg/controller.v1/tensorflow/util.go `setRestartPolicy`).
- pkg/controller.v1/tensorflow/tfjob_controller.go `UpdateJobStatus`: with a Chief the job is
  `Succeeded` when the chief succeeded (`successPolicy` only matters without a chief); a replica
  type with failed pods sets `Failed` unless the job has a `Restarting` condition. Setting
  `Running` drops `Restarting` and the reverse (pkg/util/status.go `filterOutCondition`), so each
  restart opens a new `Restarting` condition with a new `lastTransitionTime`.
- pkg/controller.v1/common/job.go `ReconcileJobs` + pkg/core/job.go `PastBackoffLimit`: with
  `backoffLimit: 0` the first new failed pod fails the job before it can be restarted (the TFJob
  controller's work queue, pkg/common/util/fake_workqueue.go, always reports 0 requeues), so a
  restarting replica needs backoffLimit >= 1. Above 0 the limit is compared with the container
  restart counts of running pods, which an ExitCode restart (a new pod) leaves at 0: the operator
  does not bound these restarts. `wait` therefore counts the restarts it sees and, past the
  budget, deletes the TFJob and fails.

Replicas get the Trainer pod's configuration: `textgen compile` lists in the step's
TEXTGEN_POD_ENV variable (names and references only, no values) the plain variables, secrets and
config maps it gave the pod (kubeflow/pod_config.py), and `replica_env` turns that into the
replicas' env: the plain variables with the Trainer pod's values, the secrets and config maps as
the same `secretKeyRef` / `configMapKeyRef` references, so no credential is copied into the TFJob.

This module knows the replica entry point only by its module name (`REPLICA_MODULE`): it imports
neither `run_fn` nor the replica module, so `run_fn -> tfjob` and `replica -> run_fn, tfjob` form
no cycle.
"""

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
# The operator injects TF_CONFIG into containers with this name only.
CONTAINER_NAME = "tensorflow"
REPLICA_ENV = "TEXTGEN_TFJOB_REPLICA"
# JSON {"env": [NAME...], "secret_env": {NAME: "secret/key"}, "config_map_env": {NAME: "map/key"}}.
POD_ENV = "TEXTGEN_POD_ENV"
# What every replica runs (components/trainer/training/replica.py).
REPLICA_MODULE = "components.trainer.training.replica"
FN_ARGS_FIELDS = (
    "working_dir",
    "hyperparameters",
    "train_files",
    "eval_files",
    "transform_output",
    "transform_graph_path",
    "serving_model_dir",
    "eval_model_dir",
    "model_run_dir",
    "train_steps",
    "eval_steps",
    "schema_path",
    "schema_file",
    "custom_config",
    "base_model",
)


class TFJobFailed(RuntimeError):
    """The TFJob, or one of its replicas, failed."""


@dataclass
class TFJobSpec:
    """What the launcher submits."""

    name: str
    namespace: str
    image: str
    command: List[str]
    workers: int = 2
    parameter_servers: int = 0
    cpu: str = "4"
    memory: str = "16Gi"
    gpus: int = 0
    service_account: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    # Further env entries as written in a pod spec (`valueFrom` references; `replica_env`).
    env_entries: List[Dict[str, Any]] = field(default_factory=list)
    # Parameter-server jobs: Worker pods killed by a signal that are recreated, in all (`restart_budget`).
    worker_restarts: int = 0


@dataclass(frozen=True)
class RestartBudget:
    """Which replica types the operator recreates after a retryable failure (`restartPolicy:
    ExitCode`), and how many recreations in all the launcher accepts before failing."""

    replicas: FrozenSet[str] = frozenset()
    limit: int = 0


def restart_budget(spec: TFJobSpec) -> RestartBudget:
    """Worker replicas restart only in parameter-server jobs.

    There the coordinator on the chief reschedules a lost worker's steps and takes the worker back
    when it returns, so recreating a killed worker pod keeps training going. The chief (it runs the
    training loop) and the PS replicas (they hold the variables) never restart: losing one fails
    the job, and a rerun resumes from the last checkpoint. In MultiWorkerMirrored jobs every worker
    takes part in each step's all-reduce: one lost worker breaks the collective for all of them
    and a recreated one cannot rejoin it mid-run, so nothing restarts there either."""
    if spec.parameter_servers and spec.worker_restarts:
        return RestartBudget(frozenset({"Worker"}), spec.worker_restarts)
    return RestartBudget()


def replica_env(environ: Dict[str, str]):
    """({name: value}, [env entries with valueFrom]) for the replicas, from the POD_ENV listing in
    `environ` (the Trainer pod's environment; see the module docstring)."""
    listing = json.loads(environ.get(POD_ENV) or "{}")
    plain = {name: environ[name] for name in listing.get("env", []) if name in environ}
    entries = []
    for section, source in (("secret_env", "secretKeyRef"), ("config_map_env", "configMapKeyRef")):
        for name, reference in sorted(listing.get(section, {}).items()):
            object_name, _, key = reference.partition("/")
            entries.append({"name": name, "valueFrom": {source: {"name": object_name, "key": key}}})
    return plain, entries


def _replica(spec: TFJobSpec, kind: str, replicas: int, gpus: bool = True) -> Dict[str, Any]:
    """The replica spec of `kind` (Chief, Worker or PS)."""
    limits = {"cpu": spec.cpu, "memory": spec.memory}
    if spec.gpus and gpus:
        limits["nvidia.com/gpu"] = str(spec.gpus)
    container = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "command": list(spec.command),
        "env": [{"name": key, "value": value} for key, value in sorted({**spec.env, REPLICA_ENV: "1"}.items())]
        + list(spec.env_entries),
        "resources": {"requests": dict(limits), "limits": dict(limits)},
    }
    pod_spec: Dict[str, Any] = {"containers": [container]}
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    # Never: a failed replica fails the job at once instead of restarting into the same error.
    # ExitCode (restart_budget): a pod killed by a signal (exit >= 128: OOM kill, preemption) is
    # recreated; a Python error (exit 1) is permanent and fails the job, so it cannot loop.
    policy = "ExitCode" if kind in restart_budget(spec).replicas else "Never"
    return {
        "replicas": replicas,
        "restartPolicy": policy,
        "template": {"metadata": {"labels": dict(spec.labels)}, "spec": pod_spec},
    }


def build_manifest(spec: TFJobSpec) -> Dict[str, Any]:
    """The TFJob custom resource: one chief, `spec.workers` workers and `spec.parameter_servers`
    parameter servers (holding variables only: no GPUs), all running `spec.command`."""
    if spec.parameter_servers and not spec.workers:
        raise ValueError(
            "kubeflow.tfjob.parameter_servers needs kubeflow.tfjob.workers >= 1 (the workers run the steps)"
        )
    replica_specs = {"Chief": _replica(spec, "Chief", 1)}
    if spec.workers:
        replica_specs["Worker"] = _replica(spec, "Worker", spec.workers)
    if spec.parameter_servers:
        replica_specs["PS"] = _replica(spec, "PS", spec.parameter_servers, gpus=False)
    # backoffLimit 0 fails the job on the first failed pod; a restarting replica needs it >= 1
    # (module docstring). No successPolicy: with a Chief the operator judges success by the chief.
    run_policy = {"cleanPodPolicy": "Running", "backoffLimit": restart_budget(spec).limit}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(spec.labels)},
        "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replica_specs},
    }


def _true_conditions(status: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [c for c in status.get("conditions") or [] if str(c.get("status")) == "True"]


def _describe(status: Dict[str, Any]) -> str:
    conditions = ",".join(c["type"] for c in _true_conditions(status)) or "Pending"
    replicas = "; ".join(
        f"{kind}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        for kind, counts in sorted((status.get("replicaStatuses") or {}).items())
    )
    return f"{conditions} ({replicas})" if replicas else conditions


def _failed_replicas(status: Dict[str, Any]) -> Dict[str, int]:
    """{replica type: failed pod count} for the types with failed pods."""
    return {
        kind: counts["failed"] for kind, counts in (status.get("replicaStatuses") or {}).items() if counts.get("failed")
    }


def _failure(name: str, failed_replicas: Dict[str, int], message: str = "", note: str = "") -> TFJobFailed:
    """The error naming the failed replica types, the operator's message and a launcher note."""
    replicas = ", ".join(f"{kind} replicas failed: {count}" for kind, count in sorted(failed_replicas.items()))
    return TFJobFailed(f"TFJob {name} failed: " + "; ".join(part for part in (replicas, message, note) if part))


def check_status(name: str, status: Dict[str, Any], budget: RestartBudget = RestartBudget(), note: str = "") -> bool:
    """True when the job succeeded, False while it runs or while the operator restarts a replica
    of `budget.replicas` (`Restarting` condition); raises TFJobFailed on the job's `Failed`
    condition or on a failed replica the operator does not restart. `note` ends the error."""
    conditions = {c["type"]: c for c in _true_conditions(status)}
    failed_replicas = _failed_replicas(status)
    if "Failed" in conditions:
        raise _failure(name, failed_replicas, conditions["Failed"].get("message", ""), note)
    retrying = budget.replicas if "Restarting" in conditions else frozenset()
    not_retried = {kind: count for kind, count in failed_replicas.items() if kind not in retrying}
    if not_retried:
        raise _failure(name, not_retried, note=note)
    return "Succeeded" in conditions


@dataclass
class RestartCount:
    """The restarts of `budget.replicas` seen while polling: per `Restarting` condition (one per
    restart, told apart by its lastTransitionTime) the most failed pods seen. Polling misses a
    restart the operator finishes between two polls, so this is a lower bound."""

    budget: RestartBudget
    failed_per_restart: Dict[str, int] = field(default_factory=dict)

    def observe(self, status: Dict[str, Any]) -> int:
        """Records `status`; returns the restarts seen so far."""
        restarting = [c for c in _true_conditions(status) if c["type"] == "Restarting"]
        if restarting and self.budget.replicas:
            mark = str(restarting[-1].get("lastTransitionTime", ""))
            failed = sum(count for kind, count in _failed_replicas(status).items() if kind in self.budget.replicas)
            self.failed_per_restart[mark] = max(self.failed_per_restart.get(mark, 1), failed)
        return self.total

    @property
    def total(self) -> int:
        """Restarts seen so far."""
        return sum(self.failed_per_restart.values())

    def note(self) -> str:
        """What to add to an error about this job: the restarts seen, if any."""
        kinds = "/".join(sorted(self.budget.replicas))
        return f"after {self.total} {kinds} restart(s)" if self.total else ""

    def exceeded(self) -> bool:
        """True once more restarts were seen than the budget allows."""
        return self.total > self.budget.limit


def submit(api, manifest: Dict[str, Any]) -> Dict[str, Any]:
    """Creates the TFJob with a kubernetes `CustomObjectsApi`."""
    metadata = manifest["metadata"]
    log.info("Submitting TFJob %s/%s", metadata["namespace"], metadata["name"])
    return api.create_namespaced_custom_object(GROUP, VERSION, metadata["namespace"], PLURAL, manifest)


def wait(
    api,
    name: str,
    namespace: str,
    poll_seconds: float = 10.0,
    timeout_seconds: float = 86400.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    budget: RestartBudget = RestartBudget(),
) -> Dict[str, Any]:
    """Polls the TFJob until it succeeds (returns its status), fails or times out (raises);
    logs each status change. Replicas of `budget.replicas` may restart `budget.limit` times in
    all; one more restart deletes the TFJob (it would go on restarting: module docstring) and fails."""
    deadline = clock() + timeout_seconds
    last = None
    restarts = RestartCount(budget)
    while True:
        status = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
        described = _describe(status)
        if described != last:
            log.info("TFJob %s/%s: %s", namespace, name, described)
            last = described
        restarts.observe(status)
        if check_status(f"{namespace}/{name}", status, budget, restarts.note()):
            return status
        if restarts.exceeded():
            api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            raise _failure(
                f"{namespace}/{name}",
                _failed_replicas(status),
                f"more than kubeflow.tfjob.worker_restarts={budget.limit} restarts",
                restarts.note() + "; TFJob deleted",
            )
        if clock() >= deadline:
            raise TFJobFailed(
                f"TFJob {namespace}/{name} did not finish within {timeout_seconds:.0f} s (last: {described})"
            )
        sleep(poll_seconds)


def running_in_replica() -> bool:
    """True inside a TFJob replica (so run_fn trains instead of launching another TFJob)."""
    return os.environ.get(REPLICA_ENV) == "1"


def replica_command(fn_args_path: str) -> List[str]:
    """The command of every replica container: the replica entry point reading `fn_args_path`."""
    return ["python", "-m", REPLICA_MODULE, "--fn-args", fn_args_path]


def fn_args_to_json(fn_args) -> str:
    """The serialisable part of a TFX FnArgs (paths, steps, custom_config)."""
    return json.dumps(
        {name: getattr(fn_args, name) for name in FN_ARGS_FIELDS if getattr(fn_args, name, None) is not None}
    )


def fn_args_from_json(text: str) -> Dict[str, Any]:
    """The FnArgs fields `fn_args_to_json` wrote, every field of FN_ARGS_FIELDS present (None when unset)."""
    fields = json.loads(text)
    unknown = set(fields) - set(FN_ARGS_FIELDS)
    if unknown:
        raise ValueError(f"not FnArgs fields written by the launcher: {sorted(unknown)}")
    return {name: fields.get(name) for name in FN_ARGS_FIELDS}


def launch(fn_args, tfjob_config, image: str, namespace: str, job_name: str, api=None) -> Dict[str, Any]:
    """The Trainer-side hook: write FnArgs, submit the TFJob, wait for it (see module docstring)."""
    import tensorflow as tf

    fn_args_path = os.path.join(fn_args.model_run_dir, "tfjob_fn_args.json")
    tf.io.gfile.makedirs(fn_args.model_run_dir)
    with tf.io.gfile.GFile(fn_args_path, "w") as handle:
        handle.write(fn_args_to_json(fn_args))
    env, env_entries = replica_env(dict(os.environ))
    spec = TFJobSpec(
        name=job_name,
        namespace=namespace,
        image=tfjob_config.image or image,
        command=replica_command(fn_args_path),
        workers=tfjob_config.workers,
        parameter_servers=tfjob_config.parameter_servers,
        cpu=tfjob_config.cpu,
        memory=tfjob_config.memory,
        gpus=tfjob_config.gpus,
        service_account=tfjob_config.service_account,
        labels={"app.kubernetes.io/part-of": "textgen"},
        env=env,
        env_entries=env_entries,
        worker_restarts=tfjob_config.worker_restarts,
    )
    if api is None:
        from kubernetes import client, config

        config.load_incluster_config()
        api = client.CustomObjectsApi()
    submit(api, build_manifest(spec))
    return wait(
        api, job_name, namespace, tfjob_config.poll_seconds, tfjob_config.timeout_seconds, budget=restart_budget(spec)
    )
