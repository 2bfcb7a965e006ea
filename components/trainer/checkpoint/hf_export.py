"""A trained backbone written back out as a Hugging Face checkpoint directory, so a model
fine-tuned here can be served with vLLM or TGI, loaded with `transformers`, or shared.

The directory holds what the imported checkpoint held: `config.json` (the imported one, with
`torch_dtype` float32 and, for GPT-2, `n_positions` cut to the positions the backbone kept),
`model.safetensors` (float32, tensor names and layouts as `save_pretrained` writes them: the
exact inverse of `hf_weights`' mapping), and the checkpoint's tokenizer files. LoRA adapters are
merged into the kernels first. A tied head is not stored (transformers ties it on load), as in
the checkpoints transformers itself saves.

Weights over `MAX_SHARD_BYTES` (1 GiB) are written as shards, `model-00001-of-0000N.safetensors`
and a `model.safetensors.index.json` (`metadata.total_size`, `weight_map`: tensor name -> file),
the layout `save_pretrained(max_shard_size=...)` writes and transformers, vLLM, TGI and this
project's importer read. Only one shard is held in memory: `safetensors.numpy.save_file` builds a
file's bytes whole, so writing a 1.1B model (4.4 GB in float32) as one file held three copies of
it beside the trained model, more than 24 GiB.

Only models fine-tuned from a Hugging Face checkpoint are exported: the architecture must be one
a config.json describes, and the tokenizer must be the checkpoint's.
"""

import json
import os
import posixpath
import shutil
import tempfile
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from safetensors.numpy import save_file

from components.tokenizer import hf_files
from components.trainer.checkpoint.hf_config import CONFIG_FILE, GPT2_TYPES, read_config
from components.trainer.checkpoint.hf_weights import Assignment, assignments
from components.trainer.checkpoint.safetensors_files import INDEX_FILE
from components.trainer.model import lora
from components.trainer.model.backbone import GPTBackbone, build_backbone

WEIGHTS_FILE = "model.safetensors"
MAX_SHARD_BYTES = 2**30  # transformers' default is 5 GB; smaller here to bound the export's memory
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
    return {
        source.name: np.ascontiguousarray(part.T if source.linear else part)
        for source, part in zip(assignment.sources, parts)
    }


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
    named_tensors = (
        item
        for assignment in assignments(model, checkpoint, [_EMBEDDING_NAMES[family]], output_dir)
        for item in _tensors(assignment).items()
    )
    with tf.io.gfile.GFile(posixpath.join(checkpoint_dir, CONFIG_FILE)) as handle:
        config = json.load(handle)
    config["torch_dtype"] = "float32"
    if family == "gpt2":
        config["n_positions"] = model.context_length
        config["n_ctx"] = model.context_length
    tokenizer = hf_files.read(checkpoint_dir)
    write_weights(named_tensors, output_dir)
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


def _shard_groups(named_tensors: Iterable[Tuple[str, np.ndarray]], max_bytes: int) -> Iterator[Dict[str, np.ndarray]]:
    """The tensors in order, grouped into consecutive shards of at most `max_bytes` each (a tensor
    larger than that is a shard of its own), as `save_pretrained` groups them."""
    shard: Dict[str, np.ndarray] = {}
    size = 0
    for name, tensor in named_tensors:
        if shard and size + tensor.nbytes > max_bytes:
            yield shard
            shard, size = {}, 0
        shard[name] = tensor
        size += tensor.nbytes
    if shard:
        yield shard


def write_weights(
    named_tensors: Iterable[Tuple[str, np.ndarray]], output_dir: str, max_shard_bytes: Optional[int] = None
) -> List[str]:
    """Writes (name, tensor) pairs to `output_dir` (any tf.io.gfile filesystem) as one
    `model.safetensors`, or as shards and their index when they exceed `max_shard_bytes`; each
    shard is written to a local staging file and dropped from memory before the next is built.
    Weight files of an earlier export there are removed first. Returns the files written.
    `max_shard_bytes` defaults to `MAX_SHARD_BYTES`."""
    tf.io.gfile.makedirs(output_dir)
    for stale in tf.io.gfile.glob(posixpath.join(output_dir, "model*.safetensors*")):
        tf.io.gfile.remove(stale)
    staging = tempfile.mkdtemp(prefix="hf-export-")
    try:
        shards: List[Tuple[str, List[str]]] = []
        total = 0
        for shard in _shard_groups(named_tensors, max_shard_bytes or MAX_SHARD_BYTES):
            path = os.path.join(staging, f"shard-{len(shards)}")
            save_file(shard, path, metadata={"format": "pt"})
            shards.append((path, list(shard)))
            total += sum(tensor.nbytes for tensor in shard.values())
            del shard
        names = (
            [WEIGHTS_FILE]
            if len(shards) == 1
            else [f"model-{index:05d}-of-{len(shards):05d}.safetensors" for index in range(1, len(shards) + 1)]
        )
        for (path, _), name in zip(shards, names):
            tf.io.gfile.copy(path, posixpath.join(output_dir, name), overwrite=True)
            os.remove(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if len(shards) > 1:
        weight_map = {tensor: name for (_, tensors), name in zip(shards, names) for tensor in tensors}
        with tf.io.gfile.GFile(posixpath.join(output_dir, INDEX_FILE), "w") as handle:
            handle.write(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
        names.append(INDEX_FILE)
    return names


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
