"""Promotion and rollback: change which pushed version TF Serving serves under a label.

Both only rewrite `<serving_dir>/models.config` (compare-and-swap, see serving_config); a TF
Serving started with `--model_config_file=<serving_dir>/models.config
--model_config_file_poll_wait_seconds=N` picks the change up within N seconds without a restart.
The registry aliases follow the labels in the same call (stable -> `production`, canary ->
`canary`): the label's alias moves, and a label models.config drops (the canary, when its version
is made stable) loses its alias. The registry version is looked up before models.config is
touched, so a version the registry does not know fails before anything changes.

The Pusher labels its new version through the same `label_version` and `align_aliases`, so a
promotion during a run, or two Pushers sharing one serving directory, keep every label and end
with the aliases equal to the labels of the last change.
"""

import logging
from typing import Dict, Iterable, Optional, Set

from components.pusher import serving_config
from components.pusher.serving_config import STABLE_LABEL, LabelChange, read_labels
from components.registry.model_registry import ModelRegistry
from components.versioned_push import existing_versions, is_complete_saved_model, version_path

log = logging.getLogger(__name__)

_MAX_ALIGN_ROUNDS = 20  # `align_aliases` re-reads models.config at most this often


class ServingChangeError(ValueError):
    """A promotion or rollback that cannot be done (no such version, nothing to roll back to)."""


def _check_pushed(serving_dir: str, version: int) -> None:
    if version not in existing_versions(serving_dir) or not is_complete_saved_model(version_path(serving_dir, version)):
        raise ServingChangeError(
            f"{serving_dir} holds no complete pushed version {version} (available: {existing_versions(serving_dir)})"
        )


def label_version(serving_dir: str, model_name: str, label: str, version: int) -> LabelChange:
    """Points `label` at pushed `version` in models.config, keeping every other writer's labels.
    Refuses (changing nothing) a version that is not, or no longer, complete under `serving_dir`:
    checked again on every attempt, so a version another Pusher's retention deleted meanwhile is
    never labelled."""

    def change(labels: Dict[str, int]) -> Dict[str, int]:
        _check_pushed(serving_dir, version)
        return serving_config.with_label(labels, label, version)

    return serving_config.update_labels(model_name, serving_dir, change)


def _labels_to_follow(change: LabelChange, version: int) -> Set[str]:
    """The labels whose aliases a change moves: every label now on `version`, and every label the
    change moved or removed."""
    before, after = change
    return {label for label, labelled in after.items() if labelled == version} | {
        label for label in set(before) | set(after) if before.get(label) != after.get(label)
    }


def align_aliases(model_registry: ModelRegistry, serving_dir: str, change: LabelChange, version: int) -> None:
    """Makes the registry aliases of the labels `change` touched (see `_labels_to_follow`) equal to
    what models.config labels now: a label's alias moves to the registered version of the serving
    version it names, a label that is gone loses its alias. When models.config changed while the
    aliases were set (another writer), they are set again from the new labels; a label on a version
    not registered yet is left to the writer that pushed it, which registers it and then calls this."""
    labels = _labels_to_follow(change, version)
    current = read_labels(serving_dir)
    for _ in range(_MAX_ALIGN_ROUNDS):
        _set_aliases(model_registry, serving_dir, labels, current, own_version=version)
        latest = read_labels(serving_dir)
        if latest == current:
            return
        current = latest
    log.warning(
        "models.config under %s kept changing while the registry aliases of %s were set; the writer "
        "of the last change sets them",
        serving_dir,
        sorted(labels),
    )


def _set_aliases(
    model_registry: ModelRegistry, serving_dir: str, labels: Iterable[str], current: Dict[str, int], own_version: int
) -> None:
    for label in sorted(labels):
        alias = model_registry.alias_for_label(label)
        if label not in current:
            model_registry.remove_alias(alias)
            continue
        try:
            model_registry.move_alias(alias, serving_dir, current[label])
        except LookupError:
            if current[label] == own_version:
                raise
            # Another writer's version, not registered yet: that writer moves the alias after registering it.


def promote(
    serving_dir: str,
    model_name: str,
    version: int,
    label: str = STABLE_LABEL,
    model_registry: Optional[ModelRegistry] = None,
) -> Dict:
    """Points `label` at pushed `version`; returns {"labels": ..., "registered_version": ...}."""
    _check_pushed(serving_dir, version)
    registered = None
    if model_registry is not None:
        registered = int(model_registry.version_for_serving(serving_dir, version).version)
    change = label_version(serving_dir, model_name, label, version)
    if model_registry is not None:
        align_aliases(model_registry, serving_dir, change, version)
    return {"labels": change.after, "registered_version": registered}


def previous_version(serving_dir: str) -> int:
    """The newest pushed version older than the one labelled stable."""
    current = read_labels(serving_dir).get(STABLE_LABEL)
    if current is None:
        raise ServingChangeError(f"{serving_dir} has no models.config with a stable version: nothing to roll back")
    older = [
        v
        for v in existing_versions(serving_dir)
        if v < current and is_complete_saved_model(version_path(serving_dir, v))
    ]
    if not older:
        raise ServingChangeError(f"no version older than the stable version {current} is left under {serving_dir}")
    return older[-1]


def rollback(
    serving_dir: str, model_name: str, to: Optional[int] = None, model_registry: Optional[ModelRegistry] = None
) -> Dict:
    """Serves `to` (default: the previous version) as stable and moves the production alias."""
    return promote(
        serving_dir, model_name, previous_version(serving_dir) if to is None else to, STABLE_LABEL, model_registry
    )
