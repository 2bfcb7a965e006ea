"""components/filesystems.py: every accepted scheme opens in TF and Beam, S3 settings are derived
for both from one set of variables, a scheme that does not open is named, and TF and Beam read and
write a real S3 API server (moto on localhost, tests/object_store.py); GCS folder markers are
removed from gs:// output artifacts, against fake-gcs-server (tests/object_store.py; TF's own GCS
client cannot be pointed at an emulator, see there)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from components import filesystems
from kubeflow.entrypoint import output_uris
from pipeline.config import PROJECT_ROOT
from tests.object_store import gcs, start_server  # noqa: F401  (gcs: a fixture)
from textgen_cli.cli import EXIT_USAGE, main


@pytest.fixture(scope="module")
def s3():
    server = start_server()
    yield server
    server.server.stop()


def test_every_accepted_scheme_is_registered_in_tensorflow_and_beam():
    from kubeflow import oss_compat

    filesystems.register()
    for scheme in filesystems.ACCEPTED_SCHEMES:
        assert scheme in filesystems.tensorflow_schemes(), scheme
        assert scheme in filesystems.beam_schemes(), scheme
    # The pipeline roots compile/submit accept are the same object stores.
    assert {prefix[: -len("://")] for prefix in oss_compat.OBJECT_STORE_SCHEMES} == set(
        filesystems.OBJECT_STORE_SCHEMES
    )


def test_s3_settings_are_derived_for_boto3_without_replacing_the_users():
    env = {
        "S3_ENDPOINT": "minio-service.kubeflow:9000",
        "S3_USE_HTTPS": "0",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "us-east-2",
    }
    filesystems.configure_environment(env)
    assert env["S3_ENDPOINT"] == env["AWS_ENDPOINT_URL_S3"] == "http://minio-service.kubeflow:9000"
    assert env["AWS_DEFAULT_REGION"] == "us-east-2"  # set by the user: kept
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    aws = {}
    filesystems.configure_environment(aws)
    assert aws == {}  # AWS S3 itself: nothing to derive, the instance metadata stays usable


def test_a_scheme_the_project_cannot_open_is_named():
    with pytest.raises(
        filesystems.SchemeError, match=r"data root hdfs://nn/corpus: the hdfs:// scheme is not supported"
    ):
        filesystems.check_schemes({"data root": "hdfs://nn/corpus"})
    filesystems.check_schemes({"data root": "s3://bucket/corpus", "output root": "/tmp/out"})


def test_run_names_the_scheme_instead_of_a_missing_data_root(tmp_path, capsys):
    code = main(["run", "--data-root", "minio://bucket/drop", "--output-root", str(tmp_path / "out")])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "minio://" in err and "does not exist" not in err, err
    assert not (tmp_path / "out").exists()


# Run in a subprocess: tensorflow-io aborts a process that used S3 at exit (filesystems.exit_process).
_ROUND_TRIP = textwrap.dedent("""
    import sys
    import tensorflow as tf
    from apache_beam.io.filesystems import FileSystems
    from components import filesystems

    filesystems.register()
    root = sys.argv[1]
    tf.io.gfile.makedirs(root + "/made/by/tf")
    with tf.io.gfile.GFile(root + "/made/by/tf/a.txt", "w") as handle:
        handle.write("from tf")
    with FileSystems.open(root + "/made/by/tf/a.txt") as handle:
        assert handle.read() == b"from tf"
    with FileSystems.create(root + "/beam/b.txt") as handle:
        handle.write(b"from beam")
    with tf.io.gfile.GFile(root + "/beam/b.txt") as handle:
        assert handle.read() == "from beam"
    assert tf.io.gfile.isdir(root + "/made") and sorted(name.rstrip("/") for name in tf.io.gfile.listdir(root)) == ["beam", "made"]
    print("round trip ok")
    filesystems.exit_process(0)
