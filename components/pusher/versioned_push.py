"""Atomic, versioned publication of a SavedModel under a TF Serving model base path.

TF Serving watches `<base>/<integer version>/`. A version directory must never be visible
half-written, so the model is copied into a hidden temporary directory on the same filesystem
and renamed into place in one step. Versions are strictly increasing integers.
"""
import os
import uuid
from typing import List, NamedTuple

import tensorflow as tf

_TEMP_PREFIX = ".incoming-"


class PushResult(NamedTuple):
    version: int
    path: str


def existing_versions(base_dir: str) -> List[int]:
    """Sorted integer version directories under `base_dir` (others are ignored)."""
    if not tf.io.gfile.isdir(base_dir):
        return []
    return sorted(int(name.rstrip("/")) for name in tf.io.gfile.listdir(base_dir) if name.rstrip("/").isdigit())


def _copy_tree(source: str, destination: str) -> None:
    """Recursively copies a directory with tf.io.gfile (works across local and object stores)."""
    for directory, _, files in tf.io.gfile.walk(source):
        relative = os.path.relpath(directory, source)
        target_dir = os.path.normpath(os.path.join(destination, relative))
        tf.io.gfile.makedirs(target_dir)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target_dir, name), overwrite=True)


def retain_latest(base_dir: str, keep: int) -> List[int]:
    """Deletes all but the `keep` highest versions under `base_dir`; returns the deleted versions."""
    versions = existing_versions(base_dir)
    stale = versions[:-keep] if keep > 0 else []
    for version in stale:
        tf.io.gfile.rmtree(os.path.join(base_dir, str(version)))
    return stale


def push_saved_model(saved_model_dir: str, base_dir: str) -> PushResult:
    """Publishes `saved_model_dir` as the next version under `base_dir`; returns where it went."""
    if not tf.io.gfile.exists(os.path.join(saved_model_dir, "saved_model.pb")):
        raise FileNotFoundError(f"{saved_model_dir} is not a SavedModel (no saved_model.pb)")
    tf.io.gfile.makedirs(base_dir)
    versions = existing_versions(base_dir)
    version = (versions[-1] + 1) if versions else 1
    staging = os.path.join(base_dir, f"{_TEMP_PREFIX}{version}-{uuid.uuid4().hex}")
    final = os.path.join(base_dir, str(version))
    try:
        _copy_tree(saved_model_dir, staging)
        tf.io.gfile.rename(staging, final, overwrite=False)
    except BaseException:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.rmtree(staging)
        raise
    return PushResult(version, final)
