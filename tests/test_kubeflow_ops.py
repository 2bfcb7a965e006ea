"""`textgen submit` / `textgen schedule` against a KFP API, and the compiled spec's hygiene.

A real KFP cluster cannot run on these machines. The requests are checked against a local HTTP
server started by the test that implements the KFP v2beta1 endpoints the kfp client calls
(healthz, experiments list/create, runs create, recurringruns create) and records every request;
the client itself is the real kfp 2.5 SDK.
"""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from kubeflow.cron import CronError, validate_cron
from textgen_cli.cli import main

SECRET = "s3cr3t-token-value"
COMPILED_ROOT = "gs://bucket/compiled-root"


@pytest.fixture(scope="module")
def compiled_spec(tmp_path_factory):
    """The pipeline compiled with a remote registry configured and credentials in the environment,
    as a CI job holding secrets would compile it."""
    output_dir = tmp_path_factory.mktemp("kfp")
    saved = {key: os.environ.get(key) for key in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "KFP_TOKEN")}
    os.environ.update(MLFLOW_TRACKING_TOKEN=SECRET, MLFLOW_TRACKING_PASSWORD=SECRET, KFP_TOKEN=SECRET)
    try:
        assert (
            main(
                [
                    "compile",
                    "--output-dir",
                    str(output_dir),
                    "--image",
                    "registry.example/textgen:1.0",
                    "--pipeline-root",
                    COMPILED_ROOT,
                    "--data-root",
                    "gs://bucket/corpus",
                    "--serving-dir",
                    "gs://bucket/serving",
                    "--set",
                    "registry.tracking_uri=http://mlflow.textgen.svc:5000",
                    "--set",
                    "registry.credentials_file=/var/run/secrets/mlflow/credentials",
                ]
            )
            == 0
        )
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    return str(output_dir / "pipeline.yaml")


def test_compiled_spec_loads_with_kfp_and_holds_no_credential(compiled_spec):
    import kfp.components

    component = kfp.components.load_component_from_file(compiled_spec)
    assert "Pusher" in component.pipeline_spec.root.dag.tasks
    text = open(compiled_spec).read()
    assert SECRET not in text
    assert "http://mlflow.textgen.svc:5000" in text  # the registry location is configuration, not a secret
    assert "/var/run/secrets/mlflow/credentials" in text  # only the secret's mount path


