"""The pusher component: publishes the model to the serving directory only when blessed.

After the push, `<serving_dir>/models.config` (TF Serving's model config file) serves the new
version and the oldest versions beyond `pusher.keep_versions` are deleted.

The PushedModel artifact carries the stock Pusher's custom properties (`pushed`,
`pushed_destination`, `pushed_version`) so TFX tooling reads it the same way; when nothing is
pushed it records why in `push_skipped_reason`.
"""
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from components.pusher.serving_config import write_serving_config
from components.pusher.versioned_push import push_saved_model, retain_latest


@component
def VersionedPusher(
    model: InputArtifact[standard_artifacts.Model],
    model_blessing: InputArtifact[standard_artifacts.ModelBlessing],
    pushed_model: OutputArtifact[standard_artifacts.PushedModel],
    serving_dir: Parameter[str],
    model_name: Parameter[str] = "textgen",
    keep_versions: Parameter[int] = 5,
) -> None:
    """Copies the blessed model to `<serving_dir>/<next version>/` atomically, points
    `<serving_dir>/models.config` at it, and deletes all but the newest `keep_versions`."""
    if model_blessing.get_int_custom_property("blessed") != 1:
        reason = model_blessing.get_string_custom_property("reason") or "model is not blessed"
        pushed_model.set_int_custom_property("pushed", 0)
        pushed_model.set_string_custom_property("push_skipped_reason", f"not blessed: {reason}")
        return
    result = push_saved_model(path_utils.serving_model_path(model.uri), serving_dir)
    pushed_model.set_int_custom_property("pushed", 1)
    pushed_model.set_string_custom_property("pushed_destination", result.path)
    pushed_model.set_int_custom_property("pushed_version", result.version)
    pushed_model.set_string_custom_property("serving_config", write_serving_config(model_name, serving_dir, result.version))
    retain_latest(serving_dir, keep_versions)
