"""Drift (this span vs the last accepted span) and skew (train vs eval) of the text statistics.

TFDV does the comparison: the curated schema puts `drift_comparator` / `skew_comparator`
Jensen-Shannon divergence thresholds on the distribution features (num_chars and the character
class fractions), and `tfdv.validate_statistics` measures them against the baseline statistics.
The findings come back as `Anomaly`s, like ExampleValidator's, in a split named `drift` or
`skew`, so the data gate can apply a block-or-warn action per check; every measurement (also
those under the threshold) is kept for the run summary.
"""

from typing import Dict, List, NamedTuple, Optional

import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from components.data_gate.anomalies import Anomaly, parse_anomalies

DIVERGENCE_ANOMALY = "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH"
DRIFT, SKEW = "drift", "skew"  # the checks, also the split names of their anomalies


class Measurement(NamedTuple):
    """One comparison TFDV made: the divergence of `feature` for `check`, and its threshold."""

    check: str
    feature: str
    divergence: float
    threshold: float

    def to_dict(self) -> dict:
        return self._asdict()


class CheckResult(NamedTuple):
    """The outcome of one check: an Anomalies proto holding only the comparators' findings (over
    a threshold) and every measurement."""

    anomalies: anomalies_pb2.Anomalies
    measurements: List[Measurement]


def _only_divergence(anomalies: anomalies_pb2.Anomalies) -> anomalies_pb2.Anomalies:
    """A copy keeping only the comparators' reasons: validate_statistics also re-runs the schema
    checks ExampleValidator already reported, and those are left to it."""
    kept = anomalies_pb2.Anomalies()
    kept.CopyFrom(anomalies)
    kept.ClearField("dataset_anomaly_info")
    for feature in list(kept.anomaly_info):
        info = kept.anomaly_info[feature]
        reasons = [
            reason for reason in info.reason if anomalies_pb2.AnomalyInfo.Type.Name(reason.type) == DIVERGENCE_ANOMALY
        ]
        if not reasons:
            del kept.anomaly_info[feature]
            continue
        del info.reason[:]
        info.reason.extend(reasons)
        info.short_description = reasons[0].short_description
        info.description = " ".join(reason.description for reason in reasons)
    return kept


def _measurements(anomalies: anomalies_pb2.Anomalies, check: str) -> List[Measurement]:
    found = []
    for info in anomalies.drift_skew_info:
        feature = ".".join(info.path.step)
        for measurement in info.drift_measurements if check == DRIFT else info.skew_measurements:
            found.append(Measurement(check, feature, measurement.value, measurement.threshold))
    return sorted(found, key=lambda m: m.feature)


def compare(
    current: statistics_pb2.DatasetFeatureStatisticsList,
    schema: schema_pb2.Schema,
    check: str,
    baseline: statistics_pb2.DatasetFeatureStatisticsList,
) -> CheckResult:
    """Runs the schema's drift comparators (`check` == DRIFT, baseline = earlier statistics) or
    skew comparators (SKEW, baseline = the other split) on `current`."""
    if check == DRIFT:
        found = tfdv.validate_statistics(current, schema, previous_statistics=baseline)
    elif check == SKEW:
        found = tfdv.validate_statistics(current, schema, serving_statistics=baseline)
    else:
        raise ValueError(f"unknown distribution check {check!r} (expected {DRIFT!r} or {SKEW!r})")
    return CheckResult(_only_divergence(found), _measurements(found, check))


def divergence_anomalies(result: CheckResult, check: str) -> List[Anomaly]:
    """The check's findings as `Anomaly`s (split = the check's name)."""
    return parse_anomalies(result.anomalies, check)


def example_count(statistics: statistics_pb2.DatasetFeatureStatisticsList) -> int:
    """Number of examples the statistics summarise (0 for an empty list)."""
    return sum(dataset.num_examples for dataset in statistics.datasets)


def too_few_examples(
    min_examples: int, **sides: Optional[statistics_pb2.DatasetFeatureStatisticsList]
) -> Optional[str]:
    """Why a comparison between `sides` would be noise (fewer than `min_examples` on a side), or None."""
    small: Dict[str, int] = {name: example_count(stats) for name, stats in sides.items() if stats is not None}
    small = {name: count for name, count in small.items() if count < min_examples}
    if not small:
        return None
    listing = ", ".join(f"{name} has {count}" for name, count in sorted(small.items()))
    return (
        f"too few documents for a meaningful comparison ({listing}; data_gate.distribution_min_examples={min_examples})"
    )
