"""The data gate's components: distribution checks, the gate itself, and the drift baseline.

    StatisticsGen + curated schema ──> ExampleValidator ───────────────┐
                 └──> DistributionValidator (drift vs last accepted    ├─> DataGate ─> Transform
                       span, skew train vs eval) <── state location ───┘      └─> RecordAcceptedStatistics

ExampleValidator records schema anomalies but nothing downstream reads them. `DataGate` reads
them (and the DistributionValidator's, and ExampleGen's ingest report: `removal`) and fails its
execution when any is blocking or cleaning removed more than `max_removed_fraction`, so
Transform (wired to run after the gate) and everything after it never runs. When it passes, it
writes a `DataGateResult` artifact recording what it tolerated, and `RecordAcceptedStatistics`
makes this span's statistics the next run's drift baseline in the state location
(`accepted_statistics`). The two nodes that read or write that location are never served from a
cache (`pipeline.pipeline.UNCACHEABLE_NODES`): their result depends on more than their inputs.
"""

import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import io_utils

from components.data_gate import accepted_statistics as accepted_lib
from components.data_gate import distribution_checks as checks
from components.data_gate import removal as removal_lib
from components.data_gate.anomalies import SCHEMA_DIFF_FILE, Anomaly, blocking_anomalies, read_anomalies
from components.data_gate.options import DataGateOptions
from components.example_gen import ingest_report

TRAIN_SPLIT, EVAL_SPLIT = "train", "eval"


class GateStage(NamedTuple):
    """Where a gate stands, for its messages: what it says when it stops the run, and what data it checks."""

    stopping: str
    data: str


# DataGate's `stage` parameter -> where that gate stands in the pipeline.
STAGES = {
    "raw": GateStage("data gate: stopping before the Tokenizer and Transform", "input data"),
    "tokens": GateStage("token gate (after Transform): stopping before the Trainer", "token data"),
}


class DataGateResult(types.Artifact):
    """Outcome of the data gate: `passed` (1/0) and the anomalies it tolerated."""

    TYPE_NAME = "components.DataGateResult"  # importable schema title (see components/__init__.py)


class BlockingAnomaliesError(RuntimeError):
    """Raised by the gate; its message lists every blocking anomaly in plain words."""


def _write_anomalies_proto(artifact: types.Artifact, split: str, anomalies: anomalies_pb2.Anomalies) -> None:
    """Writes one split's anomalies where ExampleValidator would (so `read_anomalies` reads both)."""
    directory = os.path.join(artifact.uri, f"Split-{split}")
    tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(os.path.join(directory, SCHEMA_DIFF_FILE), "wb") as handle:
        handle.write(anomalies.SerializeToString())


@component
def DistributionValidator(
    examples: InputArtifact[standard_artifacts.Examples],
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    schema: InputArtifact[standard_artifacts.Schema],
    anomalies: OutputArtifact[standard_artifacts.ExampleAnomalies],
    state_uri: Parameter[str],
    options: Parameter[str] = "{}",
) -> None:
    """Runs the curated schema's drift and skew comparators and records what they found.

    Drift compares this span's train split with the last accepted span's (see
    `accepted_statistics`); skew compares train with eval. The output has the splits 'drift'
    and 'skew' in ExampleValidator's format, plus custom properties `measurements` (every
    divergence and threshold, JSON), `drift_baseline_span`, and `skipped` (check -> reason).

    Args:
      examples: ExampleGen's output (for its span).
      statistics: StatisticsGen's output for this span.
      schema: the curated schema (with the comparators).
      anomalies: written always; the DataGate decides.
      state_uri: where the drift baseline is kept (`accepted_statistics`).
      options: `DataGateOptions` as JSON; a comparison with fewer documents than its
        `distribution_min_examples` on either side is skipped (noise).
    """
    min_examples = DataGateOptions.from_parameter(options).distribution_min_examples
    span = accepted_lib.examples_span(examples)
    current = accepted_lib.load_statistics(accepted_lib.split_statistics_path(statistics.uri, TRAIN_SPLIT))
    evaluation = accepted_lib.load_statistics(accepted_lib.split_statistics_path(statistics.uri, EVAL_SPLIT))
    curated = tfdv.load_schema_text(io_utils.get_only_uri_in_dir(schema.uri))
    baseline = accepted_lib.drift_baseline(state_uri, span)
    skipped = {}
    if baseline.statistics is None:
        skipped[checks.DRIFT] = baseline.skipped_reason
    else:
        reason = checks.too_few_examples(min_examples, current=current, baseline=baseline.statistics)
        if reason:
            skipped[checks.DRIFT] = reason
    reason = checks.too_few_examples(min_examples, train=current, eval=evaluation)
    if reason:
        skipped[checks.SKEW] = reason
    baselines = {checks.DRIFT: baseline.statistics, checks.SKEW: evaluation}
    measurements = []
    for check in (checks.DRIFT, checks.SKEW):
        if check in skipped:
            _write_anomalies_proto(anomalies, check, anomalies_pb2.Anomalies())
            continue
        result = checks.compare(current, curated, check, baselines[check])
        _write_anomalies_proto(anomalies, check, result.anomalies)
        measurements += [m.to_dict() for m in result.measurements]
    anomalies.split_names = artifact_utils.encode_split_names([checks.DRIFT, checks.SKEW])
    anomalies.span = span
    anomalies.set_string_custom_property("measurements", json.dumps(measurements))
    anomalies.set_string_custom_property("skipped", json.dumps(skipped))
    anomalies.set_int_custom_property("drift_baseline_span", -1 if baseline.span is None else baseline.span)


