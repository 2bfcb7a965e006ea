"""TFJob launcher for distributed training on Kubeflow.

No Kubernetes cluster or Training Operator runs here. The manifest is validated against
kubeflow/schemas/tfjob-v1.schema.json, a JSON schema written for this project from the TFJob
CRD's documented structure (not the CRD's own generated schema, which cannot be downloaded here).
The wait/fail logic runs against `FakeCustomObjects`, a test double of the kubernetes client's
CustomObjectsApi that replays a sequence of TFJob statuses; the statuses of a worker restart are
written as the Training Operator writes them (`_restarting`, `_succeeded_by_the_chief`).
"""

import itertools
import json
import logging
import os
import types

import jsonschema
import pytest

from components.trainer.training import tfjob
from pipeline.config import PROJECT_ROOT

SCHEMA = json.load(open(os.path.join(PROJECT_ROOT, "kubeflow", "schemas", "tfjob-v1.schema.json")))


def _spec(**overrides) -> tfjob.TFJobSpec:
    values = dict(
        name="textgen-train-1",
        namespace="ml-team",
        image="registry.example/textgen:1.0",
        command=tfjob.replica_command("gs://b/run/tfjob_fn_args.json"),
        workers=3,
        gpus=1,
        service_account="textgen-trainer",
    )
    values.update(overrides)
    return tfjob.TFJobSpec(**values)


def test_manifest_validates_against_the_tfjob_schema():
    manifest = tfjob.build_manifest(_spec())
    jsonschema.validate(manifest, SCHEMA)
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert (replicas["Chief"]["replicas"], replicas["Worker"]["replicas"]) == (1, 3)
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == replicas["Chief"]["template"]["spec"]["containers"][0]["command"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": tfjob.REPLICA_ENV, "value": "1"} in container["env"]
    jsonschema.validate(tfjob.build_manifest(_spec(workers=0, gpus=0)), SCHEMA)  # chief only


def test_replicas_get_the_trainer_pods_settings_and_secret_references_not_values():
    listing = {
        "env": ["S3_ENDPOINT", "AWS_REGION"],
        "secret_env": {"AWS_SECRET_ACCESS_KEY": "minio-creds/secretkey"},
        "config_map_env": {"MLFLOW_TRACKING_URI": "registry/uri"},
    }
    trainer_pod = {
        tfjob.POD_ENV: json.dumps(listing),
        "S3_ENDPOINT": "http://minio:9000",
        "AWS_REGION": "us-east-1",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "HOSTNAME": "trainer-pod",
    }
    env, entries = tfjob.replica_env(trainer_pod)
    assert env == {"S3_ENDPOINT": "http://minio:9000", "AWS_REGION": "us-east-1"}
    assert entries == [
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "minio-creds", "key": "secretkey"}}},
        {"name": "MLFLOW_TRACKING_URI", "valueFrom": {"configMapKeyRef": {"name": "registry", "key": "uri"}}},
    ]
    manifest = tfjob.build_manifest(_spec(env=env, env_entries=entries))
    jsonschema.validate(manifest, SCHEMA)
    container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert entries[0] in container["env"] and "s3cr3t" not in json.dumps(manifest)
    assert tfjob.replica_env({}) == ({}, [])


def test_parameter_server_manifest_has_ps_replicas_without_gpus():
    manifest = tfjob.build_manifest(_spec(workers=2, parameter_servers=3))
    jsonschema.validate(manifest, SCHEMA)
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert {kind: spec["replicas"] for kind, spec in replicas.items()} == {"Chief": 1, "Worker": 2, "PS": 3}
    (ps_container,) = replicas["PS"]["template"]["spec"]["containers"]
    (worker_container,) = replicas["Worker"]["template"]["spec"]["containers"]
    assert ps_container["command"] == worker_container["command"]  # one replica command; TF_CONFIG tells them apart
    assert "nvidia.com/gpu" not in ps_container["resources"]["limits"]
    assert worker_container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "PS" not in tfjob.build_manifest(_spec())["spec"]["tfReplicaSpecs"]  # parameter_servers=0: no PS replicas
    with pytest.raises(ValueError, match=r"kubeflow.tfjob.parameter_servers needs kubeflow.tfjob.workers >= 1"):
        tfjob.build_manifest(_spec(workers=0, parameter_servers=1))


