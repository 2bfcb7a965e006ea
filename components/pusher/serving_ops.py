"""Promotion and rollback: change which pushed version TF Serving serves under a label.

Both only rewrite `<serving_dir>/models.config` (atomically, see serving_config); a TF Serving
started with `--model_config_file=<serving_dir>/models.config
--model_config_file_poll_wait_seconds=N` picks the change up within N seconds without a restart.
The registry aliases follow the labels in the same call (stable -> `production`, canary ->
`canary`): the label's alias moves, and a label models.config drops (the canary, when its version
is made stable) loses its alias. The registry version is looked up before models.config is
touched, so a version the registry does not know fails before anything changes.
"""
from typing import Dict, Optional

from components.registry.model_registry import ModelRegistry
from components.pusher.serving_config import STABLE_LABEL, read_labels, set_label
from components.pusher.versioned_push import existing_versions, is_complete_saved_model, version_path


class ServingChangeError(ValueError):
    """A promotion or rollback that cannot be done (no such version, nothing to roll back to)."""


def promote(serving_dir: str, model_name: str, version: int, label: str = STABLE_LABEL,
            model_registry: Optional[ModelRegistry] = None) -> Dict:
    """Points `label` at pushed `version`; returns {"labels": ..., "registered_version": ...}."""
    if version not in existing_versions(serving_dir) or not is_complete_saved_model(version_path(serving_dir, version)):
        raise ServingChangeError(f"{serving_dir} holds no complete pushed version {version} "
                                 f"(available: {existing_versions(serving_dir)})")
    registered = None
    if model_registry is not None:
        registered = int(model_registry.version_for_serving(serving_dir, version).version)
    before = read_labels(serving_dir)
    labels = set_label(model_name, serving_dir, label, version)
    if model_registry is not None:
        model_registry.follow_labels(serving_dir, version, before, labels)
    return {"labels": labels, "registered_version": registered}


def previous_version(serving_dir: str) -> int:
    """The newest pushed version older than the one labelled stable."""
    current = read_labels(serving_dir).get(STABLE_LABEL)
    if current is None:
        raise ServingChangeError(f"{serving_dir} has no models.config with a stable version: nothing to roll back")
    older = [v for v in existing_versions(serving_dir) if v < current and is_complete_saved_model(version_path(serving_dir, v))]
    if not older:
        raise ServingChangeError(f"no version older than the stable version {current} is left under {serving_dir}")
    return older[-1]


def rollback(serving_dir: str, model_name: str, to: Optional[int] = None,
             model_registry: Optional[ModelRegistry] = None) -> Dict:
    """Serves `to` (default: the previous version) as stable and moves the production alias."""
    return promote(serving_dir, model_name, previous_version(serving_dir) if to is None else to, STABLE_LABEL, model_registry)
