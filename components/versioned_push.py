"""Atomic, versioned publication of a SavedModel under a TF Serving model base path.

A service the stages share, outside every stage's package: the Pusher publishes and retires
versions with it (and `textgen promote` / `rollback` list them through pusher/serving_ops.py), and
the model registry reads a version's `push_info.json` and path with it.

TF Serving watches `<base>/<integer version>/`. A version directory must never be visible
half-written, so the model is copied into a hidden temporary directory on the same filesystem
and renamed into place in one step. Deleting old versions is the mirror image: the version is
first renamed to a hidden name, then removed, so a reader never sees a version directory with half
its files gone.

Version numbers are strictly increasing integers, allocated so that several Pushers sharing one
base path (overlapping runs, several pipelines) never take the same one: a pusher first claims a
number by creating `<base>/.version-claims/<N>` with a conditional create (components/
conditional_writes.py: a hard link on a local disk, `If-None-Match: *` on S3,
`ifGenerationMatch=0` on GCS), which exactly one pusher wins; the loser claims the next number.
Only then does it move its model into `<base>/<N>/`. A claim is removed with its version when
retention deletes it (never the highest claim, so no number is handed out twice); a push that
failed after claiming leaves its number unused. Retention takes the same care: of several pushers
retiring one old version at once, only the one that creates `<claim>.retiring` deletes it.

Everything else goes through `tf.io.gfile`, so the base path may be local or on any filesystem
TensorFlow supports (gs://, s3://, hdfs://). Atomicity of the move rests on that filesystem's
rename: POSIX and HDFS rename directories atomically; object stores (gs://, s3://) emulate a
directory rename by copying objects, so there TF Serving must only be pointed at versions through
`models.config` (which the Pusher writes after the rename completes), never by polling.
TensorFlow's in-memory ram:// renames only the directory entry and leaves the files behind; a push
checks the renamed version and refuses such a filesystem with a clear error.

Each pushed version carries `assets.extra/push_info.json` (the SavedModel convention for extra
files, ignored by TF Serving) recording which model artifact it came from, so a retried push of
the same model returns the existing version instead of publishing a duplicate.
"""

import datetime
import json
import os
import socket
import uuid
from typing import Dict, Iterable, List, NamedTuple, Optional

import tensorflow as tf

from components import conditional_writes

_TEMP_PREFIX = ".incoming-"
_RETIRED_PREFIX = ".retired-"
PUSH_INFO_FILE = os.path.join("assets.extra", "push_info.json")
CLAIMS_DIR = ".version-claims"  # <base>/.version-claims/<N>: version N is taken (module docstring)
_RETIRING_SUFFIX = ".retiring"  # <claim>.retiring: one retention is deleting that version (`_retire`)
# How many times a pusher retries after losing the race for a version number.
_MAX_VERSION_ATTEMPTS = 100


class PushResult(NamedTuple):
    version: int
    path: str
    # False when an identical push (same `push_info["model_id"]`) was already published.
    created: bool = True


def existing_versions(base_dir: str) -> List[int]:
    """Sorted integer version directories under `base_dir` (others are ignored)."""
    if not tf.io.gfile.isdir(base_dir):
        return []
    return sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(base_dir) if name.rstrip("/").isdigit())


def version_path(base_dir: str, version: int) -> str:
    return os.path.join(base_dir, str(version))


def claim_path(base_dir: str, version: int) -> str:
    return os.path.join(base_dir, CLAIMS_DIR, str(version))


def claimed_versions(base_dir: str) -> List[int]:
    """Sorted version numbers claimed under `base_dir`, published or not."""
    directory = os.path.join(base_dir, CLAIMS_DIR)
    if not tf.io.gfile.isdir(directory):
        return []
    return sorted(int(name) for name in tf.io.gfile.listdir(directory) if name.isdigit())


def is_complete_saved_model(directory: str) -> bool:
    """True when `directory` holds a SavedModel's graph and its variables index."""
    return tf.io.gfile.exists(os.path.join(directory, "saved_model.pb")) and tf.io.gfile.exists(
        os.path.join(directory, "variables", "variables.index")
    )


