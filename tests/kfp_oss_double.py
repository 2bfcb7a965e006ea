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
  - `outputs.outputFile` = `<root>/<pipeline>/<run id>/<task>/<uuid>/output_metadata.json`
    (2.15+; the launcher's local path for that URI).
- **Launcher** (`component/launcher_v2.go`): the executor's container `command` + `args` exactly
  as compiled, `{{$}}` replaced by the ExecutorInput JSON, no shell; the local folder of every
  output artifact exists before the step starts (on an object store a "folder" needs no
  creating, so a step may write `<output uri>/file` at once). After a step exits 0 its executor
  output file is parsed strictly (an unknown field fails the task, as `protojson.Unmarshal`
  does); for each output named in the ExecutorInput, a non-empty `uri` replaces the URI and the
  `metadata` it reports is laid over the spec's, and that is what downstream tasks receive.
- **Image**: each step is a subprocess of `image_python` (a virtualenv holding only the
  installed wheel of the project over the pinned stack: nothing from the checkout), with an
  empty working directory and no PYTHONPATH, like a container built from kubeflow/Dockerfile.

Not covered: object stores (the pipeline root is a local directory standing in for `gs://`;
the launcher's download of inputs to `/gcs/` scratch paths and upload of outputs is not
reproduced, and our steps read and write the URIs directly), pods and resources, retries,
caching, conditions and loops (our spec has none), the API server and the UI.
"""
import itertools
import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

from kubeflow import oss_compat

EXECUTOR_INPUT_PLACEHOLDER = "{{$}}"
EXECUTOR_LOGS_OUTPUT = "executor-logs"


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
        producers = {a["taskOutputArtifact"]["producerTask"]
                     for a in task.get("inputs", {}).get("artifacts", {}).values() if "taskOutputArtifact" in a}
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

    def __init__(self, spec_path: str, pipeline_root: str, image_python: str, work_dir: str,
                 env: Optional[Dict[str, str]] = None, task_timeout_s: float = 900.0):
        with open(spec_path, encoding="utf-8") as handle:
            self.spec = yaml.safe_load(handle)
        problems = oss_compat.problems(self.spec)
        if problems:
            raise UnsupportedSpecError("open-source KFP cannot run this spec:\n  " + "\n  ".join(problems))
        self.pipeline_root = pipeline_root
        self.image_python = image_python
        self.work_dir = work_dir
        self.env = dict(env or {})
        self.task_timeout_s = task_timeout_s
        self._mlmd_ids = itertools.count(1)

    # --- the driver -----------------------------------------------------------------------------
    def task_root(self, run_id: str, task_name: str) -> str:
        """`<root>/<pipeline>/<run id>/<task>/<uuid>`: a new one each time a task is driven."""
        return os.path.join(self.pipeline_root, self.spec["pipelineInfo"]["name"], run_id, task_name, uuid.uuid4().hex)

    @staticmethod
    def _output_artifacts(task_root: str, component: Dict[str, Any]) -> Dict[str, Any]:
        outputs = {}
        for key, definition in component.get("outputDefinitions", {}).get("artifacts", {}).items():
            outputs[key] = {"artifacts": [{
                "name": key, "type": dict(definition["artifactType"]), "uri": os.path.join(task_root, key),
                "metadata": dict(definition.get("metadata", {})),
            }]}
        outputs[EXECUTOR_LOGS_OUTPUT] = {"artifacts": [{
            "name": EXECUTOR_LOGS_OUTPUT, "type": {"schemaTitle": "system.Artifact"},
            "uri": os.path.join(task_root, EXECUTOR_LOGS_OUTPUT),
        }]}
        return outputs

    def _input_artifacts(self, task: Dict[str, Any], produced: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
        inputs = {}
        for key, source in task.get("inputs", {}).get("artifacts", {}).items():
            reference = source["taskOutputArtifact"]
            artifact = produced[reference["producerTask"]][reference["outputArtifactKey"]]
            inputs[key] = {"artifacts": [{
                "name": artifact["mlmd_id"], "uri": artifact["uri"],
                "type": {"instanceSchema": ""},  # the OSS driver leaves the type schema of inputs empty
                "metadata": artifact["metadata"],
            }]}
        return inputs

    def executor_input(self, task_name: str, produced: Dict[str, Dict[str, Any]], task_root: str):
        """The ExecutorInput the OSS driver would hand this task's launcher."""
        task = self.spec["root"]["dag"]["tasks"][task_name]
        component = self.spec["components"][task["componentRef"]["name"]]
        parameters = {key: _doubles(value["runtimeValue"]["constant"])
                      for key, value in task.get("inputs", {}).get("parameters", {}).items()}
        return {
            "inputs": {"parameterValues": parameters, "artifacts": self._input_artifacts(task, produced)},
            "outputs": {"artifacts": self._output_artifacts(task_root, component),
                        "outputFile": os.path.join(task_root, "output_metadata.json")},
        }

    # --- the launcher ---------------------------------------------------------------------------
    def _container(self, task_name: str) -> Dict[str, Any]:
        task = self.spec["root"]["dag"]["tasks"][task_name]
        label = self.spec["components"][task["componentRef"]["name"]]["executorLabel"]
        return self.spec["deploymentSpec"]["executors"][label]["container"]

    def _launch(self, task_name: str, executor_input: Dict[str, Any]) -> subprocess.CompletedProcess:
        container = self._container(task_name)
        payload = json.dumps(executor_input)
        argv = [payload if arg == EXECUTOR_INPUT_PLACEHOLDER else arg
                for arg in list(container.get("command", [])) + list(container.get("args", []))]
        if argv[0] == "python":  # the image's interpreter
            argv[0] = self.image_python
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        env["PATH"] = os.path.dirname(self.image_python) + os.pathsep + env.get("PATH", "")
        env.update(self.env)
        return subprocess.run(argv, cwd=self.work_dir, env=env, capture_output=True, text=True,
                              timeout=self.task_timeout_s)

    def run(self, run_id: str, progress=print) -> RunRecord:
        """Runs every task once, in dependency order; stops scheduling below a failure."""
        produced: Dict[str, Dict[str, Any]] = {}
        records: Dict[str, TaskRecord] = {}
        failed = set()
        tasks = self.spec["root"]["dag"]["tasks"]
        for name in execution_order(self.spec):
            task = tasks[name]
            upstream = set(task.get("dependentTasks", [])) | {
                a["taskOutputArtifact"]["producerTask"] for a in task.get("inputs", {}).get("artifacts", {}).values()}
            if upstream & failed or any(records[u].state != "SUCCEEDED" for u in upstream):
                records[name] = TaskRecord(name, "SKIPPED")
                failed.add(name)
                continue
            executor_input = self.executor_input(name, produced, self.task_root(run_id, name))
            output_file = executor_input["outputs"]["outputFile"]
            for artifact_list in executor_input["outputs"]["artifacts"].values():
                os.makedirs(artifact_list["artifacts"][0]["uri"], exist_ok=True)
            started = time.time()
            result = self._launch(name, executor_input)
            self._save_log(output_file, result)
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
    def _save_log(output_file: str, result: subprocess.CompletedProcess) -> None:
        """The step's whole log beside its executor output (the UI's logs tab)."""
        os.makedirs(os.path.dirname(output_file), exist_ok=True)
        with open(os.path.join(os.path.dirname(output_file), "log.txt"), "w", encoding="utf-8") as handle:
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
