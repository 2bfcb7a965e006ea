"""Which ops a SavedModel needs, and whether stock TF Serving 2.16 can load them.

Stock TF Serving 2.16 is built with TensorFlow 2.16 (every core op) and embeds TF Text 2.12.1,
whose tokenizer ops load but whose newer ops (trimmers such as RoundRobinTrim, utf8_binarize,
ByteSplitter) do not. A graph is serving-safe when every op is a core op or in the TF Text
allow-list below.
"""

import os
from typing import Set

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

# TF Text ops present in the TF Text 2.12.1 that stock TF Serving 2.12-2.19 embeds.
SERVING_TF_TEXT_OPS = frozenset(
    {
        "RegexSplitWithOffsets",
        "WordpieceTokenizeWithOffsets",
        "FastWordpieceTokenizeWithOffsets",
        "SentencepieceOp",
        "SentencepieceTokenizeOp",
        "SentencepieceDetokenizeOp",
        "WhitespaceTokenizeWithOffsetsV2",
        "UnicodeScriptTokenizeWithOffsets",
    }
)


def saved_model_op_types(saved_model_dir: str) -> Set[str]:
    """Every op type in the SavedModel's graphs, including inside its functions."""
    with tf.io.gfile.GFile(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as handle:
        saved_model = saved_model_pb2.SavedModel.FromString(handle.read())
    ops = set()
    for meta_graph in saved_model.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def ops_stock_serving_cannot_load(saved_model_dir: str) -> Set[str]:
    """The op types in the SavedModel that are neither core TensorFlow nor allowed TF Text ops."""
    core_ops = set(dir(tf.raw_ops))
    return {op for op in saved_model_op_types(saved_model_dir) if op not in core_ops and op not in SERVING_TF_TEXT_OPS}