def test_launch_submits_the_configured_ps_replicas(tmp_path):
    from components.trainer.options import TFJobOptions

    fn_args = types.SimpleNamespace(model_run_dir=str(tmp_path / "run"), train_steps=10, custom_config={})
    api = FakeCustomObjects([{"conditions": [_condition("Succeeded")]}])
    tfjob.launch(
        fn_args,
        TFJobOptions(enabled=True, workers=2, parameter_servers=1),
        "img:1",
        "ml-team",
        "textgen-train-8",
        api=api,
    )
    ((_, _, _, _, body),) = api.created
    assert {kind: spec["replicas"] for kind, spec in body["spec"]["tfReplicaSpecs"].items()} == {
        "Chief": 1,
        "Worker": 2,
        "PS": 1,
    }
    # The documented default of kubeflow.tfjob.worker_restarts reaches the manifest.
    assert TFJobOptions().worker_restarts == 3 and body["spec"]["runPolicy"]["backoffLimit"] == 3
    assert body["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"


def _policies(manifest):
    return {kind: spec["restartPolicy"] for kind, spec in manifest["spec"]["tfReplicaSpecs"].items()}


def test_parameter_server_workers_restart_on_retryable_exit_codes_and_nothing_else_restarts():
    ps_job = tfjob.build_manifest(_spec(workers=2, parameter_servers=1, worker_restarts=4))
    jsonschema.validate(ps_job, SCHEMA)
    assert _policies(ps_job) == {"Chief": "Never", "Worker": "ExitCode", "PS": "Never"}
    assert ps_job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 4}
    assert "successPolicy" not in ps_job["spec"]  # operator default: with a Chief, the chief decides
    # MultiWorkerMirrored: a lost worker breaks the collective, so nothing restarts, whatever the option says.
    mwm_job = tfjob.build_manifest(_spec(workers=2, worker_restarts=4))
    assert _policies(mwm_job) == {"Chief": "Never", "Worker": "Never"}
    assert mwm_job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 0}
    no_restarts = tfjob.build_manifest(_spec(workers=2, parameter_servers=1, worker_restarts=0))
    assert set(_policies(no_restarts).values()) == {"Never"} and no_restarts["spec"]["runPolicy"]["backoffLimit"] == 0


@pytest.mark.parametrize(
    "breakage",
    [
        lambda m: m["spec"]["tfReplicaSpecs"].__setitem__("Trainer", m["spec"]["tfReplicaSpecs"]["Chief"]),
        lambda m: m["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0].__setitem__("name", "main"),
        lambda m: m["metadata"].__setitem__("name", "Bad_Name"),
        lambda m: m["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["resources"][
            "limits"
        ].__setitem__("memory", "lots"),
    ],
)
def test_schema_rejects_broken_manifests(breakage):
    manifest = tfjob.build_manifest(_spec())
    breakage(manifest)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, SCHEMA)


class FakeCustomObjects:
    """Test double of kubernetes.client.CustomObjectsApi: records creates and deletes, replays
    statuses (the last one repeats). It runs no operator: what the statuses say is written by
    each test (see `_restarting` for the operator behaviour they copy)."""

    def __init__(self, statuses):
        self.statuses = list(statuses)
        self.created = []
        self.deleted = []

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.deleted.append((group, version, namespace, plural, name))

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.created.append((group, version, namespace, plural, body))
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        assert (group, version, plural) == ("kubeflow.org", "v1", "tfjobs")
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"metadata": {"name": name, "namespace": namespace}, "status": status}


def _condition(kind, message=""):
    return {"type": kind, "status": "True", "message": message}


RUNNING = {
    "conditions": [_condition("Created"), _condition("Running")],
    "replicaStatuses": {"Chief": {"active": 1}, "Worker": {"active": 3}},
}


