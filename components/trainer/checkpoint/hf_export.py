"""A trained backbone written back out as a Hugging Face checkpoint directory, so a model
fine-tuned here can be served with vLLM or TGI, loaded with `transformers`, or shared.

The directory holds what the imported checkpoint held: `config.json` (the imported one, with
`torch_dtype` float32 and, for GPT-2, `n_positions` cut to the positions the backbone kept),
`model.safetensors` (float32, tensor names and layouts as `save_pretrained` writes them: the
exact inverse of `hf_weights`' mapping), and the checkpoint's tokenizer files. LoRA adapters are
merged into the kernels first. A tied head is not stored (transformers ties it on load), as in
the checkpoints transformers itself saves.

Only models fine-tuned from a Hugging Face checkpoint are exported: the architecture must be one
a config.json describes, and the tokenizer must be the checkpoint's.
"""
import json
import os
import posixpath
import shutil
import tempfile
from typing import Dict

import numpy as np
import tensorflow as tf
from safetensors.numpy import save_file

from components.tokenizer import hf_files
from components.trainer.checkpoint.hf_config import CONFIG_FILE, GPT2_TYPES, read_config
from components.trainer.checkpoint.hf_weights import Assignment, assignments
from components.trainer.model import lora
from components.trainer.model.backbone import GPTBackbone, build_backbone

WEIGHTS_FILE = "model.safetensors"
_EMBEDDING_NAMES = {"gpt2": "transformer.wte.weight", "llama": "model.embed_tokens.weight"}


def _plain(backbone: GPTBackbone) -> GPTBackbone:
    """`backbone` itself, or with LoRA adapters a copy without them, the adapters merged."""
    if not lora.adapter_layers(backbone):
        return backbone
    plain = build_backbone(backbone.architecture, backbone.vocab_size)
    lora.copy_merged_weights(backbone, plain)
    return plain


def _tensors(assignment: Assignment) -> Dict[str, np.ndarray]:
    """The checkpoint tensors one backbone variable is made of (the inverse of `hf_weights._value`)."""
    value = np.asarray(assignment.variable.numpy(), np.float32)
    widths = [source.shape[0] if source.linear else source.shape[-1] for source in assignment.sources]
    parts = np.split(value, np.cumsum(widths)[:-1], axis=-1) if len(widths) > 1 else [value]
    return {source.name: np.ascontiguousarray(part.T if source.linear else part)
            for source, part in zip(assignment.sources, parts)}


def export_hugging_face(backbone: GPTBackbone, checkpoint_dir: str, output_dir: str, chat=None) -> str:
    """Writes `backbone`, fine-tuned from the Hugging Face checkpoint at `checkpoint_dir`, to
    `output_dir` as a Hugging Face checkpoint (see the module docstring); returns `output_dir`.
    With `chat` (the run tokenizer's `ChatSpec`, a model tuned on conversations) the export carries
    its template as `chat_template.jinja` and a `generation_config.json` (the checkpoint's, if it
    has one) whose `eos_token_id` lists the ids the template's replies stop at, so transformers'
    `apply_chat_template` and `generate` answer as the served model does."""
    checkpoint = read_config(checkpoint_dir)
    family = "gpt2" if checkpoint.model_type in GPT2_TYPES else "llama"
    model = _plain(backbone)
    tensors: Dict[str, np.ndarray] = {}
    for assignment in assignments(model, checkpoint, [_EMBEDDING_NAMES[family]], output_dir):
        tensors.update(_tensors(assignment))
    with tf.io.gfile.GFile(posixpath.join(checkpoint_dir, CONFIG_FILE)) as handle:
        config = json.load(handle)
    config["torch_dtype"] = "float32"
    if family == "gpt2":
        config["n_positions"] = model.context_length
        config["n_ctx"] = model.context_length
    tokenizer = hf_files.read(checkpoint_dir)
    tf.io.gfile.makedirs(output_dir)
    staging = tempfile.mkdtemp(prefix="hf-export-")
    try:
        save_file(tensors, os.path.join(staging, WEIGHTS_FILE), metadata={"format": "pt"})
        tf.io.gfile.copy(os.path.join(staging, WEIGHTS_FILE), posixpath.join(output_dir, WEIGHTS_FILE), overwrite=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    with tf.io.gfile.GFile(posixpath.join(output_dir, CONFIG_FILE), "w") as handle:
        handle.write(json.dumps(config, indent=2))
    for name, data in tokenizer.files.items():
        with tf.io.gfile.GFile(posixpath.join(output_dir, name), "wb") as handle:
            handle.write(data)
    for name in tokenizer.unused_files:  # e.g. tokenizer.model beside tokenizer.json: the slow tokenizer's source
        tf.io.gfile.copy(posixpath.join(checkpoint_dir, name), posixpath.join(output_dir, name), overwrite=True)
    if chat is not None:
        _write_chat(chat, checkpoint_dir, output_dir)
    return output_dir


def _write_chat(chat, checkpoint_dir: str, output_dir: str) -> None:
    """The chat template and stop ids of a conversation-tuned export (see `export_hugging_face`)."""
    from components.tokenizer.chat_template import TEMPLATE_FILE

    with tf.io.gfile.GFile(posixpath.join(output_dir, TEMPLATE_FILE), "w") as handle:
        handle.write(chat.template)
    generation_path = posixpath.join(checkpoint_dir, "generation_config.json")
    generation = {}
    if tf.io.gfile.exists(generation_path):
        with tf.io.gfile.GFile(generation_path) as handle:
            generation = json.load(handle)
    stops = list(chat.stop_token_ids)
    generation["eos_token_id"] = stops[0] if len(stops) == 1 else stops
    with tf.io.gfile.GFile(posixpath.join(output_dir, "generation_config.json"), "w") as handle:
        handle.write(json.dumps(generation, indent=2))
