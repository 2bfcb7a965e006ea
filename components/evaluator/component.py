"""The evaluator component: measures eval-split perplexity and writes the ModelBlessing.

The blessing follows the stock Evaluator's conventions, which the Pusher relies on: custom
properties `blessed` (1/0), `current_model`, `current_model_id`, and a `BLESSED` or
`NOT_BLESSED` marker file in the artifact directory. The metrics and the decision are also
written to `evaluation.json` beside the marker and as custom properties.
"""
import json
import os

import tensorflow as tf
import tensorflow_transform as tft
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import path_utils

from components.evaluator.perplexity import decide_blessing, eval_split_perplexity

EVAL_SPLIT = "eval"
REPORT_FILE = "evaluation.json"


@component
def PerplexityEvaluator(
    model: InputArtifact[standard_artifacts.Model],
    examples: InputArtifact[standard_artifacts.Examples],
    transform_graph: InputArtifact[standard_artifacts.TransformGraph],
    blessing: OutputArtifact[standard_artifacts.ModelBlessing],
    max_perplexity: Parameter[float],
    batch_size: Parameter[int] = 16,
) -> None:
    """Blesses `model` when its eval-split perplexity on transformed `examples` is below `max_perplexity`."""
    saved_model_dir = path_utils.serving_model_path(model.uri)
    eval_files = os.path.join(artifact_utils.get_split_uri([examples], EVAL_SPLIT), "*")
    feature_spec = tft.TFTransformOutput(transform_graph.uri).transformed_feature_spec()
    result = eval_split_perplexity(saved_model_dir, eval_files, feature_spec, batch_size)
    decision = decide_blessing(result.perplexity, max_perplexity)

    blessing.set_int_custom_property("blessed", int(decision.blessed))
    blessing.set_string_custom_property("current_model", model.uri)
    blessing.set_int_custom_property("current_model_id", model.id)
    blessing.set_float_custom_property("perplexity", result.perplexity)
    blessing.set_float_custom_property("max_perplexity", max_perplexity)
    blessing.set_string_custom_property("reason", decision.reason)
    report = {
        "blessed": decision.blessed,
        "reason": decision.reason,
        "metrics": {"perplexity": result.perplexity, "mean_nll": result.mean_nll, "num_tokens": result.num_tokens},
        "thresholds": {"max_perplexity": max_perplexity},
    }
    with tf.io.gfile.GFile(os.path.join(blessing.uri, REPORT_FILE), "w") as handle:
        json.dump(report, handle, indent=2)
    marker = "BLESSED" if decision.blessed else "NOT_BLESSED"
    with tf.io.gfile.GFile(os.path.join(blessing.uri, marker), "w") as handle:
        handle.write("")
