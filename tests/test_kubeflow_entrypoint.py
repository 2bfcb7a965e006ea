"""`kubeflow/entrypoint.py`: the ExecutorInput repairs for the open-source KFP driver, and the
OSS backend double's refusal of specs OSS KFP cannot run (the double itself runs the whole
compiled pipeline in tests/test_kubeflow_oss_run.py)."""

import json

import pytest
import yaml

from kubeflow.entrypoint import repair_arguments, repair_executor_input
from tests.kfp_oss_double import OssKfpDouble, UnsupportedSpecError, execution_order

EXAMPLES_SCHEMA = "title: tfx.Examples\ntype: object\n"
INPUTS_SPEC = {
    "artifacts": {"examples": {"artifactType": {"instanceSchema": EXAMPLES_SCHEMA}}},
    "parameters": {"min_examples": {"parameterType": "NUMBER_INTEGER"}},
}


def _oss_executor_input():
    """As the OSS v2 driver sends it: an input with an empty type, numbers as doubles, executor-logs."""
    return {
        "inputs": {
            "parameterValues": {"min_examples": 100.0},
            "artifacts": {
                "examples": {
                    "artifacts": [{"name": "a1", "uri": "gs://b/examples", "type": {}, "metadata": {"span": 3.0}}]
                }
            },
        },
        "outputs": {
            "artifacts": {
                "anomalies": {
                    "artifacts": [{"name": "a2", "uri": "gs://b/out", "type": {"schemaTitle": "tfx.ExampleAnomalies"}}]
                },
                "executor-logs": {
                    "artifacts": [{"name": "a3", "uri": "gs://b/logs", "type": {"schemaTitle": "system.Artifact"}}]
                },
            },
            "outputFile": "/tmp/out.json",
        },
    }


def test_empty_input_types_come_from_the_inputs_spec_and_launcher_outputs_are_dropped():
    repaired = repair_executor_input(_oss_executor_input(), INPUTS_SPEC)
    (examples,) = repaired["inputs"]["artifacts"]["examples"]["artifacts"]
    assert examples["type"] == {"instanceSchema": EXAMPLES_SCHEMA}
    assert examples["metadata"] == {"span": 3.0}  # TFX's getters accept doubles; left as sent
    assert set(repaired["outputs"]["artifacts"]) == {"anomalies"}


def test_a_vertex_executor_input_passes_unchanged():
    vertex = _oss_executor_input()
    vertex["inputs"]["artifacts"]["examples"]["artifacts"][0]["type"] = {"schemaTitle": "tfx.Examples"}
    del vertex["outputs"]["artifacts"]["executor-logs"]
    assert repair_executor_input(json.loads(json.dumps(vertex)), INPUTS_SPEC) == vertex


def test_an_undeclared_untyped_input_is_named():
    with pytest.raises(ValueError, match="input artifact 'examples' has no type"):
        repair_executor_input(_oss_executor_input(), {"artifacts": {}})


def test_the_arguments_keep_their_form_and_the_rest_passes_through():
    argv = [
        "--executor_class_path",
        "x.Executor",
        "--json_serialized_invocation_args",
        json.dumps(_oss_executor_input()),
        f"--json_serialized_inputs_spec_args={json.dumps(INPUTS_SPEC)}",
        "--direct_num_workers=0",
    ]
    repaired = repair_arguments(argv)
    assert repaired[:3] == argv[:3] and repaired[4:] == argv[4:]
    assert "executor-logs" not in json.loads(repaired[3])["outputs"]["artifacts"]


