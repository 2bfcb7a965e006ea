"""The pusher component: publishes the model for TF Serving and registers it, only when blessed.

On a blessed model it
  1. copies the SavedModel atomically to `<serving_dir>/<next version>/` (components/versioned_push.py),
  2. writes `<serving_dir>/batching_parameters` and `<serving_dir>/monitoring.config` (Prometheus)
     and points the configured label (`stable` or `canary`) at the new version in
     `<serving_dir>/models.config` (serving_ops.label_version: a compare-and-swap that keeps the
     labels of other writers sharing the directory),
  3. deletes all but the newest `keep_versions`, never a version models.config serves,
  4. registers the version in the MLflow Model Registry and moves the aliases of the labels now on
     it (registry: stable -> production, canary -> canary; the first push is stable whatever its label).
A retried execution for the same model artifact reuses the version it already pushed and the
registry version it already created. When the model is not blessed nothing is written anywhere.

The PushedModel artifact carries the stock Pusher's custom properties (`pushed`,
`pushed_destination`, `pushed_version`) so TFX tooling reads it the same way, plus the registry
coordinates; when nothing is pushed it records why in `push_skipped_reason`.
"""

import json
import logging
import os
from typing import Any, Dict, List, Optional

import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter
from tfx.utils import path_utils

from components.evaluator.blessing_files import REPORT_FILE
from components.example_gen.ingest_report import REPORT_FILE as INGEST_REPORT_FILE
from components.pusher import batching, model_card, monitoring, serving_config, serving_ops
from components.pusher.options import PusherOptions
from components.registry import model_registry as registry
from components.registry.options import RegistryOptions
from components.trainer.training import record as training_record
from components.versioned_push import copy_tree, push_saved_model, retain_latest

log = logging.getLogger(__name__)


class VersionedPusherSpec(ComponentSpec):
    PARAMETERS = {
        "options": ExecutionParameter(type=str),  # PusherOptions as JSON
        "registry": ExecutionParameter(type=str),  # RegistryOptions as JSON (holds no credentials)
        "serving_dir": ExecutionParameter(type=str),
        # Local runs: where the embedded registry lives; empty on a cluster.
        "registry_dir": ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        "model": ChannelParameter(type=standard_artifacts.Model),
        "model_blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
        "examples": ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }
    OUTPUTS = {"pushed_model": ChannelParameter(type=standard_artifacts.PushedModel)}


# Numeric blessing properties that are bookkeeping, not metrics.
_NOT_METRICS = frozenset({"blessed", "current_model_id", "baseline_model_id"})


def _float_properties(artifact: types.Artifact) -> Dict[str, float]:
    """The evaluation metrics the Evaluator recorded on the blessing: its float custom properties.
    (Locally they arrive as MLMD doubles; through KFP's executor input every number arrives as a
    JSON number, so integers are told apart by name.)"""
    metrics = {}
    for name, value in artifact.mlmd_artifact.custom_properties.items():
        kind = value.WhichOneof("value")
        if kind == "double_value":
            metrics[name] = value.double_value
        elif kind in ("struct_value", "proto_value") and name not in _NOT_METRICS:
            json_value = artifact.get_json_value_custom_property(name)
            if isinstance(json_value, float):
                metrics[name] = json_value
    return metrics


