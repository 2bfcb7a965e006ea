"""The container entrypoint of every pipeline step on Kubeflow Pipelines (open-source KFP 2.x and
Vertex AI Pipelines): TFX's KubeflowV2 executor runner, after repairing what the open-source KFP
driver sends differently from Vertex.

`textgen compile` makes `python -m kubeflow.entrypoint` the command of every step, with TFX's own
arguments (`--executor_class_path`, `--json_serialized_invocation_args` = the ExecutorInput,
`--json_serialized_inputs_spec_args` = the step's input definitions, then Beam arguments). The
open-source v2 driver differs from Vertex in ways TFX 1.16's `kubeflow_v2_run_executor` does not
accept (read from kubeflow/pipelines' backend, 2.0 to 2.17; docs/kubeflow.md "Compiling"):

1. Input artifacts arrive with an empty type schema (the driver rebuilds them from its metadata
   store without the schema; kubeflow/pipelines `backend/src/v2/metadata/client.go`). TFX imports
   the artifact class named by that schema and fails. The type is taken from the step's input
   definitions instead, which the 2.1 spec carries in `--json_serialized_inputs_spec_args`.
2. Since KFP 2.5 the driver adds an output artifact `executor-logs` typed `system.Artifact`
   (unless the API server runs with PUBLISH_LOGS=false). TFX would import `system.Artifact` as a
   Python path and fail; the launcher, not the step, fills that output, so it is removed from
   what TFX sees.
3. Numbers in artifact metadata come back as doubles; TFX's property getters accept doubles for
   int properties, and this project reads custom properties only through them, so nothing is
   rewritten for that (tests/kfp_oss_double.py sends doubles to prove it).

A Vertex ExecutorInput has none of these quirks and passes through unchanged.

After a step succeeds, the GCS folder markers TF leaves in its gs:// output artifacts are removed
(components/filesystems.py `remove_folder_markers`): the OSS launcher's download of those
artifacts into the next step fails on them (kubeflow/pipelines#13476).
"""

import json
import sys
from typing import Any, Dict, List, Optional

# Output artifacts the KFP launcher itself fills: never handed to a TFX executor.
LAUNCHER_OUTPUTS = frozenset({"executor-logs"})
# Schema titles of KFP's own system types, which are not TFX artifact classes.
SYSTEM_TYPE_PREFIX = "system."


def _type_is_empty(artifact_type: Dict[str, Any]) -> bool:
    return not (artifact_type.get("schemaTitle") or artifact_type.get("instanceSchema"))


def repair_executor_input(executor_input: Dict[str, Any], inputs_spec: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The ExecutorInput (as parsed JSON) with points 1 and 2 of the module docstring repaired."""
    declared = (inputs_spec or {}).get("artifacts", {})
    for name, artifact_list in executor_input.get("inputs", {}).get("artifacts", {}).items():
        for artifact in artifact_list.get("artifacts", []):
            if not _type_is_empty(artifact.get("type", {})):
                continue
            spec_type = declared.get(name, {}).get("artifactType")
            if not spec_type:
                raise ValueError(
                    f"input artifact '{name}' has no type and the step's input definitions do not "
                    f"declare one (declared: {sorted(declared)})"
                )
            artifact["type"] = {
                key: value for key, value in spec_type.items() if key in ("schemaTitle", "instanceSchema")
            }
    outputs = executor_input.get("outputs", {}).get("artifacts", {})
    for name in list(outputs):
        titles = [a.get("type", {}).get("schemaTitle", "") for a in outputs[name].get("artifacts", [])]
        if name in LAUNCHER_OUTPUTS or any(title.startswith(SYSTEM_TYPE_PREFIX) for title in titles):
            del outputs[name]
    return executor_input


def _flag_value(argv: List[str], flag: str) -> Optional[int]:
    """Index of the value of `flag` in argv (both `--flag value` and `--flag=value` forms)."""
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return index + 1
        if arg.startswith(flag + "="):
            return index
    return None


def _invocation_index(argv: List[str]) -> int:
    invocation = _flag_value(argv, "--json_serialized_invocation_args")
    if invocation is None:
        raise ValueError("missing --json_serialized_invocation_args (the step's ExecutorInput)")
    return invocation


def _value(argv: List[str], index: int) -> str:
    return argv[index].split("=", 1)[1] if argv[index].startswith("--") else argv[index]


def output_uris(argv: List[str]) -> List[str]:
    """The URIs of the output artifacts in the ExecutorInput of TFX's executor-runner arguments."""
    executor_input = json.loads(_value(argv, _invocation_index(argv)))
    return [
        artifact["uri"]
        for artifact_list in executor_input.get("outputs", {}).get("artifacts", {}).values()
        for artifact in artifact_list.get("artifacts", [])
        if artifact.get("uri")
    ]


def repair_arguments(argv: List[str]) -> List[str]:
    """TFX's executor-runner arguments with the ExecutorInput repaired."""
    argv = list(argv)
    invocation = _invocation_index(argv)
    spec_index = _flag_value(argv, "--json_serialized_inputs_spec_args")
    inputs_spec = json.loads(_value(argv, spec_index)) if spec_index is not None else None
    repaired = json.dumps(repair_executor_input(json.loads(_value(argv, invocation)), inputs_spec))
    argv[invocation] = (
        ("--json_serialized_invocation_args=" + repaired) if argv[invocation].startswith("--") else repaired
    )
    return argv


def main(argv: Optional[List[str]] = None) -> None:
    """Runs TFX's KubeflowV2 executor runner on the repaired arguments, with the object-store file
    systems registered (components/filesystems.py), and exits with its status."""
    from absl import app
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    from components import filesystems

    argv = sys.argv if argv is None else argv
    repaired = [argv[0]] + repair_arguments(argv[1:])
    filesystems.register()
    try:
        app.run(kubeflow_v2_run_executor.main, argv=repaired, flags_parser=kubeflow_v2_run_executor._parse_flags)
        code = 0
    except SystemExit as exc:  # absl's app.run always ends with sys.exit
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)  # what sys.exit would have printed
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if code == 0:
        for uri in output_uris(repaired[1:]):
            try:
                filesystems.remove_folder_markers(uri)
            except Exception as exc:  # pylint: disable=broad-except  (the next step's download would fail on them)
                print(f"error: could not remove the GCS folder markers under output {uri}: {exc}", file=sys.stderr)
                code = 1
    filesystems.exit_process(code)


if __name__ == "__main__":
    main()
