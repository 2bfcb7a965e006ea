"""The model registry: a service the stages share, not a stage of its own.

The Pusher registers every pushed model here (`model_registry.ModelRegistry`); the Tokenizer
(reusing the production tokenizer), the Trainer (warm start) and the Evaluator (the production
baseline) look up the version the `production` alias points at (`find_production_model`); the
`textgen promote` / `rollback` commands move the aliases. Its options are `registry.*`
(`options.py`). Importing this package is light: `model_registry` imports TensorFlow, `options`
does not.
"""
