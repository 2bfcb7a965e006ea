"""A real S3 API server on localhost for tests: moto's `ThreadedMotoServer` (HTTP, path-style,
any credentials accepted), plus the environment a process needs to use it through
`components/filesystems.py`'s conventions.

The server runs in the test process; everything that reads or writes `s3://` through
tf.io.gfile runs in a subprocess given `S3Server.env()`, because tensorflow-io 0.37.1 aborts the
process that used S3 at exit (components/filesystems.py), which would fail pytest itself.
"""
import os
from dataclasses import dataclass
from typing import Dict, List

import boto3
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
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("AWS_", "S3_"))}
        env.update(self.settings())
        env.update(extra)
        return env

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=_CREDENTIALS["AWS_SECRET_ACCESS_KEY"])

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


def start_server() -> S3Server:
    """Starts a moto server on a free localhost port."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return S3Server(server, f"http://{host}:{port}")
