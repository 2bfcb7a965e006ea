"""Size of a backbone configuration: parameters and training FLOPs per token (for MFU).

FLOPs follow the PaLM paper's appendix B: 6N + 12 * L * d * T per token for a forward and
backward pass, where N counts the weights that take part in matmuls (every block's projections
and the output projection, not the embedding look-up), L the layers, d the model width and
T the context length (the attention score and value matmuls).

With LoRA the frozen weights get no weight gradient: the backward pass computes only the
gradients with respect to the activations (2N), so a token costs 4N + 12 * L * d * T (the
adapters' own matmuls, rank r against width d, add about 3r/d of that: under 2% at rank 8 and
width 2048, left out). Counting 6N there put a LoRA run's MFU at 1.5x its real value (113% on the
1.1B benchmark, issue 37).
"""

from components.trainer.options import ModelOptions


def _norm_parameters(config: ModelOptions) -> int:
    """One norm's weights: scale and offset (LayerNorm) or scale only (RMSNorm)."""
    return config.model_dim * (2 if config.norm == "layer" else 1)


def _block_matmul_parameters(config: ModelOptions) -> int:
    """One block's matmul weights: fused Q/K/V (kv_heads key/value heads), attention output, MLP."""
    width, head_dim = config.model_dim, config.model_dim // config.num_heads
    qkv = width * (config.num_heads + 2 * config.kv_heads) * head_dim
    mlp_in = width * config.mlp_dim * (2 if config.mlp == "swiglu" else 1)
    return qkv + width * width + mlp_in + config.mlp_dim * width


def block_parameters(config: ModelOptions) -> int:
    """Weights and biases of one decoder block (attention, MLP and both norms)."""
    width, head_dim = config.model_dim, config.model_dim // config.num_heads
    attention_biases = (config.num_heads + 2 * config.kv_heads) * head_dim + width if config.attention_bias else 0
    mlp_biases = config.mlp_dim * (2 if config.mlp == "swiglu" else 1) + width if config.mlp_bias else 0
    return _block_matmul_parameters(config) + attention_biases + mlp_biases + 2 * _norm_parameters(config)


def parameter_count(config: ModelOptions, vocab_size: int) -> int:
    """All trainable parameters (the embedding counted once when the output projection is tied to it)."""
    positions = config.context_length * config.model_dim if config.position_encoding == "learned" else 0
    head = 0 if config.tie_embeddings else vocab_size * config.model_dim
    return (
        vocab_size * config.model_dim
        + positions
        + config.num_layers * block_parameters(config)
        + _norm_parameters(config)
        + head
    )


def matmul_parameters(config: ModelOptions, vocab_size: int) -> int:
    """N in 6N: block matmul weights plus the output projection."""
    return config.num_layers * _block_matmul_parameters(config) + vocab_size * config.model_dim


def training_flops_per_token(config: ModelOptions, vocab_size: int, weight_gradients: bool = True) -> float:
    """Forward + backward FLOPs per trained token: 6N + 12 * L * d * T, or 4N + 12 * L * d * T
    without `weight_gradients` (LoRA: the weights are frozen; see the module docstring)."""
    attention = 12 * config.num_layers * config.model_dim * config.context_length
    return (6.0 if weight_gradients else 4.0) * matmul_parameters(config, vocab_size) + attention
