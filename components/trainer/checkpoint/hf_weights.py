"""Hugging Face tensor names -> the backbone's variables, and the import itself.

GPT-2's attention and MLP weights are Conv1D kernels stored [in, out], already the layout of a
Keras Dense kernel; its `c_attn` is the fused Q/K/V projection with the backbone's column order
(all query heads, then keys, then values). Llama's projections are torch Linear weights stored
[out, in]: they are transposed, and q/k/v (and gate/up) concatenated along the output axis into
the backbone's fused kernels. Names may carry a prefix (`transformer.` for GPT2LMHeadModel and
DistilGPT2, none for the `gpt2` hub checkpoint; `model.` for LlamaForCausalLM).

Every variable must get a tensor of exactly the expected shape, and every tensor must be used
(apart from buffers that hold no weights, and a tied head's copy of the embedding): anything else
is a `CheckpointError` naming the tensor and its file.
"""
import logging
from typing import Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from components.trainer.checkpoint.errors import CheckpointError
from components.trainer.checkpoint.hf_config import GPT2_TYPES, CheckpointConfig, checkpoint_model_options, read_config
from components.trainer.checkpoint.safetensors_files import SafetensorsCheckpoint
from components.trainer.model.backbone import GPTBackbone, build_backbone
from components.trainer.options import ModelOptions

# Tensors that are buffers, not weights: GPT-2's causal-mask constants, Llama's rotary frequencies.
_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")
_HEAD = "lm_head.weight"


class Source(NamedTuple):
    """One checkpoint tensor feeding a variable: its name, stored shape, and whether it is a torch
    Linear weight ([out, in], transposed on import)."""

    name: str
    shape: Tuple[int, ...]
    linear: bool = False


class Assignment(NamedTuple):
    """A backbone variable and the tensors concatenated (along the last axis) into it;
    `rows` keeps only the first rows (a position table longer than the context)."""

    variable: tf.Variable
    sources: List[Source]
    rows: Optional[int] = None


def _prefix(names: List[str], embedding: str, path: str) -> str:
    """The prefix before the checkpoint's names (found from the token embedding's name)."""
    for prefix in ("", "transformer.", "model."):
        if prefix + embedding in names:
            return prefix
    raise CheckpointError(f"{path}: tensor {embedding} is missing (the token embedding, with or without a prefix)")


def _dense(layer, sources: List[Source], bias_sources: List[Source]) -> Iterator[Assignment]:
    yield Assignment(layer.kernel, sources)
    if layer.bias is not None:
        yield Assignment(layer.bias, bias_sources)


def _norm(layer, name: str, width: int) -> Iterator[Assignment]:
    yield Assignment(layer.gamma, [Source(name + ".weight", (width,))])
    if getattr(layer, "beta", None) is not None:
        yield Assignment(layer.beta, [Source(name + ".bias", (width,))])


def _gpt2_assignments(backbone: GPTBackbone, prefix: str, max_positions: int) -> Iterator[Assignment]:
    config = backbone.architecture
    width, inner = config.model_dim, config.mlp_dim
    yield Assignment(backbone.token_embedding.embeddings, [Source(prefix + "wte.weight", (backbone.vocab_size, width))])
    yield Assignment(backbone.position_embedding.embeddings, [Source(prefix + "wpe.weight", (max_positions, width))],
                     rows=config.context_length)
    for index, block in enumerate(backbone.blocks):
        name = f"{prefix}h.{index}."
        attention = block.attention
        yield from _norm(block.attention_norm, name + "ln_1", width)
        yield from _dense(attention.qkv, [Source(name + "attn.c_attn.weight", (width, 3 * width))],
                          [Source(name + "attn.c_attn.bias", (3 * width,))])
        yield from _dense(attention.output_projection, [Source(name + "attn.c_proj.weight", (width, width))],
                          [Source(name + "attn.c_proj.bias", (width,))])
        yield from _norm(block.mlp_norm, name + "ln_2", width)
        yield from _dense(block.mlp_in, [Source(name + "mlp.c_fc.weight", (width, inner))], [Source(name + "mlp.c_fc.bias", (inner,))])
        yield from _dense(block.mlp_out, [Source(name + "mlp.c_proj.weight", (inner, width))], [Source(name + "mlp.c_proj.bias", (width,))])
    yield from _norm(backbone.final_norm, prefix + "ln_f", width)


