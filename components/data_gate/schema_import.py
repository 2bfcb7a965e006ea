"""ImportSchemaGen for the curated schemas, which may be `bundled:` references.

The stock ImportSchemaGen copies the file at a path fixed when the pipeline is compiled; the
curated schemas ship inside the installed package, whose path differs between the machine that
compiles a Kubeflow pipeline and the image that runs it. This executor resolves the reference
(components/resources.py) in the process that runs it, then does exactly what the stock one does.
"""
from tfx.components.schema_gen.import_schema_gen import component as import_schema_gen
from tfx.components.schema_gen.import_schema_gen import executor as import_schema_gen_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from components.resources import resolve


class CuratedSchemaExecutor(import_schema_gen_executor.Executor):
    """The stock ImportSchemaGen executor, after resolving a `bundled:` schema file reference."""

    def Do(self, input_dict, output_dict, exec_properties):
        key = standard_component_specs.SCHEMA_FILE_KEY
        super().Do(input_dict, output_dict, dict(exec_properties, **{key: resolve(exec_properties[key])}))


class CuratedSchemaGen(import_schema_gen.ImportSchemaGen):
    """ImportSchemaGen that accepts `bundled:` references (see module docstring)."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(CuratedSchemaExecutor)
