"""Typed options of the Pusher stage (composed into the pipeline config as `pusher`; the model
registry it registers pushes in has its own options, `components/registry/options.py`)."""

from typing import List, Literal

from pydantic import Field, model_validator

from components.options import Options


class BatchingOptions(Options):
    """TF Serving server-side batching (written to `<serving_dir>/batching_parameters`)."""

    max_batch_size: int = Field(16, ge=1, description="Largest batch TF Serving forms from concurrent requests.")
    batch_timeout_micros: int = Field(2000, ge=0, description="How long a partial batch waits for more requests.")
    max_enqueued_batches: int = Field(64, ge=1, description="Batches queued before TF Serving refuses requests.")
    num_batch_threads: int = Field(4, ge=1, description="Threads that run batches concurrently.")
    pad_variable_length_inputs: bool = Field(
        False, description="Let TF Serving pad inputs of different lengths into one batch."
    )
    allowed_batch_sizes: List[int] = Field(
        default_factory=list, description="Empty, or increasing sizes ending at max_batch_size."
    )

    @model_validator(mode="after")
    def _allowed_sizes_end_at_max(self) -> "BatchingOptions":
        sizes = self.allowed_batch_sizes
        if sizes and (sizes != sorted(set(sizes)) or sizes[-1] != self.max_batch_size):
            raise ValueError(
                f"allowed_batch_sizes {sizes} must increase and end at max_batch_size ({self.max_batch_size})"
            )
        return self


class MonitoringOptions(Options):
    """TF Serving's Prometheus endpoint (components/pusher/monitoring.py)."""

    prometheus: bool = Field(True, description="Expose Prometheus metrics on TF Serving's REST port.")
    path: str = Field(
        "/monitoring/prometheus/metrics",
        pattern=r"^/\S*$",
        description="URL path of the metrics (TF Serving's default shown).",
    )


class ModelCardOptions(Options):
    """The model card written beside every pushed version (components/pusher/model_card.py)."""

    enabled: bool = Field(
        True, description="Write model_cards/<version>.md and .html and log them with the registered version."
    )
    intended_use: str = Field(
        "Text generation in the style and domain of the training corpus, for the team that trained it to evaluate "
        "and build on. Not a source of facts, and not for decisions about people.",
        description="The card's intended-use section (write what your model is for).",
    )
    limitations: str = Field(
        "A decoder-only language model trained or fine-tuned on one corpus: it can produce fluent text that is false, "
        "offensive or copied from its training data. The safety and bias gates cover the prompts and groups listed in "
        "this card, not every harm; review generations before they reach users.",
        description="The card's limitations section.",
    )


class PusherOptions(Options):
    """Where and how blessed models are published for TF Serving."""

    model_name: str = Field("textgen", min_length=1, description="Model name in TF Serving's models.config.")
    keep_versions: int = Field(
        5, ge=1, description="Pushed versions kept under the serving directory; older ones are deleted."
    )
    label: Literal["stable", "canary"] = Field(
        "stable",
        description="Version label a push assigns in models.config ('canary' keeps the stable version serving too).",
    )
    batching: BatchingOptions = Field(default_factory=BatchingOptions)
    monitoring: MonitoringOptions = Field(default_factory=MonitoringOptions)
    model_card: ModelCardOptions = Field(default_factory=ModelCardOptions)
