"""The project as a Kubeflow image runs it: an installed wheel, no checkout.

1. A wheel built from setup.py, installed in a fresh virtualenv, runs `textgen validate` from an
   unrelated directory on its bundled corpus (the data stages; the rest runs from the wheel in 2).
2. The compiled `pipeline.yaml` runs end to end under `tests/kfp_oss_double.py`, a double of the
   open-source KFP backend (its docstring lists the behaviours it reproduces and their sources),
   every step a subprocess of that wheel's virtualenv with a hermetic environment: ExampleGen to
   Pusher complete, a blessed model is pushed and registered, and a second run finds the first
   run's model as its baseline through the registry (and reuses its tokenizer) and the first run's
   accepted statistics through the state location. The pipeline root, the corpus and the serving
   directory are on a real S3 API server (moto, tests/object_store.py), the registry is a real
   MLflow server; the S3 endpoint, its credentials (as a Kubernetes secret) and the registry's
   address reach the steps only through the compiled spec.

The fresh virtualenv holds only the wheel; the pinned stack (3 GB) comes from the test
environment's site-packages through a `.pth` path entry, which adds that directory to sys.path
without running its `.pth` files, so the checkout's editable install stays invisible.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from pipeline.config import PROJECT_ROOT
from tests.conftest import FAST_OVERRIDES, WEAK_MODEL_QUALITY, write_tiny_corpus
from tests.kfp_oss_double import OssKfpDouble, dockerfile_env
from tests.mlflow_server import running_mlflow_server
from tests.object_store import start_server
from textgen_cli.cli import main

pytestmark = pytest.mark.slow

# The small model of the end-to-end tests. A 30-step model's perplexity is far above the default
# threshold and it barely beats a unigram model: these tests are about packaging and Kubeflow, so
# the quality gates are relaxed as in the other plumbing tests (tests/conftest.py). The safety gates
# keep their defaults: since the calibration (benchmarks/safety_calibration.py, threshold 0.7) the
# classifier no longer flags such a model's garbled completions (it did one in 18 at 0.5).
OVERRIDES = FAST_OVERRIDES + list(WEAK_MODEL_QUALITY)
# Files of the checkout a wheel is built from (everything setup.py packages or reads).
_SOURCE_ITEMS = ("setup.py", "pipeline", "components", "kubeflow", "textgen_cli", "data", "schema")


def _set_arguments(overrides):
    return [argument for override in overrides for argument in ("--set", override)]


@pytest.fixture(scope="module")
def image_python(tmp_path_factory) -> str:
    """The python of a fresh virtualenv with only the project's wheel installed (see docstring)."""
    root = tmp_path_factory.mktemp("image")
    source = root / "source"
    source.mkdir()
    for item in _SOURCE_ITEMS:
        path = os.path.join(PROJECT_ROOT, item)
        if os.path.isdir(path):
            shutil.copytree(path, source / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / item)
    wheels = root / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
    )
    (wheel,) = wheels.glob("textgen_tfx-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site_packages = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(site_packages, "pinned_stack.pth"), "w", encoding="utf-8") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    subprocess.run([uv, "pip", "install", "--quiet", "--python", python, "--no-deps", str(wheel)], check=True)
    shutil.rmtree(source)
    located = subprocess.run(
        [
            python,
            "-c",
            "import components, pipeline.config as c; from components.resources import bundled_path;"
            "print(components.__file__); print(bundled_path('data/safety/prompts.jsonl'))",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=str(root),
        env=_image_env(),
    ).stdout.split()
    assert all(path.startswith(str(venv)) for path in located), located  # nothing comes from the checkout
    return python


def _image_env(**extra) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(extra)
    return env


def test_installed_wheels_command_validates_the_bundled_corpus_from_an_unrelated_directory(image_python, tmp_path):
    """The wheel's `textgen` console script, from a directory that is not the checkout: its default
    data root is the corpus bundled in the wheel, the curated schema comes from the package, and
    nothing is written to the working directory. `validate` runs the data stages only; every
    other stage runs from this wheel in the OSS KFP double's run below (each of its steps is
    this virtualenv's interpreter), the Evaluator's bundled suites and the Pusher included."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    output_root = tmp_path / "out"
    textgen = os.path.join(os.path.dirname(image_python), "textgen")
    result = subprocess.run(
        [textgen, "validate", "--output-root", str(output_root), *_set_arguments(OVERRIDES)],
        cwd=str(elsewhere),
        env=_image_env(),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    summary = json.loads((output_root / "last_run.json").read_text())
    assert summary["succeeded"] and summary["components"]["DataGate"] == "COMPLETE", summary.get("error")
    # The bundled corpus (data/corpus inside the wheel) was the input: both files were read.
    assert summary["data_quality"]["documents_read"] > 2000
    assert not list(elsewhere.iterdir())  # nothing written to the working directory


@pytest.fixture(scope="module")
def s3():
    server = start_server()
    yield server
    server.server.stop()


@pytest.fixture
def registry_server(tmp_path):
    """A real MLflow tracking server on localhost (SQLite behind it, on this machine only)."""
    with running_mlflow_server(str(tmp_path)) as uri:
        yield uri


# The cluster's Kubernetes secret holding the object store's credentials (as KFP's MinIO has one).
SECRET = "objectstore-creds"


def test_compiled_pipeline_runs_on_an_oss_kfp_double_and_finds_its_baseline_in_the_registry(
    image_python, tmp_path, s3, registry_server
):
    bucket = "textgen-kfp"
    s3.create_bucket(bucket)
    corpus = s3.upload_directory(write_tiny_corpus(str(tmp_path / "corpus")), bucket, "corpus")
    pipeline_root, serving_dir = f"s3://{bucket}/root", f"s3://{bucket}/serving"
    spec_dir = tmp_path / "spec"
    overrides = OVERRIDES + [
        # One Beam worker per step keeps the double within CI's time; the default
        # (multi_processing, a worker per core) is checked by tests/test_kubeflow_compile.py.
        'kubeflow.beam_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"]',
        "data_gate.distribution_min_examples=10",
        f"registry.tracking_uri={registry_server}",
    ]
    settings = s3.settings()
    assert (
        main(
            [
                "compile",
                "--output-dir",
                str(spec_dir),
                "--image",
                "textgen-tfx:test",
                "--pipeline-root",
                pipeline_root,
                "--data-root",
                corpus,
                "--serving-dir",
                serving_dir,
                "--env",
                f"S3_ENDPOINT={settings['S3_ENDPOINT']}",
                "--env",
                f"AWS_REGION={settings['AWS_REGION']}",
                "--secret-env",
                f"AWS_ACCESS_KEY_ID={SECRET}/accesskey",
                "--secret-env",
                f"AWS_SECRET_ACCESS_KEY={SECRET}/secretkey",
                *_set_arguments(overrides),
            ]
        )
        == 0
    )
    assert settings["AWS_SECRET_ACCESS_KEY"] not in (spec_dir / "pipeline.yaml").read_text()
    backend = OssKfpDouble(
        str(spec_dir / "pipeline.yaml"),
        pipeline_root,
        image_python,
        str(tmp_path / "cluster"),
        image_env=dockerfile_env(os.path.join(PROJECT_ROOT, "kubeflow", "Dockerfile")),
        s3_client=s3.client(),
        secrets={SECRET: {"accesskey": settings["AWS_ACCESS_KEY_ID"], "secretkey": settings["AWS_SECRET_ACCESS_KEY"]}},
    )

    try:
        _run_twice_and_check(backend, s3, bucket, pipeline_root, serving_dir)
    finally:
        backend.close()


def _run_twice_and_check(backend, s3, bucket, pipeline_root, serving_dir):
    first = backend.run("run-1")
    assert first.succeeded, first.describe_failures()
    assert set(first.tasks) >= {"ExampleGen", "Transform", "Trainer", "Evaluator", "Pusher"}
    examples = first.tasks["ExampleGen"].outputs["examples"]
    assert examples["uri"].startswith(pipeline_root + "/")
    # TFX writes the span custom property as "custom:span" (the Examples type also has a span property)
    assert examples["metadata"]["custom:span"] == 0 and json.loads(examples["metadata"]["spans"]) == [0]
    pushed = first.tasks["Pusher"].outputs["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1 and pushed["pushed_version"] == 1, pushed
    keys = s3.keys(bucket)
    assert "serving/1/saved_model.pb" in keys
    assert not [key for key in keys if key.endswith("/")]  # no folder markers for the launcher to trip on
    assert pushed["registered_model_version"] == 1
    first_evaluation = _evaluation(s3, first)
    assert "first run" in first_evaluation["baseline"]["skipped"]
    accepted = first.tasks["RecordAcceptedStatistics"].outputs["accepted"]["metadata"]
    assert accepted["span"] == 0 and accepted["state_uri"].startswith(pipeline_root)

    second = backend.run("run-2")
    assert second.succeeded, second.describe_failures()
    evaluation = _evaluation(s3, second)
    assert evaluation["baseline"]["registry"]["registered_version"] == 1
    assert evaluation["baseline"]["path"] == f"{serving_dir}/1"
    change_gate = next(g for g in evaluation["gates"] if g["name"] == "quality.bits_per_byte_change")
    assert change_gate["verdict"] != "SKIPPED", change_gate
    blessing = second.tasks["Evaluator"].outputs["blessing"]["metadata"]
    assert blessing["baseline_model"] == f"{serving_dir}/1" and blessing["baseline_registered_version"] == 1
    # The Tokenizer (policy auto) reused the production model's SentencePiece model: same token ids.
    tokenizers = [run.tasks["Tokenizer"].outputs["tokenizer"]["metadata"] for run in (first, second)]
    assert (tokenizers[0]["source"], tokenizers[1]["source"]) == ("learned", "reused")
    assert tokenizers[0]["sha256"] == tokenizers[1]["sha256"]
    drift = json.loads(second.tasks["DistributionValidator"].outputs["anomalies"]["metadata"]["skipped"])
    assert "re-run" in drift["drift"]  # span 0 again: the state location held run 1's acceptance


def _evaluation(s3, run) -> dict:
    blessing_uri = run.tasks["Evaluator"].outputs["blessing"]["uri"]
    bucket, _, key = blessing_uri[len("s3://") :].partition("/")
    return json.loads(s3.client().get_object(Bucket=bucket, Key=key + "/evaluation.json")["Body"].read())
