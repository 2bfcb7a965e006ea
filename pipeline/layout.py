"""Where a run reads and writes: the one definition of the output layout.

`OutputLayout` names everything a local run keeps under its output root. `PipelinePaths` is what
`create_pipeline` needs from any runner; `PipelinePaths.local` fills it from the output layout,
`PipelinePaths.kubeflow` from the cluster settings (`kubeflow.*`), with the same relative names.

    <output_root>/
      pipeline/              TFX pipeline root: every component's artifacts
      metadata.sqlite        ML Metadata
      serving/               TF Serving base path: <version>/, models.config, batching_parameters
      registry/              the embedded MLflow model registry (mlflow.db and its artifacts)
      state/drift_baseline/  the data gate's drift baseline (unless data_gate.state_uri is set)
      state/evaluator_probes/  the Evaluator's safety and bias results by model (probe_cache.py)
      runs/<run id>.json     the summary of each run
      last_run.json          a copy of the newest completed run's summary
      run.lock               held by the `run` or `validate` using this output root (pipeline/run_lock.py)

An output root on an object store (`s3://bucket/runs`, `gs://...`) keeps the pipeline root, the
serving directory and the drift state there; ML Metadata's and the embedded registry's SQLite
files, the summaries and the run lock cannot live on an object store, so they go to `local_root`, a local
directory named after the output root: `runs/object-store/<scheme>/<bucket>/<path>` (relative to
the working directory, like the default output root).
"""

import os
from dataclasses import dataclass

from components.filesystems import is_local, scheme_of
from components.resources import resolve

SCHEMA_FILE = "schema.pbtxt"  # curated schema of the raw data, in the config's schema_dir
TRANSFORMED_SCHEMA_FILE = "transformed_schema.pbtxt"  # curated schema of the token data
CONVERSATION_SCHEMA_FILE = "conversation_schema.pbtxt"  # curated schema of raw conversations (instruction data)
TRANSFORMED_CONVERSATION_SCHEMA_FILE = "transformed_conversation_schema.pbtxt"  # their rendered, masked tokens
DRIFT_STATE_DIR = "state/drift_baseline"  # under the output root (local) or the pipeline root (Kubeflow)
PROBE_CACHE_DIR = (
    "state/evaluator_probes"  # the Evaluator's probe results by model (components/evaluator/probes/probe_cache.py)
)
# Where the local files of an object-store output root go (module docstring).
OBJECT_STORE_LOCAL_ROOT = "runs/object-store"


@dataclass(frozen=True)
class OutputLayout:
    """The paths of a local run under `output_root` (see the module docstring)."""

    output_root: str

    def _path(self, *parts: str) -> str:
        return os.path.join(self.output_root, *parts)

    @property
    def local_root(self) -> str:
        """The output root when it is local; else the local directory its SQLite files and
        summary go to (module docstring)."""
        if is_local(self.output_root):
            return self.output_root
        scheme = scheme_of(self.output_root)
        return os.path.join(OBJECT_STORE_LOCAL_ROOT, scheme, self.output_root.split("://", 1)[1].strip("/"))

    def _local(self, *parts: str) -> str:
        return os.path.join(self.local_root, *parts)

    @property
    def pipeline_root(self) -> str:
        return self._path("pipeline")

    @property
    def metadata_path(self) -> str:
        return self._local("metadata.sqlite")

    @property
    def serving_dir(self) -> str:
        return self._path("serving")

    @property
    def registry_dir(self) -> str:
        """The embedded MLflow registry: `mlflow.db` (SQLite) and its artifact store."""
        return self._local("registry")

    @property
    def drift_state_dir(self) -> str:
        """The drift baseline's default location (`data_gate.state_uri` replaces it when set)."""
        return self._path(*DRIFT_STATE_DIR.split("/"))

    @property
    def probe_cache_dir(self) -> str:
        """The Evaluator's safety and bias results by model and settings (probe_cache.py)."""
        return self._path(*PROBE_CACHE_DIR.split("/"))

    @property
    def summary_path(self) -> str:
        """`last_run.json`: the newest completed run's summary."""
        return self._local("last_run.json")

    def run_summary_path(self, run_id: str) -> str:
        """`runs/<run id>.json`: the summary of one run."""
        return self._local("runs", f"{run_id}.json")

    @property
    def lock_path(self) -> str:
        """The run lock: held while a `run` or `validate` uses this output root."""
        return self._local("run.lock")


