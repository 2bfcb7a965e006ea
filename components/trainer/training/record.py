"""What a training run was, written beside its SavedModel for the model card and the registry.

`<model artifact uri>/training_record.json` (next to `Format-Serving/`, not inside the SavedModel):

    {"model": {...ModelOptions...}, "training": {...TrainingOptions...},
     "vocab_size": 4096, "parameters": 3400000, "tokenizer_sha256": "…",
     "device": "cpu", "precision": "mixed_bfloat16", "xla": true,
     "steps_run": 300, "last_step": {"step": 300, "loss": 3.1, "eval_loss": 3.4, ...},
     "exported_step": 300 | {the step whose weights were kept: lowest eval loss, training/selection.py},
     "base_checkpoint": null | {"source": "gs://…/gpt2", "sha256": "…"},
     "warm_start": null | {"saved_model_dir": "…/serving/3", "registered_version": 3},
     "export_process": "inline" | "child" (where the exports ran: serving/export_process.py),
     "lora": null | {"rank": 8, "alpha": 16.0, "targets": ["attention"]}}

The Pusher reads it (components/pusher/model_card.py); a model exported before this file existed
simply has no training section in its card.
"""

import dataclasses
import json
import os
from typing import Any, Dict, Optional

import tensorflow as tf

RECORD_FILE = "training_record.json"
# The pretrained checkpoint a fine-tuned model started from, exported as a SavedModel with the
# same signatures and tokenizer: the Evaluator's first baseline.
BASE_MODEL_DIR = "base_model"
# A model fine-tuned from a Hugging Face checkpoint, written back in that layout (checkpoint/hf_export.py).
HUGGING_FACE_DIR = "hugging_face"


@dataclasses.dataclass
class TrainingRecord:
    """The facts `write` stores; see the module docstring for the layout."""

    model: Dict[str, Any]
    training: Dict[str, Any]
    vocab_size: int
    parameters: int
    tokenizer_sha256: str
    device: str
    precision: str
    xla: bool
    steps_run: int
    last_step: Optional[Dict[str, Any]] = None
    base_checkpoint: Optional[Dict[str, str]] = None
    exported_step: Optional[int] = None
    packing: Optional[Dict[str, Any]] = None  # conversation data: packing.PackingStats of the train split
    chat: Optional[Dict[str, Any]] = None  # conversation data: the chat template, its sha256 and stop ids
    warm_start: Optional[Dict[str, Any]] = None  # the production model the weights started from (training.warm_start)
    export_process: Optional[str] = None  # where the exports ran: "child" or "inline" (training.export_process)

    @property
    def lora(self) -> Optional[Dict[str, Any]]:
        """The LoRA settings when adapters were trained, else None."""
        lora = self.training.get("lora") or {}
        return lora if lora.get("rank", 0) > 0 else None

    def to_dict(self) -> Dict[str, Any]:
        return {**dataclasses.asdict(self), "lora": self.lora}


def record_path(model_uri: str) -> str:
    """Where the record of the model artifact at `model_uri` lives."""
    return os.path.join(model_uri, RECORD_FILE)


def base_model_path(model_uri: str) -> str:
    """Where the Trainer exports the base checkpoint of the model artifact at `model_uri`."""
    return os.path.join(model_uri, BASE_MODEL_DIR)


def hugging_face_path(model_uri: str) -> str:
    """Where the Trainer writes the Hugging Face export of the model artifact at `model_uri`."""
    return os.path.join(model_uri, HUGGING_FACE_DIR)


def write(model_uri: str, record: TrainingRecord) -> str:
    """Writes `record` for the model artifact at `model_uri`; returns the file's path."""
    path = record_path(model_uri)
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(json.dumps(record.to_dict(), indent=2, ensure_ascii=False, default=str))
    return path


def read(model_uri: str) -> Dict[str, Any]:
    """The record of the model artifact at `model_uri` as a dict; {} when it has none."""
    path = record_path(model_uri)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)
