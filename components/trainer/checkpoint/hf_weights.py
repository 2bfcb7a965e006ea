"""Hugging Face tensor names -> the backbone's variables, and the import itself.

GPT-2's attention and MLP weights are Conv1D kernels stored [in, out], already the layout of a
Keras Dense kernel; its `c_attn` is the fused Q/K/V projection with the backbone's column order
(all query heads, then keys, then values). Llama's projections are torch Linear weights stored
[out, in]: they are transposed, and q/k/v (and gate/up) concatenated along the output axis into
the backbone's fused kernels. Names may carry a prefix (`transformer.` for GPT2LMHeadModel and
DistilGPT2, none for the `gpt2` hub checkpoint; `model.` for LlamaForCausalLM).

The mapping is a plan made from the architecture alone (`tensor_plan`: variable path -> tensor
names and shapes), so a checkpoint is checked against it from its safetensors headers, before any
backbone is built or any weight read (`check_tensors`; the Tokenizer stage and `textgen run` do it
through `preflight`). Every variable must get a tensor of exactly the expected shape, and every
tensor must be used (apart from buffers that hold no weights, and a tied head's copy of the
embedding): anything else is a `CheckpointError` naming the tensor and its file.
"""

import logging
from typing import Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from components.trainer.checkpoint.errors import CheckpointError
from components.trainer.checkpoint.hf_config import GPT2_TYPES, CheckpointConfig, checkpoint_model_options, read_config
from components.trainer.checkpoint.safetensors_files import SUPPORTED_DTYPES, SafetensorsCheckpoint
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


class Planned(NamedTuple):
    """One backbone variable, by its attribute path from the backbone (`blocks.3.attention.qkv.kernel`),
    and the checkpoint tensors concatenated (along the last axis) into it; `rows` keeps only the
    first rows (a position table longer than the context). Made from the architecture alone, so a
    checkpoint can be checked against it before any backbone exists (`check_tensors`)."""

    target: str
    sources: List[Source]
    rows: Optional[int] = None


class Assignment(NamedTuple):
    """A `Planned` entry with the backbone's variable it fills."""

    variable: tf.Variable
    sources: List[Source]
    rows: Optional[int] = None


def _prefix(names: List[str], embedding: str, path: str) -> str:
    """The prefix before the checkpoint's names (found from the token embedding's name)."""
    for prefix in ("", "transformer.", "model."):
        if prefix + embedding in names:
            return prefix
    raise CheckpointError(f"{path}: tensor {embedding} is missing (the token embedding, with or without a prefix)")


def _dense(target: str, bias: bool, sources: List[Source], bias_sources: List[Source]) -> Iterator[Planned]:
    yield Planned(target + ".kernel", sources)
    if bias:
        yield Planned(target + ".bias", bias_sources)


def _norm(config: ModelOptions, target: str, name: str) -> Iterator[Planned]:
    width = config.model_dim
    yield Planned(target + ".gamma", [Source(name + ".weight", (width,))])
    if config.norm == "layer":  # RMSNorm has no offset
        yield Planned(target + ".beta", [Source(name + ".bias", (width,))])


def _gpt2_plan(config: ModelOptions, vocab_size: int, prefix: str, max_positions: int) -> Iterator[Planned]:
    width, inner = config.model_dim, config.mlp_dim
    attention_bias, mlp_bias = config.attention_bias, config.mlp_bias
    yield Planned("token_embedding.embeddings", [Source(prefix + "wte.weight", (vocab_size, width))])
    yield Planned(
        "position_embedding.embeddings",
        [Source(prefix + "wpe.weight", (max_positions, width))],
        rows=config.context_length,
    )
    for index in range(config.num_layers):
        name, block = f"{prefix}h.{index}.", f"blocks.{index}."
        yield from _norm(config, block + "attention_norm", name + "ln_1")
        yield from _dense(
            block + "attention.qkv",
            attention_bias,
            [Source(name + "attn.c_attn.weight", (width, 3 * width))],
            [Source(name + "attn.c_attn.bias", (3 * width,))],
        )
        yield from _dense(
            block + "attention.output_projection",
            attention_bias,
            [Source(name + "attn.c_proj.weight", (width, width))],
            [Source(name + "attn.c_proj.bias", (width,))],
        )
        yield from _norm(config, block + "mlp_norm", name + "ln_2")
        yield from _dense(
            block + "mlp_in",
            mlp_bias,
            [Source(name + "mlp.c_fc.weight", (width, inner))],
            [Source(name + "mlp.c_fc.bias", (inner,))],
        )
        yield from _dense(
            block + "mlp_out",
            mlp_bias,
            [Source(name + "mlp.c_proj.weight", (inner, width))],
            [Source(name + "mlp.c_proj.bias", (width,))],
        )
    yield from _norm(config, "final_norm", prefix + "ln_f")


