"""Trainer: the decoder-only Transformer and how it is trained and served.

    model/     the network and what it computes: backbone, in-graph decoding, sampling, model size,
               the dtype policy it is built under and how documents are framed as its input
    training/  the TFX Trainer's run_fn and everything it trains with: input pipeline, loop,
               optimizer, distribution strategy, precision, hardware peak, warm start, and the
               Kubeflow TFJob launcher with the entry point its replicas run
    serving/   the exported SavedModel and its callers: export, serving weight layout, the
               signature contract, the client, TF Serving requests and op compatibility

Dependencies point one way: training and serving use model; training's run_fn exports through
serving; nothing in serving imports training, and nothing in model imports training or serving
(tests/test_architecture.py). What both training and serving need lives in model. Importing the package itself is light (the
CLI reads `options.py`); the modules that build Keras models import `keras_autograph`, which keeps
AutoGraph from converting tf_keras internals.
"""
