"""The input pipeline: transformed examples to packed (inputs, targets) blocks.

Documents' token streams are concatenated, each framed by the tokenizer's document prefix and
suffix (`SpecialTokens`; the learned tokenizer's is an EOS separator before each document), and cut
into blocks of `context_length + 1` tokens; inputs are the first `context_length`, targets the
last `context_length` (shifted by one). Packing wastes no compute on padding. The evaluator uses
the same function so perplexity is measured on exactly what the model trains on.

Training data is shuffled twice: documents before they are packed, anew on every pass over the
data, so a block's neighbouring documents differ from one epoch to the next (as Megatron-LM's
per-epoch document index does), and then the packed blocks. Shuffling only the blocks would repeat
the same blocks every epoch: on a small corpus trained for many epochs the model then learns which
document follows which, and what it predicts at the start of a document depends on the document
before it in the fixed packing (the bias gate's planted-association test measured this as noise
in an association-free model; tests/bias_corpus.py).
"""

from typing import Any, Dict, Optional

import tensorflow as tf

from components.file_patterns import FilePatterns, matching_files
from components.tokenizer.special import LEARNED, SpecialTokens
from components.trainer.model.framing import frame_documents
from components.transform.preprocessing import TOKEN_IDS_KEY

_PARSE_BATCH = 256  # serialized examples parsed per call; larger batches amortise op overhead


def framed_documents(
    file_patterns: FilePatterns, feature_spec: Dict[str, Any], special: SpecialTokens = LEARNED
) -> tf.data.Dataset:
    """The transformed examples matching `file_patterns` as batches of documents (ragged
    [documents, (tokens)] int64), each framed by `special`'s document prefix and suffix.

    `feature_spec` is `TFTransformOutput.transformed_feature_spec()`, which knows how Transform
    encoded the ragged `token_ids` output in the tf.Examples.
    """
    files = matching_files(file_patterns, "transformed examples")
    feature_spec = {TOKEN_IDS_KEY: feature_spec[TOKEN_IDS_KEY]}

    def frame(serialized: tf.Tensor) -> tf.RaggedTensor:
        return frame_documents(tf.io.parse_example(serialized, feature_spec)[TOKEN_IDS_KEY], special)

    return (
        tf.data.TFRecordDataset(files, compression_type="GZIP")
        .batch(_PARSE_BATCH)
        .map(frame, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    )


def _one_tensor_per_document(documents: tf.RaggedTensor) -> tf.data.Dataset:
    """A batch of framed documents as a dataset of one 1-D tensor per document (`unbatch` of a
    ragged batch keeps a ragged element spec that later `unbatch`/`batch` calls mishandle)."""
    tokens = documents.flat_values
    bounds = (documents.row_starts(), documents.row_limits())
    return tf.data.Dataset.from_tensor_slices(bounds).map(lambda start, limit: tokens[start:limit])


def token_stream(
    file_patterns: FilePatterns, feature_spec: Dict[str, Any], special: SpecialTokens = LEARNED
) -> tf.data.Dataset:
    """All tokens of the transformed examples matching `file_patterns`, in file order, each document
    framed by `special`'s document prefix and suffix (see `framed_documents`)."""
    return framed_documents(file_patterns, feature_spec, special).map(lambda documents: documents.flat_values).unbatch()


def holds_one_block(
    file_patterns: FilePatterns, feature_spec: Dict[str, Any], context_length: int, special: SpecialTokens = LEARNED
) -> bool:
    """Whether the examples hold at least one full training block (context_length + 1 tokens)."""
    stream = token_stream(file_patterns, feature_spec, special).batch(context_length + 1, drop_remainder=True)
    return any(True for _ in stream.take(1))


def packed_blocks(
    file_patterns: FilePatterns,
    feature_spec: Dict[str, Any],
    context_length: int,
    batch_size: int,
    shuffle_buffer: Optional[int] = None,
    seed: Optional[int] = None,
    repeat: bool = False,
    special: SpecialTokens = LEARNED,
) -> tf.data.Dataset:
    """Batches of (inputs, targets), each [batch_size, context_length] int64.

    With `shuffle_buffer`, documents are shuffled (a buffer of that many) before packing, on every
    pass anew, and the blocks after it (module docstring); `repeat` then repeats the documents, so
    every epoch is packed differently. Without it the blocks come in file order and repeat as they are.
    """
    if shuffle_buffer:
        documents = framed_documents(file_patterns, feature_spec, special).flat_map(_one_tensor_per_document)
        # Two seeds from one, so the document and block orders are not the same permutation.
        documents = documents.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            documents = documents.repeat()
        blocks = documents.unbatch().batch(context_length + 1, drop_remainder=True)
        blocks = blocks.shuffle(shuffle_buffer, seed=None if seed is None else seed + 1, reshuffle_each_iteration=True)
    else:
        blocks = token_stream(file_patterns, feature_spec, special).batch(context_length + 1, drop_remainder=True)
        if repeat:
            blocks = blocks.repeat()
    return (
        blocks.batch(batch_size, drop_remainder=repeat)
        .map(lambda block: (block[:, :-1], block[:, 1:]), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def distributed_blocks(strategy: tf.distribute.Strategy, make_global_batches, global_batch_size: int):
    """Distributes a dataset of global batches ((inputs, targets) or packed dicts) over the strategy's replicas.

    `make_global_batches()` returns the global-batch dataset; every input pipeline (one per
    worker) builds the same one, in the same order, and keeps only its replicas' rows, so the
    replicas together see exactly the batch a single process would: the same global batch gives
    the same update whatever the cluster shape.
    """
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(f"the global batch ({global_batch_size}) must be divisible by the {replicas} replicas")
    per_replica = global_batch_size // replicas

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        local_replicas = replicas // input_context.num_input_pipelines
        first_row = input_context.input_pipeline_id * local_replicas * per_replica

        def local_rows(*batch):
            batch = batch[0] if len(batch) == 1 else batch  # (inputs, targets), or a dict of packed conversations
            rows = slice(first_row, first_row + local_replicas * per_replica)
            shape = [local_replicas, per_replica, -1]
            return tf.nest.map_structure(lambda tensor: tf.reshape(tensor[rows], shape), batch)

        # One element per local replica, in replica order.
        return make_global_batches().map(local_rows).unbatch().prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(dataset_fn)
