"""The data gate: the component that makes TFDV anomalies stop the run.

ExampleValidator records anomalies but nothing downstream reads them. `DataGate` reads them and
fails its execution when any is blocking, so Transform (wired to run after the gate) and
everything after it never runs. When it passes, it writes a `DataGateResult` artifact recording
what it saw.
"""
import json

from tfx import types
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

from components.data_gate.anomalies import blocking_anomalies, read_anomalies


class DataGateResult(types.Artifact):
    """Outcome of the data gate: `passed` (1/0) and the anomalies it tolerated."""

    TYPE_NAME = "textgen.DataGateResult"  # KFP v2 needs a "namespace.Name" schema title


class BlockingAnomaliesError(RuntimeError):
    """Raised by the gate; its message lists every blocking anomaly in plain words."""


@component
def DataGate(
    anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
    result: OutputArtifact[DataGateResult],
    allowed_anomaly_types: Parameter[str] = "[]",
) -> None:
    """Fails the run when ExampleValidator found anomalies whose types are not allowed.

    Args:
      anomalies: ExampleValidator's output.
      result: written only when the gate passes.
      allowed_anomaly_types: JSON list of TFDV anomaly type names that only warn.
    """
    found = read_anomalies(anomalies.uri, anomalies.split_names)
    blocking = blocking_anomalies(found, json.loads(allowed_anomaly_types))
    if blocking:
        listing = "\n".join(f"  - {anomaly}" for anomaly in blocking)
        raise BlockingAnomaliesError(
            f"data gate: {len(blocking)} blocking anomal{'y' if len(blocking) == 1 else 'ies'} "
            f"in the input data; stopping before Transform:\n{listing}"
        )
    result.set_int_custom_property("passed", 1)
    result.set_string_custom_property("tolerated_anomalies", json.dumps([a.to_dict() for a in found]))