def test_wait_streams_status_changes_and_returns_on_success(caplog):
    api = FakeCustomObjects(
        [
            {},
            RUNNING,
            RUNNING,
            {
                "conditions": [_condition("Succeeded")],
                "replicaStatuses": {"Chief": {"succeeded": 1}, "Worker": {"succeeded": 3}},
            },
        ]
    )
    with caplog.at_level(logging.INFO, logger=tfjob.__name__):
        status = tfjob.wait(api, "j", "ns", poll_seconds=1, sleep=lambda s: None)
    assert status["replicaStatuses"]["Chief"] == {"succeeded": 1}
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "TFJob ns/j: Pending",
        "TFJob ns/j: Created,Running (Chief: active=1; Worker: active=3)",
        "TFJob ns/j: Succeeded (Chief: succeeded=1; Worker: succeeded=3)",
    ]


def test_a_failed_replica_fails_at_once_with_its_type_named():
    api = FakeCustomObjects(
        [
            RUNNING,
            {
                "conditions": [_condition("Running")],
                "replicaStatuses": {"Chief": {"active": 1}, "Worker": {"active": 2, "failed": 1}},
            },
        ]
    )
    with pytest.raises(tfjob.TFJobFailed, match="Worker replicas failed: 1"):
        tfjob.wait(api, "j", "ns", sleep=lambda s: None)


def test_a_failed_job_reports_the_operator_message_and_a_stuck_job_times_out():
    api = FakeCustomObjects(
        [{"conditions": [_condition("Failed", "TFJob j has failed because 1 Chief replica(s) failed.")]}]
    )
    with pytest.raises(tfjob.TFJobFailed, match="1 Chief replica"):
        tfjob.wait(api, "j", "ns", sleep=lambda s: None)
    ticks = iter(range(0, 1000, 10))
    with pytest.raises(tfjob.TFJobFailed, match="did not finish within 30 s"):
        tfjob.wait(
            FakeCustomObjects([RUNNING]), "j", "ns", timeout_seconds=30, sleep=lambda s: None, clock=lambda: next(ticks)
        )


# --- parameter-server jobs: a worker the operator restarts ---------------------------------------
def _wait(api, budget=None):
    """tfjob.wait without sleeping, failing after 100 polls instead of looping on a repeated status."""
    polls = itertools.count()
    return tfjob.wait(
        api,
        "j",
        "ns",
        poll_seconds=1,
        timeout_seconds=100,
        sleep=lambda s: None,
        clock=lambda: next(polls),
        budget=tfjob.RestartBudget() if budget is None else budget,
    )


PS_BUDGET = tfjob.RestartBudget(frozenset({"Worker"}), 2)
PS_RUNNING = {
    "conditions": [_condition("Created"), _condition("Running")],
    "replicaStatuses": {"Chief": {"active": 1}, "Worker": {"active": 2}, "PS": {"active": 1}},
}


def _restarting(since, failed_workers=1):
    """The status the Training Operator (kubeflow/training-operator, release-1.9) stores on the pass
    that sees a Worker pod of an ExitCode replica fail with a retryable code (>= 128,
    pkg/util/train/train_util.go IsRetryableExitCode):
    - pkg/controller.v1/common/pod.go ReconcilePods deletes the pod, sets `Restarting` and counts
      the pod in replicaStatuses.Worker.failed (pkg/core/status.go UpdateJobReplicaStatuses);
    - pkg/controller.v1/tensorflow/tfjob_controller.go UpdateJobStatus keeps `Restarting` (not
      `Failed`) for the failed workers and, `Running` and `Restarting` excluding each other
      (pkg/util/status.go filterOutCondition), the job is not `Running` on that pass.
    `since` is the condition's lastTransitionTime, new for each restart. Not reproduced: the
    passes in between (pod recreated: failed back to 0, `Running` again: PS_RUNNING), event
    timing, pods the operator deletes while the node is lost (counted failed, never restarted)."""
    return {
        "conditions": [
            _condition("Created"),
            dict(
                _condition("Restarting", 'job "j" is restarting because Worker replica(s) failed.'),
                lastTransitionTime=since,
            ),
        ],
        "replicaStatuses": {
            "Chief": {"active": 1},
            "Worker": {"active": 2 - failed_workers, "failed": failed_workers},
            "PS": {"active": 1},
        },
    }


