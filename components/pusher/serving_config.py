"""The TF Serving model config file written beside the pushed versions.

`<base>/models.config` is a `ModelServerConfig` text proto (the file TF Serving reads with
`--model_config_file`, and re-reads with `--model_config_file_poll_wait_seconds`): the model's name,
its base path, a version policy serving exactly the pushed version, and a `stable` label on it.
It is written to a temporary file and renamed, so a polling server never reads half a file.
"""
import os
import uuid

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

CONFIG_FILE_NAME = "models.config"
STABLE_LABEL = "stable"


def serving_config(model_name: str, base_dir: str, version: int) -> model_server_config_pb2.ModelServerConfig:
    """The config that serves `version` of `model_name` from `base_dir`, labelled stable."""
    config = model_server_config_pb2.ModelServerConfig()
    model = config.model_config_list.config.add()
    model.name = model_name
    model.base_path = base_dir
    model.model_platform = "tensorflow"
    model.model_version_policy.specific.versions.append(version)
    model.version_labels[STABLE_LABEL] = version
    return config


def write_serving_config(model_name: str, base_dir: str, version: int) -> str:
    """Atomically (re)writes `<base_dir>/models.config`; returns its path."""
    path = os.path.join(base_dir, CONFIG_FILE_NAME)
    staging = os.path.join(base_dir, f".{CONFIG_FILE_NAME}-{uuid.uuid4().hex}")
    with tf.io.gfile.GFile(staging, "w") as handle:
        handle.write(text_format.MessageToString(serving_config(model_name, base_dir, version)))
    tf.io.gfile.rename(staging, path, overwrite=True)
    return path


def read_serving_config(base_dir: str) -> model_server_config_pb2.ModelServerConfig:
    """Parses `<base_dir>/models.config`."""
    with tf.io.gfile.GFile(os.path.join(base_dir, CONFIG_FILE_NAME)) as handle:
        return text_format.Parse(handle.read(), model_server_config_pb2.ModelServerConfig())