def _llama_assignments(backbone: GPTBackbone, prefix: str) -> Iterator[Assignment]:
    config = backbone.architecture
    width, inner = config.model_dim, config.mlp_dim
    head_dim = width // config.num_heads
    query, key_value = config.num_heads * head_dim, config.kv_heads * head_dim
    yield Assignment(backbone.token_embedding.embeddings, [Source(prefix + "embed_tokens.weight", (backbone.vocab_size, width))])
    for index, block in enumerate(backbone.blocks):
        name = f"{prefix}layers.{index}."
        attention = block.attention
        yield from _norm(block.attention_norm, name + "input_layernorm", width)
        projections = [("q_proj", query), ("k_proj", key_value), ("v_proj", key_value)]
        yield from _dense(
            attention.qkv,
            [Source(f"{name}self_attn.{part}.weight", (size, width), linear=True) for part, size in projections],
            [Source(f"{name}self_attn.{part}.bias", (size,)) for part, size in projections],
        )
        yield from _dense(attention.output_projection, [Source(name + "self_attn.o_proj.weight", (width, query), linear=True)],
                          [Source(name + "self_attn.o_proj.bias", (width,))])
        yield from _norm(block.mlp_norm, name + "post_attention_layernorm", width)
        yield from _dense(
            block.mlp_in,
            [Source(f"{name}mlp.{part}.weight", (inner, width), linear=True) for part in ("gate_proj", "up_proj")],
            [Source(f"{name}mlp.{part}.bias", (inner,)) for part in ("gate_proj", "up_proj")],
        )
        yield from _dense(block.mlp_out, [Source(name + "mlp.down_proj.weight", (width, inner), linear=True)],
                          [Source(name + "mlp.down_proj.bias", (width,))])
    yield from _norm(backbone.final_norm, prefix + "norm", width)


def assignments(backbone: GPTBackbone, checkpoint: CheckpointConfig, names: List[str], source: str) -> List[Assignment]:
    """Every variable of `backbone` with the checkpoint tensors that fill it (`names`: the
    checkpoint's tensor names, which tell the prefix; also the plan of `hf_export`)."""
    if checkpoint.model_type in GPT2_TYPES:
        prefix = _prefix(names, "wte.weight", source)
        found = list(_gpt2_assignments(backbone, prefix, checkpoint.max_positions))
    else:
        prefix = _prefix(names, "embed_tokens.weight", source)
        found = list(_llama_assignments(backbone, prefix))
    if backbone.output_embedding is not None:
        found.append(Assignment(backbone.output_embedding.embeddings,
                                [Source(_HEAD, (backbone.vocab_size, backbone.architecture.model_dim))]))
    return found


def _value(files: SafetensorsCheckpoint, assignment: Assignment) -> np.ndarray:
    """The array for one variable: each source checked, read, transposed if Linear, concatenated."""
    parts = []
    for source in assignment.sources:
        if source.name not in files.tensors:
            raise CheckpointError(f"{files.source}: tensor {source.name} is missing (needed for {assignment.variable.name})")
        stored = files.tensors[source.name].shape
        if stored != source.shape:
            raise CheckpointError(f"{files.file_of(source.name)}: tensor {source.name} has shape {list(stored)}, expected {list(source.shape)}")
        array = files.read(source.name)
        parts.append(array.T if source.linear else array)
    value = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
    return value[: assignment.rows] if assignment.rows is not None else value


def load_weights(backbone: GPTBackbone, checkpoint_dir: str, checkpoint: CheckpointConfig) -> int:
    """Copies the checkpoint's weights into `backbone` (built with `checkpoint_model_options`),
    tensor by tensor; returns the number of tensors read."""
    with SafetensorsCheckpoint(checkpoint_dir) as files:
        names = files.names()
        planned = assignments(backbone, checkpoint, names, files.source)
        used = {source.name for assignment in planned for source in assignment.sources}
        if backbone.output_embedding is None:
            used.add(_HEAD)  # a tied head's stored copy of the embedding
        unused = [name for name in names if name not in used and not name.endswith(_BUFFER_SUFFIXES)]
        if unused:
            raise CheckpointError(
                f"{files.file_of(unused[0])}: tensor {unused[0]} is not part of a {checkpoint.model_type} backbone "
                f"({len(unused)} such tensor(s)): unsupported checkpoint layout"
            )
        for assignment in planned:
            assignment.variable.assign(_value(files, assignment))
    logging.info("Loaded %d tensors from %s", len(used & set(names)), files.source)
    return len(used & set(names))


def import_checkpoint(checkpoint_dir: str, options: ModelOptions = None) -> Tuple[GPTBackbone, CheckpointConfig]:
    """A backbone with the architecture and weights of the Hugging Face checkpoint at `checkpoint_dir`
    (`options`: the run's model options, whose explicit architecture fields must agree)."""
    checkpoint = read_config(checkpoint_dir)
    config = checkpoint_model_options(options or ModelOptions(checkpoint=checkpoint_dir), checkpoint)
    backbone = build_backbone(config, checkpoint.vocab_size)
    load_weights(backbone, checkpoint_dir, checkpoint)
    return backbone, checkpoint
