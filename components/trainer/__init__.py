"""Trainer: the decoder-only Transformer and how it is trained and served.

    model/     the network and what it computes: backbone, in-graph decoding, sampling, model size
    training/  the TFX Trainer's run_fn and everything it trains with: input pipeline, loop,
               optimizer, distribution strategy, precision, hardware peak, warm start, and the
               Kubeflow TFJob launcher with the entry point its replicas run
    serving/   the exported SavedModel and its callers: export, serving weight layout, the
               signature contract, the client, TF Serving requests and op compatibility

Dependencies point one way: training and serving use model; training's run_fn exports through
serving; nothing in model imports training or serving.
"""
from tensorflow.python.autograph.core import config as _autograph_config

# AutoGraph skips the `keras` package but not `tf_keras` (Keras 2, which this stack uses), so
# every tf.function that calls a Keras model would re-transpile hundreds of tf_keras internals
# (a model's first training step becomes much slower). tf_keras code needs no conversion.
if not any(getattr(rule, "_prefix", None) == "tf_keras" for rule in _autograph_config.CONVERSION_RULES):
    _autograph_config.CONVERSION_RULES = (_autograph_config.DoNotConvert("tf_keras"),) + _autograph_config.CONVERSION_RULES
