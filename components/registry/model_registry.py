"""Registers pushed models in an MLflow Model Registry and keeps its aliases in step with serving.

Where the registry lives (first that applies):
  1. `MLFLOW_TRACKING_URI` in the environment (how a cluster points every task at its server),
  2. `registry.tracking_uri` from the config,
  3. the embedded store: `sqlite:///<output_root>/registry/mlflow.db` with artifacts beside it,
     nothing to start.
Credentials are never part of the config or the compiled pipeline: MLflow reads
MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD from the environment, and
`load_credentials_file` copies those keys from a mounted Kubernetes secret into it at push time.

Each pushed model becomes one registered model version whose source is the pushed version
directory (what TF Serving loads), linked to one MLflow run holding the evaluation metrics. Its tags
carry the lineage: pipeline run id, ML Metadata artifact ids of the model and the blessing, the
blessing, the sha256 of the SentencePiece tokenizer model, the data span, and the serving version
and label. A retried push of the same model artifact finds its version by tag and creates nothing new.

A remote server only accepts a non-local source (gs://, s3://, hdfs://, ...): a path on the
pipeline's own disk means nothing to it. Use a shared serving base path with a remote registry.
"""

import contextlib
import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Optional

import tensorflow as tf

from components.versioned_push import read_push_info, version_path

log = logging.getLogger(__name__)

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
CREDENTIAL_KEYS = (
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_INSECURE_TLS",
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
)
EMBEDDED_DB_NAME = "mlflow.db"

# Tag keys on every registered version.
TAG_RUN_ID = "pipeline_run_id"
TAG_MODEL_ID = "mlmd_model_artifact_id"
TAG_MODEL_URI = "mlmd_model_uri"
TAG_BLESSING_ID = "mlmd_blessing_artifact_id"
TAG_BLESSED = "blessed"
TAG_TOKENIZER = "tokenizer_sha256"
TAG_SPAN = "data_span"
TAG_SERVING_VERSION = "serving_version"
TAG_SERVING_BASE = "serving_base_path"
TAG_SERVING_LABEL = "serving_label"
TAG_BASE_CHECKPOINT = "base_checkpoint"  # the pretrained checkpoint fine-tuned ("" = trained from scratch)
TAG_BASE_CHECKPOINT_SHA256 = "base_checkpoint_sha256"
TAG_ADAPTERS = "lora"  # the LoRA settings as JSON ("" = all weights trained)
TAG_MODEL_CARD = "model_card"
MODEL_CARD_ARTIFACT_PATH = "model_card"
METRIC_TAG_PREFIX = "metric."


def embedded_tracking_uri(registry_dir: str) -> str:
    """The SQLite store under `registry_dir` (an absolute sqlite URI)."""
    return "sqlite:///" + os.path.join(os.path.abspath(registry_dir), EMBEDDED_DB_NAME)


def resolve_tracking_uri(configured: str, registry_dir: Optional[str]) -> str:
    """Environment, then config, then the embedded store (see module docstring)."""
    uri = os.environ.get(TRACKING_URI_ENV) or configured
    if uri:
        return uri
    if not registry_dir:
        raise ValueError("no model registry configured: set registry.tracking_uri or MLFLOW_TRACKING_URI")
    return embedded_tracking_uri(registry_dir)


def display_uri(uri: str) -> str:
    """`uri` without any user:password part, safe to record and print."""
    from urllib.parse import urlparse

    parsed = urlparse(uri)
    if parsed.username or parsed.password:
        return parsed._replace(netloc=parsed.hostname + (f":{parsed.port}" if parsed.port else "")).geturl()
    return uri


