"""Transform with a tokenizer: TFX's own Transform, plus a `tokenizer` input.

TFX's Transform component has no input for a tokenizer artifact. This component keeps Transform's
spec, parameters, outputs and executor, and adds one input channel, `tokenizer` (the Tokenizer
stage's artifact). Its executor puts that artifact's directory (a learned SentencePiece model or a
checkpoint's tokenizer files, see tokenizer/loaded.py) into the `custom_config` the
`preprocessing_fn` receives (`preprocessing.TOKENIZER_MODEL_KEY`), runs the stock executor, and
then copies the tokenizer's files into the transform graph (`transform_fn/assets/`), so that
whatever reads the transform graph (the Trainer, which exports it with the model) finds the
tokenizer beside the graph that embeds it.
"""

import json
from typing import Any, Dict, List

from tfx import types
from tfx.components import Transform
from tfx.components.transform.executor import Executor as StockTransformExecutor
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.types.component_spec import ChannelParameter

from components.tokenizer import loaded
from components.tokenizer.artifact import Tokenizer
from components.transform.preprocessing import TOKENIZER_MODEL_KEY

TOKENIZER_KEY = "tokenizer"


class TokenizingTransformSpec(standard_component_specs.TransformSpec):
    INPUTS = {**standard_component_specs.TransformSpec.INPUTS, TOKENIZER_KEY: ChannelParameter(type=Tokenizer)}


class TokenizingTransformExecutor(StockTransformExecutor):
    """The stock Transform executor, told where the tokenizer model is (see module docstring)."""

    def Do(
        self,
        input_dict: Dict[str, List[types.Artifact]],
        output_dict: Dict[str, List[types.Artifact]],
        exec_properties: Dict[str, Any],
    ) -> None:
        input_dict = dict(input_dict)  # the stock executor gets Transform's own inputs only
        tokenizer = artifact_utils.get_single_instance(input_dict.pop(TOKENIZER_KEY))
        model = loaded.load(tokenizer.uri)  # checks the files before Beam starts
        key = standard_component_specs.CUSTOM_CONFIG_KEY
        custom_config = json.loads(exec_properties.get(key) or "null") or {}
        exec_properties = {**exec_properties, key: json.dumps({**custom_config, TOKENIZER_MODEL_KEY: tokenizer.uri})}
        super().Do(input_dict, output_dict, exec_properties)
        transform_graph = artifact_utils.get_single_instance(output_dict[standard_component_specs.TRANSFORM_GRAPH_KEY])
        model.write(loaded.transform_graph_dir(transform_graph.uri))


class TokenizingTransform(base_beam_component.BaseBeamComponent):
    """`tfx.components.Transform(...)` with a `tokenizer` input; takes Transform's arguments."""

    SPEC_CLASS = TokenizingTransformSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(TokenizingTransformExecutor)

    def __init__(self, tokenizer: types.BaseChannel, **transform_args: Any):
        # Let the stock component validate the arguments and build its spec, then add the input.
        stock = Transform(**transform_args).spec
        outputs = {name: types.Channel(type=channel.type) for name, channel in stock.outputs.items()}
        super().__init__(
            spec=TokenizingTransformSpec(
                **stock.exec_properties, **stock.inputs, **outputs, **{TOKENIZER_KEY: tokenizer}
            )
        )