def copy_tree(source: str, destination: str) -> None:
    """Recursively copies a directory with tf.io.gfile (works across local and object stores)."""
    for directory, _, files in tf.io.gfile.walk(source):
        relative = os.path.relpath(directory, source)
        # No os.path.normpath here: it would fold the '//' of 'gs://bucket' into 'gs:/bucket'.
        target_dir = destination if relative == "." else os.path.join(destination, relative)
        tf.io.gfile.makedirs(target_dir)
        for name in files:
            copy_file(os.path.join(directory, name), os.path.join(target_dir, name))


def copy_file(source: str, destination: str) -> None:
    """tf.io.gfile.copy (overwriting), and empty files too: tensorflow-io's S3 file system refuses
    to copy an empty object or a folder marker ("Source is a directory or empty file", its CopyFile
    checks the size), so an empty file is written empty and a folder made instead
    (tests/test_filesystems.py)."""
    info = tf.io.gfile.stat(source)
    if info.is_directory:
        tf.io.gfile.makedirs(destination)
        return
    if info.length == 0:
        with tf.io.gfile.GFile(destination, "wb") as handle:
            handle.write(b"")  # S3 creates no object for a file opened and closed without a write
        return
    tf.io.gfile.copy(source, destination, overwrite=True)


def read_push_info(version_dir: str) -> Dict:
    """The push record inside a pushed version ({} for versions pushed without one)."""
    path = os.path.join(version_dir, PUSH_INFO_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return json.loads(handle.read())


def find_pushed_version(base_dir: str, model_id: str) -> Optional[int]:
    """The version already published from model artifact `model_id`, if any."""
    for version in reversed(existing_versions(base_dir)):
        path = version_path(base_dir, version)
        if str(read_push_info(path).get("model_id", "")) == str(model_id) and is_complete_saved_model(path):
            return version
    return None


def retain_latest(base_dir: str, keep: int, protected: Iterable[int] = ()) -> List[int]:
    """Deletes all but the `keep` highest versions under `base_dir`, never one in `protected`
    (versions models.config serves or labels), with their claims; returns the versions this call
    deleted (a version another pusher's retention is deleting at the same time is left to it)."""
    versions = existing_versions(base_dir)
    keep_set = set(versions[-keep:] if keep > 0 else []) | set(protected)
    return [version for version in versions if version not in keep_set and _retire(base_dir, version)]


def _retire(base_dir: str, version: int) -> bool:
    """Deletes one version (renamed to a hidden name first, so no reader sees it half-deleted)
    and its claim; False when another retention is deleting it. On an object store, where the
    rename copies objects, two pushers retiring one version at once would each copy part of it:
    the one that creates `<claim>.retiring` first (a conditional create) retires it alone."""
    marker = claim_path(base_dir, version) + _RETIRING_SUFFIX
    if conditional_writes.supports(base_dir):
        tf.io.gfile.makedirs(os.path.dirname(marker))
        if not conditional_writes.create(marker, b""):
            return False
    retired = os.path.join(base_dir, f"{_RETIRED_PREFIX}{version}-{uuid.uuid4().hex}")
    try:
        tf.io.gfile.rename(version_path(base_dir, version), retired, overwrite=False)
        tf.io.gfile.rmtree(retired)
    except tf.errors.NotFoundError:  # retired by a retention that listed it before this one (and finished)
        return False
    finally:
        for path in (claim_path(base_dir, version), marker):
            _remove_quietly_file(path)
    return True


def _remove_quietly_file(path: str) -> None:
    """Deletes a claim or retirement marker that may not exist (versions pushed before claims
    existed; a concurrent retention removed it)."""
    try:
        tf.io.gfile.remove(path)
    except tf.errors.NotFoundError:
        pass


def _claim_version(base_dir: str, claimant: Dict) -> int:
    """Claims the lowest free version number above every claimed or published one (module docstring)."""
    tf.io.gfile.makedirs(os.path.join(base_dir, CLAIMS_DIR))
    record = json.dumps(
        dict(
            claimant,
            host=socket.gethostname(),
            pid=os.getpid(),
            claimed_at=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        ),
        sort_keys=True,
    )
    version = max(claimed_versions(base_dir) + existing_versions(base_dir), default=0) + 1
    for _ in range(_MAX_VERSION_ATTEMPTS):
        if conditional_writes.create(claim_path(base_dir, version), record.encode()):
            return version
        version += 1  # another pusher claimed it first
    raise RuntimeError(f"could not claim a version number under {base_dir} after {_MAX_VERSION_ATTEMPTS} attempts")


def _next_version(base_dir: str, claimant: Dict) -> int:
    """The version number this push takes: claimed where the store has conditional writes; on other
    file systems (HDFS, ram://) the next free number, which the directory rename alone secures."""
    if conditional_writes.supports(base_dir):
        return _claim_version(base_dir, claimant)
    return max(existing_versions(base_dir), default=0) + 1


def _publish(staging: str, base_dir: str, claimant: Dict) -> int:
    """Takes the next version number and renames `staging` to it."""
    for _ in range(_MAX_VERSION_ATTEMPTS):
        version = _next_version(base_dir, claimant)
        try:
            tf.io.gfile.rename(staging, version_path(base_dir, version), overwrite=False)
            return version
        except (tf.errors.AlreadyExistsError, tf.errors.FailedPreconditionError, OSError):
            # The directory exists although the number was free: another pusher renamed into it
            # first (where there are no claims) or a Pusher of a release without claims made it
            # (AlreadyExists: gfile saw it; FailedPrecondition/OSError: the OS refused to rename
            # onto it). A claimed number stays unused; take the next.
            if not tf.io.gfile.exists(version_path(base_dir, version)):
                raise
    raise RuntimeError(f"could not publish a version under {base_dir} after {_MAX_VERSION_ATTEMPTS} attempts")


def _check_rename_kept_contents(base_dir: str, version: int, staging: str) -> None:
    """Fails loudly on a filesystem whose directory rename drops the contents (TensorFlow's
    ram:// moves only the directory entry), after taking the empty version back out."""
    final = version_path(base_dir, version)
    if is_complete_saved_model(final):
        return
    retain_latest(base_dir, 0, protected=[v for v in existing_versions(base_dir) if v != version])
    raise OSError(
        f"the filesystem of {base_dir} did not move the contents of {staging} when renaming it to "
        f"{final}; it cannot host an atomic push (use a local, HDFS or object-store path)"
    )


def _remove_quietly(path: str) -> None:
    """Best-effort cleanup of a staging directory after a failed push."""
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    except tf.errors.OpError:
        pass


def push_saved_model(saved_model_dir: str, base_dir: str, push_info: Optional[Dict] = None) -> PushResult:
    """Publishes `saved_model_dir` as the next version under `base_dir`; returns where it went.

    With `push_info` (must hold a `model_id`), a model already published under `base_dir` is not
    published again: its existing version is returned with `created=False`.
    """
    if not tf.io.gfile.exists(os.path.join(saved_model_dir, "saved_model.pb")):
        raise FileNotFoundError(f"{saved_model_dir} is not a SavedModel (no saved_model.pb)")
    tf.io.gfile.makedirs(base_dir)
    if push_info is not None:
        previous = find_pushed_version(base_dir, push_info["model_id"])
        if previous is not None:
            return PushResult(previous, version_path(base_dir, previous), created=False)
    staging = os.path.join(base_dir, f"{_TEMP_PREFIX}{uuid.uuid4().hex}")
    try:
        copy_tree(saved_model_dir, staging)
        if push_info is not None:
            tf.io.gfile.makedirs(os.path.join(staging, "assets.extra"))
            with tf.io.gfile.GFile(os.path.join(staging, PUSH_INFO_FILE), "w") as handle:
                handle.write(json.dumps(push_info, sort_keys=True))
        version = _publish(staging, base_dir, {"push": push_info or {}})
        _check_rename_kept_contents(base_dir, version, staging)
    except BaseException:
        _remove_quietly(staging)
        raise
    return PushResult(version, version_path(base_dir, version))
