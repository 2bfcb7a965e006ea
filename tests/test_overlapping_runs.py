"""End to end: a `textgen validate` started on an output root while another one runs there refuses
(exit 75, one line naming the running one) and changes nothing of it.

`validate` is the smallest real run that holds the lock: ExampleGen to the DataGate under
LocalDagRunner on a tiny corpus. Both are subprocesses (`python -m textgen_cli.cli`), as a user's or
a scheduler's would be.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from ml_metadata.metadata_store import metadata_store
from tfx import v1 as tfx

from pipeline.config import PROJECT_ROOT
from pipeline.errors import EXIT_BUSY, EXIT_OK
from tests.conftest import write_tiny_corpus

pytestmark = pytest.mark.slow


def _validate(data_root, output_root, **popen):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "textgen_cli.cli",
            "validate",
            "--data-root",
            str(data_root),
            "--output-root",
            str(output_root),
        ],
        cwd=PROJECT_ROOT,
        env=dict(os.environ, PYTHONPATH=PROJECT_ROOT),
        text=True,
        **popen,
    )


def _holder_of(lock_file, process, timeout=600):
    """The lock record of `process` once it holds the output root (it takes the lock after its
    imports and location checks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the first run ended before it took the lock"
        try:
            record = json.loads(lock_file.read_text())
            if record["pid"] == process.pid:
                return record
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError("the first run never took the lock")


def test_a_second_validate_on_a_running_output_root_refuses_and_changes_nothing(tmp_path):
    data_root, output_root = write_tiny_corpus(str(tmp_path / "corpus")), tmp_path / "out"
    first = _validate(data_root, output_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        holder = _holder_of(output_root / "run.lock", first)
        second = _validate(data_root, output_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = second.communicate(timeout=300)
        assert first.poll() is None, "the first run had ended: the second one did not overlap it"
        first_out, first_err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == EXIT_BUSY, err[-3000:]
    assert err.startswith("textgen: ") and err.count("\n") == 1, err[-3000:]
    assert f"is in use by run {holder['run_id']} (pid {first.pid} on {socket.gethostname()}" in err
    assert out == ""

    assert first.returncode == EXIT_OK, first_err[-3000:]
    assert f"run id: {holder['run_id']}" in first_out
    summary = json.loads((output_root / "last_run.json").read_text())
    assert summary["run_id"] == holder["run_id"] and summary["succeeded"]
    assert set(summary["components"].values()) == {"COMPLETE"}
    assert os.listdir(output_root / "runs") == [f"{holder['run_id']}.json"]
    assert json.loads((output_root / "runs" / f"{holder['run_id']}.json").read_text()) == summary
    connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(str(output_root / "metadata.sqlite"))
    runs = metadata_store.MetadataStore(connection).get_contexts_by_type("pipeline_run")
    assert [run.name for run in runs] == [holder["run_id"]]
    assert (output_root / "run.lock").read_text() == ""  # released
