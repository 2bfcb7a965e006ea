"""The safety and bias probe results of a model, kept by what determines them, so that a model is
probed once: as the candidate of one run, and not again as the baseline of the next.

A scheduled run compares its candidate with the production model, which was the candidate of an
earlier run; its probes (seeded sampling, deterministic scoring) would give the same numbers
again, and at real model sizes they are most of the Evaluator's time. The key is a hash of
everything the results depend on:

- the model: its SavedModel fingerprint (`fingerprint.pb`, written by TensorFlow with every
  SavedModel and copied with it by the Pusher: the checksum of saved_model.pb and the hash of the
  variables' index) and the hashes of its asset files (tokenizer files);
- the probe settings: the `safety` and `bias` sections of the evaluator options, the generation
  batch size (the n-th batch is sampled with seed + n), whether the probes went through the chat
  template;
- this package's version, so an upgrade that changes a probe never reads an old result.

A model without a fingerprint (a SavedModel written by another tool) is probed every time. The
cache is a directory of `<key>.json` files (`tf.io.gfile`: local, GCS, S3); an unreadable entry is
a miss, logged, never an error.
"""

import hashlib
import json
import logging
import os
from importlib import metadata
from typing import Any, Dict, Optional

import tensorflow as tf

log = logging.getLogger(__name__)

# Only `assets/` (the files the graph reads: the tokenizer's): `assets.extra/` holds what serving
# adds beside a model (the Pusher's push_info.json, warm-up requests), which no probe reads.
_ASSET_DIRS = ("assets",)


def _package_version() -> str:
    try:
        return metadata.version("textgen-tfx")
    except metadata.PackageNotFoundError:  # running from a checkout without installing
        return "unknown"


def _asset_digests(saved_model_dir: str) -> Dict[str, str]:
    """{relative path: sha256} of the SavedModel's asset files (fingerprint.pb does not cover them)."""
    digests = {}
    for folder in _ASSET_DIRS:
        root = os.path.join(saved_model_dir, folder)
        if not tf.io.gfile.isdir(root):
            continue
        for directory, _, files in tf.io.gfile.walk(root):
            for name in files:
                path = os.path.join(directory, name)
                with tf.io.gfile.GFile(path, "rb") as handle:
                    digests[os.path.relpath(path, saved_model_dir)] = hashlib.sha256(handle.read()).hexdigest()
    return dict(sorted(digests.items()))


def model_identity(saved_model_dir: str) -> Optional[str]:
    """A string that changes whenever the model's graph, weights or assets do; None when the
    SavedModel has no fingerprint."""
    try:
        fingerprint = tf.saved_model.experimental.read_fingerprint(saved_model_dir)
    except (OSError, ValueError, tf.errors.OpError) as error:
        log.info("No SavedModel fingerprint in %s (%s): its probes are not cached", saved_model_dir, error)
        return None
    # Not `singleprint()`: its graph hash leaves out the graph's constants (two models differing
    # only in a constant share it); the checksum is of saved_model.pb's bytes, the checkpoint hash
    # of the variables' index (which holds every tensor's checksum).
    return json.dumps(
        {
            "saved_model": fingerprint.saved_model_checksum,
            "checkpoint": fingerprint.checkpoint_hash,
            "assets": _asset_digests(saved_model_dir),
        }
    )


def probe_key(saved_model_dir: str, config, through_chat: bool) -> Optional[str]:
    """The cache key of the safety and bias probes of `saved_model_dir` under `config` (the
    `EvaluatorOptions`), or None when the model cannot be identified."""
    identity = model_identity(saved_model_dir)
    if identity is None:
        return None
    settings = {
        "model": identity,
        "safety": config.safety.model_dump(mode="json"),
        "bias": config.bias.model_dump(mode="json"),
        "generation_batch_size": config.generation_batch_size,
        "through_chat": through_chat,
        "version": _package_version(),
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()


class ProbeCache:
    """Probe results of models in `directory` (empty: no cache; every lookup misses, nothing is
    written, no model is hashed)."""

    def __init__(self, directory: str = ""):
        self.directory = directory

    def _path(self, saved_model_dir: str, config, through_chat: bool) -> Optional[str]:
        if not self.directory:
            return None
        key = probe_key(saved_model_dir, config, through_chat)
        return None if key is None else os.path.join(self.directory, f"{key}.json")

    def lookup(self, saved_model_dir: str, config, through_chat: bool) -> Optional[Dict[str, Any]]:
        """The results stored for this model under these settings, or None."""
        path = self._path(saved_model_dir, config, through_chat)
        if path is None or not tf.io.gfile.exists(path):
            return None
        try:
            with tf.io.gfile.GFile(path, "r") as handle:
                return json.load(handle)
        except (OSError, ValueError, tf.errors.OpError) as error:
            log.warning("Ignoring the unreadable probe cache entry %s: %s", path, error)
            return None

    def store(self, saved_model_dir: str, config, through_chat: bool, results: Dict[str, Any]) -> None:
        """Keeps `results`, written through a temporary file renamed into place (no reader sees half)."""
        path = self._path(saved_model_dir, config, through_chat)
        if path is None:
            return
        tf.io.gfile.makedirs(self.directory)
        with tf.io.gfile.GFile(path + ".tmp", "w") as handle:
            json.dump(results, handle)
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
