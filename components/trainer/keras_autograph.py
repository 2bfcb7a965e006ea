"""Keeps AutoGraph out of tf_keras: imported (for its effect) by the modules that build models.

AutoGraph skips the `keras` package but not `tf_keras` (Keras 2, which this stack uses), so every
tf.function that calls a Keras model would re-transpile hundreds of tf_keras internals, making a
small model's first training step take tens of seconds. tf_keras code needs no conversion.
"""

from tensorflow.python.autograph.core import config as _autograph_config

if not any(getattr(rule, "_prefix", None) == "tf_keras" for rule in _autograph_config.CONVERSION_RULES):
    _autograph_config.CONVERSION_RULES = (
        _autograph_config.DoNotConvert("tf_keras"),
    ) + _autograph_config.CONVERSION_RULES
