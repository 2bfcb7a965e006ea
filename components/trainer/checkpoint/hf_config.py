"""A Hugging Face config.json -> the backbone's options, vocabulary size and special token ids.

Two families are supported: `gpt2` (GPT-2, DistilGPT2) and `llama` / `mistral` (Llama 2 and 3,
TinyLlama, SmolLM, Mistral without a sliding window). Anything else in the config that would
change the network's maths (another model_type or activation, a sliding window, mixture of
experts, another rope scaling) is a `CheckpointError` naming config.json and the field.
"""

import json
import logging
import posixpath
from typing import Any, Dict, NamedTuple, Optional

import tensorflow as tf

from components.trainer.checkpoint.errors import CheckpointError
from components.trainer.options import ARCHITECTURE_FIELDS, ModelOptions, RopeScaling

CONFIG_FILE = "config.json"
GPT2_TYPES = ("gpt2",)
LLAMA_TYPES = ("llama", "mistral")
# Config fields of mixture-of-experts models (Mixtral, Qwen-MoE, DeepSeek): any of them set means
# routed expert MLPs, which the backbone does not have.
_MOE_FIELDS = ("num_local_experts", "num_experts", "num_experts_per_tok", "n_routed_experts", "moe_intermediate_size")
_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


class CheckpointConfig(NamedTuple):
    """What config.json says, in the backbone's terms."""

    path: str  # the config.json read
    model_type: str
    architecture: Dict[str, Any]  # ModelOptions field -> value (ARCHITECTURE_FIELDS)
    max_positions: int  # the longest context the checkpoint was made for
    vocab_size: int
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]  # the first, where the config lists several
    pad_token_id: Optional[int]


def _field(config: Dict[str, Any], path: str, name: str, default: Any = KeyError) -> Any:
    if name in config and config[name] is not None:
        return config[name]
    if default is KeyError:
        raise CheckpointError(f"{path}: field {name} is missing")
    return default


def _unsupported(path: str, name: str, value: Any, why: str) -> CheckpointError:
    return CheckpointError(f"{path}: {name}={json.dumps(value)} is not supported ({why})")


def _first_id(value: Any) -> Optional[int]:
    return value[0] if isinstance(value, list) and value else (value if isinstance(value, int) else None)


def _gpt2_architecture(config: Dict[str, Any], path: str) -> Dict[str, Any]:
    activation = _field(config, path, "activation_function", "gelu_new")
    if activation not in _GPT2_ACTIVATIONS:
        raise _unsupported(path, "activation_function", activation, f"supported: {', '.join(_GPT2_ACTIVATIONS)}")
    for name, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if config.get(name, supported) != supported:
            raise _unsupported(path, name, config[name], f"only {json.dumps(supported)} is")
    width = _field(config, path, "n_embd")
    return dict(
        num_layers=_field(config, path, "n_layer"),
        num_heads=_field(config, path, "n_head"),
        num_kv_heads=None,
        model_dim=width,
        mlp_dim=_field(config, path, "n_inner", 4 * width),
        position_encoding="learned",
        norm="layer",
        norm_epsilon=float(_field(config, path, "layer_norm_epsilon", 1e-5)),
        mlp=_GPT2_ACTIVATIONS[activation],
        attention_bias=True,
        mlp_bias=True,
        tie_embeddings=bool(config.get("tie_word_embeddings", True)),
        rope_theta=10000.0,
        rope_scaling=None,
    )


def _rope_scaling(config: Dict[str, Any], path: str) -> Optional[RopeScaling]:
    scaling = config.get("rope_scaling")
    if scaling is None:
        return None
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if kind == "default":
        return None
    if kind != "llama3":
        raise _unsupported(path, "rope_scaling", scaling, "only rope_type llama3 is")
    try:
        return RopeScaling(**{name: scaling[name] for name in RopeScaling.model_fields})
    except (KeyError, ValueError) as error:
        raise _unsupported(
            path, "rope_scaling", scaling, f"incomplete or invalid llama3 scaling: {str(error).splitlines()[0]}"
        ) from None


