"""What each step's pod gets from the compiled spec besides its command: environment variables,
Kubernetes secrets and config maps as environment variables, and the registry check.

On open-source KFP a pod's environment is the container's `env` in the spec plus what the
Kubernetes platform spec adds (kubeflow/pipelines `backend/src/v2/driver/driver.go`
`initPodSpecPatch`: container env; `driver/k8s.go`: `secretAsEnv` and `configMapAsEnv` of the
executor's `KubernetesExecutorConfig` become `valueFrom.secretKeyRef` / `configMapKeyRef`
variables). Nothing from the machine that ran `textgen compile` reaches it.

- `kubeflow.env` (`textgen compile --env NAME=VALUE`): plain values, e.g. S3_ENDPOINT and
  AWS_REGION for MinIO (components/filesystems.py names them). A credential-looking name is
  refused here: it would be readable by anyone who can read the spec.
- `kubeflow.secret_env` (`--secret-env NAME=SECRET/KEY`) and `kubeflow.config_map_env`
  (`--config-map-env NAME=CONFIGMAP/KEY`): written to the platform spec, the second YAML
  document of pipeline.yaml, in the format `kfp-kubernetes`' `use_secret_as_env` writes
  (`platforms.kubernetes.deploymentSpec.executors.<executor>.secretAsEnv[].keyToEnv[]`), which
  the kfp client sends as `platform_spec` beside `pipeline_spec`. kfp-kubernetes itself decorates
  KFP DSL tasks, and this spec comes from TFX's compiler, so the same JSON is produced here.

The registry (MLFLOW_TRACKING_URI or registry.tracking_uri) must be a server every pod reaches:
an embedded SQLite store or a local path on one pod's disk is refused at compile time.

Pods are sized in the spec (`container.resources`: CPU and memory requests and limits, which
the driver turns into the pod's `resources`, memory in GB; the Trainer's `accelerator` type, the
Kubernetes resource name such as nvidia.com/gpu, and count): `kubeflow.resources` for every
step, `kubeflow.step_resources` for named ones. Beam's DirectRunner started with
`--direct_num_workers=0` runs one worker per core of the *node*, so that argument becomes the
step's CPU limit (at least 1).

KFP's cache key includes the image string: under a moving tag a rebuilt image would be served
the previous image's results. An image not named by digest (`repo@sha256:...`) turns caching
off for every step (`cache_allowed`).
"""

import json
import math
import re
from typing import Any, Dict, Iterable, List, Tuple

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
# A variable whose name says it holds a credential belongs in a Kubernetes secret.
_CREDENTIAL_NAME = re.compile(r"SECRET|PASSWORD|TOKEN|ACCESS_KEY|CREDENTIAL", re.IGNORECASE)
_REFERENCE = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)/(?P<key>[-._a-zA-Z0-9]+)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# URI schemes of registries that live on one machine's disk.
_LOCAL_REGISTRY_SCHEMES = ("sqlite:", "file:")


class PodConfigError(ValueError):
    """A kubeflow.env / secret_env / config_map_env entry, or a registry, pods cannot use."""


def check_env(env: Dict[str, str]) -> Dict[str, str]:
    """`env` (kubeflow.env) if every name is valid and none looks like a credential."""
    for name in env:
        if not _ENV_NAME.match(name):
            raise PodConfigError(f"kubeflow.env: {name!r} is not an environment variable name")
        if _CREDENTIAL_NAME.search(name):
            raise PodConfigError(
                f"kubeflow.env: {name} looks like a credential; the spec is readable by anyone who can "
                f"read the pipeline: use kubeflow.secret_env ({name}: <secret name>/<key>)"
            )
    return env


def parse_references(references: Dict[str, str], section: str) -> Dict[str, Tuple[str, str]]:
    """{ENV: "object/key"} (kubeflow.secret_env or config_map_env) as {ENV: (object, key)}."""
    parsed = {}
    for name, reference in references.items():
        match = _REFERENCE.match(reference)
        if not _ENV_NAME.match(name) or not match:
            raise PodConfigError(
                f"kubeflow.{section}: {name}={reference!r} must look like ENV_NAME=<object name>/<key>"
            )
        parsed[name] = (match.group("name"), match.group("key"))
    return parsed


def _grouped(references: Dict[str, Tuple[str, str]], key_field: str) -> List[Dict[str, Any]]:
    """One entry per Kubernetes object, its keys mapped to variables (sorted: stable specs)."""
    by_object: Dict[str, List[Dict[str, str]]] = {}
    for env_name, (object_name, key) in sorted(references.items()):
        by_object.setdefault(object_name, []).append({key_field: key, "envVar": env_name})
    return [{"name": name, "keyToEnv": keys} for name, keys in sorted(by_object.items())]


