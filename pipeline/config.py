"""The pipeline's one configuration surface.

`PipelineConfig` composes the options each component package owns
(`components/<stage>/options.py`; their defaults are defined there, once) with the settings of the
pipeline itself and of the Kubeflow runner. A YAML file and command-line overrides
(`section.key=value`) are layered on top of the defaults, and every layer is validated the same
way: unknown keys and values of the wrong type are rejected with an error that names the key.
`create_pipeline` hands each component its own options object (`components/options.py` says how
it crosses to the executor); no component imports this module.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import yaml
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import to_jsonable_python

from components.data_gate.options import DataGateOptions
from components.evaluator.options import EvaluatorOptions
from components.example_gen.options import CleaningOptions, ExampleGenOptions
from components.options import Options
from components.pusher.options import PusherOptions
from components.registry.options import RegistryOptions
from components.resources import bundled
from components.tokenizer.options import TokenizerOptions
from components.trainer.options import (
    GenerationOptions,
    ModelOptions,
    TFJobOptions,
    TrainingOptions,
    check_recompute,
    check_sharding,
)
from pipeline.layout import OutputLayout

# Where this package's code lives (a checkout or site-packages). Defaults that name the project's
# own files (curated schema, safety and bias suites, sample corpus) are `bundled:` references
# instead (components/resources.py), resolved by whichever process reads them.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ConfigError(ValueError):
    """A configuration file or override is malformed, unknown or of the wrong type."""


class PodResources(Options):
    """CPU and memory of one step's pod on Kubeflow (Kubernetes requests and limits)."""

    cpu_request: float = Field(1.0, gt=0, description="CPUs the scheduler reserves.")
    cpu_limit: float = Field(
        2.0, gt=0, description="CPUs the pod may use; a DirectRunner step starts this many Beam workers."
    )
    memory_request_gb: float = Field(4.0, gt=0, description="Memory the scheduler reserves, in GB (10^9 bytes).")
    memory_limit_gb: float = Field(8.0, gt=0, description="Memory above which the pod is killed, in GB.")

    @model_validator(mode="after")
    def _requests_within_limits(self) -> "PodResources":
        if self.cpu_request > self.cpu_limit or self.memory_request_gb > self.memory_limit_gb:
            raise ValueError(
                "a request exceeds its limit (cpu_request <= cpu_limit, memory_request_gb <= memory_limit_gb)"
            )
        return self


def _default_step_resources() -> Dict[str, PodResources]:
    """Larger pods for the steps that hold the corpus or the model (the rest get kubeflow.resources)."""
    return {
        "Transform": PodResources(cpu_request=2, cpu_limit=4, memory_request_gb=8, memory_limit_gb=16),
        "Trainer": PodResources(cpu_request=4, cpu_limit=8, memory_request_gb=16, memory_limit_gb=32),
        "Evaluator": PodResources(cpu_request=2, cpu_limit=4, memory_request_gb=8, memory_limit_gb=16),
    }


