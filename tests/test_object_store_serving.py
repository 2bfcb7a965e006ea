"""Promotion, rollback and `generate` on a serving directory on `s3://`, served by a real S3 API
server on localhost (moto, tests/object_store.py).

The serving directory holds two pushed versions of the tiny exported model (tests/conftest.py
`exported_model`), uploaded as the Pusher lays them out. The CLI runs in one subprocess (the S3
settings reach it only through its environment, and tensorflow-io aborts a process that used S3
at exit: components/filesystems.py `exit_process`).
"""

import json
import subprocess
import sys
import textwrap

import pytest

from pipeline.config import PROJECT_ROOT
from tests.object_store import start_server

pytestmark = pytest.mark.slow

BUCKET = "serving-ops"
OUTPUT_ROOT = f"s3://{BUCKET}/runs"
SERVING = f"{OUTPUT_ROOT}/serving"

_SCRIPT = textwrap.dedent("""
    import json
    import sys
    from components import filesystems
    from components.pusher import serving_config
    from pipeline import samples
    from textgen_cli.cli import main

    root, serving = sys.argv[1], sys.argv[2]
    serving_args = ["--output-root", root, "--no-registry"]
    codes = [main(["promote", "2", *serving_args]),
             main(["rollback", *serving_args])]
    labels = serving_config.read_labels(serving)
    resolved = samples.resolve_model_dir(serving)
    codes.append(main(["generate", "--model", serving, "--output-root", root, "--max-new-tokens", "3", "--json", "Hi"]))
    codes.append(main(["generate", "--model", "2", "--output-root", root, "--max-new-tokens", "3", "--json", "Hi"]))
    codes.append(main(["promote", "7", *serving_args]))  # no such version: refused
    print("RESULT " + json.dumps({"codes": codes, "labels": labels, "resolved": resolved}))
    filesystems.exit_process(0)
""")


@pytest.fixture(scope="module")
def s3():
    server = start_server()
    yield server
    server.server.stop()


def test_promote_rollback_and_generate_on_an_s3_serving_directory(s3, exported_model):
    s3.create_bucket(BUCKET)
    for version in (1, 2):
        s3.upload_directory(exported_model[1], BUCKET, f"runs/serving/{version}")
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, OUTPUT_ROOT, SERVING],
        cwd=PROJECT_ROOT,
        env=s3.env(PYTHONPATH=PROJECT_ROOT),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.split("RESULT ", 1)[1])
    assert outcome["codes"][:4] == [0, 0, 0, 0], result.stderr[-3000:]
    assert outcome["codes"][4] != 0 and "holds no complete pushed version 7" in result.stderr
    assert outcome["labels"] == {"stable": 1}  # promoted 2, rolled back to the one before it
    assert outcome["resolved"] == f"{SERVING}/1"  # generate --model SERVING uses the stable version
    continuations = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"prompt"')]
    assert [item["prompt"] for item in continuations] == ["Hi", "Hi"]
    keys = s3.keys(BUCKET, "runs/serving/")
    assert "runs/serving/models.config" in keys
    # The atomic rewrites of models.config leave no staging object and no folder markers behind.
    assert sorted(key for key in keys if not key.startswith(("runs/serving/1/", "runs/serving/2/"))) == [
        "runs/serving/models.config"
    ]
    assert not [key for key in keys if key.endswith("/")]
