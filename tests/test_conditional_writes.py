"""Create-if-absent and compare-and-swap (components/conditional_writes.py) on a local disk, on S3
(moto's S3 server serving one request at a time, so its conditional PutObject is atomic as S3's
is: tests/object_store.py) and on GCS (fake-gcs-server, `ifGenerationMatch`).

Each store: a second create of one name is refused; a replacement from a stale read is refused;
writers racing in threads on one counter through `update` lose no increment; racing creates of
one name have exactly one winner. boto3 and google-cloud-storage run in the test process (no
tensorflow-io, which would abort it at exit).
"""

import os
import threading

import pytest

from components import conditional_writes
from components.conditional_writes import Snapshot
from tests.object_store import gcs, serial_s3  # noqa: F401  (fixtures)

WRITERS, INCREMENTS = 4, 8


def _increment(data):
    return str(int(data or b"0") + 1).encode()


def _in_threads(count, work):
    """Runs `work(index)` in `count` threads started together; re-raises the first failure."""
    failures, start = [], threading.Barrier(count)

    def run(index):
        start.wait()
        try:
            work(index)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if failures:
        raise failures[0]


def _check_store(directory: str) -> None:
    """The behaviours every store shares (module docstring), under `directory` (a path or URI)."""
    path = f"{directory}/claims/7"
    assert conditional_writes.read(path) == Snapshot(None)
    assert conditional_writes.create(path, b"first")
    assert not conditional_writes.create(path, b"second")
    first = conditional_writes.read(path)
    assert first.data == b"first" and first.token
    assert conditional_writes.replace(path, b"third", first)
    assert not conditional_writes.replace(path, b"lost", first)  # read before "third" was written
    assert not conditional_writes.replace(path, b"lost", Snapshot(None))  # expected absent: it exists
    assert conditional_writes.read(path).data == b"third"

    counter = f"{directory}/counter"
    _in_threads(WRITERS, lambda _: [conditional_writes.update(counter, _increment) for _ in range(INCREMENTS)])
    assert conditional_writes.read(counter).data == str(WRITERS * INCREMENTS).encode()

    contested, winners = f"{directory}/claims/8", []
    _in_threads(
        WRITERS, lambda index: winners.append(index) if conditional_writes.create(contested, b"%d" % index) else None
    )
    assert len(winners) == 1 and conditional_writes.read(contested).data == b"%d" % winners[0]

    def refuse(data):
        raise ValueError("not this change")

    with pytest.raises(ValueError, match="not this change"):
        conditional_writes.update(counter, refuse)
    assert conditional_writes.read(counter).data == str(WRITERS * INCREMENTS).encode()


def test_local_files(tmp_path):
    (tmp_path / "claims").mkdir()
    _check_store(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["claims", "counter"]  # no temporary sibling left behind
    assert sorted(os.listdir(tmp_path / "claims")) == ["7", "8"]


def test_an_unsupported_scheme_is_named(tmp_path):
    assert not conditional_writes.supports("hdfs://namenode/serving")
    with pytest.raises(ValueError, match="not hdfs://"):
        conditional_writes.create("hdfs://namenode/serving/x", b"")


def test_s3_objects(serial_s3, monkeypatch):
    s3 = serial_s3
    for name in [name for name in os.environ if name.startswith(("AWS_", "S3_"))]:
        monkeypatch.delenv(name)
    for name, value in s3.settings().items():
        monkeypatch.setenv(name, value)
    s3.create_bucket("conditional")
    _check_store("s3://conditional/serving")
    # The store's support for conditional writes was checked once, and its probe object removed.
    assert sorted(s3.keys("conditional")) == ["serving/claims/7", "serving/claims/8", "serving/counter"]


def test_gcs_objects(gcs):
    gcs.create_bucket("conditional")
    _check_store("gs://conditional/serving")
    assert gcs.names("conditional") == ["serving/claims/7", "serving/claims/8", "serving/counter"]