class VersionedPusherExecutor(base_executor.BaseExecutor):
    """See the module docstring."""

    def Do(
        self,
        input_dict: Dict[str, List[types.Artifact]],
        output_dict: Dict[str, List[types.Artifact]],
        exec_properties: Dict[str, Any],
    ) -> None:
        model = artifact_utils.get_single_instance(input_dict["model"])
        blessing = artifact_utils.get_single_instance(input_dict["model_blessing"])
        examples = input_dict.get("examples") or []
        pushed_model = artifact_utils.get_single_instance(output_dict["pushed_model"])
        if blessing.get_int_custom_property("blessed") != 1:
            reason = blessing.get_string_custom_property("reason") or "model is not blessed"
            pushed_model.set_int_custom_property("pushed", 0)
            pushed_model.set_string_custom_property("push_skipped_reason", f"not blessed: {reason}")
            log.info("Not pushing: the model is not blessed (%s)", reason)
            return

        options = PusherOptions.from_parameter(exec_properties["options"])
        serving_dir, model_name, label = exec_properties["serving_dir"], options.model_name, options.label
        saved_model = path_utils.serving_model_path(model.uri)
        run_id = self._context.pipeline_run_id if self._context else None
        tokenizer_hash = registry.tokenizer_sha256(saved_model)
        push_info = {
            "model_id": model.id,
            "model_uri": model.uri,
            "blessing_id": blessing.id,
            "pipeline_run_id": run_id or "",
            "tokenizer_sha256": tokenizer_hash,
        }
        result = push_saved_model(saved_model, serving_dir, push_info)
        log.info("%s %s version %d", "Pushed" if result.created else "Already pushed", result.path, result.version)
        batching.write_batching_parameters(serving_dir, options.batching)
        monitoring.write_monitoring_config(serving_dir, options.monitoring)
        change = serving_ops.label_version(serving_dir, model_name, label, result.version)
        # Protects what models.config labels now: another Pusher sharing the directory may have moved a label since.
        protected = serving_config.read_labels(serving_dir).values()
        model_card.remove_cards(serving_dir, retain_latest(serving_dir, options.keep_versions, protected=protected))
        training = training_record.read(model.uri)
        hugging_face = self._publish_hugging_face(model.uri, serving_dir, result.version)
        if hugging_face:
            pushed_model.set_string_custom_property("hugging_face_export", hugging_face)

        pushed_model.set_int_custom_property("pushed", 1)
        pushed_model.set_string_custom_property("pushed_destination", result.path)
        pushed_model.set_int_custom_property("pushed_version", result.version)
        pushed_model.set_string_custom_property("serving_label", label)
        pushed_model.set_string_custom_property("serving_config", serving_config.config_path(serving_dir))

        registry_config = RegistryOptions.from_parameter(exec_properties["registry"])
        card_push = {
            "model_name": model_name,
            "serving_version": result.version,
            "label": label,
            "serving_path": result.path,
            "hugging_face": hugging_face,
        }
        if registry_config.enabled:
            span: Optional[int] = examples[0].span if examples else None
            base = training.get("base_checkpoint") or {}
            record = registry.PushRecord(
                serving_path=result.path,
                serving_base=serving_dir,
                serving_version=result.version,
                serving_label=label,
                model_artifact_id=model.id,
                model_uri=model.uri,
                blessing_artifact_id=blessing.id,
                blessed=True,
                tokenizer_sha256=tokenizer_hash,
                pipeline_run_id=run_id or "",
                data_span=span,
                metrics=_float_properties(blessing),
                base_checkpoint=base.get("source", ""),
                base_checkpoint_sha256=base.get("sha256", ""),
                adapters=json.dumps(training["lora"], sort_keys=True) if training.get("lora") else "",
            )
            model_registry = registry.ModelRegistry.from_config(
                registry_config, model_name, exec_properties.get("registry_dir") or None
            )
            version = model_registry.register(record, move_production_alias=False)
            serving_ops.align_aliases(model_registry, serving_dir, change, result.version)
            pushed_model.set_string_custom_property("registered_model_name", model_registry.model_name)
            pushed_model.set_int_custom_property("registered_model_version", int(version.version))
            pushed_model.set_string_custom_property("registry_uri", registry.display_uri(model_registry.tracking_uri))
            card_push.update(registered_model=model_registry.model_name, registered_version=int(version.version))
        if options.model_card.enabled:
            paths = self._write_model_card(options, card_push, training, blessing, examples)
            pushed_model.set_string_custom_property("model_card", paths["html"])
            if registry_config.enabled:
                model_registry.attach_model_card(version, paths)

    @staticmethod
    def _publish_hugging_face(model_uri: str, serving_dir: str, version: int) -> str:
        """Copies the Trainer's Hugging Face export of a fine-tuned model, when it wrote one, to
        `<serving_dir>/hugging_face/<version>/` (for vLLM, TGI or sharing); returns the path or ""."""
        source = training_record.hugging_face_path(model_uri)
        if not tf.io.gfile.isdir(source):
            return ""
        destination = model_card.hugging_face_path(serving_dir, version)
        copy_tree(source, destination)
        log.info("Published the Hugging Face export to %s", destination)
        return destination

    @staticmethod
    def _write_model_card(
        options: PusherOptions,
        push: Dict[str, Any],
        training: Dict[str, Any],
        blessing: types.Artifact,
        examples: List[types.Artifact],
    ) -> Dict[str, str]:
        """Writes the pushed version's model card from the run's records (components/pusher/model_card.py)."""
        evaluation = model_card.read_json(os.path.join(blessing.uri, REPORT_FILE)) if blessing.uri else {}
        data = {
            "spans": ", ".join(str(e.span) for e in examples),
            "ingest_report": model_card.read_json(os.path.join(examples[0].uri, INGEST_REPORT_FILE))
            if examples and examples[0].uri
            else {},
        }
        facts = model_card.collect_facts(
            push, training, evaluation, data, options.model_card.intended_use, options.model_card.limitations
        )
        paths = model_card.write_card(os.path.dirname(push["serving_path"].rstrip("/")), push["serving_version"], facts)
        log.info("Model card: %s", paths["html"])
        return paths


class VersionedPusher(base_component.BaseComponent):
    """Pushes a blessed model to a TF Serving base path and registers it (see module docstring)."""

    SPEC_CLASS = VersionedPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(VersionedPusherExecutor)

    def __init__(
        self,
        model,
        model_blessing,
        serving_dir: str,
        options: Optional[PusherOptions] = None,
        registry: Optional[RegistryOptions] = None,
        registry_dir: str = "",
        examples=None,
    ):
        super().__init__(
            VersionedPusherSpec(
                model=model,
                model_blessing=model_blessing,
                examples=examples,
                pushed_model=types.Channel(type=standard_artifacts.PushedModel),
                options=(options or PusherOptions()).to_parameter(),
                registry=(registry or RegistryOptions()).to_parameter(),
                serving_dir=serving_dir,
                registry_dir=registry_dir,
            )
        )
