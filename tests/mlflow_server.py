"""A real `mlflow server` on localhost for the tests that talk to a remote registry.

`mlflow server` starts gunicorn, which forks its workers: stopping only the `mlflow` process
leaves gunicorn running (orphaned, still holding its port) after the test. The server is
therefore started in a session of its own and the whole process group is stopped.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Iterator


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_mlflow_server(directory: str, start_timeout: float = 120.0) -> Iterator[str]:
    """An MLflow tracking server with its SQLite store and artifact root under `directory`;
    yields its URL and stops it (gunicorn and its workers included) on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mlflow = os.path.join(os.path.dirname(sys.executable), "mlflow")
    log_path = os.path.join(directory, "mlflow-server.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                mlflow,
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{os.path.join(directory, 'mlflow-server.db')}",
                "--default-artifact-root",
                os.path.join(directory, "mlflow-artifacts"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    try:
        deadline = time.time() + start_timeout
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.time() > deadline:
                with open(log_path, encoding="utf-8", errors="replace") as handle:
                    raise RuntimeError("mlflow server did not start: " + handle.read()[-2000:])
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
