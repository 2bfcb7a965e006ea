"""Drift (current span vs previous span) and skew (train vs eval) of length distributions.

TFDV does the comparison: the schema's `drift_comparator` / `skew_comparator` with a
Jensen-Shannon divergence threshold on the numeric features (e.g. num_chars, num_tokens), checked
by `tfdv.validate_statistics` against the previous span's statistics and the eval split's. The
thresholds come from the pipeline config (`data_gate.drift_jsd_threshold`,
`data_gate.skew_jsd_threshold`); results are `Anomaly`s like ExampleValidator's, so the same
block-or-warn rule (`blocking_anomalies`) applies.
"""
from typing import List, Optional, Sequence

import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2

from components.data_gate.anomalies import Anomaly, parse_anomalies

DRIFT_ANOMALY = "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH"


def with_distribution_comparators(schema: schema_pb2.Schema, features: Sequence[str], drift_threshold: Optional[float],
                                  skew_threshold: Optional[float]) -> schema_pb2.Schema:
    """A copy of `schema` whose `features` carry JSD drift/skew comparators (None: not checked)."""
    checked = schema_pb2.Schema()
    checked.CopyFrom(schema)
    for name in features:
        feature = tfdv.get_feature(checked, name)
        if drift_threshold is not None:
            feature.drift_comparator.jensen_shannon_divergence.threshold = drift_threshold
        if skew_threshold is not None:
            feature.skew_comparator.jensen_shannon_divergence.threshold = skew_threshold
    return checked


def distribution_anomalies(
    current: statistics_pb2.DatasetFeatureStatisticsList,
    schema: schema_pb2.Schema,
    features: Sequence[str] = ("num_chars",),
    previous: Optional[statistics_pb2.DatasetFeatureStatisticsList] = None,
    eval_split: Optional[statistics_pb2.DatasetFeatureStatisticsList] = None,
    drift_threshold: Optional[float] = 0.1,
    skew_threshold: Optional[float] = 0.1,
    split: str = "train",
) -> List[Anomaly]:
    """Drift of `current` against `previous` and skew against `eval_split`, as anomalies whose
    description names the divergence TFDV measured. Absent baselines are simply not compared."""
    checked = with_distribution_comparators(schema, features, drift_threshold if previous else None,
                                            skew_threshold if eval_split else None)
    found = tfdv.validate_statistics(current, checked, previous_statistics=previous, serving_statistics=eval_split)
    return [anomaly for anomaly in parse_anomalies(found, split) if DRIFT_ANOMALY in anomaly.types]
