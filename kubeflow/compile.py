"""Compiles the pipeline for Kubeflow Pipelines (KFP v2 pipeline spec YAML).

The same `create_pipeline` is used with cluster paths from the `kubeflow` config section.
`KubeflowV2DagRunner` writes a Vertex PipelineJob JSON unless the output file name ends in
.yaml, in which case it writes the bare pipeline spec the open-source KFP client accepts; the
pipeline root is passed again at submission.

The spec uses pipeline spec schema 2.1 (`use_pipeline_spec_2_1`): typed `parameterType` inputs, and
executors that read `inputs.parameterValues` from the ExecutorInput (the field current KFP 2.x
launchers fill in), plus `--json_serialized_inputs_spec_args`, from which our entrypoint
(`kubeflow/entrypoint.py`, the container command of every step) recovers input artifact types the
OSS driver leaves empty.

After TFX compiles, what TFX cannot express is set: the steps `uncacheable_nodes` names get
caching turned off (every step when the image is not named by digest); the pipeline root goes
into the spec as its `defaultPipelineRoot`, so `textgen submit` uses the root the paths in the
spec (the drift baseline's, under it) were compiled for; every step's pod gets its environment,
secrets and config maps as env (a platform spec document) and its size (`pod_config`); and the
spec is checked for anything open-source KFP cannot run (`oss_compat`): compiling fails rather
than writing such a spec, and warns when a location still names a placeholder bucket (the
`kubeflow.*` defaults' YOUR-BUCKET), which `textgen submit` refuses. Before compiling, a location
whose scheme the image cannot open, a registry the pods cannot share and malformed pod settings
are refused.
"""

import logging
import os

import yaml
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from kubeflow import oss_compat, pod_config
from pipeline.config import PipelineConfig
from pipeline.layout import PipelinePaths
from pipeline.pipeline import COMPONENT_IDS, create_pipeline, uncacheable_nodes

PIPELINE_SPEC_FILE = "pipeline.yaml"
# Every step's container command: our entrypoint module, installed with the project in the image.
ENTRYPOINT_COMMAND = ["python", "-m", "kubeflow.entrypoint"]

log = logging.getLogger(__name__)


def _size(container: dict, step: str, config: PipelineConfig) -> None:
    """Sets the step's pod resources (and the Trainer's accelerator) and its Beam worker count."""
    kubeflow = config.kubeflow
    resources = kubeflow.step_resources.get(step, kubeflow.resources)
    accelerator = kubeflow.trainer_accelerator_type if step == pod_config.TRAINER_STEP else ""
    container["resources"] = pod_config.container_resources(resources, accelerator, kubeflow.trainer_accelerator_count)
    container["args"] = pod_config.beam_workers_for(container.get("args", []), resources.cpu_limit)


def _finish_spec(path: str, uncacheable: frozenset, pipeline_root: str, config: PipelineConfig) -> None:
    """Turns caching off for `uncacheable` steps, records `pipeline_root` as the spec's default,
    gives every executor the pod configuration (kubeflow/pod_config.py; secrets and config maps
    in a second YAML document, the platform spec), refuses constructs OSS KFP cannot run and
    warns about placeholder buckets."""
    with open(path, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    executors = spec["deploymentSpec"]["executors"]
    env = pod_config.container_env(config.kubeflow.env, config.kubeflow.secret_env, config.kubeflow.config_map_env)
    for name, task in spec["root"]["dag"]["tasks"].items():
        container = executors[spec["components"][task["componentRef"]["name"]]["executorLabel"]].get("container")
        if container is None:
            continue
        if env:
            container["env"] = env
        _size(container, name, config)
    platform = pod_config.platform_spec(executors, config.kubeflow.secret_env, config.kubeflow.config_map_env)
    caching = pod_config.cache_allowed(config.kubeflow.image)
    if not caching:
        log.warning(
            "image %s is not named by digest: KFP's cache key holds the image string, so caching is off for "
            "every step (compile with --image REPOSITORY@sha256:DIGEST to allow it)",
            config.kubeflow.image,
        )
    for name, task in spec["root"]["dag"]["tasks"].items():
        if (
            name in uncacheable or not caching
        ):  # no cachingOptions = caching off (TFX writes it only to turn caching on)
            task.pop("cachingOptions", None)
    spec[oss_compat.DEFAULT_PIPELINE_ROOT] = pipeline_root
    problems = oss_compat.problems(spec)
    if problems:
        raise ValueError(
            "the compiled spec would not run on open-source Kubeflow Pipelines:\n  " + "\n  ".join(problems)
        )
    text = yaml.safe_dump(spec, sort_keys=False)
    if platform:
        text += "---\n" + yaml.safe_dump(platform, sort_keys=False)
    placeholders = oss_compat.placeholder_buckets(text)
    if placeholders:
        log.warning(
            "%s names the placeholder bucket %s (the kubeflow.pipeline_root, data_root and serving_dir "
            "defaults): `textgen submit` refuses it; compile again with --pipeline-root, --data-root and "
            "--serving-dir naming your buckets",
            path,
            ", ".join(placeholders),
        )
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def compile_pipeline(config: PipelineConfig, output_dir: str) -> str:
    """Writes OUTPUT_DIR/pipeline.yaml and returns its path; raises oss_compat.RootError, before
    compiling, when the pipeline root has a scheme the components cannot use (e.g. minio://)."""
    kubeflow = config.kubeflow
    oss_compat.check_scheme(kubeflow.pipeline_root)
    oss_compat.check_locations(
        {
            "data root": kubeflow.data_root,
            "serving directory": kubeflow.serving_dir,
            "data_gate.state_uri": config.data_gate.state_uri,
        }
    )
    pod_config.check_registry(
        config.registry.enabled,
        config.registry.tracking_uri,
        pod_config.check_env(kubeflow.env),
        kubeflow.secret_env,
        kubeflow.config_map_env,
    )
    pod_config.check_step_names(kubeflow.step_resources, COMPONENT_IDS)
    pod_config.parse_references(kubeflow.secret_env, "secret_env")
    pod_config.parse_references(kubeflow.config_map_env, "config_map_env")
    os.makedirs(output_dir, exist_ok=True)
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
            default_image=config.kubeflow.image,
            default_commands=ENTRYPOINT_COMMAND,
            use_pipeline_spec_2_1=True,
        ),
        output_dir=output_dir,
        output_filename=PIPELINE_SPEC_FILE,
    )
    cluster_config = config.model_copy(update={"beam_args": list(config.kubeflow.beam_args)})
    paths = PipelinePaths.kubeflow(config)
    runner.run(create_pipeline(cluster_config, paths), write_out=True)
    path = os.path.join(output_dir, PIPELINE_SPEC_FILE)
    _finish_spec(path, uncacheable_nodes(config, paths), config.kubeflow.pipeline_root, config)
    return path
