"""Model registry (MLflow) and the Pusher executor that feeds it.

The embedded tests use MLflow's SQLite store directly; `test_registry_against_a_real_mlflow_server`
starts a real `mlflow server` process on a free localhost port (SQLite backend in a temp dir),
waits for /health and tears it down.
"""

import os

import pytest

from components.registry import model_registry as registry
from tests.mlflow_server import running_mlflow_server
from tests.pusher_fixtures import fake_saved_model

ALL_TAGS = {
    registry.TAG_RUN_ID,
    registry.TAG_MODEL_ID,
    registry.TAG_MODEL_URI,
    registry.TAG_BLESSING_ID,
    registry.TAG_BLESSED,
    registry.TAG_TOKENIZER,
    registry.TAG_SPAN,
    registry.TAG_SERVING_VERSION,
    registry.TAG_SERVING_BASE,
    registry.TAG_SERVING_LABEL,
    "metric.perplexity",
}


def _record(base: str, version: int, model_id: int, **overrides) -> registry.PushRecord:
    values = dict(
        serving_path=f"{base}/{version}",
        serving_base=base,
        serving_version=version,
        serving_label="stable",
        model_artifact_id=model_id,
        model_uri=f"/pipeline/Trainer/model/{model_id}",
        blessing_artifact_id=model_id + 100,
        blessed=True,
        tokenizer_sha256="ab" * 32,
        pipeline_run_id=f"run-{model_id}",
        data_span=3,
        metrics={"perplexity": 4.25, "max_perplexity": 12.0},
    )
    values.update(overrides)
    return registry.PushRecord(**values)


def _check_registry_behaviour(model_registry: registry.ModelRegistry, base: str) -> None:
    """Shared by the embedded and the server tests: metadata, idempotency, alias moves."""
    first = model_registry.register(_record(base, 1, 7))
    retried = model_registry.register(_record(base, 1, 7))
    second = model_registry.register(_record(base, 2, 8))
    assert (int(first.version), int(retried.version), int(second.version)) == (1, 1, 2)
    client = model_registry.client
    assert len(client.search_model_versions(f"name='{model_registry.model_name}'")) == 2
    stored = client.get_model_version(model_registry.model_name, "1")
    assert ALL_TAGS <= set(stored.tags)
    assert stored.tags[registry.TAG_RUN_ID] == "run-7"
    assert (stored.tags[registry.TAG_MODEL_ID], stored.tags[registry.TAG_BLESSING_ID]) == ("7", "107")
    assert (stored.tags[registry.TAG_SPAN], stored.tags["metric.perplexity"]) == ("3", "4.25")
    assert stored.source == f"{base}/1"
    assert client.get_run(stored.run_id).data.metrics["perplexity"] == 4.25
    assert model_registry.alias_version("production") == 2
    assert model_registry.move_alias("production", base, 1) == 1  # a rollback
    assert model_registry.alias_version("production") == 1
    with pytest.raises(LookupError, match="was pushed as"):
        model_registry.move_alias("production", base, 99)
    model_registry.follow_labels(base, 2, before={"stable": 1}, after={"stable": 1, "canary": 2})
    assert (model_registry.alias_version("production"), model_registry.alias_version("canary")) == (1, 2)
    model_registry.follow_labels(base, 2, before={"stable": 1, "canary": 2}, after={"stable": 2})  # canary made stable
    assert (model_registry.alias_version("production"), model_registry.alias_version("canary")) == (2, None)
    model_registry.remove_alias("canary")  # not set: nothing happens


def test_embedded_registry_records_lineage_is_idempotent_and_moves_the_alias(tmp_path):
    registry_dir = str(tmp_path / "registry")
    model_registry = registry.ModelRegistry(
        registry.embedded_tracking_uri(registry_dir), "textgen", artifact_root=os.path.join(registry_dir, "artifacts")
    )
    _check_registry_behaviour(model_registry, str(tmp_path / "serving"))
    assert os.path.exists(os.path.join(registry_dir, "mlflow.db"))


def test_creating_the_embedded_store_leaves_the_process_logging_as_it_was(tmp_path):
    """MLflow's migrations configure logging from alembic.ini when they create a store's tables;
    the root logger keeps the handler it had (the CLI's, with its progress filter) and its level,
    and the migrations' records go through that handler, not a stderr handler of their own."""
    import io
    import logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    ours = logging.StreamHandler(io.StringIO())
    root.handlers[:] = [ours]
    root.setLevel(logging.INFO)
    try:
        registry.ModelRegistry(registry.embedded_tracking_uri(str(tmp_path / "registry")), "textgen")
        kept = (root.handlers[:], root.level, logging.getLogger("alembic").level)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    assert os.path.exists(tmp_path / "registry" / registry.EMBEDDED_DB_NAME)
    assert kept == ([ours], logging.INFO, logging.NOTSET)
    assert "Running upgrade" in ours.stream.getvalue()


