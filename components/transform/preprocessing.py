"""TF Transform `preprocessing_fn`: raw documents to token ids.

The tokenizer is the Tokenizer stage's: the tokenizing Transform (`component.py`) puts the
artifact's directory in `custom_config[TOKENIZER_MODEL_KEY]` (a learned SentencePiece model file
path works too). Its files are read here, at trace time, and embedded in the transform graph
(TF Text's SentencePiece op, or the byte-level BPE graph with its vocabulary and merges as
constants), so the trainer, the evaluator and the exported serving model tokenize exactly as
Transform did. There is no analyze phase.

Outputs per document:
    token_ids           ragged int64   the tokens (no separators; the trainer adds them)
    num_tokens          int64          len(token_ids)
    byte_token_fraction float32        share of tokens that stand for one byte (byte-fallback pieces;
                                       for byte-level BPE, the 256 unmerged byte symbols)
    bytes_per_token     float32        UTF-8 bytes / tokens (compression), 0 for empty text
    special_tokens      int64          tokens that are ids the pipeline places itself (bos, eos, pad,
                                       framing) or the unknown token (special.py): the transformed
                                       schema allows none, so the TokenGate refuses such data

Conversation data (raw examples with `roles` and `contents`, components/example_gen) is rendered
with the chat template the Tokenizer artifact carries (tokenizer/chat_graph.py), and per
conversation the outputs are instead:
    token_ids           ragged int64   the rendered conversation's tokens, template tokens included
    loss_mask           ragged int64   1 where the token belongs to a reply (and its end-of-turn token)
    num_tokens, byte_token_fraction    as above, over the rendered conversation
    bytes_per_token     float32        UTF-8 bytes of the contents / tokens
    supervised_tokens   int64          sum(loss_mask)
    template_accepted   int64          1, or 0 when the template refuses the order of roles (its mask is 0)
    special_tokens      int64          as above, not counting the ids the chat template places itself
"""

from typing import Any, Dict, Optional

import tensorflow as tf

from components.tokenizer import loaded

RAW_TEXT_KEY = "text"
TOKEN_IDS_KEY = "token_ids"
NUM_TOKENS_KEY = "num_tokens"
BYTE_TOKEN_FRACTION_KEY = "byte_token_fraction"
BYTES_PER_TOKEN_KEY = "bytes_per_token"
SPECIAL_TOKENS_KEY = "special_tokens"
LOSS_MASK_KEY = "loss_mask"  # conversations: 1 where a token is part of a reply the model learns
SUPERVISED_TOKENS_KEY = "supervised_tokens"
TEMPLATE_ACCEPTED_KEY = "template_accepted"
ROLES_KEY, CONTENTS_KEY = "roles", "contents"  # raw conversation features (ExampleGen)
TOKENIZER_MODEL_KEY = "tokenizer_model"  # custom_config key: a tokenizer directory or learned model file


def preprocessing_fn(
    inputs: Dict[str, tf.Tensor], custom_config: Optional[Dict[str, Any]] = None
) -> Dict[str, tf.Tensor]:
    """Tokenizes `text` with the configured tokenizer (see module docstring)."""
    if not custom_config or not custom_config.get(TOKENIZER_MODEL_KEY):
        raise ValueError(
            f"preprocessing_fn needs custom_config['{TOKENIZER_MODEL_KEY}'], the tokenizer directory "
            "or model file (the tokenizing Transform component sets it from its `tokenizer` input)"
        )
    loaded_tokenizer = loaded.load(custom_config[TOKENIZER_MODEL_KEY])
    tokenizer = loaded_tokenizer.graph()
    if ROLES_KEY in inputs:
        return _conversation_features(inputs, loaded_tokenizer, tokenizer)
    text = tf.reshape(inputs[RAW_TEXT_KEY], [-1])
    token_ids = tokenizer.tokenize(text)
    num_tokens = token_ids.row_lengths()
    is_byte_token = _is_byte_token(token_ids, loaded_tokenizer)
    byte_tokens = tf.reduce_sum(tf.cast(is_byte_token, tf.float32), axis=1)
    safe_count = tf.maximum(tf.cast(num_tokens, tf.float32), 1.0)
    return {
        TOKEN_IDS_KEY: token_ids,
        NUM_TOKENS_KEY: num_tokens,
        BYTE_TOKEN_FRACTION_KEY: byte_tokens / safe_count,
        BYTES_PER_TOKEN_KEY: tf.cast(tf.strings.length(text), tf.float32) / safe_count,
        SPECIAL_TOKENS_KEY: count_forbidden(token_ids, loaded_tokenizer.document_forbidden_ids()),
    }


