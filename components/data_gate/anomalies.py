"""Reading TFDV anomalies written by ExampleValidator, in plain words.

Shared by the data gate (which decides) and the run summary (which reports).
"""

import os
from typing import List, NamedTuple, Sequence

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.types import artifact_utils

SCHEMA_DIFF_FILE = "SchemaDiff.pb"  # the file ExampleValidator writes per split


class Anomaly(NamedTuple):
    """One anomalous feature (or the dataset) in one split."""

    split: str
    feature: str
    types: List[str]
    short_description: str
    description: str

    def to_dict(self) -> dict:
        return self._asdict()

    def label(self) -> str:
        """The short description and the TFDV type names, e.g. `New column [SCHEMA_NEW_COLUMN]`:
        the names `data_gate.allowed_anomaly_types` takes."""
        return f"{self.short_description} [{', '.join(self.types)}]" if self.types else self.short_description

    def __str__(self) -> str:
        return f"[{self.split}] {self.feature}: {self.label()} ({self.description})"


def parse_anomalies(anomalies: anomalies_pb2.Anomalies, split: str) -> List[Anomaly]:
    """Flattens an Anomalies proto into one `Anomaly` per feature (plus one for the dataset)."""
    found = []
    infos = list(anomalies.anomaly_info.items())
    if anomalies.HasField("dataset_anomaly_info"):
        infos.append(("<dataset>", anomalies.dataset_anomaly_info))
    for feature, info in sorted(infos):
        types = [anomalies_pb2.AnomalyInfo.Type.Name(reason.type) for reason in info.reason]
        found.append(Anomaly(split, feature, types, info.short_description, info.description))
    return found


def read_anomalies(uri: str, split_names_json: str) -> List[Anomaly]:
    """Reads every split's anomalies from an ExampleAnomalies artifact's directory.

    Args:
      uri: the artifact's URI.
      split_names_json: its `split_names` property (a JSON list, as TFX stores it).
    """
    found = []
    for split in artifact_utils.decode_split_names(split_names_json):
        path = os.path.join(uri, f"Split-{split}", SCHEMA_DIFF_FILE)
        with tf.io.gfile.GFile(path, "rb") as handle:
            found.extend(parse_anomalies(anomalies_pb2.Anomalies.FromString(handle.read()), split))
    return found


def blocking_anomalies(
    anomalies: Sequence[Anomaly], allowed_types: Sequence[str], warn_only_splits: Sequence[str] = ()
) -> List[Anomaly]:
    """The anomalies that must stop the run: any with a reason type not in `allowed_types`,
    unless it was found in one of `warn_only_splits` (e.g. the 'skew' check set to warn)."""
    allowed, warn_only = set(allowed_types), set(warn_only_splits)
    return [anomaly for anomaly in anomalies if anomaly.split not in warn_only and not set(anomaly.types) <= allowed]
