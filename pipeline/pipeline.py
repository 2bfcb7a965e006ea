"""`create_pipeline(config)`: the one place the pipeline's components are wired.

    ExampleGen -> StatisticsGen -> ExampleValidator (against the imported curated schema)
      + DistributionValidator (drift vs the last accepted span, skew train vs eval)
      -> DataGate (fails the run on blocking anomalies or when cleaning removed more than
         data_gate.max_removed_fraction of the span; on a pass RecordAcceptedStatistics makes
         this span the next drift baseline) -> Tokenizer (SentencePiece model: learned, reused from
         the production model, or pinned) -> Transform (tokenizes with it in the graph)
      -> statistics + validation of the token data (the curated transformed schema, written for the
         run's tokenizer: its id range) -> TokenGate
      -> Trainer -> Evaluator (quality vs the production model, safety and bias gates -> ModelBlessing)
      -> Pusher (only when blessed)

Runners (local, Kubeflow) call this with their own paths and metadata; they never re-wire.

The pipeline has no ML Metadata resolver nodes: open-source Kubeflow Pipelines cannot run them
(its Argo compiler rejects `resolver` executors when a run is created; kubeflow/oss_compat.py,
docs/kubeflow.md "Compiling"). What a run compares with is looked up by the executors at run
time, the same way on both runners: the drift baseline in a state location, the Evaluator's
baseline and the warm-start model in the model registry (the production alias), the span by
ExampleGen's own executor. Nodes whose result depends on such outside state are never served
from a cache (`uncacheable_nodes`; each runner applies it).
"""

import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from tfx import v1 as tfx

from components.data_gate.component import DataGate, DistributionValidator, RecordAcceptedStatistics
from components.data_gate.schema_import import CuratedSchemaGen
from components.evaluator.component import GatedEvaluator
from components.example_gen.component import TextCorpusExampleGen
from components.example_gen.options import CleaningOptions
from components.pusher.component import VersionedPusher
from components.tokenizer.component import TokenizerComponent
from components.trainer.options import TrainerSettings, trainer_custom_config
from components.transform.component import TokenizingTransform
from components.transform.preprocessing import RAW_TEXT_KEY
from components.transform.token_schema import TokenSchemaGen
from pipeline.config import PipelineConfig
from pipeline.layout import PipelinePaths, transformed_conversation_schema_file

PREPROCESSING_FN = "components.transform.preprocessing.preprocessing_fn"
RUN_FN = "components.trainer.training.run_fn.run_fn"

# Node ids, in execution order; run summaries and tests refer to components by these.
COMPONENT_IDS = (
    "ExampleGen",
    "StatisticsGen",
    "SchemaGen",
    "ExampleValidator",
    "DistributionValidator",
    "DataGate",
    "RecordAcceptedStatistics",
    "Tokenizer",
    "Transform",
    "TransformedStatisticsGen",
    "TransformedSchemaGen",
    "TransformedExampleValidator",
    "TokenGate",
    "Trainer",
    "Evaluator",
    "Pusher",
)
# Nodes whose outcome depends on state outside their input artifacts and parameters: the drift
# baseline's state location (read and written), the model registry (the Evaluator's baseline, the
# Pusher's versions). A cache hit would replay a stale decision, so both runners execute them
# every time. `uncacheable_nodes` adds the ones that depend on the configuration and the runner.
UNCACHEABLE_NODES = frozenset({"DistributionValidator", "RecordAcceptedStatistics", "Evaluator", "Pusher"})


def uncacheable_nodes(config: PipelineConfig, paths: PipelinePaths) -> frozenset:
    """UNCACHEABLE_NODES, plus the Trainer when it warm-starts from the registry's production
    model, the Tokenizer when its policy is `reuse`, and ExampleGen unless the runner
    fingerprinted the corpus (`PipelinePaths`). With the default tokenizer policy `auto` the choice
    (reuse production's model, or learn one) is made once per span and options, and a re-run of the
    same span keeps it: token ids stay stable and the cached Transform and Trainer stay valid."""
    nodes = set(UNCACHEABLE_NODES)
    if config.training.warm_start:
        nodes.add("Trainer")
    if config.tokenizer.policy == "reuse":  # follows the production model on every run
        nodes.add("Tokenizer")
    if not paths.corpus_fingerprint:
        nodes.add("ExampleGen")
    return frozenset(nodes)


