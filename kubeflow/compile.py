"""Compiles the pipeline for Kubeflow Pipelines (KFP v2 pipeline spec YAML).

The same `create_pipeline` is used with cluster paths from the `kubeflow` config section.
`KubeflowV2DagRunner` writes a Vertex PipelineJob JSON unless the output file name ends in
.yaml, in which case it writes the bare pipeline spec the open-source KFP client accepts; the
pipeline root is passed again at submission.
"""
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
    os.makedirs(output_dir, exist_ok=True)
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image=config.kubeflow.image),
        output_dir=output_dir,
        output_filename=PIPELINE_SPEC_FILE,
    )
    runner.run(create_pipeline(config, kubeflow_paths(config)), write_out=True)
    return os.path.join(output_dir, PIPELINE_SPEC_FILE)