def _llama_plan(config: ModelOptions, vocab_size: int, prefix: str) -> Iterator[Planned]:
    width, inner = config.model_dim, config.mlp_dim
    attention_bias, mlp_bias = config.attention_bias, config.mlp_bias
    head_dim = width // config.num_heads
    query, key_value = config.num_heads * head_dim, config.kv_heads * head_dim
    yield Planned("token_embedding.embeddings", [Source(prefix + "embed_tokens.weight", (vocab_size, width))])
    for index in range(config.num_layers):
        name, block = f"{prefix}layers.{index}.", f"blocks.{index}."
        yield from _norm(config, block + "attention_norm", name + "input_layernorm")
        projections = [("q_proj", query), ("k_proj", key_value), ("v_proj", key_value)]
        yield from _dense(
            block + "attention.qkv",
            attention_bias,
            [Source(f"{name}self_attn.{part}.weight", (size, width), linear=True) for part, size in projections],
            [Source(f"{name}self_attn.{part}.bias", (size,)) for part, size in projections],
        )
        yield from _dense(
            block + "attention.output_projection",
            attention_bias,
            [Source(name + "self_attn.o_proj.weight", (width, query), linear=True)],
            [Source(name + "self_attn.o_proj.bias", (width,))],
        )
        yield from _norm(config, block + "mlp_norm", name + "post_attention_layernorm")
        yield from _dense(
            block + "mlp_in",
            mlp_bias,
            [Source(f"{name}mlp.{part}.weight", (inner, width), linear=True) for part in ("gate_proj", "up_proj")],
            [Source(f"{name}mlp.{part}.bias", (inner,)) for part in ("gate_proj", "up_proj")],
        )
        yield from _dense(
            block + "mlp_out",
            mlp_bias,
            [Source(name + "mlp.down_proj.weight", (width, inner), linear=True)],
            [Source(name + "mlp.down_proj.bias", (width,))],
        )
    yield from _norm(config, "final_norm", prefix + "norm")


def tensor_plan(
    config: ModelOptions, vocab_size: int, checkpoint: CheckpointConfig, names: List[str], source: str
) -> List[Planned]:
    """Every variable of a backbone of architecture `config` and `vocab_size` tokens with the
    checkpoint tensors that fill it (`names`: the checkpoint's tensor names, which tell the prefix;
    `source`: the file named when the token embedding is missing)."""
    if checkpoint.model_type in GPT2_TYPES:
        planned = list(_gpt2_plan(config, vocab_size, _prefix(names, "wte.weight", source), checkpoint.max_positions))
    else:
        planned = list(_llama_plan(config, vocab_size, _prefix(names, "embed_tokens.weight", source)))
    if not config.tie_embeddings:
        planned.append(Planned("output_embedding.embeddings", [Source(_HEAD, (vocab_size, config.model_dim))]))
    return planned


def _resolve(backbone: GPTBackbone, target: str) -> tf.Variable:
    """The variable at attribute path `target` of `backbone` (numbers index lists)."""
    found = backbone
    for part in target.split("."):
        found = found[int(part)] if part.isdigit() else getattr(found, part)
    return found


def assignments(backbone: GPTBackbone, checkpoint: CheckpointConfig, names: List[str], source: str) -> List[Assignment]:
    """`tensor_plan` for `backbone`, each entry with its variable (also the plan of `hf_export`)."""
    return [
        Assignment(_resolve(backbone, planned.target), planned.sources, planned.rows)
        for planned in tensor_plan(backbone.architecture, backbone.vocab_size, checkpoint, names, source)
    ]


