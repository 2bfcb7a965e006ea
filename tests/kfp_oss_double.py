"""A test double of the open-source Kubeflow Pipelines 2.x backend: runs a compiled `pipeline.yaml`
task by task, the way the OSS v2 driver and launcher would, on this machine.

No KFP cluster can run here. This double reproduces the backend behaviours that decide whether
our steps run, each read from kubeflow/pipelines' backend (`backend/src/v2/`, master after 2.17,
checked against 2.5 to 2.16):

- **Spec constructs**: a spec holding a `resolver` executor is refused, as the API server's Argo
  compiler refuses it when a run is created (`compiler/argocompiler/dag.go`: "resolver executors
  not implemented"); `container.lifecycle` hooks are refused too, since nothing in the backend
  runs them (a real cluster ignores them silently, which is worse). `kubeflow.oss_compat`
  holds the list; the double checks again instead of trusting the compiler.
- **Order and failure**: tasks run in dependency order (`dependentTasks`, which Argo turns into
  `depends: a.Succeeded && ...`, plus the producers of input artifacts); a failed task fails the
  run and nothing downstream of it starts. Caching is not emulated: every task executes.
- **ExecutorInput as the driver builds it** (`driver/container.go`, `driver/resolve.go`,
  `driver/driver.go` `provisionOutputs`, `metadata/client.go`, `metadata/converter.go`):
  - parameters only in `inputs.parameterValues`, numbers as JSON doubles (the deprecated
    `inputs.parameters` is never filled);
  - input artifacts named by their MLMD id (a numeric string), with `type` =
    `{"instanceSchema": ""}` (`GetOutputArtifactsByExecutionId` leaves the schema empty), and
    `metadata` = the custom properties MLMD stored: numbers as doubles, booleans as 1/0, lists
    as `{"list": [...]}` and objects as `{"struct": {...}}` (`StructValueToMLMDValue` round
    trip), plus the launcher's `display_name` and `store_session_info` keys;
  - output artifacts typed from the component's output definitions, at
    `<root>/<pipeline>/<run id>/<task>/<uuid>/<output>`, and the `executor-logs` output typed
    `system.Artifact` that KFP >= 2.5 adds while the API server publishes logs (the default);
  - `outputs.outputFile` at the pod-local path of KFP 2.15+ (`driver/driver.go`
    `provisionOutputs`): `LocalPathForURI(<task root>)/output_metadata.json`, e.g.
    `/s3/<bucket>/<...>/output_metadata.json`, or `/tmp/kfp_outputs/output_metadata.json`
    (`component.OutputMetadataFilepath`) when the root's scheme has no local path; never on the
    object store itself.
- **Launcher** (`component/launcher_v2.go`): before the step, `downloadArtifacts` copies every
  input artifact on the object store to its local path (`LocalPathForURI`: `gs://b/k` ->
  `/gcs/b/k`, `s3://b/k` -> `/s3/b/k`, `minio://b/k` -> `/minio/b/k`; other schemes are skipped
  with a warning) with `objectstore.DownloadBlob` (`objectstore/object_store.go`): every key
  under the artifact's prefix is listed without a delimiter and written to the local path of its
  key relative to the prefix, parent folders created on the way; a zero-byte "folder marker"
  key (`dir/`) becomes a file `dir`, so the next key under it fails with `mkdir ...: not a
  directory` and the task fails before the step starts (kubeflow/pipelines#13476).
  `prepareOutputFolders` creates the parent of every output's local path. Then the executor's
  container `command` + `args` exactly as compiled, `{{$}}` replaced by the ExecutorInput JSON,
  no shell. With a local pipeline root (a volume every pod mounts) the output folders themselves
  are created too, as an object store would need none. After a step exits 0 its executor
  output file is parsed strictly (an unknown field fails the task, as `protojson.Unmarshal`
  does); for each output named in the ExecutorInput, a non-empty `uri` replaces the URI and the
  `metadata` it reports is laid over the spec's, and that is what downstream tasks receive.
- **Image**: each step is a process of `image_python` (a virtualenv holding only the
  installed wheel of the project over the pinned stack: nothing from the checkout), with an
  empty working directory and no PYTHONPATH, like a container built from kubeflow/Dockerfile.
  By default (`prewarm`) a step's process is forked from an interpreter of that image that has
  already imported what the entrypoint imports first (TFX's executor runner), which saves about
  9 s of each step here; tests/prewarmed_interpreter.py lists what such a child has and what it
  does not reproduce of a fresh container.
- **A hermetic environment** (`driver/driver.go` `initPodSpecPatch`, `driver/k8s.go`): a step
  sees only the image's variables (the Dockerfile's `ENV` lines, PATH, HOME), the container's
  `env` from the spec, the platform spec's `secretAsEnv` / `configMapAsEnv` resolved from the
  secrets and config maps the double is given as the cluster's (a missing one fails the task, as
  Kubernetes refuses to start such a pod: CreateContainerConfigError), and the variables KFP sets
  (`KFP_POD_NAME`, `KFP_POD_UID`: `compiler/argocompiler/common.go`). Nothing from the test
  process's environment.

- **Pods' own file systems**: each task's pod-local paths (`/s3/...`, `/tmp/...`) live under a
  fresh directory of its own (`<work_dir>/pods/<run id>/<task>/`, its working directory `home`,
  the Dockerfile's WORKDIR), so nothing a step leaves on its disk reaches another step.

The pipeline root is `s3://` on a real S3 API server (moto, tests/object_store.py), or a local
directory standing in for a volume every pod mounts. Not covered: the launcher's upload of the
local output paths after a step (ours write their output URIs directly, so those paths stay
empty), resources, retries, caching, conditions and loops (our spec has none), the API server
and the UI.
"""

