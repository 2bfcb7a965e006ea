"""Writes that cannot lose a race: create-if-absent and compare-and-swap of small files, on a local
disk, `s3://` and `gs://`.

Several writers may share one serving directory (overlapping scheduled runs, one pipeline per
team, a `textgen promote` while a run pushes). Two of them must never take the same version
number, and a read-modify-write of `models.config` must not drop another writer's labels.
tf.io.gfile offers neither: its writes are unconditional, and on object stores its rename copies
objects one by one. Each store's own primitive is used instead:

- local paths: a file is created with a hard link from a complete temporary sibling (`link`
  fails when the name exists, so a reader never sees it half-written); a replacement renames a
  temporary sibling over the file while holding an exclusive `flock` of its directory, after
  checking, under that lock, that the file still holds what the writer read (its sha256). The
  lock is held only for that check and rename.
- `s3://`: PutObject with `If-None-Match: *` (create) or `If-Match: <ETag>` (replace), which S3
  evaluates atomically (AWS S3 since 2024). An S3-compatible store that ignores those headers
  would let two writers both win, so the first conditional write to a bucket in a process probes
  it and refuses a store that accepts a second create of one key (`UnsupportedStore`). boto3 is
  configured from the S3 settings of components/filesystems.py.
- `gs://`: an upload with `ifGenerationMatch` (0: only if absent; else the generation read),
  through google-cloud-storage (credentials from the environment, as Beam's GCS file system).

A refused write returns False; `update` reads again and retries, so every writer's change is
applied, each to the state the previous one left.
"""

import fcntl
import hashlib
import logging
import os
import random
import threading
import time
import uuid
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from components.filesystems import beam_s3_options, scheme_of

log = logging.getLogger(__name__)

# How many times `update` re-reads after another writer changed the file first.
_MAX_UPDATE_ATTEMPTS = 200


class Snapshot(NamedTuple):
    """What a file held when it was read: its bytes (None: it did not exist) and the store's
    version of them (S3 ETag, GCS generation, sha256 of a local file; "" when absent)."""

    data: Optional[bytes]
    token: str = ""


class UnsupportedStore(RuntimeError):
    """An object store that does not honour conditional writes: nothing can be allocated safely on it."""


def _bucket_and_key(uri: str) -> Tuple[str, str]:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key


_SCHEMES = ("", "s3", "gs")


def supports(uri: str) -> bool:
    """True when `uri` is on a store this module writes conditionally (local, s3://, gs://)."""
    return scheme_of(uri) in _SCHEMES


def _dispatch(uri: str, operations: Dict[str, Callable]):
    scheme = scheme_of(uri)
    if scheme not in operations:
        raise ValueError(f"{uri}: conditional writes are supported on local paths, s3:// and gs://, not {scheme}://")
    return operations[scheme]


# --- local files -------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_local(path: str) -> Snapshot:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return Snapshot(None)
    return Snapshot(data, _sha256(data))


def _temporary_sibling(path: str, data: bytes) -> str:
    """A complete, synced copy of `data` beside `path` under a hidden unique name."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}-{uuid.uuid4().hex}")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return temporary


def _create_local(path: str, data: bytes) -> bool:
    temporary = _temporary_sibling(path, data)
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.remove(temporary)


def _replace_local(path: str, data: bytes, expected: Snapshot) -> bool:
    directory = os.path.dirname(path) or "."
    temporary = _temporary_sibling(path, data)
    lock = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the directory's own lock, held for the check and the rename
        if _read_local(path).token != expected.token:
            return False
        os.replace(temporary, path)
        temporary = ""
        return True
    finally:
        os.close(lock)  # releases the flock
        if temporary:
            os.remove(temporary)


# --- s3:// -------------------------------------------------------------------------------------

_s3_lock = threading.Lock()
_s3_clients: Dict[Tuple, object] = {}
_s3_checked_buckets = set()
# S3's answers to a refused condition: 412 (the ETag or absence did not hold), 409 (a concurrent
# conditional write to the key is in progress), NoSuchKey (the object an If-Match named is gone).
_S3_REFUSALS = {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}
_S3_REFUSAL_STATUSES = {412, 409}


def _s3_client():
    """One boto3 client per S3 setting (clients are thread-safe; creating them is not)."""
    options = beam_s3_options(os.environ)
    key = tuple(sorted((name, str(value)) for name, value in options.items()))
    with _s3_lock:
        if key not in _s3_clients:
            import boto3
            from botocore.config import Config

            kwargs = {}
            if options.get("s3_endpoint_url"):
                kwargs.update(endpoint_url=options["s3_endpoint_url"], config=Config(s3={"addressing_style": "path"}))
            if options.get("s3_region_name"):
                kwargs["region_name"] = options["s3_region_name"]
            if "s3_verify" in options:
                kwargs["verify"] = options["s3_verify"]
            _s3_clients[key] = boto3.session.Session().client("s3", **kwargs)
        return _s3_clients[key]


def _s3_refused(error) -> bool:
    """True when a boto3 ClientError is S3 refusing a write's condition (not a real failure)."""
    code = str(error.response.get("Error", {}).get("Code", ""))
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in _S3_REFUSALS or status in _S3_REFUSAL_STATUSES


def _s3_put(uri: str, data: bytes, **condition: str) -> bool:
    from botocore.exceptions import ClientError

    bucket, key = _bucket_and_key(uri)
    _check_s3_conditional_writes(bucket, key)
    try:
        _s3_client().put_object(Bucket=bucket, Key=key, Body=data, **condition)
        return True
    except ClientError as exc:
        if _s3_refused(exc):
            return False
        raise