def container_env(
    env: Dict[str, str], secret_env: Dict[str, str], config_map_env: Dict[str, str]
) -> List[Dict[str, str]]:
    """A container's `env` list in the pipeline spec: `env`, plus (when any is set) the listing
    of names and references a Trainer hands on to its TFJob replicas (tfjob.POD_ENV)."""
    from components.trainer.training.tfjob import POD_ENV

    entries = [{"name": name, "value": value} for name, value in sorted(check_env(env).items())]
    if env or secret_env or config_map_env:
        listing = {
            "env": sorted(env),
            "secret_env": dict(sorted(secret_env.items())),
            "config_map_env": dict(sorted(config_map_env.items())),
        }
        entries.append({"name": POD_ENV, "value": json.dumps(listing)})
    return entries


def platform_spec(
    executor_labels: Iterable[str], secret_env: Dict[str, str], config_map_env: Dict[str, str]
) -> Dict[str, Any]:
    """The Kubernetes platform spec giving every executor the secrets and config maps as env
    ({} when there are none)."""
    secrets = _grouped(parse_references(secret_env, "secret_env"), "secretKey")
    config_maps = _grouped(parse_references(config_map_env, "config_map_env"), "configMapKey")
    if not secrets and not config_maps:
        return {}
    executor = {}
    if secrets:
        executor["secretAsEnv"] = [{"secretName": s["name"], "keyToEnv": s["keyToEnv"]} for s in secrets]
    if config_maps:
        executor["configMapAsEnv"] = [{"configMapName": c["name"], "keyToEnv": c["keyToEnv"]} for c in config_maps]
    return {
        "platforms": {
            "kubernetes": {"deploymentSpec": {"executors": {label: executor for label in sorted(executor_labels)}}}
        }
    }


def check_registry(
    enabled: bool, tracking_uri: str, env: Dict[str, str], secret_env: Dict[str, str], config_map_env: Dict[str, str]
) -> None:
    """Refuses a registry the pods cannot share: none configured, or one on a single disk."""
    if not enabled:
        return
    if TRACKING_URI_ENV in secret_env or TRACKING_URI_ENV in config_map_env:
        return  # a server's address, from the cluster
    uri = env.get(TRACKING_URI_ENV) or tracking_uri
    if not uri:
        raise PodConfigError(
            "the model registry has no server: on Kubeflow every step's pod needs the same registry; "
            "set registry.tracking_uri (or kubeflow.env MLFLOW_TRACKING_URI) to an MLflow server, "
            "or registry.enabled=false"
        )
    if uri.startswith(_LOCAL_REGISTRY_SCHEMES) or "://" not in uri:
        raise PodConfigError(
            f"registry {uri} is a store on one disk that the pipeline's pods cannot share: set "
            "registry.tracking_uri to an MLflow server (http(s)://...), or registry.enabled=false"
        )


TRAINER_STEP = "Trainer"
NODE_CORES_WORKERS = "--direct_num_workers=0"


def cache_allowed(image: str) -> bool:
    """Whether KFP may cache steps run in `image`: only when it is named by digest."""
    return "@sha256:" in image


def check_step_names(step_resources: Dict[str, Any], steps: Iterable[str]) -> None:
    """Refuses a kubeflow.step_resources entry that names no step of the pipeline."""
    unknown = sorted(set(step_resources) - set(steps))
    if unknown:
        raise PodConfigError(
            f"kubeflow.step_resources: no step named {', '.join(unknown)} (steps: {', '.join(sorted(steps))})"
        )


def container_resources(resources, accelerator_type: str = "", accelerator_count: int = 0) -> Dict[str, Any]:
    """A container's `resources` in the pipeline spec for a PodResources (memory in GB, as the
    driver reads `memoryLimit`), with an accelerator when `accelerator_type` is set."""
    spec: Dict[str, Any] = {
        "cpuRequest": resources.cpu_request,
        "cpuLimit": resources.cpu_limit,
        "memoryRequest": resources.memory_request_gb,
        "memoryLimit": resources.memory_limit_gb,
    }
    if accelerator_type:
        spec["accelerator"] = {"type": accelerator_type, "count": accelerator_count}
    return spec


def beam_workers_for(args: List[str], cpu_limit: float) -> List[str]:
    """`args` with `--direct_num_workers=0` (one per node core) replaced by the pod's CPU limit."""
    workers = f"--direct_num_workers={max(1, math.floor(cpu_limit))}"
    return [workers if arg == NODE_CORES_WORKERS else arg for arg in args]
