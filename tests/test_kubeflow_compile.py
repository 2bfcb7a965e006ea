"""`textgen compile`: a KFP v2 pipeline spec the kfp SDK loads, with every component, and nothing
open-source Kubeflow Pipelines cannot run.

No KFP cluster runs here; the test checks the compiled spec with the real kfp SDK loader and the
OSS constraints of `kubeflow/oss_compat.py`. tests/test_kubeflow_oss_run.py runs it.
"""

import json

import kfp.components
import pytest
import yaml
from tfx.utils import import_utils

from kubeflow import oss_compat
from kubeflow.compile import ENTRYPOINT_COMMAND
from pipeline.pipeline import COMPONENT_IDS, UNCACHEABLE_NODES
from textgen_cli.cli import main


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("kfp")
    exit_code = main(
        [
            "compile",
            "--output-dir",
            str(output_dir),
            "--image",
            IMAGE,
            "--pipeline-root",
            "gs://bucket/root",
            "--data-root",
            "gs://bucket/corpus",
            *REGISTRY,
        ]
    )
    assert exit_code == 0
    path = output_dir / "pipeline.yaml"
    return path, yaml.safe_load(path.read_text())


# An image named by digest: KFP may cache its steps.
IMAGE = "registry.example/textgen@sha256:" + "ab" * 32
# A registry server every pod reaches (compile refuses a registry that pods cannot share).
REGISTRY = ("--set", "registry.tracking_uri=http://mlflow.textgen.svc:5000")


def test_compile_writes_a_kfp_loadable_spec_with_every_component(compiled):
    path, spec = compiled
    component = kfp.components.load_component_from_file(str(path))
    tasks = component.pipeline_spec.root.dag.tasks
    assert set(tasks) == set(COMPONENT_IDS)  # no resolver tasks beside the components
    assert "DataGate" in tasks["Tokenizer"].dependent_tasks and "Tokenizer" in tasks["Transform"].dependent_tasks
    assert "DataGate" in tasks["RecordAcceptedStatistics"].dependent_tasks
    executors = spec["deploymentSpec"]["executors"].values()
    assert {executor["container"]["image"] for executor in executors} == {IMAGE}
    assert all(executor["container"]["command"] == ENTRYPOINT_COMMAND for executor in executors)
    assert "gs://bucket/corpus" in path.read_text()
    assert spec["schemaVersion"] == "2.1.0"


def test_the_spec_has_nothing_oss_kfp_cannot_run(compiled):
    _, spec = compiled
    text = json.dumps(spec)
    assert '"resolver"' not in text and '"lifecycle"' not in text
    assert oss_compat.problems(spec) == []


def test_nodes_that_read_outside_state_are_never_cached(compiled):
    _, spec = compiled
    tasks = spec["root"]["dag"]["tasks"]
    uncacheable = UNCACHEABLE_NODES | {"ExampleGen"}  # compiled once, run on later data: never cached
    for name, task in tasks.items():
        assert task.get("cachingOptions", {}).get("enableCache", False) is (name not in uncacheable), name


def test_every_artifact_type_title_imports_in_the_package(compiled):
    _, spec = compiled
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    titles = set()
    for component in spec["components"].values():
        for direction in ("inputDefinitions", "outputDefinitions"):
            for definition in component.get(direction, {}).get("artifacts", {}).values():
                artifact_type = definition["artifactType"]
                titles.add(artifact_type.get("schemaTitle") or yaml.safe_load(artifact_type["instanceSchema"])["title"])
    custom = {title for title in titles if title not in compiler_utils.TITLE_TO_CLASS_PATH}
    assert custom == {"components.DataGateResult", "components.AcceptedStatistics", "components.Tokenizer"}
    for title in custom:
        assert import_utils.import_class_by_path(title).TYPE_NAME == title


