"""The token data's schema, written for the run's tokenizer.

Which ids a document may contain depends on the tokenizer: the learned SentencePiece layout keeps
ids 0-2 for [PAD], [EOS], [UNK], while in GPT-2's vocabulary '!' is id 0 and <|endoftext|> the
last id. So the curated transformed schema (schema/transformed_schema.pbtxt) fixes no id range:
`TokenSchemaGen` reads it and the Tokenizer artifact and writes the schema the TokenGate's
ExampleValidator uses, with the token ids' domain [0, vocab_size). Ids the pipeline places itself
(and the unknown token) are refused through Transform's `special_tokens` count, whose domain the
curated schema fixes at 0 (preprocessing.py, tokenizer/special.py).

The fewest UTF-8 bytes a token stands for depends on the tokenizer too. The learned tokenizer's
graph adds nothing to a document, so each token covers at least one byte (the curated minimum of
`bytes_per_token`, 1). A checkpoint's tokenizer may add to the text before it splits it: a dummy
prefix ('▁' in Llama's SentencePiece and its tokenizer.json, a space with GPT-2's add_prefix_space)
is a token that covers no byte of the document, so text the vocabulary does not know (Chinese
through a Latin-script checkpoint: one byte-fallback token per byte) comes out below one byte per
token, down to 0.5 for a one-byte document. Its minimum is CHECKPOINT_MIN_BYTES_PER_TOKEN; how
well a checkpoint's vocabulary covers the corpus is `byte_token_fraction`'s to show, not a reason
to stop the run.
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
from components.transform.preprocessing import BYTES_PER_TOKEN_KEY, TOKEN_IDS_KEY

TOKEN_IDS_FEATURE = f"{TOKEN_IDS_KEY}$ragged_values"  # how TFDV names a ragged feature's values
CHECKPOINT_MIN_BYTES_PER_TOKEN = 0.5  # one added token (a dummy prefix) beside a one-byte document
SCHEMA_FILE_NAME = "schema.pbtxt"  # the name ImportSchemaGen gives it


def schema_for_tokenizer(
    curated: schema_pb2.Schema, tokenizer: loaded.LoadedTokenizer, source: str
) -> schema_pb2.Schema:
    """A copy of `curated` for `tokenizer`: the token ids' domain is [0, vocab_size) (any curated
    domain replaced) and, for a checkpoint's tokenizer, `bytes_per_token` may go down to
    CHECKPOINT_MIN_BYTES_PER_TOKEN (module docstring). `source` names `curated` in errors."""
    schema = schema_pb2.Schema()
    schema.CopyFrom(curated)
    features = {feature.name: feature for feature in schema.feature}
    if TOKEN_IDS_FEATURE not in features:
        raise ValueError(f"{source}: no feature {TOKEN_IDS_FEATURE!r} (the token ids Transform writes)")
    ids = features[TOKEN_IDS_FEATURE]
    ids.int_domain.Clear()
    ids.int_domain.min = 0
    ids.int_domain.max = tokenizer.vocab_size - 1
    compression = features.get(BYTES_PER_TOKEN_KEY)
    if (
        tokenizer.kind != loaded.LEARNED_SENTENCEPIECE
        and compression is not None
        and compression.HasField("float_domain")
    ):
        compression.float_domain.min = min(compression.float_domain.min, CHECKPOINT_MIN_BYTES_PER_TOKEN)
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
    written = schema_for_tokenizer(tfdv.load_schema_text(path), run_tokenizer, path)
    tf.io.gfile.makedirs(schema.uri)
    tfdv.write_schema_text(written, os.path.join(schema.uri, SCHEMA_FILE_NAME))
