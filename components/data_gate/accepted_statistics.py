"""The drift baseline: train-split statistics of the latest span that passed the data gate.

Drift is measured against data that was accepted, so a span the gate blocked never becomes the
reference for the next one. The baseline is kept in a state location of its own
(`data_gate.state_uri`: a local path, `gs://` or `s3://`), read by the DistributionValidator and
written by `RecordAcceptedStatistics` after a passing gate. It is found the same way by the
local runner and on Kubeflow Pipelines, which cannot run ML Metadata resolver nodes:

    <state_uri>/spans/<span>/FeatureStats.pb   train statistics of each accepted span
    <state_uri>/accepted.json                  {"span": latest accepted, "earlier_span": the one
                                                accepted before it (-1 if none)}

`accepted.json` is replaced atomically (written beside and renamed; a single object write on an
object store) only after the statistics it points at are in place, so a reader sees the old
baseline or the new one, never half of one.

Re-running the pipeline on the same span is common (a fix, a new model config), and comparing a
span with itself says nothing. So a run of span S compares against the latest accepted span when
it is older than S, against the earlier one when the latest is S itself (a re-run), and skips
with a recorded reason on a first run or a backfill of a span older than the latest accepted one.
"""

import json
import os
import uuid
from typing import NamedTuple, Optional

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx import types

STATISTICS_FILE = "FeatureStats.pb"  # StatisticsGen's per-split file name
STATE_FILE = "accepted.json"
SPANS_DIR = "spans"
NO_SPAN = -1


class AcceptedStatistics(types.Artifact):
    """Lineage record of one update of the drift baseline: custom properties `span`,
    `earlier_span` and `state_uri` (the statistics themselves live in the state location)."""

    TYPE_NAME = "components.AcceptedStatistics"  # importable schema title (see components/__init__.py)


class AcceptedState(NamedTuple):
    """The spans the state location records: the latest accepted and the one before it."""

    span: int
    earlier_span: int = NO_SPAN


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


def _span_statistics_path(state_uri: str, span: int) -> str:
    return os.path.join(state_uri, SPANS_DIR, str(span), STATISTICS_FILE)


def read_state(state_uri: str) -> Optional[AcceptedState]:
    """The accepted spans recorded under `state_uri`, or None when nothing was accepted yet."""
    path = os.path.join(state_uri, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as handle:
            recorded = json.load(handle)
        return AcceptedState(int(recorded["span"]), int(recorded.get("earlier_span", NO_SPAN)))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"drift baseline state {path} is unreadable ({exc}); delete it to start a new baseline"
        ) from None


def drift_baseline(state_uri: str, span: int) -> DriftBaseline:
    """Picks the statistics span `span` is compared with (see the module docstring)."""
    state = read_state(state_uri)
    if state is None:
        return DriftBaseline(None, None, "no span has passed the data gate before (first run)")
    if state.span < span:
        return DriftBaseline(load_statistics(_span_statistics_path(state_uri, state.span)), state.span)
    if state.span == span and state.earlier_span != NO_SPAN:
        return DriftBaseline(load_statistics(_span_statistics_path(state_uri, state.earlier_span)), state.earlier_span)
    if state.span == span:
        return DriftBaseline(None, None, f"span {span} is the only span that has passed the data gate (a re-run)")
    return DriftBaseline(
        None,
        None,
        f"span {span} is older than the latest accepted span {state.span} "
        "(a backfill); drift is checked going forward only",
    )


def _write_atomically(path: str, write) -> None:
    """Writes `path` through a temporary file beside it and a rename (see module docstring)."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    write(temporary)
    tf.io.gfile.rename(temporary, path, overwrite=True)


def record_accepted(state_uri: str, train_statistics_path: str, span: int) -> AcceptedState:
    """Makes span `span` (which passed the gate) the drift baseline and returns the new state.

    A backfill (a span older than the latest accepted) leaves the baseline as it was.
    """
    before = read_state(state_uri)
    if before is not None and before.span > span:
        return before
    if before is None:
        state = AcceptedState(span)
    elif before.span == span:  # a re-run keeps the span accepted before this one
        state = before
    else:
        state = AcceptedState(span, before.span)
    _write_atomically(
        _span_statistics_path(state_uri, span),
        lambda temporary: tf.io.gfile.copy(train_statistics_path, temporary, overwrite=True),
    )

    def write_state(temporary: str) -> None:
        with tf.io.gfile.GFile(temporary, "w") as handle:
            json.dump(state._asdict(), handle)

    _write_atomically(os.path.join(state_uri, STATE_FILE), write_state)
    return state
