"""End to end on an object store: `textgen run` with the corpus, the output root (pipeline root,
drift state, serving directory) on `s3://`, served by a real S3 API server on localhost (moto,
tests/object_store.py). ML Metadata's and the registry's SQLite files and the summary go to the
local directory the output names (pipeline/layout.py).

The run is a subprocess (`python -m textgen_cli.cli`, the console script's path): the S3 settings
reach it only through its environment, as they would a user's shell.
"""

import json
import os
import subprocess
import sys

import pytest

from pipeline.config import PROJECT_ROOT
from tests.conftest import FAST_OVERRIDES, WEAK_MODEL_QUALITY, write_tiny_corpus
from tests.object_store import start_server

pytestmark = pytest.mark.slow

BUCKET = "textgen-e2e"
# As tests/test_kubeflow_oss_run.py: a 30-step model, so the quality and safety gates are loosened.
OVERRIDES = FAST_OVERRIDES + [
    *WEAK_MODEL_QUALITY,
    "evaluator.safety.max_toxic_fraction=0.25",
    "evaluator.safety.max_toxicity_probability=0.5",
    "evaluator.safety.max_expected_max_toxicity=0.5",
    "generation.num_samples=1",
]


@pytest.fixture(scope="module")
def s3():
    server = start_server()
    yield server
    server.server.stop()


def test_the_local_pipeline_runs_with_corpus_outputs_state_and_serving_on_s3(s3, tmp_path):
    s3.create_bucket(BUCKET)
    data_root = s3.upload_directory(write_tiny_corpus(str(tmp_path / "corpus")), BUCKET, "drop")
    output_root = f"s3://{BUCKET}/runs"
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    arguments = ["run", "--data-root", data_root, "--output-root", output_root]
    arguments += [item for override in OVERRIDES for item in ("--set", override)]
    result = subprocess.run(
        [sys.executable, "-m", "textgen_cli.cli", *arguments],
        cwd=str(work_dir),
        env=s3.env(PYTHONPATH=PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    log = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, log
    local_root = work_dir / "runs" / "object-store" / "s3" / BUCKET / "runs"
    assert (
        f"ML Metadata and the embedded registry (SQLite, not on an object store): runs/object-store/s3/{BUCKET}/runs"
        in result.stdout
    )
    assert sorted(os.listdir(local_root)) == ["last_run.json", "metadata.sqlite", "registry", "run.lock", "runs"]
    summary = json.loads((local_root / "last_run.json").read_text())
    assert json.loads((local_root / "runs" / f"{summary['run_id']}.json").read_text()) == summary
    assert summary["succeeded"] and summary["push"]["pushed"], summary.get("error")
    assert summary["push"]["path"] == f"{output_root}/serving/1"
    assert summary["data_quality"]["documents_read"] > 5
    keys = s3.keys(BUCKET, "runs/")
    assert "runs/serving/1/saved_model.pb" in keys and "runs/serving/models.config" in keys
    assert "runs/state/drift_baseline/accepted.json" in keys
    assert any(key.startswith("runs/pipeline/Trainer/model/") for key in keys)
    assert not [key for key in keys if key.endswith("/")]  # no folder markers
    assert summary["samples"] and summary["samples"][0]["continuation"]
