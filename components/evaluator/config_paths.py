"""Passing the evaluator's data files (red-team prompts, lexicons, bias suites) to the component.

Their default paths point into the checkout that compiles the pipeline, but the component may run
elsewhere (the Kubeflow image installs the project under another root). Paths inside the project
are therefore passed relative to the project root and resolved against the project root of the
process that runs the component; paths outside it (a user's own suite) pass unchanged.
"""
import os

from pipeline.config import PROJECT_ROOT, EvaluatorConfig

DATA_PATH_FIELDS = {
    "safety": ("prompts_file", "lexicon_dir"),
    "bias": ("templates_file", "groups_file", "zh_sentiment_lexicon"),
}


def _map_paths(config: EvaluatorConfig, convert) -> EvaluatorConfig:
    updates = {}
    for section, fields in DATA_PATH_FIELDS.items():
        current = getattr(config, section)
        updates[section] = current.model_copy(update={f: convert(getattr(current, f)) for f in fields})
    return config.model_copy(update=updates)


def to_portable_json(config: EvaluatorConfig) -> str:
    """The config as JSON with project-internal data paths made relative to the project root."""
    def relative(path: str) -> str:
        absolute = os.path.abspath(path)
        inside = os.path.commonpath([absolute, PROJECT_ROOT]) == PROJECT_ROOT
        return os.path.relpath(absolute, PROJECT_ROOT) if inside else path
    return _map_paths(config, relative).model_dump_json()


def from_portable_json(text: str) -> EvaluatorConfig:
    """Parses `to_portable_json` output, resolving relative data paths against this project root."""
    def absolute(path: str) -> str:
        return path if os.path.isabs(path) or "://" in path else os.path.join(PROJECT_ROOT, path)
    return _map_paths(EvaluatorConfig.model_validate_json(text), absolute)