def test_the_cluster_beam_workers_follow_the_pods_cpu_limit_and_the_drift_state_lives_under_the_root(compiled):
    _, spec = compiled
    executors = spec["deploymentSpec"]["executors"]
    args = executors["ExampleGen_executor"]["container"]["args"]
    assert "--direct_running_mode=multi_processing" in args and "--direct_num_workers=2" in args  # kubeflow.resources
    assert "--direct_num_workers=4" in executors["Transform_executor"]["container"]["args"]  # step_resources.Transform
    assert not any(arg == "--direct_num_workers=0" for e in executors.values() for arg in e["container"]["args"])
    validator = spec["root"]["dag"]["tasks"]["DistributionValidator"]["inputs"]["parameters"]
    assert validator["state_uri"]["runtimeValue"]["constant"] == "gs://bucket/root/state/drift_baseline"


def test_the_spec_carries_the_pipeline_root_it_was_compiled_for(compiled):
    _, spec = compiled
    assert spec[oss_compat.DEFAULT_PIPELINE_ROOT] == "gs://bucket/root"
    assert (
        kfp.components.load_component_from_file(str(compiled[0])).pipeline_spec.default_pipeline_root
        == "gs://bucket/root"
    )


def test_compile_takes_runner_beam_args_and_warns_of_placeholder_buckets(tmp_path, capsys):
    dataflow = ["--runner=DataflowRunner", "--project=p", "--region=europe-west1", "--temp_location=gs://b/tmp"]
    assert (
        main(
            [
                "compile",
                "--output-dir",
                str(tmp_path),
                "--pipeline-root",
                "gs://b/root",
                *REGISTRY,
                *[f"--beam-arg={arg}" for arg in dataflow],
            ]
        )
        == 0
    )
    spec = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    args = spec["deploymentSpec"]["executors"]["Transform_executor"]["container"]["args"]
    assert args[-len(dataflow) :] == dataflow
    # --data-root and --serving-dir were not given: the spec still reads the defaults' placeholder bucket.
    assert "names the placeholder bucket YOUR-BUCKET" in capsys.readouterr().err
    assert oss_compat.placeholder_buckets((tmp_path / "pipeline.yaml").read_text()) == ["YOUR-BUCKET"]


@pytest.mark.parametrize("root", ["minio://mlpipeline/v2/artifacts", "hdfs://nn/root", "http://store/root"])
def test_compile_refuses_a_pipeline_root_scheme_the_components_cannot_use(root, tmp_path, capsys):
    assert main(["compile", "--output-dir", str(tmp_path), "--pipeline-root", root, *REGISTRY]) == 64
    err = capsys.readouterr().err
    assert err.startswith(f"textgen: pipeline root '{root}' is not a gs:// or s3:// URI") and err.count("\n") == 1
    assert not (tmp_path / "pipeline.yaml").exists()


@pytest.mark.parametrize(
    "text,placeholders",
    [
        ("gs://YOUR-BUCKET/textgen/corpus", ["YOUR-BUCKET"]),
        ("root: s3://BUCKET/r, gs://BUCKET/x", ["BUCKET"]),
        ("gs://my-bucket.example/root s3://b/r", []),
        ("see https://Example.com/x", []),
    ],
)
def test_placeholder_buckets_are_the_upper_case_bucket_names(text, placeholders):
    assert oss_compat.placeholder_buckets(text) == placeholders


def test_a_spec_with_a_resolver_or_a_lifecycle_hook_is_named(compiled):
    _, spec = compiled
    broken = json.loads(json.dumps(spec))
    broken["deploymentSpec"]["executors"]["X_executor"] = {"resolver": {"outputArtifactQueries": {}}}
    broken["deploymentSpec"]["executors"]["ExampleGen_executor"]["container"]["lifecycle"] = {"preCacheCheck": {}}
    problems = oss_compat.problems(broken)
    assert any("X_executor is a resolver" in p for p in problems)
    assert any("ExampleGen_executor has a container.lifecycle hook" in p for p in problems)


