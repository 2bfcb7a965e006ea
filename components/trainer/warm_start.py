"""Warm start: initialise the backbone from a previously exported (blessed) serving model."""
import collections
import logging
import os

import tensorflow as tf
import tf_keras as keras

_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _saved_backbone_shapes(variables_prefix: str) -> collections.Counter:
    return collections.Counter(
        tuple(shape)
        for name, shape in tf.train.list_variables(variables_prefix)
        if name.startswith("backbone/") and name.endswith(_VALUE_SUFFIX)
    )


def warm_start_from(backbone: keras.Model, saved_model_dir: str) -> bool:
    """Copies the backbone weights of the SavedModel at `saved_model_dir` into `backbone`.

    Only when the shapes match exactly (same model shape and vocabulary size); otherwise logs why
    and leaves the fresh initialisation. Returns whether weights were loaded.
    """
    variables_prefix = os.path.join(saved_model_dir, "variables", "variables")
    saved = _saved_backbone_shapes(variables_prefix)
    expected = collections.Counter(tuple(weight.shape) for weight in backbone.weights)
    # The serving copy adds one [model_dim, vocab] output projection derived from the embedding
    # (serving_weights.py), saved after the trained weights; it is not read back. An int8
    # export's kernels have other shapes: no warm start from it.
    projection = collections.Counter({(backbone.architecture.model_dim, backbone.vocab_size): 1})
    if saved != expected and saved != expected + projection:
        logging.warning("Not warm-starting from %s: its weights have other shapes (model or vocabulary changed)", saved_model_dir)
        return False
    tf.train.Checkpoint(backbone=backbone).read(variables_prefix).assert_existing_objects_matched()
    logging.info("Warm-started from %s", saved_model_dir)
    return True