class _FakeKfp(BaseHTTPRequestHandler):
    """The slice of the KFP v2beta1 REST API that kfp.Client uses for submit/schedule."""

    requests: list = []
    experiments: dict = {}

    def log_message(self, *args):
        pass

    def _reply(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self, body=None) -> tuple:
        url = urlparse(self.path)
        self.requests.append(
            {
                "method": self.command,
                "path": url.path,
                "query": parse_qs(url.query),
                "authorization": self.headers.get("Authorization"),
                "body": body,
            }
        )
        return url.path, parse_qs(url.query)

    def do_GET(self):
        path, query = self._record()
        if path == "/apis/v2beta1/healthz":
            return self._reply({"multi_user": False})
        if path == "/apis/v2beta1/experiments":
            found = [e for e in self.experiments.values() if e["display_name"] in query.get("filter", [""])[0]]
            return self._reply({"experiments": found, "total_size": len(found)} if found else {})
        self.send_error(404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        path, _ = self._record(body)
        if path == "/apis/v2beta1/experiments":
            experiment = dict(body, experiment_id=f"exp-{len(self.experiments) + 1}")
            self.experiments[experiment["experiment_id"]] = experiment
            return self._reply(experiment)
        if path == "/apis/v2beta1/runs":
            return self._reply(dict(body, run_id="run-1", state="PENDING"))
        if path == "/apis/v2beta1/recurringruns":
            return self._reply(dict(body, recurring_run_id="rr-1", status="ENABLED"))
        self.send_error(404)


class _ForbiddingKfp(_FakeKfp):
    """A KFP API that answers /healthz but refuses every experiment request, as a multi-user
    KFP does to a token without access to the namespace."""

    def do_GET(self):
        if urlparse(self.path).path == "/apis/v2beta1/healthz":
            return super().do_GET()
        self._forbid()

    def do_POST(self):
        self._forbid()

    def _forbid(self):
        data = json.dumps({"message": "user is not allowed in namespace ml-team", "code": 7}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _serve(handler):
    """Serves `handler` on a loopback port; yields (its URL, the requests it recorded)."""
    handler.requests, handler.experiments = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.requests
    server.shutdown()
    server.server_close()


class _UnhealthyKfp(_FakeKfp):
    """A KFP API whose /healthz answers 500, as a backend whose database is down does."""

    def do_GET(self):
        self._record()
        self.send_error(500, "Internal Server Error")


@pytest.fixture
def kfp_host():
    yield from _serve(_FakeKfp)


@pytest.fixture
def forbidding_kfp_host():
    yield from _serve(_ForbiddingKfp)


@pytest.fixture
def unhealthy_kfp_host():
    yield from _serve(_UnhealthyKfp)


def _posted(requests, path):
    return [r for r in requests if r["method"] == "POST" and r["path"] == path]


def _dry_run_body(capsys, argv) -> dict:
    assert main(argv + ["--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert SECRET not in json.dumps(printed)
    return printed


def test_schedule_sends_the_recurring_run_its_dry_run_printed(compiled_spec, kfp_host, capsys, monkeypatch):
    host, requests = kfp_host
    monkeypatch.setenv("KFP_TOKEN", SECRET)
    argv = [
        "schedule",
        "--spec",
        compiled_spec,
        "--host",
        host,
        "--namespace",
        "ml-team",
        "--experiment",
        "nightly",
        "--cron",
        "0 0 2 * * *",
        "--max-concurrency",
        "2",
        "--name",
        "textgen nightly",
        "--pipeline-root",
        "gs://bucket/root",
    ]
    printed = _dry_run_body(capsys, argv)
    assert requests == []  # a dry run contacts nothing
    assert printed["request"]["path"] == "/apis/v2beta1/recurringruns"
    assert printed["auth"] == "bearer token from $KFP_TOKEN"
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["recurring_run_id"] == "rr-1"
    (experiment,) = _posted(requests, "/apis/v2beta1/experiments")
    assert (experiment["body"]["display_name"], experiment["body"]["namespace"]) == ("nightly", "ml-team")
    (sent,) = _posted(requests, "/apis/v2beta1/recurringruns")
    assert all(r["authorization"] == f"Bearer {SECRET}" for r in requests)
    body = sent["body"]
    assert body["experiment_id"] == "exp-1"
    assert body["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert (body["max_concurrency"], body["no_catchup"], body["mode"]) == (2, True, "ENABLE")
    assert body["runtime_config"]["pipeline_root"] == "gs://bucket/root"
    assert body["pipeline_spec"] == yaml.safe_load(open(compiled_spec))
    assert body == dict(printed["request"]["body"], experiment_id="exp-1")


def test_submit_creates_one_run_with_a_token_from_a_file(compiled_spec, kfp_host, capsys, tmp_path):
    host, requests = kfp_host
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    argv = [
        "submit",
        "--spec",
        compiled_spec,
        "--host",
        host,
        "--token-file",
        str(token_file),
        "--run-name",
        "try 1",
        "--pipeline-root",
        "gs://bucket/root",
    ]
    printed = _dry_run_body(capsys, argv)
    assert printed["auth"] == f"bearer token from file {token_file}"
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["run_id"] == "run-1"
    (sent,) = _posted(requests, "/apis/v2beta1/runs")
    assert all(r["authorization"] == f"Bearer {SECRET}" for r in requests)
    assert sent["body"] == dict(printed["request"]["body"], experiment_id="exp-1")
    assert sent["body"]["display_name"] == "try 1"


@pytest.mark.parametrize("command", ["submit", "schedule"])
@pytest.mark.parametrize("root", ["minio://mlpipeline/v2/artifacts", "/mnt/pipeline-root", "hdfs://nn/root"])
def test_submit_and_schedule_refuse_a_pipeline_root_tf_cannot_read(compiled_spec, kfp_host, capsys, command, root):
    host, requests = kfp_host
    argv = [command, "--spec", compiled_spec, "--host", host, "--pipeline-root", root]
    if command == "schedule":
        argv += ["--cron", "0 0 2 * * *"]
    assert main(argv) == 64
    assert "is not a gs:// or s3:// URI" in capsys.readouterr().err
    assert requests == []


@pytest.mark.parametrize("command", [[], ["--cron", "@daily"]], ids=["submit", "schedule"])
def test_an_http_error_from_the_host_is_one_line_with_the_servers_message(
    compiled_spec, forbidding_kfp_host, capsys, command
):
    host, _ = forbidding_kfp_host
    argv = [
        "schedule" if command else "submit",
        "--spec",
        compiled_spec,
        "--host",
        host,
        "--namespace",
        "ml-team",
        "--pipeline-root",
        "gs://bucket/root",
    ] + command
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == (
        f"textgen: KFP host {host} refused the request: HTTP 403 Forbidden: user is not allowed in namespace ml-team\n"
    )


@pytest.mark.parametrize("command", [[], ["--cron", "@daily"]], ids=["submit", "schedule"])
def test_without_pipeline_root_the_run_uses_the_root_the_spec_was_compiled_for(compiled_spec, capsys, command):
    argv = ["schedule" if command else "submit", "--spec", compiled_spec] + command
    printed = _dry_run_body(capsys, argv)
    assert printed["request"]["body"]["runtime_config"]["pipeline_root"] == COMPILED_ROOT


def test_an_unhealthy_host_is_one_line_without_kfps_retry_tracebacks(compiled_spec, unhealthy_kfp_host, capsys):
    host, requests = unhealthy_kfp_host
    assert main(["submit", "--spec", compiled_spec, "--host", host, "--pipeline-root", "gs://bucket/root"]) == 1
    assert capsys.readouterr().err == f"textgen: KFP host {host} refused the request: HTTP 500 Internal Server Error\n"
    # One try: kfp's own get_kfp_healthz would make five, 5 s apart, logging a traceback each.
    assert [(r["method"], r["path"]) for r in requests] == [("GET", "/apis/v2beta1/healthz")]


def test_schedule_rejects_bad_cron_before_contacting_anything(compiled_spec, kfp_host, capsys):
    host, requests = kfp_host
    for cron in ("0 2 * * *", "0 0 25 * * *", "0 0 2 * * MOO", "*/0 * * * * *", "@fortnightly"):
        assert main(["schedule", "--spec", compiled_spec, "--host", host, "--cron", cron]) == 64, cron
    assert "6 with seconds first" in capsys.readouterr().err
    assert requests == []


@pytest.mark.parametrize(
    "good", ["0 0 2 * * *", "0 0 9 ? * 2-6", "0 */15 8-18 * JAN-MAR MON,FRI", "@daily", "@every 6h30m"]
)
def test_cron_accepts_kfp_expressions(good):
    assert validate_cron(good) == good


@pytest.mark.parametrize(
    "bad,message",
    [
        ("0 2 * * *", "5 fields"),
        ("0 0 24 * * *", "hour field: 24"),
        ("0 0 2 ? * ?x", "day-of-week"),
        ("0 5-1 * * * *", "backwards"),
        ("0 0 2 * 13 *", "month field"),
    ],
)
def test_cron_rejects_with_the_field_named(bad, message):
    with pytest.raises(CronError, match=message):
        validate_cron(bad)


@pytest.mark.slow
def test_the_compiled_pusher_command_pushes_and_registers_from_kfp_executor_input(compiled_spec, tmp_path):
    """The project's own Pusher through the KFP v2 container entrypoint: input artifacts and their
    metadata arrive as KFP sends them (numbers as JSON numbers), the serving path is overridden in
    parameterValues, and MLFLOW_TRACKING_URI in the pod environment (here an SQLite store) wins over
    the compiled registry.tracking_uri."""
    import subprocess
    import sys

    from pipeline.config import PROJECT_ROOT
    from tests.pusher_fixtures import fake_saved_model

    spec = yaml.safe_load(open(compiled_spec))
    container = spec["deploymentSpec"]["executors"]["Pusher_executor"]["container"]
    parameters = {
        name: value["runtimeValue"]["constant"]
        for name, value in spec["root"]["dag"]["tasks"]["Pusher"]["inputs"]["parameters"].items()
    }
    parameters["serving_dir"] = str(tmp_path / "serving")
    secret = tmp_path / "credentials"  # stands in for the mounted secret the compiled spec names
    secret.write_text("MLFLOW_TRACKING_TOKEN=unused-by-sqlite\n")
    parameters["registry"] = json.dumps(dict(json.loads(parameters["registry"]), credentials_file=str(secret)))
    model_uri = str(tmp_path / "Trainer" / "model")
    fake_saved_model(os.path.join(model_uri, "Format-Serving"))

    def artifact(title, uri, metadata):
        return {
            "artifacts": [
                {
                    "name": f"projects/x/artifacts/{title}",
                    "type": {"schemaTitle": title},
                    "uri": uri,
                    "metadata": metadata,
                }
            ]
        }

    executor_input = {
        "inputs": {
            "parameterValues": parameters,
            "artifacts": {
                "model": artifact("tfx.Model", model_uri, {}),
                "model_blessing": artifact(
                    "tfx.ModelBlessing",
                    str(tmp_path / "blessing"),
                    {"blessed": 1, "perplexity": 4.5, "current_model_id": 7, "reason": "ok"},
                ),
                "examples": artifact(
                    "tfx.Examples", str(tmp_path / "examples"), {"span": 3, "split_names": '["train"]'}
                ),
            },
        },
        "outputs": {
            "artifacts": {"pushed_model": artifact("tfx.PushedModel", str(tmp_path / "pushed"), {})},
            "outputFile": str(tmp_path / "executor_output.json"),
        },
    }
    command = container["command"] + [
        json.dumps(executor_input) if arg == "{{$}}" else arg for arg in container["args"]
    ]
    tracking_uri = f"sqlite:///{tmp_path}/mlflow.db"
    env = dict(os.environ, MLFLOW_TRACKING_URI=tracking_uri)
    completed = subprocess.run(
        [sys.executable] + command[1:], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600, env=env
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    (pushed,) = json.load(open(executor_input["outputs"]["outputFile"]))["artifacts"]["pushed_model"]["artifacts"]
    assert (pushed["metadata"]["pushed"], pushed["metadata"]["pushed_version"]) == (1, 1)
    assert pushed["metadata"]["registry_uri"] == tracking_uri
    assert os.path.exists(tmp_path / "serving" / "1" / "saved_model.pb")
    from components.registry import model_registry as registry

    version = registry.ModelRegistry(tracking_uri, "textgen").client.get_model_version("textgen", "1")
    assert version.tags["metric.perplexity"] == "4.5" and "metric.current_model_id" not in version.tags
    assert version.tags[registry.TAG_SPAN] == "3"
