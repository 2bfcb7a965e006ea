"""The model: the decoder-only Transformer backbone, in-graph decoding and sampling, its size."""