@dataclass(frozen=True)
class _ValidationStage:
    """Statistics, the imported curated schema, validation against it, and the gate that acts on it
    (for raw data also the distribution checks and the drift baseline they use)."""

    statistics_gen: tfx.types.BaseNode
    schema_gen: tfx.types.BaseNode
    example_validator: tfx.types.BaseNode
    gate: tfx.types.BaseNode
    distribution_nodes: Tuple[tfx.types.BaseNode, ...] = ()
    after_gate: Tuple[tfx.types.BaseNode, ...] = ()

    def nodes(self) -> List[tfx.types.BaseNode]:
        return [
            self.statistics_gen,
            self.schema_gen,
            self.example_validator,
            *self.distribution_nodes,
            self.gate,
            *self.after_gate,
        ]


def _validation_stage(
    examples,
    schema_gen: tfx.types.BaseNode,
    config: PipelineConfig,
    id_prefix: str,
    gate_id: str,
    stage: str,
    drift_state_uri: Optional[str] = None,
) -> _ValidationStage:
    """TFDV checks of `examples` against `schema_gen`'s schema, ending in a DataGate with id
    `gate_id` whose messages name its `stage` ('raw' or 'tokens').

    With a `drift_state_uri`, drift and skew are checked too and a passing gate records this
    span's statistics there as the next run's drift baseline.
    """
    check_distributions = drift_state_uri is not None
    statistics_gen = tfx.components.StatisticsGen(examples=examples).with_id(f"{id_prefix}StatisticsGen")
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    ).with_id(f"{id_prefix}ExampleValidator")
    distribution_nodes, after_gate, distribution_anomalies = (), (), None
    if check_distributions:
        distribution_validator = DistributionValidator(
            examples=examples,
            statistics=statistics_gen.outputs["statistics"],
            schema=schema_gen.outputs["schema"],
            state_uri=drift_state_uri,
            options=config.data_gate.to_parameter(),
        ).with_id(f"{id_prefix}DistributionValidator")
        distribution_nodes = (distribution_validator,)
        distribution_anomalies = distribution_validator.outputs["anomalies"]
    gate = DataGate(
        anomalies=example_validator.outputs["anomalies"],
        distribution_anomalies=distribution_anomalies,
        examples=examples if check_distributions else None,  # raw data: what cleaning removed
        options=config.data_gate.to_parameter(),
        stage=stage,
    ).with_id(gate_id)
    if check_distributions:
        after_gate = (
            RecordAcceptedStatistics(
                examples=examples,
                statistics=statistics_gen.outputs["statistics"],
                gate_result=gate.outputs["result"],
                state_uri=drift_state_uri,
            ).with_id(f"{id_prefix}RecordAcceptedStatistics"),
        )
    return _ValidationStage(statistics_gen, schema_gen, example_validator, gate, distribution_nodes, after_gate)


def cleaning_options(config: PipelineConfig) -> CleaningOptions:
    """The cleaning options, with the evaluator's red-team prompts and bias templates added to the
    decontamination suites (so the gates never ask what the model trained on)."""
    suites = [config.evaluator.safety.prompts_file, config.evaluator.bias.templates_file]
    decontamination = config.cleaning.decontamination.model_copy(
        update={"files": suites + list(config.cleaning.decontamination.files)}
    )
    return config.cleaning.model_copy(update={"decontamination": decontamination})