def _succeeded_by_the_chief():
    """UpdateJobStatus (tfjob_controller.go) with a Chief: `Succeeded` once the chief's pod
    succeeded, the PS job's workers and parameter servers still running (they only serve)."""
    return {
        "conditions": [_condition("Created"), {**_condition("Running"), "status": "False"}, _condition("Succeeded")],
        "replicaStatuses": {"Chief": {"succeeded": 1}, "Worker": {"active": 2}, "PS": {"active": 1}},
    }


def test_a_restarted_worker_does_not_fail_a_parameter_server_job_the_chief_then_finishes(caplog):
    statuses = [PS_RUNNING, _restarting("2026-01-01T10:00:00Z"), PS_RUNNING, _succeeded_by_the_chief()]
    with caplog.at_level(logging.INFO, logger=tfjob.__name__):
        status = _wait(FakeCustomObjects(statuses), budget=PS_BUDGET)
    assert status["replicaStatuses"]["Chief"] == {"succeeded": 1}
    assert (
        "TFJob ns/j: Created,Restarting (Chief: active=1; PS: active=1; Worker: active=1, failed=1)" in caplog.messages
    )
    # The same statuses for a job whose workers do not restart (MultiWorkerMirrored): the failure counts.
    with pytest.raises(tfjob.TFJobFailed, match="Worker replicas failed: 1"):
        _wait(FakeCustomObjects(statuses))


def test_a_job_failed_after_worker_restarts_names_the_replica_and_the_restarts():
    backoff = {
        "conditions": [_condition("Failed", "Job j has failed because it has reached the specified backoff limit")],
        "replicaStatuses": {"Chief": {"active": 1}, "Worker": {"active": 1, "failed": 1}, "PS": {"active": 1}},
    }
    api = FakeCustomObjects([PS_RUNNING, _restarting("2026-01-01T10:00:00Z"), PS_RUNNING, backoff])
    with pytest.raises(
        tfjob.TFJobFailed,
        match=r"TFJob ns/j failed: Worker replicas failed: 1; Job j has failed because it has "
        r"reached the specified backoff limit; after 1 Worker restart\(s\)$",
    ):
        _wait(api, budget=PS_BUDGET)
    # ExitCode with a permanent code (a Python error, exit 1): ReconcilePods sets Failed, no restart.
    permanent = {
        "conditions": [_condition("Failed", 'job "j" is failing because "Worker" replica(s) failed.')],
        "replicaStatuses": {"Chief": {"active": 1}, "Worker": {"active": 1, "failed": 1}, "PS": {"active": 1}},
    }
    with pytest.raises(tfjob.TFJobFailed, match='Worker replicas failed: 1; job "j" is failing'):
        _wait(FakeCustomObjects([permanent]), budget=PS_BUDGET)


def test_more_restarts_than_the_budget_delete_the_job_and_fail():
    api = FakeCustomObjects(
        [
            _restarting("2026-01-01T10:00:00Z"),
            _restarting("2026-01-01T10:00:00Z"),
            PS_RUNNING,
            _restarting("2026-01-01T11:00:00Z", failed_workers=2),
        ]
    )
    with pytest.raises(
        tfjob.TFJobFailed,
        match=r"more than kubeflow.tfjob.worker_restarts=2 restarts; after 3 Worker restart\(s\); TFJob deleted",
    ):
        _wait(api, budget=PS_BUDGET)
    assert api.deleted == [("kubeflow.org", "v1", "ns", "tfjobs", "j")] and not api.statuses[1:]
    within = FakeCustomObjects(
        [
            _restarting("2026-01-01T10:00:00Z"),
            PS_RUNNING,
            _restarting("2026-01-01T11:00:00Z"),
            _succeeded_by_the_chief(),
        ]
    )
    _wait(within, budget=PS_BUDGET)  # 2 restarts: within the budget
    assert within.deleted == []


