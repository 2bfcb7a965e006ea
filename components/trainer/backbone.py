"""The decoder-only Transformer backbone (GPT family): token ids in, next-token logits out.

Pre-LayerNorm blocks with causal multi-head self-attention and a GELU MLP, learned positions, and
output logits tied to the input embedding. Pure network: no loss, no tokenizer, no decoding.
"""
import tensorflow as tf
import tf_keras as keras

from pipeline.config import ModelConfig


class DecoderBlock(keras.layers.Layer):
    """One pre-LayerNorm Transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, model_dim: int, num_heads: int, mlp_dim: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.attention_norm = keras.layers.LayerNormalization(epsilon=1e-5)
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=num_heads, key_dim=model_dim // num_heads, dropout=dropout
        )
        self.mlp_norm = keras.layers.LayerNormalization(epsilon=1e-5)
        self.mlp_in = keras.layers.Dense(mlp_dim, activation="gelu")
        self.mlp_out = keras.layers.Dense(model_dim)
        self.dropout = keras.layers.Dropout(dropout)

    def call(self, hidden: tf.Tensor, training: bool = False) -> tf.Tensor:
        normed = self.attention_norm(hidden)
        hidden = hidden + self.dropout(
            self.attention(normed, normed, use_causal_mask=True, training=training), training=training
        )
        return hidden + self.dropout(self.mlp_out(self.mlp_in(self.mlp_norm(hidden))), training=training)


class GPTBackbone(keras.Model):
    """Token ids [batch, length] -> logits [batch, length, vocab_size] (length <= context_length)."""

    def __init__(self, config: ModelConfig, vocab_size: int, **kwargs):
        super().__init__(**kwargs)
        self.context_length = config.context_length
        self.vocab_size = vocab_size
        self.token_embedding = keras.layers.Embedding(vocab_size, config.model_dim, name="token_embedding")
        self.position_embedding = keras.layers.Embedding(config.context_length, config.model_dim, name="position_embedding")
        self.blocks = [
            DecoderBlock(config.model_dim, config.num_heads, config.mlp_dim, config.dropout, name=f"block_{index}")
            for index in range(config.num_layers)
        ]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5)
        self.embedding_dropout = keras.layers.Dropout(config.dropout)

    def call(self, token_ids: tf.Tensor, training: bool = False) -> tf.Tensor:
        positions = tf.range(tf.shape(token_ids)[1])
        hidden = self.token_embedding(token_ids) + self.position_embedding(positions)[tf.newaxis]
        hidden = self.embedding_dropout(hidden, training=training)
        for block in self.blocks:
            hidden = block(hidden, training=training)
        hidden = self.final_norm(hidden)
        # Tied output projection: logits are similarities with the input embedding rows.
        return tf.matmul(hidden, self.token_embedding.embeddings, transpose_b=True)


def build_backbone(config: ModelConfig, vocab_size: int) -> GPTBackbone:
    """Creates the backbone and its weights (by calling it once on a dummy batch)."""
    model = GPTBackbone(config, vocab_size, name="gpt")
    model(tf.zeros([1, config.context_length], tf.int64))
    return model