def test_the_dockerfile_builds_the_wheel_from_everything_setup_py_packages():
    """No Docker engine runs here. The image installs the wheel built from setup.py (whose
    contents tests/test_kubeflow_oss_run.py runs from a fresh virtualenv), so the Dockerfile must
    copy every folder that wheel is built from, and install nothing from source folders."""
    import os
    import re

    from pipeline.config import PROJECT_ROOT

    dockerfile = open(os.path.join(PROJECT_ROOT, "kubeflow", "Dockerfile"), encoding="utf-8").read()
    copied = set(re.findall(r"^COPY (\S+) ", dockerfile, flags=re.MULTILINE))
    setup = open(os.path.join(PROJECT_ROOT, "setup.py"), encoding="utf-8").read()
    resource_folders = set(
        re.search(r"RESOURCE_FOLDERS = \(([^)]*)\)", setup).group(1).replace('"', "").replace(" ", "").split(",")
    ) - {""}
    assert {"setup.py", "pipeline", "components", "kubeflow", "textgen_cli"} | resource_folders <= copied
    assert "pip wheel" in dockerfile and "uv pip install --system --no-cache --no-deps /tmp/wheels/*.whl" in dockerfile
    assert " -e ." not in dockerfile


def test_pod_settings_reach_every_executor_through_the_spec_and_secrets_through_the_platform_spec(tmp_path):
    assert (
        main(
            [
                "compile",
                "--output-dir",
                str(tmp_path),
                "--pipeline-root",
                "s3://bucket/root",
                "--data-root",
                "s3://bucket/corpus",
                "--serving-dir",
                "s3://bucket/serving",
                *REGISTRY,
                "--env",
                "S3_ENDPOINT=http://minio-service.kubeflow:9000",
                "--env",
                "AWS_REGION=us-east-1",
                "--secret-env",
                "AWS_ACCESS_KEY_ID=mlpipeline-minio-artifact/accesskey",
                "--secret-env",
                "AWS_SECRET_ACCESS_KEY=mlpipeline-minio-artifact/secretkey",
            ]
        )
        == 0
    )
    spec, platform = yaml.safe_load_all((tmp_path / "pipeline.yaml").read_text())
    executors = spec["deploymentSpec"]["executors"]
    for executor in executors.values():
        env = executor["container"]["env"]
        assert env[:2] == [
            {"name": "AWS_REGION", "value": "us-east-1"},
            {"name": "S3_ENDPOINT", "value": "http://minio-service.kubeflow:9000"},
        ]
        # Names and references only (a Trainer hands them on to TFJob replicas): no credential values.
        assert json.loads(env[2]["value"]) == {
            "env": ["AWS_REGION", "S3_ENDPOINT"],
            "config_map_env": {},
            "secret_env": {
                "AWS_ACCESS_KEY_ID": "mlpipeline-minio-artifact/accesskey",
                "AWS_SECRET_ACCESS_KEY": "mlpipeline-minio-artifact/secretkey",
            },
        }
    kubernetes = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(kubernetes) == set(executors)
    assert kubernetes["Trainer_executor"] == {
        "secretAsEnv": [
            {
                "secretName": "mlpipeline-minio-artifact",
                "keyToEnv": [
                    {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"},
                    {"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"},
                ],
            }
        ]
    }
    # `submit` sends both documents, as the kfp client does (kfp/client/client.py `_PipelineDoc`).
    from kubeflow.submit import load_pipeline_spec

    loaded = load_pipeline_spec(str(tmp_path / "pipeline.yaml"))
    assert loaded["platform_spec"] == platform and loaded["pipeline_spec"]["root"] == spec["root"]


@pytest.mark.parametrize(
    "arguments,message",
    [
        ([], "the model registry has no server"),
        (
            ["--set", "registry.tracking_uri=sqlite:////data/mlflow.db"],
            "is a store on one disk that the pipeline's pods cannot share",
        ),
        ([*REGISTRY, "--env", "AWS_SECRET_ACCESS_KEY=x"], "AWS_SECRET_ACCESS_KEY looks like a credential"),
        ([*REGISTRY, "--secret-env", "AWS_ACCESS_KEY_ID=no-key-here"], "must look like ENV_NAME=<object name>/<key>"),
        ([*REGISTRY, "--data-root", "hdfs://nn/corpus"], "the hdfs:// scheme is not supported"),
    ],
)
def test_compile_refuses_what_pods_cannot_use_in_one_line(arguments, message, tmp_path, capsys):
    assert main(["compile", "--output-dir", str(tmp_path), "--pipeline-root", "s3://bucket/root", *arguments]) == 64
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "pipeline.yaml").exists()


