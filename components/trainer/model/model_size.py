"""Size of a backbone configuration: parameters and training FLOPs per token (for MFU).

FLOPs follow the PaLM paper's appendix B: 6N + 12 * L * d * T per token for a forward and
backward pass, where N counts the weights that take part in matmuls (every block's projections
and the tied output projection, not the embedding look-up), L the layers, d the model width and
T the context length (the attention score and value matmuls).
"""
from components.trainer.options import ModelOptions


def block_parameters(config: ModelOptions) -> int:
    """Weights and biases of one decoder block (attention, MLP and both layer norms)."""
    width, mlp = config.model_dim, config.mlp_dim
    attention = width * 3 * width + 3 * width + width * width + width
    feed_forward = width * mlp + mlp + mlp * width + width
    return attention + feed_forward + 2 * 2 * width


def parameter_count(config: ModelOptions, vocab_size: int) -> int:
    """All trainable parameters (embeddings counted once: the output projection is tied)."""
    positions = config.context_length * config.model_dim if config.position_encoding == "learned" else 0
    return vocab_size * config.model_dim + positions + config.num_layers * block_parameters(config) + 2 * config.model_dim


def matmul_parameters(config: ModelOptions, vocab_size: int) -> int:
    """N in 6N: block matmul weights plus the tied output projection."""
    width, mlp = config.model_dim, config.mlp_dim
    per_block = 4 * width * width + 2 * width * mlp
    return config.num_layers * per_block + vocab_size * width


def training_flops_per_token(config: ModelOptions, vocab_size: int) -> float:
    """Forward + backward FLOPs per trained token: 6N + 12 * L * d * T."""
    attention = 12 * config.num_layers * config.model_dim * config.context_length
    return 6.0 * matmul_parameters(config, vocab_size) + attention
