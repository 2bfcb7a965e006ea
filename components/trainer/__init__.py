"""Trainer: the decoder-only Transformer, its input pipeline, run_fn and serving export."""
from tensorflow.python.autograph.core import config as _autograph_config

# AutoGraph skips the `keras` package but not `tf_keras` (Keras 2, which this stack uses), so
# every tf.function that calls a Keras model re-transpiles hundreds of tf_keras internals: a
# 2-layer model's first training step took ~35 s here. tf_keras code needs no conversion.
if not any(getattr(rule, "_prefix", None) == "tf_keras" for rule in _autograph_config.CONVERSION_RULES):
    _autograph_config.CONVERSION_RULES = (_autograph_config.DoNotConvert("tf_keras"),) + _autograph_config.CONVERSION_RULES