class KubeflowConfig(Options):
    """Settings used only when compiling for Kubeflow Pipelines."""

    image: str = Field(
        "textgen-tfx:latest", description="Container image built from this project (kubeflow/Dockerfile)."
    )
    pipeline_root: str = Field(
        "gs://YOUR-BUCKET/textgen/pipeline-root", description="Artifact root on the cluster's object store."
    )
    data_root: str = Field("gs://YOUR-BUCKET/textgen/corpus", description="Corpus location the cluster can read.")
    serving_dir: str = Field(
        "gs://YOUR-BUCKET/textgen/serving", description="TF Serving model base path on the cluster."
    )
    host: str = Field("", description="KFP API endpoint for submit/schedule, e.g. https://kfp.example.com/pipeline.")
    namespace: str = Field("kubeflow", description="Kubernetes namespace (multi-user KFP: the profile namespace).")
    experiment: str = Field(
        "textgen", min_length=1, description="KFP experiment runs and recurring runs are filed under."
    )
    request_timeout: float = Field(
        60.0,
        gt=0,
        description="Seconds submit/schedule wait for the KFP host to connect and to answer each request "
        "before giving up (kfp's client would wait forever).",
    )
    beam_args: List[str] = Field(
        default_factory=lambda: ["--direct_running_mode=multi_processing", "--direct_num_workers=0"],
        description="Beam pipeline options of the data components on the cluster. Default: DirectRunner with one worker "
        "process per core of the pod. For Dataflow, Flink or Spark pass that runner's options instead "
        "(docs/kubeflow.md).",
    )
    env: Dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of every step's pod, in the spec: no credentials (kubeflow/pod_config.py), "
        "e.g. {S3_ENDPOINT: http://minio-service.kubeflow:9000, AWS_REGION: us-east-1} for KFP's MinIO.",
    )
    secret_env: Dict[str, str] = Field(
        default_factory=dict,
        description="Kubernetes secret keys as environment variables of every step: {ENV: <secret>/<key>}, e.g. "
        "{AWS_ACCESS_KEY_ID: mlpipeline-minio-artifact/accesskey, "
        "AWS_SECRET_ACCESS_KEY: mlpipeline-minio-artifact/secretkey}.",
    )
    config_map_env: Dict[str, str] = Field(
        default_factory=dict,
        description="Kubernetes config map keys as environment variables of every step: {ENV: <config map>/<key>}.",
    )
    resources: PodResources = Field(default_factory=PodResources)
    step_resources: Dict[str, PodResources] = Field(
        default_factory=_default_step_resources,
        description="Pods of particular steps (by step name, e.g. Trainer), instead of kubeflow.resources; the keys "
        "given for a step are merged into its default (Transform, Trainer and Evaluator have larger ones) "
        "or, for another step, into kubeflow.resources: Trainer={cpu_limit: 16} keeps the Trainer's "
        "memory.",
    )
    trainer_accelerator_type: str = Field(
        "", description="Kubernetes resource name of the Trainer's accelerators, e.g. nvidia.com/gpu; empty = none."
    )
    trainer_accelerator_count: int = Field(1, ge=1, description="How many accelerators the Trainer's pod gets.")
    tfjob: TFJobOptions = Field(default_factory=TFJobOptions)

    @field_validator("step_resources", mode="before")
    @classmethod
    def _over_default_steps(cls, value: Any, info: ValidationInfo) -> Any:
        """The keys given for a step are merged into that step's default pod (or, for a step
        without one, into `kubeflow.resources`); the steps not given keep their defaults."""
        if not isinstance(value, dict):
            return value
        merged: Dict[str, Any] = dict(_default_step_resources())
        for step, given in value.items():
            if isinstance(given, dict):
                base = merged.get(step, info.data.get("resources") or PodResources())
                given = {**base.model_dump(), **given}
            merged[step] = given
        return merged


# Peak learning rates when fine-tuning `model.checkpoint` (warm-up as `training.warmup_steps`):
# the usual defaults of full fine-tuning (Hugging Face Trainer: 5e-5) and of LoRA adapters, which
# start from zero and train with an update scaled by alpha / rank.
FULL_FINE_TUNING_LEARNING_RATE = 5e-5
LORA_LEARNING_RATE = 2e-4