def check_tensors(files: SafetensorsCheckpoint, planned: List[Planned], checkpoint: CheckpointConfig) -> int:
    """Checks, from the headers alone, that the checkpoint holds every tensor `planned` needs with
    the shape config.json implies and a readable dtype, and nothing a backbone has no place for
    (apart from buffers and a tied head's copy of the embedding). Raises `CheckpointError` naming
    the first tensor at fault and its file; returns the number of tensors that will be read."""
    for entry in planned:
        for source in entry.sources:
            info = files.tensors.get(source.name)
            if info is None:
                raise CheckpointError(
                    f"{files.source}: tensor {source.name} is missing (needed for the backbone's {entry.target})"
                )
            if info.shape != source.shape:
                raise CheckpointError(
                    f"{files.file_of(source.name)}: tensor {source.name} has shape {list(info.shape)}, "
                    f"expected {list(source.shape)} from {checkpoint.path}"
                )
            if info.dtype not in SUPPORTED_DTYPES:
                raise CheckpointError(
                    f"{files.file_of(source.name)}: tensor {source.name} has dtype {info.dtype} "
                    f"(supported: {', '.join(SUPPORTED_DTYPES)})"
                )
    used = {source.name for entry in planned for source in entry.sources}
    read = len(used)
    if all(entry.target != "output_embedding.embeddings" for entry in planned):
        used.add(_HEAD)  # a tied head's stored copy of the embedding
    unused = [name for name in files.names() if name not in used and not name.endswith(_BUFFER_SUFFIXES)]
    if unused:
        raise CheckpointError(
            f"{files.file_of(unused[0])}: tensor {unused[0]} is not part of a {checkpoint.model_type} backbone "
            f"({len(unused)} such tensor(s)): unsupported checkpoint layout"
        )
    return read


def _value(files: SafetensorsCheckpoint, entry: Planned, variable: tf.Variable) -> np.ndarray:
    """The array for `variable`, in its dtype: each source read, transposed if Linear, concatenated."""
    parts = [files.read(source.name, variable.dtype.as_numpy_dtype) for source in entry.sources]
    parts = [part.T if source.linear else part for source, part in zip(entry.sources, parts)]
    value = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
    return value[: entry.rows] if entry.rows is not None else value


def load_weights(backbone: GPTBackbone, checkpoint_dir: str, checkpoint: CheckpointConfig) -> int:
    """Copies the checkpoint's weights into `backbone` (built with `checkpoint_model_options`),
    tensor by tensor, after checking every tensor against the plan (`check_tensors`: nothing is
    assigned from a checkpoint that fails it); returns the number of tensors read. Each tensor is
    read in its variable's dtype: a frozen base weight stored as bfloat16 (model/lora.py) gets a
    bfloat16 tensor unwidened."""
    with SafetensorsCheckpoint(checkpoint_dir) as files:
        planned = tensor_plan(backbone.architecture, backbone.vocab_size, checkpoint, files.names(), files.source)
        count = check_tensors(files, planned, checkpoint)
        for entry in planned:
            variable = _resolve(backbone, entry.target)
            variable.assign(_value(files, entry, variable))
    logging.info("Loaded %d tensors from %s", count, files.source)
    return count


def stored_weight_dtypes(checkpoint_dir: str) -> frozenset:
    """The safetensors dtypes the checkpoint's weights are stored in (buffers aside), from its
    headers: {"BF16"} for a bfloat16 checkpoint such as TinyLlama's."""
    with SafetensorsCheckpoint(checkpoint_dir) as files:
        return frozenset(info.dtype for name, info in files.tensors.items() if not name.endswith(_BUFFER_SUFFIXES))


def import_checkpoint(checkpoint_dir: str, options: ModelOptions = None) -> Tuple[GPTBackbone, CheckpointConfig]:
    """A backbone with the architecture and weights of the Hugging Face checkpoint at `checkpoint_dir`
    (`options`: the run's model options, whose explicit architecture fields must agree)."""
    checkpoint = read_config(checkpoint_dir)
    config = checkpoint_model_options(options or ModelOptions(checkpoint=checkpoint_dir), checkpoint)
    backbone = build_backbone(config, checkpoint.vocab_size)
    load_weights(backbone, checkpoint_dir, checkpoint)
    return backbone, checkpoint
