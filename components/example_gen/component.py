"""The ExampleGen component: a file-based ExampleGen whose executor resolves its own spans.

TFX's `FileBasedExampleGen` resolves `{SPAN}` / date patterns in a driver. Locally the driver runs
in-process, but the Kubeflow V2 compiler turns it into a `container.lifecycle.preCacheCheck` hook,
which open-source Kubeflow Pipelines never runs (see ../shared/DESIGN.md section 4b): a `{SPAN}`
pattern then matches no file. This component has the same spec as FileBasedExampleGen (so TFX
tooling reads its artifacts the same way) and no custom driver; `TextCorpusExampleGenExecutor`
resolves the span with TFX's own input processor at run time, on both runners.

Because the span and the input fingerprint are only known once the executor runs, this node is
served from a cache only when the runner passed a fingerprint of the corpus as a parameter (the
local runner does; see `pipeline.pipeline.uncacheable_nodes`).
"""
from typing import Optional

from tfx import types
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import standard_artifacts, standard_component_specs

from components.example_gen.executor import TextCorpusExampleGenExecutor


class TextCorpusExampleGen(base_beam_component.BaseBeamComponent):
    """Reads, cleans and splits a text corpus into tf.Example TFRecords (see module docstring)."""

    SPEC_CLASS = standard_component_specs.FileBasedExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(TextCorpusExampleGenExecutor)

    def __init__(self, input_base: str, input_config: example_gen_pb2.Input, output_config: example_gen_pb2.Output,
                 custom_config: dict, range_config: Optional[range_config_pb2.RangeConfig] = None):
        super().__init__(spec=standard_component_specs.FileBasedExampleGenSpec(
            input_base=input_base,
            input_config=input_config,
            output_config=output_config or example_gen_utils.make_default_output_config(input_config),
            custom_config=custom_config,
            range_config=range_config,
            output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
            output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
            examples=types.Channel(type=standard_artifacts.Examples),
        ))