def gate_verdict(
    found: List[Anomaly],
    gate_options: DataGateOptions,
    report: Optional[Dict[str, Any]] = None,
    stage: GateStage = STAGES["raw"],
) -> Tuple[Optional[str], Optional[removal_lib.RemovalFinding]]:
    """(the error message when the gate blocks or None, the removal finding or None): blocking
    anomalies, and (given ExampleGen's ingest `report`) cleaning that removed more than
    `max_removed_fraction`, which blocks unless `removal_action` is 'warn'. The message names the
    gate's `stage`."""
    blocking = blocking_anomalies(found, gate_options.allowed_anomaly_types, gate_options.warn_only_checks())
    finding = removal_lib.removal_finding(report, gate_options.max_removed_fraction) if report else None
    problems = []
    if finding is not None and gate_options.removal_action == "block":
        problems.append(finding.message())
    if blocking:
        listing = "\n".join(f"  - {anomaly}" for anomaly in blocking)
        problems.append(
            f"{len(blocking)} blocking anomal{'y' if len(blocking) == 1 else 'ies'} in the {stage.data}:\n{listing}"
        )
    if not problems:
        return None, finding
    return f"{stage.stopping}: " + "\n".join(problems), finding


@component
def DataGate(
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    result: OutputArtifact[DataGateResult],
    distribution_anomalies: InputArtifact[standard_artifacts.ExampleAnomalies] = None,
    examples: InputArtifact[standard_artifacts.Examples] = None,
    options: Parameter[str] = "{}",
    stage: Parameter[str] = "raw",
) -> None:
    """Fails the run when a validator found anomalies that block, or cleaning removed too much.

    Args:
      anomalies: ExampleValidator's output.
      result: written only when the gate passes; custom properties `removal_check` (passed,
        warned, or not checked: token data) and `removal_warning` (the finding that
        `removal_action` 'warn' let through, empty when none).
      distribution_anomalies: DistributionValidator's output (raw data only).
      examples: ExampleGen's output (raw data only): its ingest report says what cleaning removed
        (`removal`).
      options: `DataGateOptions` as JSON: the TFDV anomaly types and the distribution checks
        ('drift', 'skew') that only warn, and the removal limit and action.
      stage: where the gate stands, named in its message: 'raw' (the DataGate, before the
        Tokenizer) or 'tokens' (the TokenGate, after Transform, before the Trainer).
    """
    gate_options = DataGateOptions.from_parameter(options)
    found = read_anomalies(anomalies.uri, anomalies.split_names)
    if distribution_anomalies is not None:
        found += read_anomalies(distribution_anomalies.uri, distribution_anomalies.split_names)
    report = ingest_report.read_artifact_report(examples) if examples is not None else None
    error, finding = gate_verdict(found, gate_options, report, STAGES[stage])
    if error:
        raise BlockingAnomaliesError(error)
    result.set_int_custom_property("passed", 1)
    result.set_string_custom_property("tolerated_anomalies", json.dumps([a.to_dict() for a in found]))
    result.set_string_custom_property("removal_warning", finding.message() if finding else "")
    checked = "not checked (no ingest report)" if report is None else "warned" if finding else "passed"
    result.set_string_custom_property("removal_check", checked)


@component
def RecordAcceptedStatistics(
    examples: InputArtifact[standard_artifacts.Examples],
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    gate_result: InputArtifact[DataGateResult],
    accepted: OutputArtifact[accepted_lib.AcceptedStatistics],
    state_uri: Parameter[str],
) -> None:
    """Makes this span's train statistics the next run's drift baseline (runs only after the
    gate passed: `gate_result` exists only then).

    Args:
      examples: ExampleGen's output (for its span).
      statistics: StatisticsGen's output for this span.
      gate_result: the passing DataGate's result.
      accepted: a lineage record of the baseline now in force (its spans and the state location).
      state_uri: where the drift baseline is kept (`accepted_statistics`).
    """
    del gate_result  # an ordering input: present only when the gate passed
    state = accepted_lib.record_accepted(
        state_uri, accepted_lib.split_statistics_path(statistics.uri, TRAIN_SPLIT), accepted_lib.examples_span(examples)
    )
    accepted.set_int_custom_property("span", state.span)
    accepted.set_int_custom_property("earlier_span", state.earlier_span)
    accepted.set_string_custom_property("state_uri", state_uri)
