"""CuratedSchemaGen: imports the curated schema that fits the examples, which may be a `bundled:`
reference.

The stock ImportSchemaGen copies the file at a path fixed when the pipeline is compiled; the
curated schemas ship inside the installed package, whose path differs between the machine that
compiles a Kubeflow pipeline and the image that runs it. This executor resolves the reference
(components/resources.py) in the process that runs it, then does exactly what the stock one does.

Raw data comes in two kinds (plain text or conversations: `components/example_gen/data_kind.py`),
and the kind is known only once ExampleGen has read the data, after the pipeline was compiled.
Given the Examples, the executor reads their `data_kind` and imports `conversation_schema_file`
for conversations, `schema_file` otherwise; without Examples (the token data) it imports
`schema_file`. The output Schema records the choice as custom properties `data_kind` and
`schema_file` (the reference it imported).
"""

from typing import Any, Dict, List, Optional

import tensorflow as tf
from tfx import types
from tfx.components.schema_gen.import_schema_gen import executor as import_schema_gen_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.example_gen import data_kind
from components.resources import resolve

EXAMPLES_KEY = "examples"
CONVERSATION_SCHEMA_FILE_KEY = "conversation_schema_file"


class CuratedSchemaGenSpec(ComponentSpec):
    PARAMETERS = {
        standard_component_specs.SCHEMA_FILE_KEY: ExecutionParameter(type=str),
        CONVERSATION_SCHEMA_FILE_KEY: ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True)}
    OUTPUTS = {standard_component_specs.SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema)}


def select_schema_file(exec_properties: Dict[str, Any], examples: Optional[types.Artifact]) -> tuple:
    """(the data kind, the schema reference to import) for `examples` (None: the token data).
    Raises FileNotFoundError when the examples hold conversations and no conversation schema is
    configured or the configured one does not exist."""
    kind = data_kind.examples_data_kind(examples) if examples is not None else data_kind.TEXT
    if kind != data_kind.CONVERSATIONS:
        return kind, exec_properties[standard_component_specs.SCHEMA_FILE_KEY]
    chosen = exec_properties.get(CONVERSATION_SCHEMA_FILE_KEY) or ""
    if not chosen or not tf.io.gfile.exists(resolve(chosen)):
        raise FileNotFoundError(
            f"the examples hold conversations (data_kind={kind}), and their curated schema "
            f"{chosen or '(none configured)'} does not exist: the schema directory must hold conversation_schema.pbtxt"
        )
    return kind, chosen


class CuratedSchemaExecutor(import_schema_gen_executor.Executor):
    """The stock ImportSchemaGen executor, after choosing the schema for the examples' kind and
    resolving a `bundled:` reference (see module docstring)."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]], output_dict, exec_properties) -> None:
        examples = input_dict.get(EXAMPLES_KEY) or []
        kind, chosen = select_schema_file(exec_properties, examples[0] if examples else None)
        key = standard_component_specs.SCHEMA_FILE_KEY
        super().Do({}, output_dict, dict(exec_properties, **{key: resolve(chosen)}))
        schema = artifact_utils.get_single_instance(output_dict[standard_component_specs.SCHEMA_KEY])
        schema.set_string_custom_property(data_kind.DATA_KIND_PROPERTY, kind)
        schema.set_string_custom_property(key, chosen)


class CuratedSchemaGen(base_component.BaseComponent):
    """ImportSchemaGen that accepts `bundled:` references and, given the Examples, imports the
    conversation schema for conversations (see module docstring)."""

    SPEC_CLASS = CuratedSchemaGenSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(CuratedSchemaExecutor)

    def __init__(
        self, schema_file: str, examples: Optional[types.BaseChannel] = None, conversation_schema_file: str = ""
    ):
        super().__init__(
            spec=CuratedSchemaGenSpec(
                schema_file=schema_file,
                conversation_schema_file=conversation_schema_file,
                examples=examples,
                schema=types.Channel(type=standard_artifacts.Schema),
            )
        )