def test_tracking_uri_precedence_and_credentials_file(tmp_path, monkeypatch):
    monkeypatch.delenv(registry.TRACKING_URI_ENV, raising=False)
    assert registry.resolve_tracking_uri("", str(tmp_path)).startswith("sqlite:///")
    assert registry.resolve_tracking_uri("http://mlflow:5000", str(tmp_path)) == "http://mlflow:5000"
    monkeypatch.setenv(registry.TRACKING_URI_ENV, "http://from-env:5000")
    assert registry.resolve_tracking_uri("http://mlflow:5000", None) == "http://from-env:5000"
    secret = tmp_path / "secret"
    secret.write_text("# mounted\nMLFLOW_TRACKING_TOKEN=s3cr3t\n")
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    registry.load_credentials_file(str(secret))
    assert os.environ["MLFLOW_TRACKING_TOKEN"] == "s3cr3t"
    secret.write_text("MLFLOW_TRACKING_URI=http://evil\n")
    with pytest.raises(ValueError, match="secret:1"):
        registry.load_credentials_file(str(secret))


def test_config_rejects_credentials_in_the_tracking_uri():
    from pipeline.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="must not embed credentials"):
        load_config(overrides=["registry.tracking_uri=https://user:pw@mlflow.example.com"])


def test_tokenizer_hash_is_the_sha256_of_the_asset(tmp_path):
    import hashlib

    model = fake_saved_model(tmp_path / "m", tokenizer=b"a\nb\n")
    assert registry.tokenizer_sha256(model) == hashlib.sha256(b"a\nb\n").hexdigest()
    os.remove(os.path.join(model, "assets", "sentencepiece.model"))
    with pytest.raises(FileNotFoundError, match="no tokenizer model asset"):
        registry.tokenizer_sha256(model)


@pytest.fixture
def mlflow_server(tmp_path):
    """A real `mlflow server` (SQLite backend, local artifact root) on a free port."""
    with running_mlflow_server(str(tmp_path)) as url:
        yield url


@pytest.mark.slow
def test_registry_against_a_real_mlflow_server(mlflow_server, monkeypatch):
    """Same behaviour through the REST API. A server only accepts non-local sources, as a cluster's
    serving base path is (gs://...); nothing reads the source here, so a gs:// path is used."""
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "not-checked-by-a-bare-server")
    model_registry = registry.ModelRegistry(mlflow_server, "textgen-remote")
    _check_registry_behaviour(model_registry, "gs://bucket/serving")


def test_display_uri_drops_credentials():
    assert registry.display_uri("https://u:p@mlflow.example.com:8443/x") == "https://mlflow.example.com:8443/x"
    assert registry.display_uri("sqlite:////tmp/r/mlflow.db") == "sqlite:////tmp/r/mlflow.db"


def test_production_model_follows_the_alias_and_a_missing_store_is_not_created(tmp_path, monkeypatch):
    from components.registry.options import RegistryOptions

    working_dir = tmp_path / "cwd"
    working_dir.mkdir()
    monkeypatch.chdir(working_dir)

    registry_dir = tmp_path / "registry"
    config = RegistryOptions()
    assert registry.find_production_model(config, "textgen", str(registry_dir)) is None
    assert not registry_dir.exists()  # a read-only lookup creates no store

    model_registry = registry.ModelRegistry.from_config(config, "textgen", str(registry_dir))
    assert model_registry.production_model() is None  # the store exists, no alias yet
    model_registry.register(_record("/serving", 1, 7))
    model_registry.register(_record("/serving", 2, 8), move_production_alias=False)
    production = registry.find_production_model(config, "textgen", str(registry_dir))
    assert (production.registered_version, production.saved_model_dir) == (1, "/serving/1")
    assert production.model_artifact_uri == "/pipeline/Trainer/model/7"
    assert production.describe()["serving_version"] == "1"
    assert registry.find_production_model(RegistryOptions(enabled=False), "textgen", str(registry_dir)) is None
    assert not list(working_dir.iterdir())  # no ./mlruns: the embedded store keeps its artifacts in registry/
