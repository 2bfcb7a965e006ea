"""The evaluator component: quality, safety and bias gates, and the ModelBlessing they decide.

The blessing follows the stock Evaluator's conventions, which the Pusher relies on: custom
properties `blessed` (1/0), `current_model`, `current_model_id` (and `baseline_model`,
`baseline_model_id` when a baseline was compared), and a `BLESSED` or `NOT_BLESSED` marker file
in the artifact directory. Beside the marker: `evaluation.json` (every metric, gate and flagged
completion) and `report.html`. The gates are also a JSON custom property (`gates`) so run
summaries read them from ML Metadata.

`baseline_model` is the latest blessed model, resolved by the pipeline's
`LatestBlessedModelStrategy` resolver node; it is absent on the first run, and when it is the
candidate itself (a re-run of an already blessed model) the change gate is skipped.
"""
import json
import os

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
from tfx.dsl.component.experimental.annotations import BeamComponentParameter, InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import path_utils

from components.evaluator.config_paths import from_portable_json
from components.evaluator.evaluation import evaluate_candidate
from components.evaluator.report import render_report

EVAL_SPLIT = "eval"
TRAIN_SPLIT = "train"
REPORT_FILE = "evaluation.json"
HTML_REPORT_FILE = "report.html"


def _baseline(model, baseline_model) -> tuple:
    """(baseline SavedModel dir or None, reason when None)."""
    if baseline_model is None:
        return None, "no blessed model exists yet (first run)"
    if baseline_model.id == model.id:
        return None, "the latest blessed model is this candidate itself"
    return path_utils.serving_model_path(baseline_model.uri), ""


def _write(uri: str, name: str, text: str) -> str:
    path = os.path.join(uri, name)
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(text)
    return path


@component(use_beam=True)
def GatedEvaluator(
    model: InputArtifact[standard_artifacts.Model],
    examples: InputArtifact[standard_artifacts.Examples],
    transform_graph: InputArtifact[standard_artifacts.TransformGraph],
    raw_examples: InputArtifact[standard_artifacts.Examples],
    blessing: OutputArtifact[standard_artifacts.ModelBlessing],
    evaluator_config: Parameter[str],
    baseline_model: InputArtifact[standard_artifacts.Model] = None,
    beam_pipeline: BeamComponentParameter[beam.Pipeline] = None,
) -> None:
    """Blesses `model` only when every gate passes (see module docstring).

    `evaluator_config` is `EvaluatorConfig` as portable JSON (`config_paths`); `examples` are the transformed examples
    (eval split scored for perplexity); `raw_examples` the raw ones (train split probed for
    memorisation).
    """
    config = from_portable_json(evaluator_config)
    baseline_dir, baseline_reason = _baseline(model, baseline_model)
    evaluation = evaluate_candidate(
        path_utils.serving_model_path(model.uri),
        os.path.join(artifact_utils.get_split_uri([examples], EVAL_SPLIT), "*"),
        tft.TFTransformOutput(transform_graph.uri).transformed_feature_spec(),
        config,
        train_files=[os.path.join(artifact_utils.get_split_uri([raw_examples], TRAIN_SPLIT), "*")],
        raw_eval_files=[os.path.join(artifact_utils.get_split_uri([raw_examples], EVAL_SPLIT), "*")],
        baseline_dir=baseline_dir,
        baseline_skip_reason=baseline_reason,
        beam_pipeline=beam_pipeline,
    )
    result = evaluation.to_dict()
    quality = result["metrics"]["quality"]
    blessing.set_int_custom_property("blessed", int(evaluation.blessed))
    blessing.set_string_custom_property("current_model", model.uri)
    blessing.set_int_custom_property("current_model_id", model.id)
    if baseline_dir:
        blessing.set_string_custom_property("baseline_model", baseline_model.uri)
        blessing.set_int_custom_property("baseline_model_id", baseline_model.id)
    blessing.set_float_custom_property("perplexity", quality["perplexity"])
    blessing.set_float_custom_property("max_perplexity", config.max_perplexity)
    blessing.set_string_custom_property("reason", evaluation.reason)
    blessing.set_string_custom_property("gates", json.dumps(result["gates"], ensure_ascii=False))
    _write(blessing.uri, REPORT_FILE, json.dumps(result, indent=2, ensure_ascii=False))
    report = _write(blessing.uri, HTML_REPORT_FILE, render_report(result, model.uri))
    blessing.set_string_custom_property("report", report)
    _write(blessing.uri, "BLESSED" if evaluation.blessed else "NOT_BLESSED", "")
