"""The ExampleGen component: a file-based ExampleGen whose executor resolves its own spans.

TFX's `FileBasedExampleGen` resolves `{SPAN}` / date patterns in a driver. Locally the driver runs
in-process, but the Kubeflow V2 compiler turns it into a `container.lifecycle.preCacheCheck` hook,
which open-source Kubeflow Pipelines never runs (its backend reads no `container.lifecycle`;
kubeflow/oss_compat.py, docs/kubeflow.md "Compiling"): a `{SPAN}` pattern then matches no file.
This component has the same spec as FileBasedExampleGen (so TFX tooling reads its artifacts the
same way) and no custom driver; `TextCorpusExampleGenExecutor` resolves the span with TFX's own
input processor at run time, on both runners.

Because the span and the input fingerprint are only known once the executor runs, this node is
served from a cache only when the runner passed a fingerprint of the corpus as a parameter (the
local runner does; see `pipeline.pipeline.uncacheable_nodes`).
"""

from typing import Optional

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import standard_artifacts, standard_component_specs

from components.example_gen.executor import TextCorpusExampleGenExecutor, corpus_fingerprint
from components.example_gen.options import (
    CLEANING_OPTIONS_KEY,
    CORPUS_FINGERPRINT_KEY,
    EXAMPLE_GEN_OPTIONS_KEY,
    CleaningOptions,
    ExampleGenOptions,
)

CORPUS_SPLIT = "corpus"  # the one input split; ExampleGen hash-splits it into train and eval


def input_config(options: ExampleGenOptions) -> example_gen_pb2.Input:
    """The one input split: every file `options.file_pattern` matches."""
    return example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name=CORPUS_SPLIT, pattern=options.file_pattern)])


def output_config(options: ExampleGenOptions) -> example_gen_pb2.Output:
    """The train/eval hash split."""
    return example_gen_pb2.Output(
        split_config=example_gen_pb2.SplitConfig(
            splits=[
                example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=options.train_buckets),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=options.eval_buckets),
            ]
        )
    )


def range_config(options: ExampleGenOptions) -> Optional[range_config_pb2.RangeConfig]:
    """TFX's span selection: None means the latest span (resolved by the executor)."""
    if options.span is None:
        return None
    return range_config_pb2.RangeConfig(
        static_range=range_config_pb2.StaticRange(start_span_number=options.span, end_span_number=options.span)
    )


def fingerprint_corpus(input_base: str, options: ExampleGenOptions) -> str:
    """TFX's fingerprint of the files `options` select under `input_base` now ("" when none match)."""
    return corpus_fingerprint(input_base, input_config(options), range_config(options))


def custom_config(options: ExampleGenOptions, cleaning: CleaningOptions, fingerprint: str = "") -> dict:
    """The executor's custom config: each options object as its JSON text, and the cache key."""
    return {
        EXAMPLE_GEN_OPTIONS_KEY: options.to_parameter(),
        CLEANING_OPTIONS_KEY: cleaning.to_parameter(),
        CORPUS_FINGERPRINT_KEY: fingerprint,
    }


class TextCorpusExampleGen(base_beam_component.BaseBeamComponent):
    """Reads, cleans and splits a text corpus into tf.Example TFRecords (see module docstring)."""

    SPEC_CLASS = standard_component_specs.FileBasedExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(TextCorpusExampleGenExecutor)

    def __init__(
        self, input_base: str, options: ExampleGenOptions, cleaning: CleaningOptions, corpus_fingerprint: str = ""
    ):
        """`corpus_fingerprint` (`fingerprint_corpus`) is only a cache key: a runner that passes it
        lets TFX's cache reuse this node exactly when the selected files are unchanged."""
        super().__init__(
            spec=standard_component_specs.FileBasedExampleGenSpec(
                input_base=input_base,
                input_config=input_config(options),
                output_config=output_config(options),
                custom_config=custom_config(options, cleaning, corpus_fingerprint),
                range_config=range_config(options),
                output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
                output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
                examples=types.Channel(type=standard_artifacts.Examples),
            )
        )
