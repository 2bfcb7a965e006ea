"""Typed options of the model registry (composed into the pipeline config as `registry`): the
MLflow Model Registry that the Pusher registers pushed models in, and where the Tokenizer, the
Trainer (warm start) and the Evaluator (baseline) find the production model."""

from pydantic import Field, model_validator

from components.options import Options


class RegistryOptions(Options):
    """The MLflow Model Registry every pushed model is registered in.

    Empty `tracking_uri` = the embedded store (SQLite under the output root), unless the
    MLFLOW_TRACKING_URI environment variable names a server (read by `model_registry.py` when
    the registry is opened). Credentials never go here: MLflow reads MLFLOW_TRACKING_TOKEN /
    MLFLOW_TRACKING_USERNAME + MLFLOW_TRACKING_PASSWORD from the environment, or `credentials_file`
    names a mounted secret holding them (KEY=VALUE lines).
    """

    enabled: bool = Field(
        True,
        description="Register pushed models and look up the production model; false = no registry "
        "(no baseline, no warm start, no tokenizer reuse).",
    )
    tracking_uri: str = Field(
        "", description="MLflow tracking server URL; empty = embedded SQLite store (or $MLFLOW_TRACKING_URI)."
    )
    registered_model_name: str = Field("", description="Registered model name; empty = pusher.model_name.")
    production_alias: str = Field(
        "production", min_length=1, description="Alias moved to each version pushed as stable."
    )
    credentials_file: str = Field(
        "", description="Path of a mounted secret with MLFLOW_TRACKING_* KEY=VALUE lines (read at push time)."
    )

    @model_validator(mode="after")
    def _no_credentials_in_uri(self) -> "RegistryOptions":
        from urllib.parse import urlparse

        if urlparse(self.tracking_uri).password or "@" in urlparse(self.tracking_uri).netloc:
            raise ValueError(
                "registry.tracking_uri must not embed credentials; use the environment or credentials_file"
            )
        return self
