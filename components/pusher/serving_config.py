"""The TF Serving model config file written beside the pushed versions.

`<base>/models.config` is a `ModelServerConfig` text proto (the file TF Serving reads with
`--model_config_file`, and re-reads every `--model_config_file_poll_wait_seconds`): the model's
name, its base path, a version policy serving exactly the labelled versions, and the labels
themselves (`stable`, and `canary` while a canary is out). Clients pick a version by label
(`/v1/models/NAME/labels/stable:predict`). Promotion and rollback only rewrite this file.

A polling server never reads half a file: TF Serving only accepts a label on a version it has
already loaded unless it runs with `--allow_version_labels_for_unavailable_models`; the serving
manifest in kubeflow/manifests sets that flag so a push can label its new version in one write.

Changing the labels (`update_labels`) is a read-modify-write of one file made safe for several
writers at once (Pushers of overlapping runs, a `textgen promote` during a run): the new file is
written only if models.config still holds what the change was computed from (a compare-and-swap:
the ETag on S3, the generation on GCS, the content under the serving directory's `flock` on a
local disk; components/conditional_writes.py), else the change is applied again to what the other
writer left. So no writer's label is lost, and the labels end as the last writer's change left them.
Each local write is a temporary file renamed over the old one; an object-store write is one
object PUT, which readers see whole or not at all.
"""

import os
import uuid
from typing import Callable, Dict, NamedTuple, Optional

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from components import conditional_writes

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
    """Atomically (re)writes `<base_dir>/models.config` serving `labels`, whatever it held before
    (a tool's reset; a change of labels is `update_labels`); returns its path."""
    text = text_format.MessageToString(serving_config(model_name, base_dir, labels))
    return atomic_write_text(config_path(base_dir), text)


def _parse(text: str, path: str) -> model_server_config_pb2.ModelServerConfig:
    try:
        return text_format.Parse(text, model_server_config_pb2.ModelServerConfig())
    except text_format.ParseError as exc:
        raise ValueError(f"{path} is not a ModelServerConfig text proto: {exc}") from None


def read_serving_config(base_dir: str) -> model_server_config_pb2.ModelServerConfig:
    """Parses `<base_dir>/models.config`."""
    path = config_path(base_dir)
    with tf.io.gfile.GFile(path) as handle:
        return _parse(handle.read(), path)


def _labels_of(config: model_server_config_pb2.ModelServerConfig) -> Dict[str, int]:
    models = config.model_config_list.config
    return dict(models[0].version_labels) if models else {}


def read_labels(base_dir: str) -> Dict[str, int]:
    """{label: version} currently in `<base_dir>/models.config` ({} before the first push)."""
    if not tf.io.gfile.exists(config_path(base_dir)):
        return {}
    return _labels_of(read_serving_config(base_dir))


class LabelChange(NamedTuple):
    """The labels of models.config just before and just after one successful update."""

    before: Dict[str, int]
    after: Dict[str, int]


def _labels_in(data: Optional[bytes], path: str) -> Dict[str, int]:
    return _labels_of(_parse(data.decode("utf-8"), path)) if data is not None else {}


def update_labels(model_name: str, base_dir: str, change: Callable[[Dict[str, int]], Dict[str, int]]) -> LabelChange:
    """Rewrites models.config with `change(labels it holds now)`, compare-and-swap (module
    docstring): `change` may be called again, with another writer's labels, and must not have side
    effects; an exception from it leaves models.config as it was."""
    path = config_path(base_dir)

    def rewrite(data: Optional[bytes]) -> bytes:
        return text_format.MessageToString(
            serving_config(model_name, base_dir, change(_labels_in(data, path)))
        ).encode()

    tf.io.gfile.makedirs(base_dir)
    previous, written = conditional_writes.update(path, rewrite)
    return LabelChange(_labels_in(previous.data, path), _labels_in(written, path))


def with_label(labels: Dict[str, int], label: str, version: int) -> Dict[str, int]:
    """`labels` with `label` pointing at `version` (the others kept). Promoting a version to
    `stable` that was the canary ends the canary; the very first label is stable too."""
    labels = dict(labels, **{label: version})
    if label == STABLE_LABEL and labels.get(CANARY_LABEL) == version:
        del labels[CANARY_LABEL]
    if STABLE_LABEL not in labels:  # the very first push is stable whatever it was pushed as
        labels[STABLE_LABEL] = version
    return labels


def set_label(model_name: str, base_dir: str, label: str, version: int) -> Dict[str, int]:
    """Points `label` at `version` in models.config (see `with_label`); returns the labels written."""
    return update_labels(model_name, base_dir, lambda labels: with_label(labels, label, version)).after
