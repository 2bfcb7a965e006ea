"""The pipeline: its configuration, the create_pipeline() factory and the local runner (the CLI
that drives them is `textgen_cli/`)."""

# Importing `components` first selects Keras 2 (tf-keras) before TensorFlow is loaded.
import components  # noqa: F401
