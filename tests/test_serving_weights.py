"""The serving copy of the backbone: the pre-transposed projection changes nothing, int8 changes little."""

import numpy as np
import pytest
import tensorflow as tf

from components.trainer.model import decoding
from components.trainer.model.backbone import build_backbone
from components.trainer.options import ModelOptions
from components.trainer.serving.weights import quantize_per_channel, serving_backbone

# int8 bounds, measured on the peaked random models below (see benchmarks/README.md for a
# trained model's eval bits per byte): greedy tokens agree on at least this fraction, and the
# mean next-token NLL moves by less than this many nats.
INT8_MIN_TOKEN_AGREEMENT = 0.9
INT8_MAX_NLL_CHANGE = 0.02


def _peaked_backbone(seed: int, rotary: bool):
    """A random 2-layer model whose logits are peaked (embeddings scaled up), so greedy choices
    are not coin flips between near-equal logits, as they would be in a freshly initialised model."""
    tf.keras.utils.set_random_seed(seed)
    config = ModelOptions(
        num_layers=2,
        num_heads=2,
        model_dim=32,
        mlp_dim=64,
        context_length=32,
        position_encoding="rotary" if rotary else "learned",
    )
    backbone = build_backbone(config, 97)
    backbone.token_embedding.embeddings.assign(backbone.token_embedding.embeddings * 40.0)
    return backbone


def _prompts(seed: int) -> tf.RaggedTensor:
    rng = np.random.default_rng(seed)
    return tf.ragged.constant([rng.integers(3, 97, size=n).tolist() for n in (3, 7, 1, 12)], dtype=tf.int64)


def _mean_nll(backbone, blocks: tf.Tensor) -> float:
    logits = backbone(blocks[:, :-1])
    return float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=blocks[:, 1:], logits=logits)))


def test_per_channel_quantization_reconstructs_each_column_within_half_a_step():
    kernel = tf.random.stateless_normal([64, 16], seed=[1, 2]) * tf.range(1.0, 17.0)
    quantized, scale = quantize_per_channel(kernel)
    assert quantized.dtype == tf.int8 and scale.shape == [16]
    error = tf.abs(tf.cast(quantized, tf.float32) * scale - kernel)
    assert bool(tf.reduce_all(error <= scale / 2 + 1e-6))
    assert int(tf.reduce_max(tf.abs(tf.cast(quantized, tf.int32)))) == 127


@pytest.mark.parametrize("rotary", [False, True], ids=["learned", "rotary"])
def test_the_float_serving_copy_gives_the_same_logits_and_tokens(rotary):
    trained = _peaked_backbone(3, rotary)
    served = serving_backbone(trained)
    tokens = tf.constant(np.random.default_rng(0).integers(3, 97, size=(2, 20)), tf.int64)
    np.testing.assert_allclose(served(tokens).numpy(), trained(tokens).numpy(), atol=1e-4, rtol=1e-5)
    for jit_compile in (False, True):
        cached, _ = decoding.generate_tokens(served, _prompts(1), 12, 0.0, 0, 1.0, 0, jit_compile=jit_compile)
        recomputed, _ = decoding.generate_tokens_without_cache(trained, _prompts(1), 12, 0.0, 0, 1.0, 0)
        assert cached.to_list() == recomputed.to_list()
    assert trained.output_projection is None  # training keeps its tied weights


def test_int8_tokens_agree_and_the_score_moves_within_the_bounds():
    agreements, nll_changes = [], []
    for seed in range(3):
        trained = _peaked_backbone(seed, rotary=bool(seed % 2))
        quantized = serving_backbone(trained, "int8")
        reference, _ = decoding.generate_tokens_without_cache(trained, _prompts(seed), 16, 0.0, 0, 1.0, 0)
        tokens, _ = decoding.generate_tokens(quantized, _prompts(seed), 16, 0.0, 0, 1.0, 0)
        # agreement up to the first difference in each row (after it the prefixes differ)
        for want, got in zip(reference.to_list(), tokens.to_list()):
            same = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), len(want))
            agreements.append(same / len(want))
        blocks = tf.constant(np.random.default_rng(seed).integers(3, 97, size=(4, 33)), tf.int64)
        nll_changes.append(abs(_mean_nll(quantized, blocks) - _mean_nll(trained, blocks)))
    agreement = float(np.mean(agreements))
    print(f"int8: greedy token agreement {agreement:.3f}, largest mean-NLL change {max(nll_changes):.5f} nats")
    assert agreement >= INT8_MIN_TOKEN_AGREEMENT
    assert max(nll_changes) < INT8_MAX_NLL_CHANGE


def test_an_unknown_quantization_is_rejected():
    with pytest.raises(ValueError, match="weight_quantization"):
        serving_backbone(_peaked_backbone(0, False), "int4")