def _check_s3_conditional_writes(bucket: str, key: str) -> None:
    """Once per bucket and process: creates a probe object beside `key` twice with
    `If-None-Match: *` and refuses a store that accepts the second create (module docstring)."""
    from botocore.exceptions import ClientError

    if bucket in _s3_checked_buckets:
        return
    client = _s3_client()
    probe = "/".join(filter(None, [os.path.dirname(key), f".conditional-write-probe-{uuid.uuid4().hex}"]))
    try:
        client.put_object(Bucket=bucket, Key=probe, Body=b"1", IfNoneMatch="*")
        try:
            client.put_object(Bucket=bucket, Key=probe, Body=b"2", IfNoneMatch="*")
        except ClientError as exc:
            if not _s3_refused(exc):
                raise
        else:
            raise UnsupportedStore(
                f"the S3 store of s3://{bucket} ignores conditional writes (a PutObject with If-None-Match: * "
                f"replaced an existing object): two writers could take the same version; use a store that "
                f"supports them (AWS S3, or an S3-compatible server that implements If-None-Match and If-Match)"
            )
    finally:
        client.delete_object(Bucket=bucket, Key=probe)
    _s3_checked_buckets.add(bucket)


def _read_s3(uri: str) -> Snapshot:
    from botocore.exceptions import ClientError

    bucket, key = _bucket_and_key(uri)
    try:
        reply = _s3_client().get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return Snapshot(None)
        raise
    return Snapshot(reply["Body"].read(), reply["ETag"])


def _create_s3(uri: str, data: bytes) -> bool:
    return _s3_put(uri, data, IfNoneMatch="*")


def _replace_s3(uri: str, data: bytes, expected: Snapshot) -> bool:
    if expected.data is None:
        return _create_s3(uri, data)
    return _s3_put(uri, data, IfMatch=expected.token)


# --- gs:// -------------------------------------------------------------------------------------

_gcs_lock = threading.Lock()
_gcs_clients: Dict[str, object] = {}
_GCS_EMULATOR = "STORAGE_EMULATOR_HOST"  # google-cloud-storage's own setting for an emulator


def _gcs_blob(uri: str):
    """The object at `uri`, through one google-cloud-storage client per endpoint."""
    from google.cloud import storage

    endpoint = os.environ.get(_GCS_EMULATOR, "")
    with _gcs_lock:
        if endpoint not in _gcs_clients:
            _gcs_clients[endpoint] = storage.Client(project=None)  # project=None: no project lookup needed
    bucket, key = _bucket_and_key(uri)
    return _gcs_clients[endpoint].bucket(bucket).blob(key)


def _read_gcs(uri: str) -> Snapshot:
    from google.api_core.exceptions import NotFound, PreconditionFailed

    blob = _gcs_blob(uri)
    while True:
        try:
            blob.reload()
        except NotFound:
            return Snapshot(None)
        try:  # the bytes of exactly the generation the metadata named
            return Snapshot(blob.download_as_bytes(if_generation_match=blob.generation), str(blob.generation))
        except (PreconditionFailed, NotFound):  # rewritten or deleted between the two requests
            continue


def _upload_gcs(uri: str, data: bytes, generation: int) -> bool:
    from google.api_core.exceptions import PreconditionFailed

    try:
        _gcs_blob(uri).upload_from_string(data, if_generation_match=generation)
        return True
    except PreconditionFailed:
        return False


def _create_gcs(uri: str, data: bytes) -> bool:
    return _upload_gcs(uri, data, 0)


def _replace_gcs(uri: str, data: bytes, expected: Snapshot) -> bool:
    return _upload_gcs(uri, data, 0 if expected.data is None else int(expected.token))


# --- the interface -----------------------------------------------------------------------------


def read(uri: str) -> Snapshot:
    """The file's bytes and version (Snapshot(None) when it does not exist)."""
    return _dispatch(uri, {"": _read_local, "s3": _read_s3, "gs": _read_gcs})(uri)


def create(uri: str, data: bytes) -> bool:
    """Creates `uri` holding `data` only if nothing exists there; False when something does."""
    return _dispatch(uri, {"": _create_local, "s3": _create_s3, "gs": _create_gcs})(uri, data)


def replace(uri: str, data: bytes, expected: Snapshot) -> bool:
    """Writes `data` to `uri` only if it still holds what `expected` read (or, for a Snapshot of
    an absent file, only if it is still absent); False when another writer changed it first."""
    return _dispatch(uri, {"": _replace_local, "s3": _replace_s3, "gs": _replace_gcs})(uri, data, expected)


def update(uri: str, change: Callable[[Optional[bytes]], bytes]) -> Tuple[Snapshot, bytes]:
    """Replaces the file's bytes with `change(current bytes or None)`, compare-and-swap: when
    another writer got there first, reads again and applies `change` to what that writer left.
    Returns (the snapshot the change was applied to, the bytes written). An exception from
    `change` leaves the file as it was."""
    for attempt in range(_MAX_UPDATE_ATTEMPTS):
        current = read(uri)
        written = change(current.data)
        if replace(uri, written, current):
            return current, written
        log.debug("%s changed while it was being updated (attempt %d); reading it again", uri, attempt + 1)
        time.sleep(random.uniform(0, 0.05 * min(attempt + 1, 10)))  # spreads out writers that keep colliding
    raise RuntimeError(f"could not update {uri}: other writers changed it {_MAX_UPDATE_ATTEMPTS} times in a row")