def _llama_architecture(config: Dict[str, Any], path: str) -> Dict[str, Any]:
    for name in ("sliding_window", "use_sliding_window"):
        if config.get(name):
            raise _unsupported(path, name, config[name], "sliding-window attention")
    for name in _MOE_FIELDS:
        if config.get(name):
            raise _unsupported(path, name, config[name], "mixture of experts")
    activation = _field(config, path, "hidden_act", "silu")
    if activation != "silu":
        raise _unsupported(path, "hidden_act", activation, "Llama's SwiGLU needs silu")
    width, heads = _field(config, path, "hidden_size"), _field(config, path, "num_attention_heads")
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim * heads != width:
        raise _unsupported(
            path,
            "head_dim",
            head_dim,
            f"the backbone's head size is hidden_size / num_attention_heads = {width // heads}",
        )
    return dict(
        num_layers=_field(config, path, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=_field(config, path, "num_key_value_heads", heads),
        model_dim=width,
        mlp_dim=_field(config, path, "intermediate_size"),
        position_encoding="rotary",
        norm="rms",
        norm_epsilon=float(_field(config, path, "rms_norm_eps", 1e-6)),
        mlp="swiglu",
        attention_bias=bool(config.get("attention_bias", False)),
        mlp_bias=bool(config.get("mlp_bias", False)),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        rope_theta=float(_field(config, path, "rope_theta", 10000.0)),
        rope_scaling=_rope_scaling(config, path),
    )


def read_config(checkpoint_dir: str) -> CheckpointConfig:
    """Reads `checkpoint_dir`/config.json (any tf.io.gfile path: local, gs://, ...)."""
    path = posixpath.join(checkpoint_dir, CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        raise CheckpointError(f"{path}: no such file (a Hugging Face checkpoint directory has a config.json)")
    try:
        with tf.io.gfile.GFile(path, "r") as handle:
            config = json.load(handle)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None
    model_type = _field(config, path, "model_type")
    if model_type in GPT2_TYPES:
        architecture, max_positions = _gpt2_architecture(config, path), _field(config, path, "n_positions")
    elif model_type in LLAMA_TYPES:
        architecture, max_positions = _llama_architecture(config, path), _field(config, path, "max_position_embeddings")
    else:
        raise _unsupported(path, "model_type", model_type, f"supported: {', '.join(GPT2_TYPES + LLAMA_TYPES)}")
    return CheckpointConfig(
        path=path,
        model_type=model_type,
        architecture=architecture,
        max_positions=int(max_positions),
        vocab_size=int(_field(config, path, "vocab_size")),
        bos_token_id=_first_id(config.get("bos_token_id")),
        eos_token_id=_first_id(config.get("eos_token_id")),
        pad_token_id=_first_id(config.get("pad_token_id")),
    )


def checkpoint_model_options(options: ModelOptions, checkpoint: CheckpointConfig) -> ModelOptions:
    """`options` with the architecture of `checkpoint`.

    An architecture field the user set explicitly must agree with the checkpoint's. The context
    length (the training block) is the checkpoint's maximum unless set lower; dropout and the
    other training choices stay the user's.
    """
    given = options.model_fields_set
    for name in ARCHITECTURE_FIELDS:
        if name in given and getattr(options, name) != checkpoint.architecture[name]:
            raise CheckpointError(
                f"{checkpoint.path}: model.{name}={getattr(options, name)!r} conflicts with the checkpoint's "
                f"{checkpoint.architecture[name]!r} (leave it unset to take the checkpoint's)"
            )
    context_length = options.context_length if "context_length" in given else checkpoint.max_positions
    if context_length > checkpoint.max_positions:
        raise CheckpointError(
            f"{checkpoint.path}: model.context_length={context_length} exceeds the checkpoint's {checkpoint.max_positions} positions"
        )
    values = {**options.model_dump(exclude={"preset"}), **checkpoint.architecture, "context_length": context_length}
    resolved = ModelOptions(**values)
    logging.info(
        "Model architecture from %s (%s): %d layers, %d heads (%d key/value), width %d, MLP %d (%s), %s norm, "
        "%s positions, context %d, %s head; vocabulary %d",
        checkpoint.path,
        checkpoint.model_type,
        resolved.num_layers,
        resolved.num_heads,
        resolved.kv_heads,
        resolved.model_dim,
        resolved.mlp_dim,
        resolved.mlp,
        resolved.norm,
        resolved.position_encoding,
        resolved.context_length,
        "tied" if resolved.tie_embeddings else "untied",
        checkpoint.vocab_size,
    )
    return resolved


RUN_TOKENIZER = "the run's tokenizer"


def check_vocabulary(checkpoint: CheckpointConfig, vocab_size: int, tokenizer_source: str = RUN_TOKENIZER) -> None:
    """The run's tokenizer (of `vocab_size` tokens, read from `tokenizer_source`, for messages) must
    have the checkpoint's vocabulary size: its weights are indexed by token id. A larger tokenizer
    would hand the model ids its embedding has no row for; a smaller one is not the checkpoint's."""
    if vocab_size > checkpoint.vocab_size:
        raise CheckpointError(
            f"{tokenizer_source}: {vocab_size} tokens, more than the {checkpoint.vocab_size} rows of the model's token "
            f"embedding (vocab_size in {checkpoint.path}): ids {checkpoint.vocab_size}-{vocab_size - 1} would have no "
            "embedding; the tokenizer files are not this model's"
        )
    if checkpoint.vocab_size != vocab_size:
        where = "" if tokenizer_source == RUN_TOKENIZER else f", {tokenizer_source}"
        raise CheckpointError(
            f"{checkpoint.path}: vocab_size={checkpoint.vocab_size} differs from the run's tokenizer ({vocab_size} tokens"
            f"{where}); fine-tuning a checkpoint needs its own tokenizer"
        )
