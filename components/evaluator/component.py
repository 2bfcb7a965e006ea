"""The evaluator component: quality, safety and bias gates, and the ModelBlessing they decide.

The blessing follows the stock Evaluator's conventions, which the Pusher relies on: custom
properties `blessed` (1/0), `current_model`, `current_model_id` (and `baseline_model`,
`baseline_model_id` when a baseline was compared), and a `BLESSED` or `NOT_BLESSED` marker file
in the artifact directory. Beside the marker: `evaluation.json` (every metric, gate and flagged
completion) and `report.html`. The gates are also a JSON custom property (`gates`) so run
summaries read them from ML Metadata.

The baseline is the model the model registry currently serves as production (the MLflow alias
`registry.production_alias`), looked up by the Evaluator itself when it runs: the same code path on
the local runner and on Kubeflow Pipelines, which cannot run ML Metadata resolver nodes. On a
first run of a fine-tuned model the baseline is the pretrained checkpoint it started from, which
the Trainer exports beside the candidate (`base_model/`): the change gate then asks whether
fine-tuning made the model better on this data. There is none on a first run from scratch, and
when it is the candidate itself (a re-run of an already pushed model) the
change gate is skipped; either way the reason is recorded. Which model was compared is recorded in
`evaluation.json` (`baseline`) and on the blessing (`baseline_model`, `baseline_model_id`, and
`baseline_registered_version`). Because the answer depends on the registry, not only on the
inputs, the Evaluator is never served from a cache (`pipeline.pipeline.UNCACHEABLE_NODES`).
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

from components.evaluator.blessing_files import HTML_REPORT_FILE, REPORT_FILE
from components.evaluator.evaluation import EvaluationInputs, evaluate_candidate
from components.evaluator.options import EvaluatorOptions
from components.evaluator.probes.probe_cache import ProbeCache
from components.evaluator.report import render_report
from components.registry.model_registry import TAG_MODEL_ID, ProductionModel, find_production_model
from components.registry.options import RegistryOptions
from components.tokenizer import loaded
from components.trainer.training import record as training_record

EVAL_SPLIT = "eval"
TRAIN_SPLIT = "train"


def _baseline(model, production) -> tuple:
    """(baseline SavedModel dir or None, reason when None): the registry's production model, else
    the pretrained checkpoint the candidate was fine-tuned from (exported by the Trainer beside the
    candidate), else none."""
    base_model = training_record.base_model_path(model.uri)
    if production is None:
        if tf.io.gfile.exists(base_model):
            return base_model, ""
        return None, "no model is registered as production yet (first run)"
    if production.model_artifact_uri == model.uri:
        return None, "the production model is this candidate itself"
    return production.saved_model_dir, ""


def _record_baseline(blessing, production: ProductionModel) -> None:
    """The stock Evaluator's baseline fields, plus which registered version it was."""
    blessing.set_string_custom_property("baseline_model", production.saved_model_dir)
    model_id = production.tags.get(TAG_MODEL_ID, "")
    if model_id.isdigit():
        blessing.set_int_custom_property("baseline_model_id", int(model_id))
    blessing.set_int_custom_property("baseline_registered_version", production.registered_version)


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
    options: Parameter[str],
    registry: Parameter[str],
    model_name: Parameter[str],
    registry_dir: Parameter[str] = "",
    probe_cache_dir: Parameter[str] = "",
    beam_pipeline: BeamComponentParameter[beam.Pipeline] = None,
) -> None:
    """Blesses `model` only when every gate passes (see module docstring).

    `options` is `EvaluatorOptions` as JSON; `examples` are the transformed examples
    (eval split scored for perplexity, train split counted for the unigram reference); `raw_examples` the raw ones (train split probed for
    memorisation). `registry` (`RegistryOptions` as JSON), `model_name` and
    `registry_dir` (the embedded store's directory; empty on a cluster) say where the
    production model, the baseline, is looked up; `probe_cache_dir` where the safety and bias
    results of each model probed are kept, so the baseline is not probed again (probes/probe_cache.py;
    empty: always probed).
    """
    config = EvaluatorOptions.from_parameter(options)
    production = find_production_model(RegistryOptions.from_parameter(registry), model_name, registry_dir or None)
    baseline_dir, baseline_reason = _baseline(model, production)
    inputs = EvaluationInputs(
        path_utils.serving_model_path(model.uri),
        os.path.join(artifact_utils.get_split_uri([examples], EVAL_SPLIT), "*"),
        tft.TFTransformOutput(transform_graph.uri).transformed_feature_spec(),
        config,
        train_files=[os.path.join(artifact_utils.get_split_uri([raw_examples], TRAIN_SPLIT), "*")],
        train_token_files=[os.path.join(artifact_utils.get_split_uri([examples], TRAIN_SPLIT), "*")],
        raw_eval_files=[os.path.join(artifact_utils.get_split_uri([raw_examples], EVAL_SPLIT), "*")],
        baseline_dir=baseline_dir,
        baseline_skip_reason=baseline_reason,
        beam_pipeline=beam_pipeline,
        special=loaded.load(loaded.transform_graph_dir(transform_graph.uri)).special,
        probe_cache=ProbeCache(probe_cache_dir),
    )
    evaluation = evaluate_candidate(inputs)
    result = evaluation.to_dict()
    if production is not None and baseline_dir:
        result["baseline"] = dict(result["baseline"] or {}, kind="production", registry=production.describe())
    elif production is not None:
        result["baseline"] = dict(result["baseline"] or {}, registry=production.describe())
    quality = result["metrics"]["quality"]
    blessing.set_int_custom_property("blessed", int(evaluation.blessed))
    blessing.set_string_custom_property("current_model", model.uri)
    blessing.set_int_custom_property("current_model_id", model.id)
    if baseline_dir and production is not None:
        _record_baseline(blessing, production)
    elif baseline_dir:
        result["baseline"] = dict(result["baseline"], kind="base_checkpoint")
        blessing.set_string_custom_property("baseline_model", baseline_dir)
    blessing.set_float_custom_property("perplexity", quality["perplexity"])
    if config.max_perplexity is not None:
        blessing.set_float_custom_property("max_perplexity", config.max_perplexity)
    blessing.set_string_custom_property("reason", evaluation.reason)
    blessing.set_string_custom_property("gates", json.dumps(result["gates"], ensure_ascii=False))
    _write(blessing.uri, REPORT_FILE, json.dumps(result, indent=2, ensure_ascii=False))
    report = _write(blessing.uri, HTML_REPORT_FILE, render_report(result, model.uri))
    blessing.set_string_custom_property("report", report)
    _write(blessing.uri, "BLESSED" if evaluation.blessed else "NOT_BLESSED", "")
