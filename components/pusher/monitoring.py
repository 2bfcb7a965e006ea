"""TF Serving's monitoring configuration file, written beside models.config: Prometheus metrics.

TF Serving serves Prometheus metrics on its REST port when started with
`--monitoring_config_file=<base>/monitoring.config` (and `--rest_api_port`). The file is a
`MonitoringConfig` text proto (tensorflow_serving/config/monitoring_config.proto:
`prometheus_config { enable, path }`); the proto is not in the tensorflow-serving-api wheel, so
the text is formatted here, as batching.py does for its file. The metrics include request counts
and latencies per model and signature, model load state and batching queue delays
(`:tensorflow:serving:*`, `:tensorflow:core:*`).
"""

import json
import os

from components.pusher.options import MonitoringOptions
from components.pusher.serving_config import atomic_write_text

MONITORING_FILE_NAME = "monitoring.config"


def monitoring_config_text(monitoring: MonitoringOptions) -> str:
    """The MonitoringConfig text proto for `monitoring`."""
    enable = "true" if monitoring.prometheus else "false"
    return f"prometheus_config {{\n  enable: {enable}\n  path: {json.dumps(monitoring.path)}\n}}\n"


def write_monitoring_config(base_dir: str, monitoring: MonitoringOptions) -> str:
    """Atomically writes `<base_dir>/monitoring.config`; returns its path."""
    return atomic_write_text(os.path.join(base_dir, MONITORING_FILE_NAME), monitoring_config_text(monitoring))