def test_the_double_refuses_a_spec_with_a_resolver(tmp_path):
    spec = {
        "pipelineInfo": {"name": "p"},
        "root": {"dag": {"tasks": {}}},
        "deploymentSpec": {"executors": {"R_executor": {"resolver": {"outputArtifactQueries": {}}}}},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(UnsupportedSpecError, match="resolver"):
        OssKfpDouble(str(path), str(tmp_path), "python", str(tmp_path), image_env={})


def test_the_double_orders_tasks_by_dependencies_and_artifact_producers():
    tasks = {
        "c": {"dependentTasks": ["b"]},
        "b": {"inputs": {"artifacts": {"x": {"taskOutputArtifact": {"producerTask": "a", "outputArtifactKey": "o"}}}}},
        "a": {},
    }
    assert execution_order({"root": {"dag": {"tasks": tasks}}}) == ["a", "b", "c"]


@pytest.fixture(scope="module")
def s3():
    from tests.object_store import start_server

    server = start_server()
    yield server
    server.server.stop()


def test_the_double_downloads_an_input_artifact_as_the_launcher_does(s3, tmp_path):
    from tests.kfp_oss_double import download_blob, local_path_for_uri

    s3.create_bucket("inputs")
    client = s3.client()
    for key in ("root/model/saved_model.pb", "root/model/variables/variables.index", "root/model-other/x"):
        client.put_object(Bucket="inputs", Key=key, Body=b"1")
    assert local_path_for_uri("s3://inputs/root/model") == "/s3/inputs/root/model"
    download_blob(client, "inputs", "root/model", str(tmp_path / "model"))
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "model/saved_model.pb",
        "model/variables/variables.index",
    ]  # not the sibling "model-other"


def test_the_double_fails_a_download_on_a_folder_marker_like_downloadblob(s3, tmp_path):
    """kubeflow/pipelines#13476: a zero-byte `dir/` object (TF's GCS file system writes them)."""
    from tests.kfp_oss_double import DownloadError, download_blob

    s3.create_bucket("markers")
    client = s3.client()
    client.put_object(Bucket="markers", Key="root/model/variables/", Body=b"")
    client.put_object(Bucket="markers", Key="root/model/variables/variables.index", Body=b"1")
    with pytest.raises(DownloadError, match="not a directory"):
        download_blob(client, "markers", "root/model", str(tmp_path / "model"))


def test_the_double_gives_a_pod_only_the_image_spec_secret_and_kfp_variables(tmp_path, monkeypatch):
    import os

    from pipeline.config import PROJECT_ROOT
    from tests.kfp_oss_double import PodStartError, dockerfile_env

    spec = {
        "pipelineInfo": {"name": "p"},
        "root": {"dag": {"tasks": {"T": {"componentRef": {"name": "comp-t"}}}}},
        "components": {"comp-t": {"executorLabel": "T_executor"}},
        "deploymentSpec": {
            "executors": {
                "T_executor": {
                    "container": {"image": "i", "env": [{"name": "S3_ENDPOINT", "value": "http://minio:9000"}]}
                }
            }
        },
    }
    platform = {
        "platforms": {
            "kubernetes": {
                "deploymentSpec": {
                    "executors": {
                        "T_executor": {
                            "secretAsEnv": [
                                {
                                    "secretName": "creds",
                                    "keyToEnv": [{"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"}],
                                }
                            ]
                        }
                    }
                }
            }
        }
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec) + "---\n" + yaml.safe_dump(platform))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///leaked.db")
    image_env = dockerfile_env(os.path.join(PROJECT_ROOT, "kubeflow", "Dockerfile"))
    assert image_env["TF_USE_LEGACY_KERAS"] == "1"
    double = OssKfpDouble(
        str(path),
        "s3://b/root",
        "/image/bin/python",
        str(tmp_path),
        image_env=image_env,
        secrets={"creds": {"secretkey": "s3cr3t"}},
    )
    env = double.pod_env("T", "/home")
    assert env["S3_ENDPOINT"] == "http://minio:9000" and env["AWS_SECRET_ACCESS_KEY"] == "s3cr3t"
    assert env["PATH"].startswith("/image/bin:") and env["KFP_POD_NAME"].startswith("t-")
    assert set(env) == {
        "PATH",
        "HOME",
        "S3_ENDPOINT",
        "AWS_SECRET_ACCESS_KEY",
        "KFP_POD_NAME",
        "KFP_POD_UID",
        *image_env,
    }
    without_secret = OssKfpDouble(str(path), "s3://b/root", "python", str(tmp_path), image_env={})
    with pytest.raises(PodStartError, match="CreateContainerConfigError: secret 'creds'"):
        without_secret.pod_env("T", "/home")