def create_components(config: PipelineConfig, paths: PipelinePaths) -> List[tfx.types.BaseNode]:
    """Instantiates and connects every component, in COMPONENT_IDS order."""
    example_gen = TextCorpusExampleGen(
        input_base=paths.data_root,
        options=config.example_gen,
        cleaning=cleaning_options(config),
        corpus_fingerprint=paths.corpus_fingerprint,
    ).with_id("ExampleGen")

    # The raw data's schema: the curated one for the examples' data kind (text or conversations).
    raw_schema = CuratedSchemaGen(
        schema_file=paths.schema_file,
        examples=example_gen.outputs["examples"] if paths.conversation_schema_file else None,
        conversation_schema_file=paths.conversation_schema_file,
    ).with_id("SchemaGen")
    raw_data_checks = _validation_stage(
        example_gen.outputs["examples"],
        raw_schema,
        config,
        "",
        "DataGate",
        "raw",
        drift_state_uri=paths.drift_state_uri,
    )
    tokenizer = TokenizerComponent(
        examples=example_gen.outputs["examples"],
        options=config.tokenizer,
        text_feature=RAW_TEXT_KEY,
        registry=config.registry,
        model_name=config.pusher.model_name,
        registry_dir=paths.registry_dir,
        checkpoint=config.model.checkpoint or "",
    ).with_id("Tokenizer")
    tokenizer.add_upstream_node(raw_data_checks.gate)
    transform = TokenizingTransform(
        tokenizer=tokenizer.outputs["tokenizer"],
        examples=example_gen.outputs["examples"],
        schema=raw_data_checks.schema_gen.outputs["schema"],
        preprocessing_fn=PREPROCESSING_FN,
    ).with_id("Transform")

    # The token data's schema is written for the run's tokenizer (its id range).
    token_schema = TokenSchemaGen(
        tokenizer=tokenizer.outputs["tokenizer"],
        schema_file=paths.transformed_schema_file,
        conversation_schema_file=transformed_conversation_schema_file(os.path.dirname(paths.transformed_schema_file)),
    ).with_id("TransformedSchemaGen")
    token_data_checks = _validation_stage(
        transform.outputs["transformed_examples"], token_schema, config, "Transformed", "TokenGate", "tokens"
    )

    # Every training setting, the step count included, reaches run_fn one way: `training` inside
    # custom_config, typed and validated like the rest (TrainingOptions.train_steps; a resumed run
    # finishes the remainder, and the TFJob replicas read the same settings). TFX's TrainArgs and
    # EvalArgs stay at their defaults (fn_args.train_steps is None): run_fn reads neither.
    trainer = tfx.components.Trainer(
        run_fn=RUN_FN,
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        custom_config=trainer_custom_config(
            TrainerSettings(
                model=config.model,
                training=config.training,
                generation=config.generation,
                # Where the production model is looked up when training.warm_start is on.
                registry=config.registry,
                model_name=config.pusher.model_name,
                registry_dir=paths.registry_dir,
                tfjob=config.kubeflow.tfjob.model_copy(
                    update={"image": config.kubeflow.tfjob.image or config.kubeflow.image}
                ),
                tfjob_namespace=config.kubeflow.namespace,
            )
        ),
    ).with_id("Trainer")
    trainer.add_upstream_node(token_data_checks.gate)

    evaluator = GatedEvaluator(
        model=trainer.outputs["model"],
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        raw_examples=example_gen.outputs["examples"],
        options=config.evaluator.to_parameter(),
        registry=config.registry.to_parameter(),
        model_name=config.pusher.model_name,
        registry_dir=paths.registry_dir,
        probe_cache_dir=paths.probe_cache_uri,
    ).with_id("Evaluator")

    pusher = VersionedPusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        serving_dir=paths.serving_dir,
        options=config.pusher,
        registry=config.registry,
        registry_dir=paths.registry_dir,
        examples=example_gen.outputs["examples"],
    ).with_id("Pusher")

    return [
        example_gen,
        *raw_data_checks.nodes(),
        tokenizer,
        transform,
        *token_data_checks.nodes(),
        trainer,
        evaluator,
        pusher,
    ]


# `textgen validate` runs the pipeline through this node (and everything upstream of it):
# ingestion, both data checks, the gate, and the drift baseline a passing gate records.
DATA_VALIDATION_LAST_NODE = "RecordAcceptedStatistics"


def create_pipeline(
    config: PipelineConfig,
    paths: Optional[PipelinePaths] = None,
    metadata_connection_config=None,
) -> tfx.dsl.Pipeline:
    """Builds the TFX pipeline for `config`; `paths` default to the local layout."""
    paths = paths or PipelinePaths.local(config)
    return tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=paths.pipeline_root,
        components=create_components(config, paths),
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=list(config.beam_args),
    )
