"""Warm start: initialise the backbone from a previously exported (blessed) serving model.

Only a model that tokenizes the same way is a valid starting point: its weights are indexed by
token id. The base model's SentencePiece asset must have the same sha256 as this run's tokenizer
(the same vocabulary size is not enough: two learned models of one size assign different pieces
to the same ids), and its weights must have the same shapes.
"""
import collections
import logging
import os

import tensorflow as tf
import tf_keras as keras

from components.tokenizer import hf_files, loaded, model_file

_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _saved_backbone_shapes(variables_prefix: str) -> collections.Counter:
    return collections.Counter(
        tuple(shape)
        for name, shape in tf.train.list_variables(variables_prefix)
        if name.startswith("backbone/") and name.endswith(_VALUE_SUFFIX)
    )


def tokenizer_mismatch(saved_model_dir: str, tokenizer_sha256: str) -> str:
    """Why the SavedModel's tokenizer is not the one with `tokenizer_sha256`, or "" when it is."""
    path = model_file.saved_model_model_path(saved_model_dir)
    assets = loaded.saved_model_dir(saved_model_dir)
    if tf.io.gfile.exists(path):
        base_sha256 = model_file.read_model(path).sha256
    elif tf.io.gfile.exists(os.path.join(assets, hf_files.SPECIAL_RECORD)):  # a checkpoint's tokenizer
        base_sha256 = loaded.load(assets).sha256
    else:
        return f"it has no SentencePiece tokenizer ({path} does not exist)"
    if base_sha256 != tokenizer_sha256:
        return (f"its tokenizer differs (sha256 {base_sha256[:12]}... vs this run's {tokenizer_sha256[:12]}...): "
                "token ids mean other pieces; use tokenizer.policy=reuse (or auto) to keep the tokenizer")
    return ""


def warm_start_from(backbone: keras.Model, saved_model_dir: str, tokenizer_sha256: str) -> bool:
    """Copies the backbone weights of the SavedModel at `saved_model_dir` into `backbone`.

    Only when its tokenizer has `tokenizer_sha256` (this run's) and the shapes match exactly;
    otherwise logs why and leaves the fresh initialisation. Returns whether weights were loaded.
    """
    mismatch = tokenizer_mismatch(saved_model_dir, tokenizer_sha256)
    if mismatch:
        logging.warning("Not warm-starting from %s: %s", saved_model_dir, mismatch)
        return False
    variables_prefix = os.path.join(saved_model_dir, "variables", "variables")
    saved = _saved_backbone_shapes(variables_prefix)
    expected = collections.Counter(tuple(weight.shape) for weight in backbone.weights)
    # The serving copy adds one [model_dim, vocab] output projection derived from the embedding
    # (serving/weights.py), saved after the trained weights; it is not read back. An int8
    # export's kernels have other shapes: no warm start from it.
    projection = collections.Counter({(backbone.architecture.model_dim, backbone.vocab_size): 1})
    if saved != expected and saved != expected + projection:
        logging.warning("Not warm-starting from %s: its weights have other shapes (model or vocabulary changed)", saved_model_dir)
        return False
    tf.train.Checkpoint(backbone=backbone).read(variables_prefix).assert_existing_objects_matched()
    logging.info("Warm-started from %s", saved_model_dir)
    return True
