"""Which tokenizer a run uses (`tokenizer.policy`).

    learn    a new model from this run's train split
    reuse    the tokenizer inside the SavedModel the registry serves as production: token ids stay
             the same across spans, which warm start and continued training need; an error when
             there is none. A learned SentencePiece model (its model file), or a checkpoint's
             tokenizer (its files and special_tokens.json among the export's assets): with
             `model.checkpoint` it must be the latter (the checkpoint's model reads only the ids of
             a checkpoint tokenizer; the Tokenizer stage then checks its size against the
             checkpoint's embedding)
    pinned   the file `tokenizer.pinned_model_file`
    checkpoint  the tokenizer files of the Hugging Face checkpoint `model.checkpoint` (its model
             only understands its own token ids)
    auto     checkpoint when `model.checkpoint` is set; else reuse when a production model with a
             SentencePiece tokenizer exists, else learn (the first run, or a production model
             exported before the Tokenizer stage existed)

The production model is looked up at run time by the Tokenizer executor (no ML Metadata resolver,
so the same code runs locally and on Kubeflow Pipelines).
"""

import os
from typing import Callable, NamedTuple, Optional

import tensorflow as tf

from components.tokenizer import hf_files, loaded, model_file

LEARN, REUSE, PINNED, CHECKPOINT = "learn", "reuse", "pinned", "checkpoint"


class Choice(NamedTuple):
    """What to do: `action` (learn/reuse/pinned/checkpoint), the model file for reuse/pinned or
    the tokenizer directory, and why. `directory`: `model_path` is a checkpoint tokenizer's
    directory (a checkpoint, or the assets of an export that tokenizes with one), not a learned
    SentencePiece model file."""

    action: str
    model_path: str
    reason: str
    directory: bool = False


def choose(
    policy: str, pinned_model_file: str, find_production: Callable[[], Optional[object]], checkpoint: str = ""
) -> Choice:
    """Applies `policy`; `find_production` returns the registry's production model (with
    `saved_model_dir` and `registered_version`) or None, and is called only when needed;
    `checkpoint` is `model.checkpoint` ('' when unset)."""
    if policy == CHECKPOINT or (policy == "auto" and checkpoint):
        if not checkpoint:
            raise ValueError(
                "tokenizer.policy=checkpoint needs model.checkpoint (the Hugging Face checkpoint directory)"
            )
        return Choice(CHECKPOINT, checkpoint, f"the tokenizer of model.checkpoint {checkpoint}", directory=True)
    if checkpoint and policy != REUSE:
        raise ValueError(
            f"tokenizer.policy={policy} with model.checkpoint {checkpoint}: the checkpoint's model needs "
            "its own tokenizer (use tokenizer.policy checkpoint or auto, or reuse for the production model's)"
        )
    if policy == PINNED:
        if not tf.io.gfile.exists(pinned_model_file):
            raise FileNotFoundError(f"tokenizer.pinned_model_file {pinned_model_file} does not exist")
        return Choice(PINNED, pinned_model_file, f"pinned file {pinned_model_file}")
    if policy == LEARN:
        return Choice(LEARN, "", "tokenizer.policy=learn")
    production = find_production()
    if production is None:
        if policy == REUSE:
            raise ValueError(
                "tokenizer.policy=reuse, but the model registry has no production model to reuse the "
                "tokenizer of (learn one first, or use policy auto)"
            )
        return Choice(LEARN, "", "no production model yet")
    version = production.registered_version
    path = model_file.saved_model_model_path(production.saved_model_dir)
    assets = loaded.saved_model_dir(production.saved_model_dir)
    reason = f"the production model's (registered version {version})"
    if policy == REUSE and tf.io.gfile.exists(os.path.join(assets, hf_files.SPECIAL_RECORD)):
        return Choice(REUSE, assets, reason, directory=True)  # a checkpoint's tokenizer
    if checkpoint:
        what = "a learned SentencePiece model" if tf.io.gfile.exists(path) else "no tokenizer this stage can reuse"
        raise ValueError(
            f"tokenizer.policy=reuse with model.checkpoint {checkpoint}: the production model (registered "
            f"version {version}) has {what}, not a checkpoint's tokenizer ({assets} holds no "
            f"{hf_files.SPECIAL_RECORD}): use tokenizer.policy checkpoint (or auto)"
        )
    if not tf.io.gfile.exists(path):
        if policy == REUSE:
            raise FileNotFoundError(
                f"tokenizer.policy=reuse, but the production model (registered version "
                f"{version}) has no SentencePiece tokenizer: {path} does not exist"
            )
        why = (
            "it tokenizes with a checkpoint's tokenizer: auto reuses only a learned one, tokenizer.policy=reuse "
            "takes a checkpoint's too"
            if tf.io.gfile.exists(os.path.join(assets, hf_files.SPECIAL_RECORD))
            else "exported before the Tokenizer stage"
        )
        return Choice(
            LEARN, "", f"the production model (registered version {version}) has no SentencePiece tokenizer ({why})"
        )
    return Choice(REUSE, path, reason)
