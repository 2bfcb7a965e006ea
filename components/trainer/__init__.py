"""Trainer: the decoder-only Transformer, its training loop and distribution, run_fn and the serving export.

Importing the package is light (its options are read by the CLI); the modules that build Keras
models import `keras_autograph` for its effect on AutoGraph.
"""