def schema_files(schema_dir: str):
    """(raw data schema, token data schema) in a curated schema directory (may be `bundled:`)."""
    return os.path.join(schema_dir, SCHEMA_FILE), os.path.join(schema_dir, TRANSFORMED_SCHEMA_FILE)


def conversation_schema_file(schema_dir: str) -> str:
    """The raw data schema for conversations in a curated schema directory (may be `bundled:`);
    the schema import picks it over the plain-text one when the examples hold conversations."""
    return os.path.join(schema_dir, CONVERSATION_SCHEMA_FILE)


def transformed_conversation_schema_file(schema_dir: str) -> str:
    """The token data schema for conversations (the token schema step picks it when the run's
    tokenizer carries a chat template)."""
    return os.path.join(schema_dir, TRANSFORMED_CONVERSATION_SCHEMA_FILE)


@dataclass(frozen=True)
class PipelinePaths:
    """Where a particular runner's pipeline reads and writes."""

    pipeline_root: str
    data_root: str
    schema_file: str
    transformed_schema_file: str
    serving_dir: str
    # Where the drift baseline is kept (components/data_gate/accepted_statistics.py).
    drift_state_uri: str
    # The embedded model registry's directory; empty where the registry is a server (Kubeflow).
    registry_dir: str = ""
    # TFX's fingerprint of the corpus files the span pattern selects, taken when the pipeline is
    # built; as an ExampleGen parameter it makes TFX's cache reuse ExampleGen exactly when those
    # files are unchanged. The local runner takes it; on Kubeflow the pipeline is compiled once and
    # runs on later data, so it stays empty and ExampleGen always runs (its executor resolves the
    # span either way).
    corpus_fingerprint: str = ""
    # The raw data schema for conversations (instruction data), chosen at run time by the schema
    # import when ExampleGen's output holds conversations.
    conversation_schema_file: str = ""
    # Where the Evaluator keeps each model's safety and bias probe results (probe_cache.py).
    probe_cache_uri: str = ""

    @classmethod
    def local(cls, config) -> "PipelinePaths":
        """Absolute local paths for a `PipelineConfig`, from its output layout. The curated schemas
        stay `bundled:` references (resolved by the schema importer wherever it runs)."""
        from components.example_gen.component import fingerprint_corpus

        def local_path(path: str) -> str:
            return os.path.abspath(path) if is_local(path) else path

        layout = config.layout
        data_root = local_path(resolve(config.data_root))
        schema_file, transformed_schema_file = schema_files(config.schema_dir)
        return cls(
            pipeline_root=local_path(layout.pipeline_root),
            data_root=data_root,
            schema_file=schema_file,
            transformed_schema_file=transformed_schema_file,
            serving_dir=local_path(layout.serving_dir),
            drift_state_uri=local_path(config.data_gate.state_uri or layout.drift_state_dir),
            registry_dir=os.path.abspath(layout.registry_dir),
            corpus_fingerprint=fingerprint_corpus(data_root, config.example_gen),
            conversation_schema_file=conversation_schema_file(config.schema_dir),
            probe_cache_uri=local_path(layout.probe_cache_dir),
        )

    @classmethod
    def kubeflow(cls, config) -> "PipelinePaths":
        """Cluster-side paths for a `PipelineConfig`: object-store roots from its `kubeflow` section,
        the drift baseline under the pipeline root; schemas as `bundled:` references that the image
        resolves inside its installed package. No registry directory: the cluster's registry is a
        server (MLFLOW_TRACKING_URI)."""
        schema_file, transformed_schema_file = schema_files(config.schema_dir)
        root = config.kubeflow.pipeline_root.rstrip("/")
        return cls(
            pipeline_root=config.kubeflow.pipeline_root,
            data_root=config.kubeflow.data_root,
            schema_file=schema_file,
            transformed_schema_file=transformed_schema_file,
            serving_dir=config.kubeflow.serving_dir,
            drift_state_uri=config.data_gate.state_uri or f"{root}/{DRIFT_STATE_DIR}",
            conversation_schema_file=conversation_schema_file(config.schema_dir),
            probe_cache_uri=f"{root}/{PROBE_CACHE_DIR}",
        )
