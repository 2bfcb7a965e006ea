"""Compiles the pipeline for Kubeflow Pipelines (KFP v2 pipeline spec YAML).

The same `create_pipeline` is used with cluster paths from the `kubeflow` config section.
`KubeflowV2DagRunner` writes a Vertex PipelineJob JSON unless the output file name ends in
.yaml, in which case it writes the bare pipeline spec the open-source KFP client accepts; the
pipeline root is passed again at submission.

The spec uses pipeline spec schema 2.1 (`use_pipeline_spec_2_1`): typed `parameterType` inputs, and
executors that read `inputs.parameterValues` from the ExecutorInput (the field current KFP 2.x
launchers fill in). With the default 2.0 schema the TFX container entrypoint reads only the
deprecated `inputs.parameters` field, and parameters sent as `parameterValues` never reach the
executor (checked by tests/test_kubeflow_ops.py, which runs a compiled command locally).
"""
import logging
import os

from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from pipeline.config import PipelineConfig
from pipeline.pipeline import PipelinePaths, create_pipeline

PIPELINE_SPEC_FILE = "pipeline.yaml"
# Where kubeflow/Dockerfile puts the project inside the image.
IMAGE_PROJECT_ROOT = "/opt/textgen"


def kubeflow_paths(config: PipelineConfig) -> PipelinePaths:
    """Cluster-side paths: object-store roots from config, the schema as shipped in the image."""
    return PipelinePaths(
        pipeline_root=config.kubeflow.pipeline_root,
        data_root=config.kubeflow.data_root,
        schema_file=f"{IMAGE_PROJECT_ROOT}/schema/schema.pbtxt",
        transformed_schema_file=f"{IMAGE_PROJECT_ROOT}/schema/transformed_schema.pbtxt",
        serving_dir=config.kubeflow.serving_dir,
    )


def compile_pipeline(config: PipelineConfig, output_dir: str) -> str:
    """Writes OUTPUT_DIR/pipeline.yaml and returns its path."""
    if config.registry.enabled and not config.registry.tracking_uri:
        logging.getLogger(__name__).warning(
            "registry.tracking_uri is empty: on the cluster the Pusher registers models only if its pod has "
            "MLFLOW_TRACKING_URI set, and fails after pushing otherwise (set the URI, or registry.enabled=false)")
    os.makedirs(output_dir, exist_ok=True)
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
            default_image=config.kubeflow.image, use_pipeline_spec_2_1=True,
        ),
        output_dir=output_dir,
        output_filename=PIPELINE_SPEC_FILE,
    )
    runner.run(create_pipeline(config, kubeflow_paths(config)), write_out=True)
    return os.path.join(output_dir, PIPELINE_SPEC_FILE)