def test_pods_are_sized_per_step_and_the_trainer_gets_its_accelerator(tmp_path):
    assert (
        main(
            [
                "compile",
                "--output-dir",
                str(tmp_path),
                "--pipeline-root",
                "gs://bucket/root",
                *REGISTRY,
                "--image",
                IMAGE,
                "--set",
                "kubeflow.trainer_accelerator_type=nvidia.com/gpu",
                "--set",
                "kubeflow.trainer_accelerator_count=2",
                "--set",
                "kubeflow.step_resources.StatisticsGen={cpu_limit: 6, cpu_request: 3}",
            ]
        )
        == 0
    )
    pipeline = kfp.components.load_component_from_file(str(tmp_path / "pipeline.yaml")).pipeline_spec
    executors = pipeline.deployment_spec.fields["executors"].struct_value.fields
    trainer = executors["Trainer_executor"].struct_value.fields["container"].struct_value.fields["resources"]
    spec = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())["deploymentSpec"]["executors"]
    assert spec["Trainer_executor"]["container"]["resources"] == {
        "cpuRequest": 4.0,
        "cpuLimit": 8.0,
        "memoryRequest": 16.0,
        "memoryLimit": 32.0,
        "accelerator": {"type": "nvidia.com/gpu", "count": 2},
    }
    assert trainer.struct_value.fields["accelerator"].struct_value.fields["type"].string_value == "nvidia.com/gpu"
    statistics = spec["StatisticsGen_executor"]["container"]
    assert statistics["resources"]["cpuLimit"] == 6 and "--direct_num_workers=6" in statistics["args"]
    assert "accelerator" not in statistics["resources"]
    assert spec["SchemaGen_executor"]["container"]["resources"] == {
        "cpuRequest": 1.0,
        "cpuLimit": 2.0,
        "memoryRequest": 4.0,
        "memoryLimit": 8.0,
    }


def test_an_image_under_a_tag_turns_caching_off_for_every_step(tmp_path, capsys):
    assert (
        main(
            [
                "compile",
                "--output-dir",
                str(tmp_path),
                "--pipeline-root",
                "gs://bucket/root",
                *REGISTRY,
                "--image",
                "registry.example/textgen:latest",
            ]
        )
        == 0
    )
    tasks = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())["root"]["dag"]["tasks"]
    assert not [name for name, task in tasks.items() if "cachingOptions" in task]
    assert "image registry.example/textgen:latest is not named by digest" in capsys.readouterr().err


def test_step_resources_must_name_a_step(tmp_path, capsys):
    assert (
        main(
            [
                "compile",
                "--output-dir",
                str(tmp_path),
                "--pipeline-root",
                "gs://bucket/root",
                *REGISTRY,
                "--set",
                "kubeflow.step_resources.Traner={cpu_limit: 4}",
            ]
        )
        == 64
    )
    assert "kubeflow.step_resources: no step named Traner (steps: " in capsys.readouterr().err


def test_the_image_runs_as_a_numeric_non_root_user():
    """KFP 2.16+ drops every capability and clusters may require runAsNonRoot, which Kubernetes can
    only verify for a numeric USER."""
    import os

    from pipeline.config import PROJECT_ROOT

    lines = open(os.path.join(PROJECT_ROOT, "kubeflow", "Dockerfile"), encoding="utf-8").read().splitlines()
    user = [line.split()[1] for line in lines if line.startswith("USER ")][-1]
    assert user.isdigit() and int(user) != 0, user
