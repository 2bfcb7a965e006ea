"""Distributed training on Kubeflow: run the Trainer as a Training Operator TFJob.

The TFX Trainer only runs in one pod. With `kubeflow.tfjob.enabled`, the Trainer's pod becomes a
launcher (`launch`, called by `run_fn`): it writes the run's `FnArgs` as JSON next to the model
run directory (shared storage), creates a `kubeflow.org/v1` TFJob whose chief and workers all run
`replica_command` (`python -m components.trainer.training.replica --fn-args <that file>`: the
same `run_fn`; the operator sets `TF_CONFIG` on each replica, from which the strategy builds
MultiWorkerMirroredStrategy and lets only the chief export), waits for it while logging every
status change, and raises `TFJobFailed` naming the replica type and the operator's message as
soon as a replica fails or the job does.

With `parameter_servers` > 0 the TFJob also has PS replicas (same image and command, no GPUs):
the replicas' TF_CONFIG then lists `ps` tasks, the chief trains with ParameterServerStrategy and
the worker and PS replicas serve it (replica.py); the job succeeds when the chief does.

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
from typing import Any, Callable, Dict, List

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
# The operator injects TF_CONFIG into containers with this name only.
CONTAINER_NAME = "tensorflow"
REPLICA_ENV = "TEXTGEN_TFJOB_REPLICA"
# JSON {"env": [NAME...], "secret_env": {NAME: "secret/key"}, "config_map_env": {NAME: "map/key"}}.
POD_ENV = "TEXTGEN_POD_ENV"
# What every replica runs (components/trainer/training/replica.py).
REPLICA_MODULE = "components.trainer.training.replica"
FN_ARGS_FIELDS = ("working_dir", "hyperparameters", "train_files", "eval_files", "transform_output", "transform_graph_path", "serving_model_dir",
                  "eval_model_dir", "model_run_dir", "train_steps", "eval_steps", "schema_path", "schema_file",
                  "custom_config", "base_model")


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


def _replica(spec: TFJobSpec, replicas: int, gpus: bool = True) -> Dict[str, Any]:
    limits = {"cpu": spec.cpu, "memory": spec.memory}
    if spec.gpus and gpus:
        limits["nvidia.com/gpu"] = str(spec.gpus)
    container = {
        "name": CONTAINER_NAME, "image": spec.image, "command": list(spec.command),
        "env": [{"name": key, "value": value} for key, value in sorted({**spec.env, REPLICA_ENV: "1"}.items())]
               + list(spec.env_entries),
        "resources": {"requests": dict(limits), "limits": dict(limits)},
    }
    pod_spec: Dict[str, Any] = {"containers": [container]}
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    # Never: a failed replica fails the job at once instead of restarting into the same error.
    return {"replicas": replicas, "restartPolicy": "Never",
            "template": {"metadata": {"labels": dict(spec.labels)}, "spec": pod_spec}}


def build_manifest(spec: TFJobSpec) -> Dict[str, Any]:
    """The TFJob custom resource: one chief, `spec.workers` workers and `spec.parameter_servers`
    parameter servers (holding variables only: no GPUs), all running `spec.command`."""
    if spec.parameter_servers and not spec.workers:
        raise ValueError("kubeflow.tfjob.parameter_servers needs kubeflow.tfjob.workers >= 1 (the workers run the steps)")
    replica_specs = {"Chief": _replica(spec, 1)}
    if spec.workers:
        replica_specs["Worker"] = _replica(spec, spec.workers)
    if spec.parameter_servers:
        replica_specs["PS"] = _replica(spec, spec.parameter_servers, gpus=False)
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TFJob",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": dict(spec.labels)},
        "spec": {"runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0}, "tfReplicaSpecs": replica_specs},
    }


def _true_conditions(status: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [c for c in status.get("conditions") or [] if str(c.get("status")) == "True"]


def _describe(status: Dict[str, Any]) -> str:
    conditions = ",".join(c["type"] for c in _true_conditions(status)) or "Pending"
    replicas = "; ".join(f"{kind}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                         for kind, counts in sorted((status.get("replicaStatuses") or {}).items()))
    return f"{conditions} ({replicas})" if replicas else conditions


def check_status(name: str, status: Dict[str, Any]) -> bool:
    """True when the job succeeded, False while it runs; raises TFJobFailed on any failure."""
    failed_replicas = {kind: counts["failed"] for kind, counts in (status.get("replicaStatuses") or {}).items()
                       if counts.get("failed")}
    failed = [c for c in _true_conditions(status) if c["type"] == "Failed"]
    if failed or failed_replicas:
        message = failed[-1].get("message", "") if failed else ""
        replicas = ", ".join(f"{kind} replicas failed: {count}" for kind, count in sorted(failed_replicas.items()))
        raise TFJobFailed(f"TFJob {name} failed: " + "; ".join(part for part in (replicas, message) if part))
    return any(c["type"] == "Succeeded" for c in _true_conditions(status))


def submit(api, manifest: Dict[str, Any]) -> Dict[str, Any]:
    """Creates the TFJob with a kubernetes `CustomObjectsApi`."""
    metadata = manifest["metadata"]
    log.info("Submitting TFJob %s/%s", metadata["namespace"], metadata["name"])
    return api.create_namespaced_custom_object(GROUP, VERSION, metadata["namespace"], PLURAL, manifest)


def wait(api, name: str, namespace: str, poll_seconds: float = 10.0, timeout_seconds: float = 86400.0,
         sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Dict[str, Any]:
    """Polls the TFJob until it succeeds (returns its status), fails or times out (raises);
    logs each status change."""
    deadline = clock() + timeout_seconds
    last = None
    while True:
        status = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status") or {}
        described = _describe(status)
        if described != last:
            log.info("TFJob %s/%s: %s", namespace, name, described)
            last = described
        if check_status(f"{namespace}/{name}", status):
            return status
        if clock() >= deadline:
            raise TFJobFailed(f"TFJob {namespace}/{name} did not finish within {timeout_seconds:.0f} s (last: {described})")
        sleep(poll_seconds)


def running_in_replica() -> bool:
    """True inside a TFJob replica (so run_fn trains instead of launching another TFJob)."""
    return os.environ.get(REPLICA_ENV) == "1"


def replica_command(fn_args_path: str) -> List[str]:
    """The command of every replica container: the replica entry point reading `fn_args_path`."""
    return ["python", "-m", REPLICA_MODULE, "--fn-args", fn_args_path]


def fn_args_to_json(fn_args) -> str:
    """The serialisable part of a TFX FnArgs (paths, steps, custom_config)."""
    return json.dumps({name: getattr(fn_args, name) for name in FN_ARGS_FIELDS if getattr(fn_args, name, None) is not None})


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
        name=job_name, namespace=namespace, image=tfjob_config.image or image,
        command=replica_command(fn_args_path),
        workers=tfjob_config.workers, parameter_servers=tfjob_config.parameter_servers, cpu=tfjob_config.cpu, memory=tfjob_config.memory, gpus=tfjob_config.gpus,
        service_account=tfjob_config.service_account, labels={"app.kubernetes.io/part-of": "textgen"},
        env=env, env_entries=env_entries,
    )
    if api is None:
        from kubernetes import client, config

        config.load_incluster_config()
        api = client.CustomObjectsApi()
    submit(api, build_manifest(spec))
    return wait(api, job_name, namespace, tfjob_config.poll_seconds, tfjob_config.timeout_seconds)