def count_forbidden(token_ids: tf.RaggedTensor, forbidden) -> tf.Tensor:
    """[batch] int64: how many of each document's tokens are in `forbidden` (ids)."""
    forbidden = tf.constant(sorted(forbidden) or [-1], tf.int64)
    flat = tf.cast(token_ids.flat_values, tf.int64)
    hit = tf.reduce_any(tf.equal(flat[:, tf.newaxis], forbidden[tf.newaxis, :]), axis=1)
    return tf.reduce_sum(tf.cast(token_ids.with_flat_values(hit), tf.int64), axis=1)


def _dense_strings(feature) -> tf.Tensor:
    """A variable-length string feature as [batch, turns], "" after each row's last value."""
    if isinstance(feature, tf.SparseTensor):
        return tf.sparse.to_dense(feature, default_value="")
    if isinstance(feature, tf.RaggedTensor):
        return feature.to_tensor(default_value="")
    return feature


def _conversation_features(
    inputs: Dict[str, tf.Tensor], loaded_tokenizer: loaded.LoadedTokenizer, tokenizer
) -> Dict[str, tf.Tensor]:
    """Renders, tokenizes and masks each conversation (module docstring)."""
    from components.tokenizer.chat_graph import ChatGraph

    chat = loaded_tokenizer.chat()
    if chat is None:
        raise ValueError(
            f"conversation data needs a chat template, and the tokenizer at {loaded_tokenizer.source} has "
            "none (the Tokenizer stage adds one when the examples are conversations)"
        )
    roles, contents = _dense_strings(inputs[ROLES_KEY]), _dense_strings(inputs[CONTENTS_KEY])
    token_ids, loss_mask, accepted = ChatGraph(chat.grammar, chat.special_ids, tokenizer.tokenize).training_example(
        roles, contents
    )
    num_tokens = token_ids.row_lengths()
    safe_count = tf.maximum(tf.cast(num_tokens, tf.float32), 1.0)
    byte_tokens = tf.reduce_sum(tf.cast(_is_byte_token(token_ids, loaded_tokenizer), tf.float32), axis=1)
    content_bytes = tf.reduce_sum(tf.strings.length(contents), axis=1)
    return {
        TOKEN_IDS_KEY: token_ids,
        LOSS_MASK_KEY: loss_mask,
        NUM_TOKENS_KEY: num_tokens,
        SUPERVISED_TOKENS_KEY: tf.reduce_sum(loss_mask, axis=1),
        TEMPLATE_ACCEPTED_KEY: tf.cast(accepted, tf.int64),
        BYTE_TOKEN_FRACTION_KEY: byte_tokens / safe_count,
        BYTES_PER_TOKEN_KEY: tf.cast(content_bytes, tf.float32) / safe_count,
        SPECIAL_TOKENS_KEY: count_forbidden(
            token_ids, set(loaded_tokenizer.document_forbidden_ids()) - set(chat.special_ids.values())
        ),
    }


def _is_byte_token(token_ids: tf.RaggedTensor, tokenizer: loaded.LoadedTokenizer) -> tf.RaggedTensor:
    """Whether each token stands for one byte (a contiguous id range where it is one, as in the
    learned layout and Llama's; else a lookup in a constant mask over the vocabulary)."""
    byte_ids = tokenizer.byte_token_ids()
    if byte_ids == list(range(byte_ids[0], byte_ids[-1] + 1)):
        return (token_ids >= byte_ids[0]) & (token_ids <= byte_ids[-1])
    mask = [False] * tokenizer.vocab_size
    for index in byte_ids:
        mask[index] = True
    return tf.ragged.map_flat_values(tf.gather, tf.constant(mask), token_ids)