import itertools
import json
import os
import posixpath
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

from kubeflow import oss_compat
from tests.prewarmed_interpreter import PrewarmedInterpreter

EXECUTOR_INPUT_PLACEHOLDER = "{{$}}"
EXECUTOR_LOGS_OUTPUT = "executor-logs"
# launcher_v2.go LocalPathForURI: where an input on an object store is downloaded in the pod.
LOCAL_PATH_PREFIXES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}
# component.OutputMetadataFilepath: the executor output file for a root without a local path.
LEGACY_OUTPUT_METADATA_FILE = "/tmp/kfp_outputs/output_metadata.json"


class PodStartError(RuntimeError):
    """The task's pod cannot start or its launcher fails before the step runs (the task fails)."""


class DownloadError(PodStartError):
    """The launcher could not copy an input artifact to the pod (the task fails)."""


def local_path_for_uri(uri: str) -> Optional[str]:
    """The pod-local path of an object-store URI (launcher_v2.go `LocalPathForURI`), or None."""
    for prefix, local in LOCAL_PATH_PREFIXES.items():
        if uri.startswith(prefix):
            return local + uri[len(prefix) :]
    return None


def _mkdir_all(path: str) -> None:
    """Go's os.MkdirAll: an existing non-directory on the way is `mkdir <path>: not a directory`."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"mkdir {path}: not a directory")
    os.makedirs(path, exist_ok=True)


def download_blob(client, bucket: str, prefix: str, local_dir: str) -> None:
    """objectstore.DownloadBlob with an S3 client: every key under `prefix`, listed without a
    delimiter, to `local_dir`/<key relative to prefix> (see the module docstring)."""
    trimmed = prefix.rstrip("/")
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            key = item["Key"]
            if key != trimmed and not key.startswith(trimmed + "/"):
                continue  # isBlobKeyUnderPrefix
            local_path = os.path.normpath(os.path.join(local_dir, posixpath.relpath(key, trimmed)))
            try:
                _mkdir_all(os.path.dirname(local_path))
                client.download_file(bucket, key, local_path)  # os.Create, then the copy
            except OSError as exc:
                raise DownloadError(
                    f"failed to download input artifact from remote storage URI s3://{bucket}/{prefix}: "
                    f"downloadFile(): unable to complete copying {key!r} to local storage "
                    f"{local_path!r}: {exc}"
                ) from exc


# KFP's own variables in every pod (compiler/argocompiler/common.go).
KFP_POD_ENV = ("KFP_POD_NAME", "KFP_POD_UID")
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"


def dockerfile_env(dockerfile: str) -> Dict[str, str]:
    """The variables the `ENV NAME=VALUE ...` lines (with continuations) of `dockerfile` set."""
    with open(dockerfile, encoding="utf-8") as handle:
        text = handle.read().replace("\\\n", " ")
    env = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for item in line[len("ENV ") :].split():
                name, _, value = item.partition("=")
                env[name] = value.strip('"')
    return env


class UnsupportedSpecError(ValueError):
    """The spec uses something open-source KFP does not implement."""


@dataclass
class TaskRecord:
    """What happened to one task of a run."""

    name: str
    state: str  # SUCCEEDED, FAILED or SKIPPED (an upstream task failed)
    seconds: float = 0.0
    log_tail: str = ""
    outputs: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # output key -> runtime artifact


@dataclass
class RunRecord:
    """A whole run: every task's record, in execution order."""

    run_id: str
    tasks: Dict[str, TaskRecord]

    @property
    def succeeded(self) -> bool:
        return all(task.state == "SUCCEEDED" for task in self.tasks.values())

    def describe_failures(self) -> str:
        return "\n".join(f"--- {t.name}: {t.state}\n{t.log_tail}" for t in self.tasks.values() if t.state == "FAILED")