""")


def test_tf_and_beam_read_and_write_a_real_s3_server_and_the_process_exits_cleanly(s3):
    bucket = s3.create_bucket("roundtrip")
    result = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP, bucket + "/root"],
        cwd=PROJECT_ROOT,
        env=s3.env(PYTHONPATH=PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "round trip ok" in result.stdout
    # Only the two files: tf.io.gfile.makedirs left no "folder/" marker objects.
    assert sorted(s3.keys("roundtrip")) == ["root/beam/b.txt", "root/made/by/tf/a.txt"]


def test_an_object_store_output_root_keeps_sqlite_and_the_summary_in_a_local_directory_it_names():
    from pipeline.layout import OutputLayout

    remote = OutputLayout("s3://bucket/runs/")
    assert remote.pipeline_root == "s3://bucket/runs/pipeline" and remote.serving_dir == "s3://bucket/runs/serving"
    assert remote.drift_state_dir == "s3://bucket/runs/state/drift_baseline"
    assert remote.local_root == os.path.join("runs", "object-store", "s3", "bucket", "runs")
    assert remote.metadata_path == os.path.join(remote.local_root, "metadata.sqlite")
    assert remote.registry_dir == os.path.join(remote.local_root, "registry")
    assert remote.summary_path == os.path.join(remote.local_root, "last_run.json")
    local = OutputLayout("runs/local")
    assert local.local_root == "runs/local" and local.metadata_path == os.path.join("runs/local", "metadata.sqlite")


def test_gcs_folder_markers_are_removed_from_an_output_artifact_and_nothing_else(gcs):
    gcs.create_bucket("markers")
    artifact = "root/Trainer/model/5"
    # What tf.io.gfile.makedirs leaves on GCS: a zero-byte "<dir>/" object for each directory it
    # creates (TF 2.16 tsl/platform/cloud/gcs_file_system.cc, GcsFileSystem::CreateDir).
    markers = [f"{artifact}/", f"{artifact}/Format-Serving/", f"{artifact}/Format-Serving/variables/"]
    outside = ["root/", "root/Trainer/model/", "root/Trainer/model/50/"]  # parents, and a sibling artifact's
    for name in markers + outside:
        gcs.put("markers", name)
    files = [f"{artifact}/Format-Serving/saved_model.pb", f"{artifact}/Format-Serving/variables/variables.index"]
    for name in files:
        gcs.put("markers", name, b"data")
    gcs.put("markers", f"{artifact}/_SUCCESS")  # an empty file, not a marker
    removed = filesystems.remove_folder_markers(f"gs://markers/{artifact}")
    assert sorted(removed) == sorted(f"gs://markers/{name}" for name in markers)
    assert gcs.names("markers") == sorted(outside + files + [f"{artifact}/_SUCCESS"])
    assert filesystems.remove_folder_markers(f"gs://markers/{artifact}") == []
    assert filesystems.remove_folder_markers("s3://markers/" + artifact) == []  # S3 has none


def test_the_entrypoint_finds_every_output_artifact_uri():
    executor_input = {
        "outputs": {
            "artifacts": {
                "model": {"artifacts": [{"uri": "gs://b/root/Trainer/model/5"}]},
                "model_run": {"artifacts": [{"uri": "gs://b/root/Trainer/model_run/5"}]},
            }
        },
        "inputs": {"artifacts": {"examples": {"artifacts": [{"uri": "gs://b/root/Transform/5"}]}}},
    }
    argv = ["--executor_class_path", "x.Executor", "--json_serialized_invocation_args", json.dumps(executor_input)]
    assert output_uris(argv) == ["gs://b/root/Trainer/model/5", "gs://b/root/Trainer/model_run/5"]
    assert (
        output_uris(["--json_serialized_invocation_args=" + json.dumps(executor_input)])[0]
        == "gs://b/root/Trainer/model/5"
    )


def test_the_entrypoint_removes_the_folder_markers_of_a_steps_gs_outputs(gcs, tmp_path):
    """A real TFX executor runner (kubeflow/entrypoint.py over kubeflow_v2_run_executor) whose
    executor leaves the layout of TF's GCS file system (tests/marker_writing_executor.py)."""
    from tests import marker_writing_executor

    gcs.create_bucket("step-outputs")
    uri = "gs://step-outputs/root/Trainer/model/5"
    executor_input = {
        "inputs": {},
        "outputs": {
            "artifacts": {
                "model": {
                    "artifacts": [
                        {
                            "name": "projects/x/artifacts/model",
                            "type": {"schemaTitle": "tfx.Model"},
                            "uri": uri,
                            "metadata": {},
                        }
                    ]
                }
            },
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }
    command = [
        sys.executable,
        "-m",
        "kubeflow.entrypoint",
        "--executor_class_path",
        "tests.marker_writing_executor.Executor",
        "--json_serialized_invocation_args",
        json.dumps(executor_input),
    ]
    result = subprocess.run(
        command,
        cwd=PROJECT_ROOT,
        env=dict(os.environ, PYTHONPATH=PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    prefix = "root/Trainer/model/5/"
    assert gcs.names("step-outputs") == sorted(prefix + name for name in marker_writing_executor.FILES)


_COPY_TREE = textwrap.dedent("""
    import sys
    import tensorflow as tf
    from components import filesystems
    from components.versioned_push import copy_tree

    filesystems.register()
    root = sys.argv[1]
    for name, text in (("model/saved_model.pb", "graph"), ("model/assets/empty.txt", "")):
        with tf.io.gfile.GFile(root + "/" + name, "w") as handle:
            handle.write(text)
    try:
        tf.io.gfile.copy(root + "/model/assets/empty.txt", root + "/plain_copy.txt")
        print("plain copy of an empty object worked")
    except tf.errors.OpError as error:
        print("plain copy refused:", error.message)
    copy_tree(root + "/model", root + "/pushed")
    with tf.io.gfile.GFile(root + "/pushed/assets/empty.txt") as handle:
        assert handle.read() == ""
    with tf.io.gfile.GFile(root + "/pushed/saved_model.pb") as handle:
        assert handle.read() == "graph"
    print("copy ok")
    filesystems.exit_process(0)
""")


def test_the_pushers_copy_carries_an_empty_file_between_s3_paths(s3):
    """tensorflow-io's S3 file system refuses to copy an empty object ("Source is a directory or
    empty file"); the Pusher's copy_tree must still carry one (a pipeline on S3 stopped at Pusher)."""
    bucket = s3.create_bucket("copying")
    result = subprocess.run(
        [sys.executable, "-c", _COPY_TREE, bucket + "/root"],
        cwd=PROJECT_ROOT,
        env=s3.env(PYTHONPATH=PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "plain copy refused: Source is a directory or empty file" in result.stdout  # what copy_tree works around
    assert "copy ok" in result.stdout
    assert {"root/pushed/saved_model.pb", "root/pushed/assets/empty.txt"} <= set(s3.keys("copying"))
