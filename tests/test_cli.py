"""The `textgen` command line: documented options and exit codes, and expected failures reported
as one line on stderr (no traceback, no echoed secret) that change nothing."""

import os
import re

import pytest

from pipeline import errors
from pipeline.config import PROJECT_ROOT, ConfigError
from tests.pusher_fixtures import fake_saved_model
from textgen_cli.cli import EXIT_FAILED, EXIT_USAGE, build_parser, main


def _one_line_error(capsys) -> str:
    """The command's stderr, checked to be exactly one `textgen: ...` line."""
    err = capsys.readouterr().err
    assert err.startswith("textgen: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def test_run_help_documents_every_flag_and_config_key(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = capsys.readouterr().out
    for flag in ("--data-root", "--output-root", "--config", "--set", "--no-cache"):
        assert flag in text
    assert "training.train_steps" in text and "evaluator.max_perplexity" in text


def test_help_and_the_docs_document_every_exit_code(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    help_text = capsys.readouterr().out
    with open(os.path.join(PROJECT_ROOT, "docs", "operations.md"), encoding="utf-8") as handle:
        documented_codes = {int(code) for code in re.findall(r"^\| (\d+) \|", handle.read(), re.MULTILINE)}
    for code, _ in errors.EXIT_CODES:
        assert re.search(rf"^  {code} ", help_text, re.MULTILINE), code
    assert documented_codes == {code for code, _ in errors.EXIT_CODES}


def _usage_error(argv, capsys) -> str:
    """The one `textgen: ...` line of a command line the parser refuses with EXIT_USAGE."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    return _one_line_error(capsys)


def test_a_usage_error_exits_64_not_the_data_gates_2(capsys):
    message = _usage_error(["rollback", "--to", "three"], capsys)
    assert message == "textgen: rollback: argument --to: invalid int value: 'three' (see `textgen rollback --help`)\n"
    assert "unrecognized arguments: --bogus" in _usage_error(["options", "--bogus"], capsys)


@pytest.mark.parametrize(
    "flag,value,allowed",
    [
        ("--top-p", "1.5", "in (0, 1]"),
        ("--top-p", "0", "in (0, 1]"),
        ("--top-p", "nan", "in (0, 1]"),
        ("--temperature", "-1", ">= 0"),
        ("--top-k", "-3", ">= 0"),
        ("--max-new-tokens", "0", ">= 1"),
        ("--max-new-tokens", "-5", ">= 1"),
    ],
)
def test_generate_refuses_a_sampling_value_out_of_range(flag, value, allowed, tmp_path, capsys):
    message = _usage_error(["generate", "--model", str(tmp_path), flag, value, "hello"], capsys)
    assert f"textgen: generate: argument {flag}: must be {allowed}, got {value}" in message


def test_generate_accepts_the_edges_of_each_range_and_states_its_defaults(capsys):
    args = build_parser().parse_args(
        [
            "generate",
            "--model",
            "1",
            "--top-p",
            "1",
            "--temperature",
            "0",
            "--top-k",
            "0",
            "--max-new-tokens",
            "1",
            "hello",
        ]
    )
    assert (args.top_p, args.temperature, args.top_k, args.max_new_tokens, args.seed) == (1.0, 0.0, 0, 1, 0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for default in (
        "(default: 160)",
        "(default: 0.8)",
        "(default: 20)",
        "(default: 1.0)",
        "give the same text (default: 0)",
    ):
        assert default in help_text


# --- the error mapping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc,code,line",
    [
        (
            ConfigError("invalid configuration (x.yaml):\n  unknown key 'a.b'\n  c.d: bad"),
            EXIT_USAGE,
            "invalid configuration (x.yaml): unknown key 'a.b'; c.d: bad",
        ),
        (
            FileNotFoundError("spec.yaml does not exist; run `textgen compile` first"),
            EXIT_FAILED,
            "spec.yaml does not exist; run `textgen compile` first",
        ),
        (
            FileNotFoundError(2, "No such file or directory", "/no/such"),
            EXIT_FAILED,
            "/no/such: No such file or directory",
        ),
        (NotADirectoryError(20, "Not a directory", "/etc/hostname/x"), EXIT_FAILED, "/etc/hostname/x: Not a directory"),
        (PermissionError(13, "Permission denied", "/srv/runs"), EXIT_FAILED, "/srv/runs: Permission denied"),
        (errors.Refused("no complete pushed version 7"), EXIT_FAILED, "no complete pushed version 7"),
        (errors.UsageError("'0 2 * * *' has 5 fields"), EXIT_USAGE, "'0 2 * * *' has 5 fields"),
        (
            errors.CommandError("cannot reach https://alice:hunter2@kfp.example"),
            EXIT_FAILED,
            "cannot reach https://***@kfp.example",
        ),
    ],
)
def test_each_expected_failure_is_one_redacted_line_with_its_exit_code(exc, code, line, capsys):
    assert errors.report(exc) == code
    assert capsys.readouterr().err == f"textgen: {line}\n"


@pytest.mark.parametrize("exc", [ValueError("x"), KeyError("x"), RuntimeError("x"), OSError("disk on fire")])
def test_an_unexpected_error_is_not_mapped(exc, capsys):
    assert errors.report(exc) is None
    assert capsys.readouterr().err == ""


def test_an_unexpected_error_keeps_its_traceback(monkeypatch):
    from textgen_cli import commands

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(commands, "options", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["options"])


# --- expected failures of each command, end to end -------------------------------------------------


def test_unknown_config_key_exits_with_a_usage_error(capsys):
    assert main(["run", "--set", "training.stepz=3"]) == EXIT_USAGE
    assert "unknown key 'training.stepz'" in _one_line_error(capsys)


def test_a_refused_config_value_never_echoes_a_password(capsys):
    assert main(["compile", "--set", "registry.tracking_uri=http://alice:hunter2@mlflow.example"]) == EXIT_USAGE
    message = _one_line_error(capsys)
    assert "must not embed credentials" in message and "http://***@mlflow.example" in message
    assert "hunter2" not in message and "alice" not in message


def test_an_override_that_is_not_yaml_never_echoes_a_password(capsys):
    assert main(["compile", "--set", "registry.tracking_uri=[http://alice:hunter2@mlflow.example"]) == EXIT_USAGE
    message = _one_line_error(capsys)
    assert "a --set value is not valid YAML: while parsing a flow sequence; expected ',' or ']'" in message
    assert "hunter2" not in message and "alice" not in message


def test_run_on_a_missing_data_root_refuses_before_creating_anything(tmp_path, capsys):
    output_root = tmp_path / "out"
    assert main(["run", "--data-root", str(tmp_path / "no-corpus"), "--output-root", str(output_root)]) == EXIT_FAILED
    assert f"data root {tmp_path / 'no-corpus'} is not a directory" in _one_line_error(capsys)
    assert not output_root.exists()


def test_generate_rejects_a_path_without_a_model(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path), "hello"]) == EXIT_FAILED
    assert "is neither a SavedModel directory nor a serving directory" in _one_line_error(capsys)


def test_generate_resolves_a_version_number_under_the_serving_dir(tmp_path, capsys):
    from pipeline.samples import resolve_model_dir

    serving = tmp_path / "serving"
    (serving / "2").mkdir(parents=True)
    (serving / "2" / "saved_model.pb").write_bytes(b"")
    assert resolve_model_dir("2", str(serving)) == str(serving / "2")
    assert resolve_model_dir(str(serving)) == str(serving / "2")
    assert main(["generate", "--model", "7", "--output-root", str(tmp_path), "hello"]) == EXIT_FAILED
    assert _one_line_error(capsys) == (
        f"textgen: no pushed model version 7 under {serving} (its versions are 2); a version number is looked up "
        "under the --output-root's serving/ (default runs/local): give --output-root for another run's, or "
        "--model with the SavedModel's path\n"
    )
    assert main(["generate", "--model", "1", "--output-root", str(tmp_path / "elsewhere"), "hello"]) == EXIT_FAILED
    assert f"no pushed model version 1 under {tmp_path / 'elsewhere' / 'serving'} (it holds no pushed version)" in (
        _one_line_error(capsys)
    )


def test_generate_from_a_serving_dir_uses_the_stable_version_not_the_highest(tmp_path):
    from components.pusher.serving_config import write_serving_config
    from pipeline.samples import resolve_model_dir

    serving = tmp_path / "serving"
    for version in (1, 2, 3):
        fake_saved_model(serving / str(version))
    assert resolve_model_dir(str(serving)) == str(serving / "3")  # no models.config: the highest
    write_serving_config("textgen", str(serving), {"stable": 2, "canary": 3})  # e.g. after `rollback --to 2`
    assert resolve_model_dir(str(serving)) == str(serving / "2")


def test_generate_from_a_saved_model_that_does_not_load_is_one_line(tmp_path, capsys):
    model = fake_saved_model(tmp_path / "serving" / "1")  # files shaped like a SavedModel, not a parsable graph
    assert main(["generate", "--model", model, "hello"]) == EXIT_FAILED
    assert f"textgen: cannot generate from {model}: Cannot parse file" in _one_line_error(capsys)


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sync stopped."}]
TURNS = [("system", "Be brief."), ("user", "Sync stopped.")]


def test_messages_reads_a_bare_list_a_training_record_and_json_lines(tmp_path):
    """`generate --messages`: a JSON list of turns, the training data's {"messages": [...]} record
    (its other keys ignored), pretty-printed or not, or a JSON Lines file of either, one
    conversation per line."""
    import json

    from pipeline.samples import read_conversations

    bare, record, lines = tmp_path / "bare.json", tmp_path / "record.json", tmp_path / "data.jsonl"
    bare.write_text(json.dumps(MESSAGES), encoding="utf-8")
    record.write_text(json.dumps({"messages": MESSAGES, "id": 7}, indent=2), encoding="utf-8")
    lines.write_text(
        json.dumps({"messages": MESSAGES, "source": "tickets"}) + "\n\n" + json.dumps(MESSAGES[1:]) + "\n",
        encoding="utf-8",
    )
    assert read_conversations(str(bare)) == [TURNS]
    assert read_conversations(str(record)) == [TURNS]
    assert read_conversations(str(lines)) == [TURNS, TURNS[1:]]


@pytest.mark.parametrize(
    "text,problem",
    [
        (
            '{"prompt": "Hi", "completion": "Hello"}',
            """: an object needs a "messages" list (its keys: 'completion', 'prompt'); expected a JSON list""",
        ),
        ('"Hi"', ": a string is no conversation; expected a JSON list"),
        ('{"messages": []}', ": an empty list is no conversation"),
        ('[{"role": "user"}]', ": message 0 is not an object with string role and content"),
        ('[{"role": "user", "content": "Hi"}]\n{"messages": 3}', " line 2: a number is no conversation"),
        (
            '[{"role": "user", "content": "Hi"}]\n{"messages": [',
            " is neither one JSON document nor JSON Lines: line 2 is not valid JSON",
        ),
        ("[{", " is not valid JSON"),
    ],
)
def test_messages_in_any_other_form_is_a_usage_error_naming_the_file_and_the_forms(text, problem, tmp_path, capsys):
    model = fake_saved_model(tmp_path / "model")  # the file is read before the model is loaded
    path = tmp_path / "conversation.json"
    path.write_text(text, encoding="utf-8")
    assert main(["generate", "--model", model, "--messages", str(path)]) == EXIT_USAGE
    assert _one_line_error(capsys).startswith(f"textgen: generate: --messages {path}{problem}")


def test_messages_with_system_or_prompts_is_a_usage_error(tmp_path, capsys):
    model = fake_saved_model(tmp_path / "model")
    path = tmp_path / "conversation.json"
    path.write_text("[]", encoding="utf-8")
    assert main(["generate", "--model", model, "--messages", str(path), "--system", "Be brief."]) == EXIT_USAGE
    assert "with --messages put a system turn in the conversation" in _one_line_error(capsys)
    assert main(["generate", "--model", model, "--messages", str(path), "Hi"]) == EXIT_USAGE
    assert "--messages takes whole conversations; give no prompts with it" in _one_line_error(capsys)


def test_a_refused_rollback_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "dir"
    assert main(["rollback", "--output-root", str(missing)]) == EXIT_FAILED
    assert "no model registry at" in _one_line_error(capsys)
    assert main(["rollback", "--no-registry", "--output-root", str(missing)]) == EXIT_FAILED
    assert "has no models.config with a stable version" in _one_line_error(capsys)
    assert not (tmp_path / "no").exists()


class _RegistryWithoutVersions:
    """Stands in for an existing MLflow registry that has no record of any pushed version
    (`ModelRegistry.version_for_serving` raises this LookupError; test_registry checks it does).
    A real store is not created here: MLflow's database migration reconfigures logging, closing
    the stream absl captured at import, which inside a capturing test is pytest's own."""

    def version_for_serving(self, serving_base, serving_version):
        raise LookupError(f"no version of registered model 'textgen' was pushed as {serving_base}/{serving_version}")


def test_a_version_the_registry_does_not_know_is_refused_and_nothing_changes(tmp_path, capsys, monkeypatch):
    from components.pusher import serving_config
    from components.registry import model_registry as registry

    monkeypatch.setattr(
        registry.ModelRegistry, "from_config", classmethod(lambda cls, *args, **kwargs: _RegistryWithoutVersions())
    )
    fake_saved_model(tmp_path / "serving" / "3")
    assert main(["promote", "3", "--output-root", str(tmp_path)]) == EXIT_FAILED
    message = _one_line_error(capsys)
    assert "no version of registered model 'textgen' was pushed as" in message and "nothing changed" in message
    assert serving_config.read_labels(str(tmp_path / "serving")) == {}
    assert main(["promote", "7", "--no-registry", "--output-root", str(tmp_path)]) == EXIT_FAILED
    assert "holds no complete pushed version 7 (available: [3])" in _one_line_error(capsys)


def test_refused_submit_and_schedule_exit_64_and_a_missing_spec_exits_1(tmp_path, capsys):
    spec = str(tmp_path / "pipeline.yaml")
    assert main(["schedule", "--spec", spec, "--cron", "0 2 * * *", "--pipeline-root", "gs://b/r"]) == EXIT_USAGE
    assert "6 with seconds first" in _one_line_error(capsys)
    assert main(["submit", "--spec", spec, "--pipeline-root", "/mnt/root", "--dry-run"]) == EXIT_USAGE
    assert "is not a gs:// or s3:// URI" in _one_line_error(capsys)
    assert main(["submit", "--spec", spec, "--pipeline-root", "gs://b/r", "--dry-run"]) == EXIT_FAILED
    assert f"{spec} does not exist; run `textgen compile` first" in _one_line_error(capsys)


def _minimal_spec(tmp_path) -> str:
    """A pipeline spec file `kubeflow.submit.load_pipeline_spec` accepts, without compiling."""
    path = tmp_path / "pipeline.yaml"
    path.write_text("pipelineInfo: {name: textgen}\nroot: {dag: {tasks: {}}}\ndeploymentSpec: {executors: {}}\n")
    return str(path)


def _closed_loopback_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("command", [[], ["--cron", "@daily"]], ids=["submit", "schedule"])
def test_an_unreachable_kfp_host_is_one_line_naming_it(command, tmp_path, capsys):
    host = f"http://alice:hunter2@127.0.0.1:{_closed_loopback_port()}"
    argv = [
        "schedule" if command else "submit",
        "--spec",
        _minimal_spec(tmp_path),
        "--host",
        host,
        "--pipeline-root",
        "gs://bucket/root",
    ] + command
    assert main(argv) == EXIT_FAILED
    message = _one_line_error(capsys)
    assert f"cannot reach KFP host http://***@127.0.0.1:{host.rsplit(':', 1)[1]}: Connection refused" in message


@pytest.mark.parametrize("command", [[], ["--cron", "@daily"]], ids=["submit", "schedule"])
def test_a_kfp_host_that_never_answers_times_out_in_one_line(command, tmp_path, capsys):
    """A listening socket nobody reads from: the kernel completes the TCP handshake, so the client
    connects and sends its request, and no answer ever comes (a hung API server or proxy). Without
    a timeout the client would wait forever: after 10 s the socket is closed (its pending
    connections reset), so such a regression fails here instead of hanging."""
    import socket
    import threading
    import time

    import kfp  # noqa: F401  (imported before the clock starts)

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        argv = [
            "schedule" if command else "submit",
            "--spec",
            _minimal_spec(tmp_path),
            "--host",
            host,
            "--pipeline-root",
            "gs://bucket/root",
            "--set",
            "kubeflow.request_timeout=0.5",
        ] + command
        watchdog = threading.Timer(10, silent.close)
        watchdog.start()
        started = time.monotonic()
        try:
            assert main(argv) == EXIT_FAILED
        finally:
            watchdog.cancel()
        elapsed = time.monotonic() - started
    assert (
        _one_line_error(capsys) == f"textgen: KFP host {host} did not answer within 0.5 s (kubeflow.request_timeout)\n"
    )
    assert elapsed < 5, elapsed  # one wait of 0.5 s: the timed-out read is not retried


def test_the_progress_log_leaves_a_failed_component_to_the_one_line_error():
    import logging

    from textgen_cli.logs import ProgressFilter

    def record(pathname, level, msg):
        return logging.LogRecord("absl", level, pathname, 1, msg, None, None)

    launcher = os.path.join("site-packages", "tfx", "orchestration", "portable", "launcher.py")
    assert not ProgressFilter().filter(record(launcher, logging.ERROR, "Execution %d failed."))
    assert ProgressFilter().filter(record(launcher, logging.ERROR, "Something else broke"))


@pytest.mark.parametrize("command", [[], ["--cron", "@daily"]], ids=["submit", "schedule"])
def test_submit_refuses_a_placeholder_bucket_in_the_pipeline_root_or_the_spec(command, tmp_path, capsys):
    """The Kubeflow walkthrough (docs/kubeflow.md) names gs://BUCKET; the kubeflow.* defaults name gs://YOUR-BUCKET."""
    submit = ["schedule" if command else "submit", *command, "--dry-run"]
    spec = _minimal_spec(tmp_path)
    assert main(submit + ["--spec", spec, "--pipeline-root", "gs://BUCKET/root"]) == EXIT_USAGE
    assert "pipeline root 'gs://BUCKET/root' names the placeholder bucket BUCKET" in _one_line_error(capsys)
    assert main(submit + ["--spec", spec]) == EXIT_USAGE  # neither the flag nor the spec: kubeflow.pipeline_root
    assert "'gs://YOUR-BUCKET/textgen/pipeline-root' names the placeholder bucket YOUR-BUCKET" in _one_line_error(
        capsys
    )
    with open(spec, "a", encoding="utf-8") as handle:
        handle.write("defaultPipelineRoot: gs://my-bucket/root\nx: {data_root: gs://YOUR-BUCKET/textgen/corpus}\n")
    assert main(submit + ["--spec", spec]) == EXIT_USAGE
    assert f"{spec} names the placeholder bucket YOUR-BUCKET" in _one_line_error(capsys)


# --- what a command that loads TensorFlow prints -------------------------------------------------

IMPORT_NOISE = """\
2026-12-03 16:11:48.529508: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:479] Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been registered
2026-12-03 16:11:48.547214: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:10575] Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered
2026-12-03 16:11:48.547290: E external/local_xla/xla/stream_executor/cuda/cuda_blas.cc:1442] Unable to register cuBLAS factory: Attempting to register factory for plugin cuBLAS when one has already been registered
2026-12-05 12:23:30.696010: E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512. Falling back to the default Eigen-based implementation if present.
"""


def test_only_tensorflows_import_noise_is_dropped():
    from textgen_cli.logs import without_import_noise

    other = "2026-12-03 16:11:49.000000: E tensorflow/core/framework/op_kernel.cc:1] OP_REQUIRES failed\n"
    assert without_import_noise(IMPORT_NOISE) == ""
    similar = "2026-12-03 16:11:49.000000: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:1] cuFFT failed\n"
    assert without_import_noise(similar + other) == similar + other
    assert without_import_noise(IMPORT_NOISE + other) == other


def test_a_refused_promote_prints_only_its_textgen_line(tmp_path):
    """`textgen promote` loads TensorFlow, whose import writes three `E external/local_xla/...
    Unable to register cuFFT/cuDNN/cuBLAS factory` lines from C++ at any TF_CPP_MIN_LOG_LEVEL
    below 3: a fresh process, as a user runs it, prints only the `textgen:` line."""
    import subprocess
    import sys

    environment = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = PROJECT_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "textgen_cli.cli", "promote", "7", "--output-root", str(tmp_path / "out")],
        cwd=str(tmp_path),
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == EXIT_FAILED, done.stderr
    assert done.stderr.startswith("textgen: no model registry at ") and done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""


def test_tensorflows_first_int64_kernel_writes_nothing_after_loading():
    """oneDNN writes an ERROR-level DT_INT64 note at a process's first int64 kernel on the AMD EPYCs
    (`textgen generate` printed it after the prompt's ids were built); `load_tensorflow` runs that
    kernel while it captures stderr, so an int64 op afterwards, as `generate` runs, writes nothing."""
    import subprocess
    import sys

    script = (
        "from textgen_cli import logs; logs.load_tensorflow(); import tensorflow as tf; "
        "tf.transpose(tf.constant([[1, 2], [3, 4]], tf.int64)); print('ran')"
    )
    environment = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = PROJECT_ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    environment["PYTHONWARNINGS"] = "ignore"
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    assert "DT_INT64" not in done.stderr, done.stderr