class PipelineConfig(Options):
    """Everything a pipeline run needs; `create_pipeline` reads only this."""

    pipeline_name: str = Field(
        "textgen",
        description="TFX pipeline name: ML Metadata records runs under it, and it names the compiled KFP pipeline.",
    )
    data_root: str = Field(
        bundled("data/corpus"),
        description="Directory of corpus files (.txt, .jsonl, .csv, .tsv, .tfrecord; each optionally .gz/.bz2).",
    )
    output_root: str = Field("runs/local", description="Root of all local outputs.")
    schema_dir: str = Field(
        bundled("schema"),
        description="Directory holding the curated schema.pbtxt (raw text), conversation_schema.pbtxt (raw conversations) "
        "and transformed_schema.pbtxt (tokens).",
    )
    enable_cache: bool = Field(
        True,
        description="Reuse a component's earlier result when its inputs and parameters are unchanged (TFX caching; textgen run --no-cache sets false).",
    )
    beam_args: List[str] = Field(
        default_factory=lambda: ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
        description="Apache Beam pipeline options for the data components.",
    )
    example_gen: ExampleGenOptions = Field(default_factory=ExampleGenOptions)
    cleaning: CleaningOptions = Field(default_factory=CleaningOptions)
    data_gate: DataGateOptions = Field(default_factory=DataGateOptions)
    tokenizer: TokenizerOptions = Field(default_factory=TokenizerOptions)
    model: ModelOptions = Field(default_factory=ModelOptions)
    training: TrainingOptions = Field(default_factory=TrainingOptions)
    evaluator: EvaluatorOptions = Field(default_factory=EvaluatorOptions)
    generation: GenerationOptions = Field(default_factory=GenerationOptions)
    pusher: PusherOptions = Field(default_factory=PusherOptions)
    registry: RegistryOptions = Field(default_factory=RegistryOptions)
    kubeflow: KubeflowConfig = Field(default_factory=KubeflowConfig)

    @model_validator(mode="after")
    def _batch_fits_model(self) -> "PipelineConfig":
        batch = self.training.resolved_batch_size(self.model.context_length)
        if batch % self.training.gradient_accumulation_steps:
            raise ValueError(
                f"the global batch ({batch} sequences) must be divisible by "
                f"training.gradient_accumulation_steps ({self.training.gradient_accumulation_steps})"
            )
        return self

    @model_validator(mode="after")
    def _recompute_fits_model(self) -> "PipelineConfig":
        check_recompute(self.training.recompute, self.model)
        return self

    @model_validator(mode="after")
    def _sharding_fits(self) -> "PipelineConfig":
        """Sharded training: the settings it supports (options.check_sharding), in one Trainer
        process (a TFJob of one chief, no workers or parameter servers)."""
        check_sharding(self.training, self.model)
        tfjob = self.kubeflow.tfjob
        if self.training.sharding.enabled and tfjob.enabled and (tfjob.workers or tfjob.parameter_servers):
            raise ValueError(
                f"kubeflow.tfjob.workers={tfjob.workers} and parameter_servers={tfjob.parameter_servers} cannot be combined "
                "with training.sharding: sharded training runs in one process (multi-client DTensor is not supported); "
                "set both to 0 for a one-pod TFJob with kubeflow.tfjob.gpus GPUs"
            )
        return self

    @model_validator(mode="after")
    def _fine_tuning_defaults(self) -> "PipelineConfig":
        """A pretrained checkpoint wants a far lower peak learning rate than training from scratch
        (the default, 3e-3, would wreck it in a few steps): unless `training.learning_rate` is set,
        fine-tuning uses FULL_FINE_TUNING_LEARNING_RATE, or LORA_LEARNING_RATE with LoRA."""
        if self.model.checkpoint and "learning_rate" not in self.training.model_fields_set:
            lora = self.training.lora.rank > 0
            self.training.learning_rate = LORA_LEARNING_RATE if lora else FULL_FINE_TUNING_LEARNING_RATE
        return self

    @property
    def layout(self) -> OutputLayout:
        """Where this run's local outputs go (`pipeline/layout.py`)."""
        return OutputLayout(self.output_root)


