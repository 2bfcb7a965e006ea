"""The token data's schema, written for the run's tokenizer.

Which ids a document may contain depends on the tokenizer: the learned SentencePiece layout keeps
ids 0-2 for [PAD], [EOS], [UNK], while in GPT-2's vocabulary '!' is id 0 and <|endoftext|> the
last id. So the curated transformed schema (schema/transformed_schema.pbtxt) fixes no id range:
`TokenSchemaGen` reads it and the Tokenizer artifact and writes the schema the TokenGate's
ExampleValidator uses, with the token ids' domain [0, vocab_size). Ids the pipeline places itself
(and the unknown token) are refused through Transform's `special_tokens` count, whose domain the
curated schema fixes at 0 (preprocessing.py, tokenizer/special.py).
"""
import os

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

from components.resources import resolve
from components.tokenizer import loaded
from components.tokenizer.artifact import Tokenizer
from components.transform.preprocessing import TOKEN_IDS_KEY

TOKEN_IDS_FEATURE = f"{TOKEN_IDS_KEY}$ragged_values"  # how TFDV names a ragged feature's values
SCHEMA_FILE_NAME = "schema.pbtxt"  # the name ImportSchemaGen gives it


def schema_for_tokenizer(curated: schema_pb2.Schema, vocab_size: int, source: str) -> schema_pb2.Schema:
    """A copy of `curated` whose token ids' domain is [0, vocab_size) (any curated domain replaced)."""
    schema = schema_pb2.Schema()
    schema.CopyFrom(curated)
    features = [feature for feature in schema.feature if feature.name == TOKEN_IDS_FEATURE]
    if not features:
        raise ValueError(f"{source}: no feature {TOKEN_IDS_FEATURE!r} (the token ids Transform writes)")
    features[0].int_domain.Clear()
    features[0].int_domain.min = 0
    features[0].int_domain.max = vocab_size - 1
    return schema


@component
def TokenSchemaGen(
    tokenizer: InputArtifact[Tokenizer],
    schema: OutputArtifact[standard_artifacts.Schema],
    schema_file: Parameter[str],
    conversation_schema_file: Parameter[str] = "",
) -> None:
    """Writes the token data's schema for the run's tokenizer (see the module docstring).

    Args:
      tokenizer: the Tokenizer stage's artifact.
      schema: the schema (`schema.pbtxt`), as ImportSchemaGen writes one.
      schema_file: the curated transformed schema (a path or a `bundled:` reference).
      conversation_schema_file: the curated schema of transformed conversations, used instead
        when the tokenizer carries a chat template (conversation data; preprocessing.py).
    """
    run_tokenizer = loaded.load(tokenizer.uri)
    chosen = conversation_schema_file if conversation_schema_file and run_tokenizer.chat() is not None else schema_file
    path = resolve(chosen)
    written = schema_for_tokenizer(tfdv.load_schema_text(path), run_tokenizer.vocab_size, path)
    tf.io.gfile.makedirs(schema.uri)
    tfdv.write_schema_text(written, os.path.join(schema.uri, SCHEMA_FILE_NAME))
