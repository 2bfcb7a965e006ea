"""Trainer: the decoder-only Transformer, its input pipeline, run_fn and serving export."""