def _set_dotted(tree: Dict[str, Any], dotted_key: str, value: Any) -> None:
    """Sets `tree[a][b][c] = value` for key 'a.b.c', creating intermediate dicts."""
    parts = dotted_key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set '{dotted_key}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def _deep_merge(base: Dict[str, Any], update: Dict[str, Any]) -> Dict[str, Any]:
    """Returns `base` updated recursively with `update` (sections merge, leaves replace)."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# `scheme://user:password@host`: the credentials part of a URL, never echoed back.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")


def redact_credentials(text: str) -> str:
    """`text` with the user:password part of every URL in it replaced by `***`."""
    return _URL_CREDENTIALS.sub(lambda match: match.group("scheme") + "***@", text)


def _format_validation_error(error: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "<root>"
        if item["type"] == "extra_forbidden":
            lines.append(f"  unknown key '{key}'")
        else:
            lines.append(f"  {key}: {item['msg']} (got {redact_credentials(repr(item.get('input')))})")
    return "\n".join(lines)


# Keys that moved: (section, key) -> (where to, the documentation page that describes it), named in
# the error instead of a bare "unknown key".
MOVED_KEYS = {
    ("transform", "vocab_size"): ("tokenizer.vocab_size", "docs/tokenizers.md"),
    ("evaluator", "max_perplexity_increase"): (
        "evaluator.max_bits_per_byte_increase (a relative change in bits per byte)",
        "docs/evaluation.md",
    ),
}


def _refuse_moved_keys(values: Dict[str, Any], source: str) -> None:
    for (section, key), (new_key, page) in MOVED_KEYS.items():
        if isinstance(values.get(section), dict) and key in values[section]:
            raise ConfigError(
                f"invalid configuration ({source}):\n  '{section}.{key}' moved to '{new_key}' (see {page})"
            )


def load_config(
    yaml_path: Optional[str] = None,
    overrides: Sequence[str] = (),
    **top_level: Any,
) -> PipelineConfig:
    """Builds the config from code defaults, an optional YAML file and `key=value` overrides.

    Later layers win: defaults < YAML file < `overrides` (dotted keys, YAML-typed values,
    e.g. `training.train_steps=50`) < `top_level` keyword values that are not None (the CLI's
    dedicated flags such as --data-root).
    """
    values: Dict[str, Any] = {}
    if yaml_path:
        try:
            with open(yaml_path, encoding="utf-8") as handle:
                loaded = yaml.safe_load(handle) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {yaml_path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {yaml_path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {yaml_path} must hold a mapping at the top level")
        values = loaded
    for override in overrides:
        key, sep, raw = override.partition("=")
        if not sep or not key:
            raise ConfigError(f"override '{override}' must look like section.key=value")
        _set_dotted(values, key.strip(), yaml.safe_load(raw))
    values = _deep_merge(values, {k: v for k, v in top_level.items() if v is not None})
    source = yaml_path or "defaults and overrides"
    _refuse_moved_keys(values, source)
    try:
        return PipelineConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, source)) from None


def yaml_value(value: Any) -> str:
    """`value` as it is written in a --config file or a --set override: `null`, `true`, `0.8`,
    `[a, b]`, `''` (YAML flow style, on one line)."""
    text = yaml.safe_dump(to_jsonable_python(value), default_flow_style=True, width=float("inf"))
    return text[: -len("\n...\n")] if text.endswith("\n...\n") else text.rstrip("\n")


class OptionEntry(NamedTuple):
    """One configurable key: its dotted name, its declared type, its default value, its
    description, and the options class (section) it belongs to with that section's dotted prefix."""

    key: str
    annotation: Any
    default: Any
    description: str
    section: str  # "" for the top-level keys, else e.g. "cleaning.quality"
    section_class: type


def option_entries() -> List[OptionEntry]:
    """Every configurable key of `PipelineConfig`, depth first in declaration order: the one source
    of `textgen options`, `textgen run --help` and the configuration reference page
    (`pipeline/config_reference.py`)."""
    entries: List[OptionEntry] = []

    def walk(model_cls: type, instance: BaseModel, prefix: str) -> None:
        for name, field in model_cls.model_fields.items():
            value = getattr(instance, name)
            if isinstance(value, BaseModel):
                walk(type(value), value, f"{prefix}{name}.")
                continue
            entries.append(
                OptionEntry(
                    f"{prefix}{name}", field.annotation, value, field.description or "", prefix.rstrip("."), model_cls
                )
            )

    walk(PipelineConfig, PipelineConfig(), "")
    return entries


def describe_options() -> List[str]:
    """One line per configurable key with its default written as YAML (`textgen options`,
    `textgen run --help`)."""
    return [
        f"{entry.key} = {yaml_value(entry.default)}" + (f"  {entry.description}" if entry.description else "")
        for entry in option_entries()
    ]