def _through_mlmd(value: Any) -> Any:
    """A metadata value as the driver returns it after storing it as an MLMD custom property:
    numbers as doubles, booleans as 1/0, lists and objects wrapped (see the module docstring)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        return {"struct": {key: _through_mlmd(item) for key, item in value.items()}}
    if isinstance(value, list):
        return {"list": [_through_mlmd(item) for item in value]}
    return value


def _doubles(value: Any) -> Any:
    """A parameter value with every number a double (protobuf Value `number_value`)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return value


def execution_order(spec: Dict[str, Any]) -> List[str]:
    """Task names in an order that respects dependentTasks and artifact producers."""
    tasks = spec["root"]["dag"]["tasks"]
    upstream = {}
    for name, task in tasks.items():
        producers = {
            a["taskOutputArtifact"]["producerTask"]
            for a in task.get("inputs", {}).get("artifacts", {}).values()
            if "taskOutputArtifact" in a
        }
        upstream[name] = set(task.get("dependentTasks", [])) | producers
    order, done = [], set()
    while len(order) < len(tasks):
        ready = sorted(name for name in tasks if name not in done and upstream[name] <= done)
        if not ready:
            raise UnsupportedSpecError(f"the task graph has a cycle among {sorted(set(tasks) - done)}")
        order += ready
        done.update(ready)
    return order