@pytest.mark.parametrize("kind", ["Chief", "PS"])
def test_a_failed_chief_or_parameter_server_fails_the_job_even_while_a_worker_restarts(kind):
    status = _restarting("2026-01-01T10:00:00Z")
    status["replicaStatuses"][kind] = {"failed": 1}
    with pytest.raises(tfjob.TFJobFailed, match=f"{kind} replicas failed: 1"):
        _wait(FakeCustomObjects([status]), budget=PS_BUDGET)
    failed = {
        "conditions": [_condition("Failed", f"TFJob ns/j has failed because 1 {kind} replica(s) failed.")],
        "replicaStatuses": {kind: {"failed": 1}},
    }
    with pytest.raises(
        tfjob.TFJobFailed, match=f"{kind} replicas failed: 1; TFJob ns/j has failed because 1 {kind} replica"
    ):
        _wait(FakeCustomObjects([failed]), budget=PS_BUDGET)


def test_launch_writes_fn_args_submits_and_waits(tmp_path):
    from tfx.components.trainer.fn_args_utils import FnArgs

    from components.trainer.options import TFJobOptions

    fn_args = FnArgs(
        train_files=["a*.gz"],
        eval_files=["b*.gz"],
        train_steps=10,
        model_run_dir=str(tmp_path / "run"),
        serving_model_dir=str(tmp_path / "serving"),
        custom_config={"model": {"num_layers": 1}},
    )
    api = FakeCustomObjects([{"conditions": [_condition("Succeeded")]}])
    tfjob.launch(
        fn_args,
        TFJobOptions(enabled=True, workers=1, poll_seconds=0.01),
        "img:1",
        "ml-team",
        "textgen-train-7",
        api=api,
    )
    ((_, _, namespace, plural, body),) = api.created
    assert (namespace, plural, body["metadata"]["name"]) == ("ml-team", "tfjobs", "textgen-train-7")
    jsonschema.validate(body, SCHEMA)
    fn_args_path = str(tmp_path / "run" / "tfjob_fn_args.json")
    written = json.load(open(fn_args_path))
    assert FnArgs(**written).train_files == ["a*.gz"] and written["custom_config"] == {"model": {"num_layers": 1}}
    for replica in body["spec"]["tfReplicaSpecs"].values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["command"] == [
            "python",
            "-m",
            "components.trainer.training.replica",
            "--fn-args",
            fn_args_path,
        ]
    # What the replica entry point rebuilds: every launcher field, unset ones None.
    rebuilt = tfjob.fn_args_from_json(open(fn_args_path).read())
    assert set(rebuilt) == set(tfjob.FN_ARGS_FIELDS) and rebuilt["train_steps"] == 10 and rebuilt["base_model"] is None


def test_run_fn_launches_a_tfjob_when_enabled_and_trains_itself_inside_a_replica(monkeypatch, tmp_path):
    """The Trainer hook: the launcher submits instead of training; a replica trains."""
    import types

    from components.trainer.options import TFJobOptions
    from components.trainer.training import run_fn as run_fn_module

    launched = []
    monkeypatch.setattr(run_fn_module.tfjob, "launch", lambda *args: launched.append(args))
    monkeypatch.delenv(run_fn_module.tfjob.REPLICA_ENV, raising=False)
    fn_args = types.SimpleNamespace(
        model_run_dir=str(tmp_path / "Trainer" / "model_run" / "17"),
        custom_config={
            "tfjob": TFJobOptions(enabled=True, workers=3, image="img:1").to_parameter(),
            "tfjob_namespace": "team",
        },
    )
    run_fn_module.run_fn(fn_args)  # returns after launching: no training inputs are needed
    ((passed_args, config, image, namespace, job_name),) = launched
    assert (passed_args, config.workers, image, namespace) == (fn_args, 3, "img:1", "team")
    assert job_name.startswith("textgen-train-") and len(job_name) <= 63
    monkeypatch.setenv(run_fn_module.tfjob.REPLICA_ENV, "1")
    assert not run_fn_module._launched_as_tfjob(
        fn_args, run_fn_module.read_trainer_custom_config(fn_args.custom_config)
    )
