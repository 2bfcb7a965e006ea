"""Typed options of the data gates (composed into the pipeline config as `data_gate`)."""

from typing import List, Literal

from pydantic import Field

from components.options import Options


class DataGateOptions(Options):
    """Which TFDV anomalies stop the run (raw data before the Tokenizer, token data before the Trainer), and how much
    of a span cleaning may remove."""

    allowed_anomaly_types: List[str] = Field(
        default_factory=list,
        description="TFDV anomaly type names (e.g. 'ENUM_TYPE_UNEXPECTED_STRING_VALUES') that only warn; all others block.",
    )
    drift_action: Literal["block", "warn"] = Field(
        "block",
        description="What a drift finding does: the schema's Jensen-Shannon drift comparators, this span vs the last "
        "span that passed the gate.",
    )
    skew_action: Literal["block", "warn"] = Field(
        "warn",
        description="What a skew finding does: the schema's skew comparators, train vs eval split. Warns by default: "
        "both splits are hash samples of one span, so a finding usually means a small or odd sample.",
    )
    max_removed_fraction: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="The most of a span's documents, or of their bytes, that cleaning may remove (ExampleGen's ingest "
        "report; quarantined unreadable records do not count); more stops the run before the Tokenizer, "
        "naming the rules that removed the most. 1 turns the check off.",
    )
    removal_action: Literal["block", "warn"] = Field(
        "block",
        description="What removal over max_removed_fraction does: block (exit 2) or warn (the run goes on and "
        "the run summary says so).",
    )
    distribution_min_examples: int = Field(
        100,
        ge=1,
        description="Drift/skew comparisons with fewer documents on either side are skipped (recorded).",
    )
    state_uri: str = Field(
        "",
        description="Where the drift baseline (statistics of the last accepted span) is kept: a local path, gs:// or "
        "s3://. Empty = OUTPUT_ROOT/state/drift_baseline locally, kubeflow.pipeline_root/state/drift_baseline "
        "on Kubeflow.",
    )

    def warn_only_checks(self) -> List[str]:
        """The distribution checks ('drift', 'skew') whose findings only warn."""
        return [
            check for check, action in (("drift", self.drift_action), ("skew", self.skew_action)) if action == "warn"
        ]