class OssKfpDouble:
    """Runs compiled specs like the OSS KFP backend (see the module docstring)."""

    def __init__(
        self,
        spec_path: str,
        pipeline_root: str,
        image_python: str,
        work_dir: str,
        image_env: Dict[str, str],
        task_timeout_s: float = 900.0,
        s3_client=None,
        secrets: Optional[Dict[str, Dict[str, str]]] = None,
        config_maps: Optional[Dict[str, Dict[str, str]]] = None,
        prewarm: bool = True,
    ):
        """`image_env`: the image's variables (`dockerfile_env`); `secrets` and `config_maps`: the
        cluster's, {name: {key: value}}; `s3_client` (boto3): the launcher's connection to the
        object store of an s3:// pipeline root; `work_dir` holds the pods' own file systems;
        `prewarm`: fork steps from a pre-started image interpreter (module docstring). Call
        `close` when done (it stops those interpreters)."""
        with open(spec_path, encoding="utf-8") as handle:
            documents = [document for document in yaml.safe_load_all(handle) if document]
        self.spec = documents[0]
        self.platform = {key: value for document in documents[1:] for key, value in document.items()}
        problems = oss_compat.problems(self.spec)
        if problems:
            raise UnsupportedSpecError("open-source KFP cannot run this spec:\n  " + "\n  ".join(problems))
        self.pipeline_root = pipeline_root
        self.image_python = image_python
        self.work_dir = work_dir
        self.image_env = dict(image_env)
        self.secrets = dict(secrets or {})
        self.config_maps = dict(config_maps or {})
        self.task_timeout_s = task_timeout_s
        self._mlmd_ids = itertools.count(1)
        self.s3_client = s3_client
        self._on_object_store = local_path_for_uri(pipeline_root) is not None
        self.prewarm = prewarm
        self._interpreters: List[PrewarmedInterpreter] = []

    def close(self) -> None:
        """Stops the pre-started interpreters."""
        for interpreter in self._interpreters:
            interpreter.close()
        self._interpreters = []

    def _interpreter(self, argv: List[str], env: Dict[str, str]) -> Optional[PrewarmedInterpreter]:
        """A pre-started interpreter that can run `argv` in `env` (started on first need), or None."""
        if not self.prewarm or len(argv) < 3 or argv[1] != "-m":
            return None
        for interpreter in self._interpreters:
            if interpreter.serves(argv, env):
                return interpreter
        interpreter = PrewarmedInterpreter(
            self.image_python, env, os.path.join(self.work_dir, "interpreters", str(len(self._interpreters)))
        )
        self._interpreters.append(interpreter)
        return interpreter

    # --- the driver -----------------------------------------------------------------------------
    def task_root(self, run_id: str, task_name: str) -> str:
        """`<root>/<pipeline>/<run id>/<task>/<uuid>`: a new one each time a task is driven."""
        return posixpath.join(
            self.pipeline_root, self.spec["pipelineInfo"]["name"], run_id, task_name, uuid.uuid4().hex
        )

    @staticmethod
    def pod_path(pod_dir: str, path: str) -> str:
        """A pod-local absolute `path` inside the directory standing in for that pod's disk."""
        return os.path.join(pod_dir, path.lstrip("/"))

    @staticmethod
    def _output_artifacts(task_root: str, component: Dict[str, Any]) -> Dict[str, Any]:
        outputs = {}
        for key, definition in component.get("outputDefinitions", {}).get("artifacts", {}).items():
            outputs[key] = {
                "artifacts": [
                    {
                        "name": key,
                        "type": dict(definition["artifactType"]),
                        "uri": posixpath.join(task_root, key),
                        "metadata": dict(definition.get("metadata", {})),
                    }
                ]
            }
        outputs[EXECUTOR_LOGS_OUTPUT] = {
            "artifacts": [
                {
                    "name": EXECUTOR_LOGS_OUTPUT,
                    "type": {"schemaTitle": "system.Artifact"},
                    "uri": posixpath.join(task_root, EXECUTOR_LOGS_OUTPUT),
                }
            ]
        }
        return outputs

    def _input_artifacts(self, task: Dict[str, Any], produced: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        inputs = {}
        for key, source in task.get("inputs", {}).get("artifacts", {}).items():
            reference = source["taskOutputArtifact"]
            artifact = produced[reference["producerTask"]][reference["outputArtifactKey"]]
            inputs[key] = {
                "artifacts": [
                    {
                        "name": artifact["mlmd_id"],
                        "uri": artifact["uri"],
                        "type": {"instanceSchema": ""},  # the OSS driver leaves the type schema of inputs empty
                        "metadata": artifact["metadata"],
                    }
                ]
            }
        return inputs

    def executor_input(self, task_name: str, produced: Dict[str, Dict[str, Any]], task_root: str, pod_dir: str):
        """The ExecutorInput the OSS driver would hand this task's launcher (pod-local paths
        already inside `pod_dir`)."""
        task = self.spec["root"]["dag"]["tasks"][task_name]
        component = self.spec["components"][task["componentRef"]["name"]]
        parameters = {
            key: _doubles(value["runtimeValue"]["constant"])
            for key, value in task.get("inputs", {}).get("parameters", {}).items()
        }
        local_task_root = local_path_for_uri(task_root)
        output_file = (
            posixpath.join(local_task_root, "output_metadata.json") if local_task_root else LEGACY_OUTPUT_METADATA_FILE
        )
        return {
            "inputs": {"parameterValues": parameters, "artifacts": self._input_artifacts(task, produced)},
            "outputs": {
                "artifacts": self._output_artifacts(task_root, component),
                "outputFile": self.pod_path(pod_dir, output_file),
            },
        }

    # --- the launcher ---------------------------------------------------------------------------
    def _container(self, task_name: str) -> Dict[str, Any]:
        task = self.spec["root"]["dag"]["tasks"][task_name]
        label = self.spec["components"][task["componentRef"]["name"]]["executorLabel"]
        return self.spec["deploymentSpec"]["executors"][label]["container"]

    def _download_inputs(self, executor_input: Dict[str, Any], pod_dir: str) -> None:
        """launcher_v2.go `downloadArtifacts` (module docstring); raises DownloadError."""
        for artifact_list in executor_input["inputs"]["artifacts"].values():
            for artifact in artifact_list["artifacts"]:
                local = local_path_for_uri(artifact["uri"])
                if local is None:
                    continue  # "does not have a recognized storage URI ... Skipping downloading"
                if not artifact["uri"].startswith("s3://") or self.s3_client is None:
                    raise DownloadError(f"the double downloads only s3:// inputs with an S3 client: {artifact['uri']}")
                bucket, _, key = artifact["uri"][len("s3://") :].partition("/")
                download_blob(self.s3_client, bucket, key, self.pod_path(pod_dir, local))

    def _prepare_output_folders(self, executor_input: Dict[str, Any], pod_dir: str) -> None:
        """launcher_v2.go `prepareOutputFolders`, plus the folders of a local root's outputs."""
        for artifact_list in executor_input["outputs"]["artifacts"].values():
            uri = artifact_list["artifacts"][0]["uri"]
            local = local_path_for_uri(uri)
            if local is not None:
                os.makedirs(os.path.dirname(self.pod_path(pod_dir, local)), exist_ok=True)
            elif not self._on_object_store:
                os.makedirs(uri, exist_ok=True)
        os.makedirs(os.path.dirname(executor_input["outputs"]["outputFile"]), exist_ok=True)

    def _executor_label(self, task_name: str) -> str:
        task = self.spec["root"]["dag"]["tasks"][task_name]
        return self.spec["components"][task["componentRef"]["name"]]["executorLabel"]

    def pod_env(self, task_name: str, home: str) -> Dict[str, str]:
        """The hermetic environment of the task's pod (module docstring); raises
        PodStartError when a secret or config map it names is missing."""
        env = {"PATH": os.path.dirname(self.image_python) + os.pathsep + IMAGE_PATH}
        env.update(self.image_env)
        env["HOME"] = home  # the pod's home directory stands for the image's HOME (also its WORKDIR)
        env.update({item["name"]: item["value"] for item in self._container(task_name).get("env", [])})
        executor = (
            self.platform.get("platforms", {})
            .get("kubernetes", {})
            .get("deploymentSpec", {})
            .get("executors", {})
            .get(self._executor_label(task_name), {})
        )
        for kind, objects, name_field, key_field in (
            ("secret", self.secrets, "secretName", "secretKey"),
            ("configmap", self.config_maps, "configMapName", "configMapKey"),
        ):
            for reference in executor.get("secretAsEnv" if kind == "secret" else "configMapAsEnv", []):
                data = objects.get(reference[name_field])
                for mapping in reference["keyToEnv"]:
                    if data is None or mapping[key_field] not in data:
                        raise PodStartError(
                            f"CreateContainerConfigError: {kind} {reference[name_field]!r} "
                            f"(key {mapping[key_field]!r}) not found"
                        )
                    env[mapping["envVar"]] = data[mapping[key_field]]
        env.update({"KFP_POD_NAME": f"{task_name.lower()}-{uuid.uuid4().hex[:8]}", "KFP_POD_UID": str(uuid.uuid4())})
        return env

    def _launch(self, task_name: str, executor_input: Dict[str, Any], pod_dir: str) -> subprocess.CompletedProcess:
        container = self._container(task_name)
        payload = json.dumps(executor_input)
        argv = [
            payload if arg == EXECUTOR_INPUT_PLACEHOLDER else arg
            for arg in list(container.get("command", [])) + list(container.get("args", []))
        ]
        if argv[0] == "python":  # the image's interpreter
            argv[0] = self.image_python
        home = self.pod_path(pod_dir, "home")
        os.makedirs(home, exist_ok=True)
        env = self.pod_env(task_name, home)
        interpreter = self._interpreter(argv, env)
        if interpreter is not None:
            return interpreter.run(argv, env, home, os.path.join(pod_dir, "log.txt"), self.task_timeout_s)
        return subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=self.task_timeout_s)

    def run(self, run_id: str, progress=print) -> RunRecord:
        """Runs every task once, in dependency order; stops scheduling below a failure."""
        produced: Dict[str, Dict[str, Any]] = {}
        records: Dict[str, TaskRecord] = {}
        failed = set()
        tasks = self.spec["root"]["dag"]["tasks"]
        for name in execution_order(self.spec):
            task = tasks[name]
            upstream = set(task.get("dependentTasks", [])) | {
                a["taskOutputArtifact"]["producerTask"] for a in task.get("inputs", {}).get("artifacts", {}).values()
            }
            if upstream & failed or any(records[u].state != "SUCCEEDED" for u in upstream):
                records[name] = TaskRecord(name, "SKIPPED")
                failed.add(name)
                continue
            pod_dir = os.path.join(self.work_dir, "pods", run_id, name)
            executor_input = self.executor_input(name, produced, self.task_root(run_id, name), pod_dir)
            output_file = executor_input["outputs"]["outputFile"]
            started = time.time()
            try:
                self._download_inputs(executor_input, pod_dir)
                self._prepare_output_folders(executor_input, pod_dir)
                result = self._launch(name, executor_input, pod_dir)
            except PodStartError as exc:
                records[name] = TaskRecord(name, "FAILED", 0.0, str(exc))
                failed.add(name)
                progress(f"[kfp-double] {name}: FAILED before the step ran: {exc}")
                continue
            self._save_log(pod_dir, result)
            seconds = time.time() - started
            log_tail = (result.stdout + result.stderr)[-6000:]
            if result.returncode != 0:
                records[name] = TaskRecord(name, "FAILED", seconds, log_tail)
                failed.add(name)
                progress(f"[kfp-double] {name}: FAILED after {seconds:.0f} s")
                continue
            try:
                produced[name] = self._record_outputs(executor_input, output_file)
            except Exception as exc:  # the launcher fails a task whose executor output does not parse
                records[name] = TaskRecord(name, "FAILED", seconds, f"{log_tail}\nexecutor output: {exc}")
                failed.add(name)
                continue
            records[name] = TaskRecord(name, "SUCCEEDED", seconds, log_tail, produced[name])
            progress(f"[kfp-double] {name}: SUCCEEDED in {seconds:.0f} s")
        return RunRecord(run_id, records)

    @staticmethod
    def _save_log(pod_dir: str, result: subprocess.CompletedProcess) -> None:
        """The step's whole log in its pod directory (the UI's logs tab)."""
        with open(os.path.join(pod_dir, "log.txt"), "w", encoding="utf-8") as handle:
            handle.write(result.stdout + result.stderr)

    def _record_outputs(self, executor_input: Dict[str, Any], output_file: str) -> Dict[str, Dict[str, Any]]:
        """Each output artifact as the launcher records it in MLMD: the executor output's uri and
        metadata laid over the provisioned artifact, then the MLMD round trip of the metadata."""
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        reported = pipeline_spec_pb2.ExecutorOutput()
        if os.path.exists(output_file):
            with open(output_file, encoding="utf-8") as handle:
                json_format.Parse(handle.read(), reported)  # strict: unknown fields fail the task
        outputs = {}
        for key, artifact_list in executor_input["outputs"]["artifacts"].items():
            if key == EXECUTOR_LOGS_OUTPUT:
                continue
            artifact = dict(artifact_list["artifacts"][0])
            metadata = dict(artifact.get("metadata", {}))
            if key in reported.artifacts and reported.artifacts[key].artifacts:
                written = reported.artifacts[key].artifacts[0]
                artifact["uri"] = written.uri or artifact["uri"]
                metadata.update(json_format.MessageToDict(written.metadata))
            metadata.setdefault("display_name", key)
            metadata["store_session_info"] = json.dumps({"Provider": "local", "Params": {}})
            artifact["metadata"] = {name: _through_mlmd(value) for name, value in metadata.items()}
            artifact["mlmd_id"] = str(next(self._mlmd_ids))
            outputs[key] = artifact
        return outputs
