"""The evaluator's data files (red-team prompts, lexicons, bias suites) as local paths.

The configuration names them as `bundled:` references (the project's own suites, installed with
the package) or as the user's own paths/URIs; `resolve_data_paths` turns every reference into a
path in the process that runs the evaluator, which may be a Kubeflow pod far from the machine
that compiled the pipeline.
"""
from components.resources import resolve

DATA_PATH_FIELDS = {
    "safety": ("prompts_file", "lexicon_dir"),
    "bias": ("templates_file", "groups_file", "zh_sentiment_lexicon"),
}


def resolve_data_paths(config):
    """A copy of `config` (an EvaluatorConfig) with every data file reference resolved."""
    updates = {}
    for section, fields in DATA_PATH_FIELDS.items():
        current = getattr(config, section)
        updates[section] = current.model_copy(update={f: resolve(getattr(current, f)) for f in fields})
    return config.model_copy(update=updates)