def load_credentials_file(path: str) -> None:
    """Copies MLFLOW_TRACKING_* credentials from a mounted secret file (KEY=VALUE lines) into the
    environment MLflow reads; other keys are refused so the file cannot reconfigure anything else."""
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read registry credentials file {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or key.strip() not in CREDENTIAL_KEYS:
            raise ValueError(f"{path}:{number}: expected one of {', '.join(CREDENTIAL_KEYS)} as KEY=VALUE")
        os.environ[key.strip()] = value.strip()


def tokenizer_sha256(saved_model_dir: str) -> str:
    """sha256 of the tokenizer among a SavedModel's assets: the learned SentencePiece model file's,
    or a checkpoint tokenizer's hash over its files (tokenizer/loaded.py)."""
    from components.tokenizer import hf_files, loaded
    from components.tokenizer.model_file import saved_model_model_path

    path = saved_model_model_path(saved_model_dir)
    if not tf.io.gfile.exists(path):
        assets = loaded.saved_model_dir(saved_model_dir)
        if tf.io.gfile.exists(os.path.join(assets, hf_files.SPECIAL_RECORD)):
            return loaded.load(assets).sha256
        raise FileNotFoundError(f"{saved_model_dir} has no tokenizer model asset ({path} does not exist)")
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ProductionModel:
    """The registered version the production alias points at: what serving calls production.

    `saved_model_dir` is the pushed serving version directory (the registered version's source),
    which is what the Evaluator compares against, what warm start loads and where a reused
    tokenizer comes from. `tags` are the lineage tags `PushRecord.tags` wrote.
    """

    model_name: str
    registered_version: int
    saved_model_dir: str
    tags: Dict[str, str]

    @property
    def model_artifact_uri(self) -> str:
        """The ML Metadata URI of the Trainer's model artifact this version was pushed from."""
        return self.tags.get(TAG_MODEL_URI, "")

    def describe(self) -> Dict[str, object]:
        """A JSON-able record of which model this is (for evaluation outputs and run summaries)."""
        return {
            "registered_model": self.model_name,
            "registered_version": self.registered_version,
            "saved_model_dir": self.saved_model_dir,
            "model_uri": self.model_artifact_uri,
            "serving_version": self.tags.get(TAG_SERVING_VERSION, ""),
        }


@dataclass
class PushRecord:
    """What the registry records about one push."""

    serving_path: str
    serving_base: str
    serving_version: int
    serving_label: str
    model_artifact_id: int
    model_uri: str
    blessing_artifact_id: int
    blessed: bool
    tokenizer_sha256: str
    pipeline_run_id: str = ""
    data_span: Optional[int] = None
    metrics: Dict[str, float] = field(default_factory=dict)
    base_checkpoint: str = ""
    base_checkpoint_sha256: str = ""
    adapters: str = ""

    def tags(self) -> Dict[str, str]:
        tags = {
            TAG_RUN_ID: self.pipeline_run_id or "unknown",
            TAG_MODEL_ID: str(self.model_artifact_id),
            TAG_MODEL_URI: self.model_uri,
            TAG_BLESSING_ID: str(self.blessing_artifact_id),
            TAG_BLESSED: str(int(self.blessed)),
            TAG_TOKENIZER: self.tokenizer_sha256,
            TAG_SPAN: "" if self.data_span is None else str(self.data_span),
            TAG_SERVING_VERSION: str(self.serving_version),
            TAG_SERVING_BASE: self.serving_base,
            TAG_SERVING_LABEL: self.serving_label,
            TAG_BASE_CHECKPOINT: self.base_checkpoint,
            TAG_BASE_CHECKPOINT_SHA256: self.base_checkpoint_sha256,
            TAG_ADAPTERS: self.adapters,
        }
        tags.update({METRIC_TAG_PREFIX + name: repr(float(value)) for name, value in self.metrics.items()})
        return tags


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


@contextlib.contextmanager
def _default_artifact_root(path: str):
    """Makes MLflow's client-side SQLite store default its artifact root to `path`.

    MlflowClient gives a SQLite tracking store the artifact root `./mlruns` and creates that
    folder in the current working directory (mlflow 2.x `_get_sqlalchemy_store`, which reads the
    module constant patched here); an embedded registry keeps everything under its own folder
    instead, so a run leaves nothing in the directory it was started from.
    """
    from mlflow.tracking._tracking_service import utils as tracking_utils

    saved = tracking_utils.DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    tracking_utils.DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH = path
    try:
        yield
    finally:
        tracking_utils.DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH = saved


@contextlib.contextmanager
def _process_logging_kept():
    """Keeps the process's logging as it is while MLflow opens a store.

    Opening a SQL store whose tables do not exist yet runs MLflow's alembic migrations, whose
    env.py calls `logging.config.fileConfig(alembic.ini)`: that replaced the root logger's handlers
    (the CLI's filtered progress handler) with a plain stderr one at WARN and set the `alembic`
    logger to INFO, so the first run under an output root printed about 20
    `INFO [alembic.runtime.migration]` lines and then every absl INFO line unfiltered. The
    migrations' records now go through the handlers the process has (`textgen --verbose` shows them).
    """
    import logging.config

    saved = logging.config.fileConfig
    logging.config.fileConfig = lambda *args, **kwargs: None
    try:
        yield
    finally:
        logging.config.fileConfig = saved


def find_production_model(registry_config, model_name: str, registry_dir: Optional[str]) -> Optional[ProductionModel]:
    """The production model of the registry `registry_config` points at, or None.

    Read-only: an embedded store that does not exist yet (no model was ever pushed to this
    output root) answers None without creating anything. Used at run time by every step that
    needs "the model serving now" (the Evaluator's baseline, warm start, tokenizer reuse), so
    the local runner and Kubeflow find it the same way, with no ML Metadata resolver.
    """
    if not registry_config.enabled:
        return None
    load_credentials_file(registry_config.credentials_file)
    uri = resolve_tracking_uri(registry_config.tracking_uri, registry_dir)
    if uri.startswith("sqlite:///") and not os.path.exists(uri[len("sqlite:///") :]):
        return None
    return ModelRegistry.from_config(registry_config, model_name, registry_dir).production_model()


class ModelRegistry:
    """One registered model in one MLflow registry."""

    def __init__(
        self,
        tracking_uri: str,
        model_name: str,
        production_alias: str = "production",
        artifact_root: Optional[str] = None,
    ):
        from mlflow import MlflowClient  # imported here: mlflow costs seconds and only the Pusher needs it

        self.tracking_uri = tracking_uri
        self.model_name = model_name
        self.production_alias = production_alias
        self.artifact_root = artifact_root
        with _process_logging_kept():  # the client opens the tracking store (and creates its tables)
            if tracking_uri.startswith("sqlite:///"):  # the embedded store: its directory is ours to make
                store_dir = os.path.dirname(tracking_uri[len("sqlite:///") :]) or "."
                os.makedirs(store_dir, exist_ok=True)
                with _default_artifact_root(artifact_root or os.path.join(store_dir, "artifacts")):
                    self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
            else:
                self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    @classmethod
    def from_config(
        cls, registry_config, model_name: str, registry_dir: Optional[str], create: bool = True
    ) -> "ModelRegistry":
        """The registry `registry_config` (a RegistryOptions) points at, credentials loaded.

        With `create=False` an embedded store that does not exist yet is an error (LookupError)
        instead of a new empty store: commands that only change an existing registry (promote,
        rollback) must leave nothing behind when they refuse.
        """
        load_credentials_file(registry_config.credentials_file)
        uri = resolve_tracking_uri(registry_config.tracking_uri, registry_dir)
        if not create and uri.startswith("sqlite:///") and not os.path.exists(uri[len("sqlite:///") :]):
            raise LookupError(
                f"no model registry at {uri[len('sqlite:///') :]} (nothing was pushed under this output root)"
            )
        artifact_root = (
            os.path.join(os.path.abspath(registry_dir), "artifacts")
            if uri.startswith("sqlite:") and registry_dir
            else None
        )
        return cls(
            uri, registry_config.registered_model_name or model_name, registry_config.production_alias, artifact_root
        )

    # --- lookups -------------------------------------------------------------------------------
    def _versions_tagged(self, **tags: str):
        conditions = [f"name={_quote(self.model_name)}"] + [
            f"tags.{key}={_quote(str(value))}" for key, value in tags.items()
        ]
        return self.client.search_model_versions(" and ".join(conditions))

    def find_version(self, model_artifact_id: int, model_uri: str):
        """The version already registered for this model artifact, if any."""
        found = self._versions_tagged(**{TAG_MODEL_ID: str(model_artifact_id), TAG_MODEL_URI: model_uri})
        return min(found, key=lambda v: int(v.version)) if found else None

    def version_for_serving(self, serving_base: str, serving_version: int):
        """The registered version that was pushed as `serving_version` under `serving_base`: found
        by the serving tags the push recorded or, when the serving directory has moved since (a
        copied output root), by the model artifact the pushed version's push_info.json names."""
        found = self._versions_tagged(**{TAG_SERVING_BASE: serving_base, TAG_SERVING_VERSION: str(serving_version)})
        if not found:
            found = self._versions_of_pushed_model(version_path(serving_base, serving_version))
        if not found:
            raise LookupError(
                f"no version of registered model '{self.model_name}' was pushed as {serving_base}/{serving_version}"
            )
        return min(found, key=lambda v: int(v.version))

    def _versions_of_pushed_model(self, version_dir: str) -> list:
        """The registered version of the model artifact a pushed version directory came from (its
        push_info.json: model id and URI, which the registry's tags also hold), as a list."""
        info = read_push_info(version_dir) if tf.io.gfile.isdir(version_dir) else {}
        if "model_id" not in info or "model_uri" not in info:
            return []
        version = self.find_version(info["model_id"], info["model_uri"])
        return [version] if version is not None else []

    def alias_version(self, alias: str) -> Optional[int]:
        """The registered version number `alias` points at, or None."""
        from mlflow.exceptions import MlflowException

        try:
            return int(self.client.get_model_version_by_alias(self.model_name, alias).version)
        except MlflowException:
            return None

    def production_model(self) -> Optional[ProductionModel]:
        """The version the production alias points at, or None when there is none yet."""
        from mlflow.exceptions import MlflowException

        try:
            version = self.client.get_model_version_by_alias(self.model_name, self.production_alias)
        except MlflowException:
            return None
        return ProductionModel(self.model_name, int(version.version), version.source, dict(version.tags or {}))

    # --- writes --------------------------------------------------------------------------------
    def _ensure_registered_model(self) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(self.model_name)
        except MlflowException:
            try:
                self.client.create_registered_model(
                    self.model_name, description="Text-generation models pushed by the textgen TFX pipeline."
                )
            except MlflowException:  # created concurrently by another pusher
                self.client.get_registered_model(self.model_name)

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(self.model_name)
        if experiment is not None:
            return experiment.experiment_id
        artifact_location = None
        if self.artifact_root:
            artifact_location = "file://" + os.path.join(self.artifact_root, self.model_name)
        try:
            return self.client.create_experiment(self.model_name, artifact_location=artifact_location)
        except MlflowException:  # created concurrently by another pusher
            return self.client.get_experiment_by_name(self.model_name).experiment_id

    def _run_for(self, record: PushRecord) -> str:
        """The MLflow run holding this push's metrics (reused when a retried push made one)."""
        experiment_id = self._experiment_id()
        existing = self.client.search_runs(
            [experiment_id],
            f"tags.{TAG_MODEL_ID} = {_quote(str(record.model_artifact_id))} and "
            f"tags.{TAG_MODEL_URI} = {_quote(record.model_uri)}",
            max_results=1,
        )
        if existing:
            return existing[0].info.run_id
        run = self.client.create_run(experiment_id, tags=record.tags(), run_name=record.pipeline_run_id or None)
        for name, value in record.metrics.items():
            self.client.log_metric(run.info.run_id, name, float(value))
        self.client.set_terminated(run.info.run_id)
        return run.info.run_id

    def register(self, record: PushRecord, move_production_alias: bool = True):
        """Registers `record` (once per model artifact); moves the production alias to it when
        `move_production_alias`. Returns the MLflow ModelVersion."""
        self._ensure_registered_model()
        version = self.find_version(record.model_artifact_id, record.model_uri)
        if version is None:
            run_id = self._run_for(record)
            version = self.client.create_model_version(
                self.model_name,
                record.serving_path,
                run_id=run_id,
                tags=record.tags(),
                description=f"TF Serving version {record.serving_version} under {record.serving_base}",
            )
            log.info("Registered %s version %s (%s)", self.model_name, version.version, self.tracking_uri)
        else:
            log.info(
                "%s version %s already registers model artifact %s; not registering again",
                self.model_name,
                version.version,
                record.model_artifact_id,
            )
        if move_production_alias:
            self.client.set_registered_model_alias(self.model_name, self.production_alias, version.version)
        return version

    def attach_model_card(self, version, card_paths: Dict[str, str]) -> None:
        """Logs the model card files with `version`'s run (artifact path `model_card/`) and tags
        the version with where the card lives beside the served model."""
        if version.run_id:
            with tempfile.TemporaryDirectory(prefix="model-card-") as local_dir:
                for path in card_paths.values():  # MLflow logs local files; the card may be on an object store
                    local = os.path.join(local_dir, os.path.basename(path))
                    tf.io.gfile.copy(path, local, overwrite=True)
                    self.client.log_artifact(version.run_id, local, MODEL_CARD_ARTIFACT_PATH)
        self.client.set_model_version_tag(self.model_name, version.version, TAG_MODEL_CARD, card_paths["md"])

    def move_alias(self, alias: str, serving_base: str, serving_version: int) -> int:
        """Points `alias` at the registered version pushed as `serving_version`; returns its number.

        MLflow's SQL store sets an alias with a read, then an insert or update (`session.merge`):
        of two writers setting an alias that did not exist, one fails on the unique constraint. The
        alias exists then, and setting it once more updates it."""
        from mlflow.exceptions import MlflowException

        version = self.version_for_serving(serving_base, serving_version)
        try:
            self.client.set_registered_model_alias(self.model_name, alias, version.version)
        except MlflowException:
            self.client.set_registered_model_alias(self.model_name, alias, version.version)
        return int(version.version)

    def remove_alias(self, alias: str) -> None:
        """Deletes `alias` (nothing happens when it is not set)."""
        self.client.delete_registered_model_alias(self.model_name, alias)

    def follow_labels(
        self, serving_base: str, serving_version: int, before: Dict[str, int], after: Dict[str, int]
    ) -> None:
        """Keeps the aliases equal to the serving labels after models.config's labels changed from
        `before` to `after` by pointing labels at `serving_version`: the alias of every label now on
        that version moves to its registered version, and the alias of every label that went (a
        canary promoted to stable ends) is deleted."""
        for label in sorted(label for label, version in after.items() if version == serving_version):
            self.move_alias(self.alias_for_label(label), serving_base, serving_version)
        for label in sorted(set(before) - set(after)):
            self.remove_alias(self.alias_for_label(label))

    def alias_for_label(self, label: str) -> str:
        """The registry alias that follows a TF Serving version label (stable -> production)."""
        return self.production_alias if label == "stable" else label
