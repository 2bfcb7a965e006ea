"""Pipeline configuration, the create_pipeline() factory, the local runner and the CLI."""

# Importing `components` first selects Keras 2 (tf-keras) before TensorFlow is loaded.
import components  # noqa: F401
