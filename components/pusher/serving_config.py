"""The TF Serving model config file written beside the pushed versions.

`<base>/models.config` is a `ModelServerConfig` text proto (the file TF Serving reads with
`--model_config_file`, and re-reads every `--model_config_file_poll_wait_seconds`): the model's
name, its base path, a version policy serving exactly the labelled versions, and the labels
themselves (`stable`, and `canary` while a canary is out). Clients pick a version by label
(`/v1/models/NAME/labels/stable:predict`). Promotion and rollback only rewrite this file.

Every write goes to a temporary file on the same filesystem and is renamed over the old one, so a
polling server never reads half a file. TF Serving only accepts a label on a version it has
already loaded unless it runs with `--allow_version_labels_for_unavailable_models`; the serving
manifest in kubeflow/manifests sets that flag so a push can label its new version in one write.

Updating the labels is a read-modify-write of one file: two writers at the same moment are
last-writer-wins (the version directories themselves are safe, see versioned_push). Pipelines that
push to one serving path should run one at a time (`textgen schedule --max-concurrency 1`).
"""
import os
import uuid
from typing import Dict

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

CONFIG_FILE_NAME = "models.config"
STABLE_LABEL = "stable"
CANARY_LABEL = "canary"
LABELS = (STABLE_LABEL, CANARY_LABEL)


def atomic_write_text(path: str, text: str) -> str:
    """Writes `text` to `path` through a temporary sibling and a rename; returns `path`."""
    directory, name = os.path.split(path)
    staging = os.path.join(directory, f".{name}-{uuid.uuid4().hex}")
    with tf.io.gfile.GFile(staging, "w") as handle:
        handle.write(text)
    try:
        tf.io.gfile.rename(staging, path, overwrite=True)
    except BaseException:
        tf.io.gfile.remove(staging)
        raise
    return path


def serving_config(model_name: str, base_dir: str, labels: Dict[str, int]) -> model_server_config_pb2.ModelServerConfig:
    """The config that serves exactly the versions in `labels` ({label: version}) of `model_name`."""
    unknown = set(labels) - set(LABELS)
    if unknown:
        raise ValueError(f"unknown version label(s) {sorted(unknown)}; use one of {list(LABELS)}")
    if STABLE_LABEL not in labels:
        raise ValueError("a serving config needs a 'stable' version")
    config = model_server_config_pb2.ModelServerConfig()
    model = config.model_config_list.config.add()
    model.name = model_name
    model.base_path = base_dir
    model.model_platform = "tensorflow"
    model.model_version_policy.specific.versions.extend(sorted(set(labels.values())))
    for label, version in labels.items():
        model.version_labels[label] = version
    return config


def config_path(base_dir: str) -> str:
    return os.path.join(base_dir, CONFIG_FILE_NAME)


def write_serving_config(model_name: str, base_dir: str, labels: Dict[str, int]) -> str:
    """Atomically (re)writes `<base_dir>/models.config` serving `labels`; returns its path."""
    text = text_format.MessageToString(serving_config(model_name, base_dir, labels))
    return atomic_write_text(config_path(base_dir), text)


def read_serving_config(base_dir: str) -> model_server_config_pb2.ModelServerConfig:
    """Parses `<base_dir>/models.config`."""
    path = config_path(base_dir)
    with tf.io.gfile.GFile(path) as handle:
        try:
            return text_format.Parse(handle.read(), model_server_config_pb2.ModelServerConfig())
        except text_format.ParseError as exc:
            raise ValueError(f"{path} is not a ModelServerConfig text proto: {exc}") from None


def read_labels(base_dir: str) -> Dict[str, int]:
    """{label: version} currently in `<base_dir>/models.config` ({} before the first push)."""
    if not tf.io.gfile.exists(config_path(base_dir)):
        return {}
    models = read_serving_config(base_dir).model_config_list.config
    return dict(models[0].version_labels) if models else {}


def set_label(model_name: str, base_dir: str, label: str, version: int) -> Dict[str, int]:
    """Points `label` at `version` (keeping the other labels) and rewrites models.config.

    Promoting a version to `stable` that was the canary ends the canary.
    """
    labels = read_labels(base_dir)
    labels[label] = version
    if label == STABLE_LABEL and labels.get(CANARY_LABEL) == version:
        del labels[CANARY_LABEL]
    if STABLE_LABEL not in labels:  # the very first push is stable whatever it was pushed as
        labels[STABLE_LABEL] = version
    write_serving_config(model_name, base_dir, labels)
    return labels
