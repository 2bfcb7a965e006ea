"""The drift baseline: train-split statistics of the latest span that passed the data gate.

Drift is measured against data that was accepted, so a span the gate blocked never becomes the
reference for the next one. After a passing gate, `RecordAcceptedStatistics` publishes an
`AcceptedStatistics` artifact; the next run's resolver hands the latest one to the
DistributionValidator. A plain "latest artifact" resolver is used because it is the one that
compiles to Kubeflow Pipelines too.

Re-running the pipeline on the same span is common (a fix, a new model config), and comparing a
span with itself says nothing. So each artifact keeps two snapshots:

    latest/FeatureStats.pb    the accepted span's train statistics   (custom property `span`)
    earlier/FeatureStats.pb   the span accepted before it, if any     (`earlier_span`, -1 if none)

and a run of span S compares against `latest` when its span is older than S, against `earlier`
when `latest` is S itself (a re-run), and skips with a recorded reason on a first run or a
backfill of a span older than the latest accepted one.
"""
import os
from typing import NamedTuple, Optional

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx import types

STATISTICS_FILE = "FeatureStats.pb"  # StatisticsGen's per-split file name
LATEST, EARLIER = "latest", "earlier"
NO_SPAN = -1


class AcceptedStatistics(types.Artifact):
    """Train statistics of the latest accepted span and of the one accepted before it."""

    TYPE_NAME = "components.AcceptedStatistics"  # importable schema title (see components/__init__.py)


class DriftBaseline(NamedTuple):
    """What the current span is compared with: statistics and their span, or why nothing."""

    statistics: Optional[statistics_pb2.DatasetFeatureStatisticsList]
    span: Optional[int]
    skipped_reason: str = ""


def split_statistics_path(statistics_uri: str, split: str) -> str:
    """Where StatisticsGen wrote one split's statistics."""
    return os.path.join(statistics_uri, f"Split-{split}", STATISTICS_FILE)


def load_statistics(path: str) -> statistics_pb2.DatasetFeatureStatisticsList:
    """Reads a binary DatasetFeatureStatisticsList, naming the file if it is missing."""
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"statistics file {path} does not exist")
    return tfdv.load_stats_binary(path)


def examples_span(examples: types.Artifact) -> int:
    """The span of an Examples artifact. TFX's ExampleGen driver records it as a custom property
    (StatisticsGen copies only the standard property, which stays 0), so read that first."""
    if examples.has_custom_property("span"):
        return int(examples.get_int_custom_property("span"))
    return int(examples.span)


def _span_property(artifact: types.Artifact, name: str) -> int:
    return int(artifact.get_int_custom_property(name)) if artifact.has_custom_property(name) else NO_SPAN


def drift_baseline(accepted: Optional[types.Artifact], span: int) -> DriftBaseline:
    """Picks the statistics span `span` is compared with (see the module docstring)."""
    if accepted is None:
        return DriftBaseline(None, None, "no span has passed the data gate before (first run)")
    latest_span, earlier_span = _span_property(accepted, "span"), _span_property(accepted, "earlier_span")
    if latest_span < span:
        return DriftBaseline(load_statistics(os.path.join(accepted.uri, LATEST, STATISTICS_FILE)), latest_span)
    if latest_span == span and earlier_span != NO_SPAN:
        return DriftBaseline(load_statistics(os.path.join(accepted.uri, EARLIER, STATISTICS_FILE)), earlier_span)
    if latest_span == span:
        return DriftBaseline(None, None, f"span {span} is the only span that has passed the data gate (a re-run)")
    return DriftBaseline(None, None, f"span {span} is older than the latest accepted span {latest_span} "
                                     "(a backfill); drift is checked going forward only")


def _copy(source: str, destination_dir: str) -> None:
    tf.io.gfile.makedirs(destination_dir)
    tf.io.gfile.copy(source, os.path.join(destination_dir, STATISTICS_FILE), overwrite=True)


def record_accepted(output: types.Artifact, train_statistics_path: str, span: int,
                    accepted_before: Optional[types.Artifact]) -> None:
    """Writes `output` as the new baseline after span `span` passed the gate.

    A backfill (a span older than the latest accepted) leaves the baseline as it was.
    """
    before_span = _span_property(accepted_before, "span") if accepted_before is not None else NO_SPAN
    if before_span > span:
        latest_path, latest_span = os.path.join(accepted_before.uri, LATEST, STATISTICS_FILE), before_span
        earlier_span = _span_property(accepted_before, "earlier_span")
        earlier_path = os.path.join(accepted_before.uri, EARLIER, STATISTICS_FILE)
    else:
        latest_path, latest_span = train_statistics_path, span
        if before_span == span:  # a re-run keeps the span accepted before this one
            earlier_span = _span_property(accepted_before, "earlier_span")
            earlier_path = os.path.join(accepted_before.uri, EARLIER, STATISTICS_FILE)
        else:
            earlier_span = before_span
            earlier_path = os.path.join(accepted_before.uri, LATEST, STATISTICS_FILE) if accepted_before else ""
    _copy(latest_path, os.path.join(output.uri, LATEST))
    if earlier_span != NO_SPAN:
        _copy(earlier_path, os.path.join(output.uri, EARLIER))
    output.set_int_custom_property("span", latest_span)
    output.set_int_custom_property("earlier_span", earlier_span)
