"""The backbone's GPT-2 / Llama options: defaults unchanged, and every option combination decodes
with the key/value cache (graph and XLA), serves (float and int8 copies) and saves."""

import numpy as np
import pytest
import tensorflow as tf

from components.trainer.model import decoding
from components.trainer.model.backbone import build_backbone, rotary_inverse_frequency
from components.trainer.model.dtype_policy import keras_policy
from components.trainer.model.model_size import parameter_count
from components.trainer.options import ModelOptions, RopeScaling
from components.trainer.serving.weights import serving_backbone

VOCAB = 97
SHAPE = dict(num_layers=2, num_heads=4, model_dim=32, mlp_dim=48, context_length=32)
LLAMA3 = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
FAMILIES = {
    "gpt2": dict(mlp="gelu_tanh"),
    "llama": dict(
        position_encoding="rotary",
        norm="rms",
        norm_epsilon=1e-6,
        mlp="swiglu",
        num_kv_heads=2,
        attention_bias=False,
        mlp_bias=False,
        tie_embeddings=False,
        rope_theta=500000.0,
        rope_scaling=LLAMA3,
    ),
    "multi-query-learned-untied": dict(num_kv_heads=1, tie_embeddings=False, mlp="swiglu", mlp_bias=False),
    "rms-gelu-rotary-biases": dict(position_encoding="rotary", norm="rms", attention_bias=True),
}


def _peaked(options: dict, seed: int = 0):
    """A random backbone whose logits are peaked (embeddings scaled up), so greedy choices are not near-ties."""
    tf.keras.utils.set_random_seed(seed)
    backbone = build_backbone(ModelOptions(**SHAPE, **options), VOCAB)
    backbone.token_embedding.embeddings.assign(backbone.token_embedding.embeddings * 40.0)
    if backbone.output_embedding is not None:
        backbone.output_embedding.embeddings.assign(backbone.output_embedding.embeddings * 40.0)
    return backbone


def _prompts() -> tf.RaggedTensor:
    rng = np.random.default_rng(5)
    return tf.ragged.constant([rng.integers(3, VOCAB, size=n).tolist() for n in (3, 7, 1, 12)], dtype=tf.int64)


def test_default_options_keep_the_variables_of_the_project_model():
    backbone = build_backbone(
        ModelOptions(num_layers=1, num_heads=2, model_dim=32, mlp_dim=64, context_length=32), VOCAB
    )
    names = [(weight.name, tuple(weight.shape)) for weight in backbone.weights]
    assert names == [
        ("gpt/token_embedding/embeddings:0", (97, 32)),
        ("gpt/position_embedding/embeddings:0", (32, 32)),
        ("gpt/block_0/attention_norm/gamma:0", (32,)),
        ("gpt/block_0/attention_norm/beta:0", (32,)),
        ("gpt/block_0/attention/qkv/kernel:0", (32, 96)),
        ("gpt/block_0/attention/qkv/bias:0", (96,)),
        ("gpt/block_0/attention/output/kernel:0", (32, 32)),
        ("gpt/block_0/attention/output/bias:0", (32,)),
        ("gpt/block_0/mlp_norm/gamma:0", (32,)),
        ("gpt/block_0/mlp_norm/beta:0", (32,)),
        ("gpt/block_0/mlp_in/kernel:0", (32, 64)),
        ("gpt/block_0/mlp_in/bias:0", (64,)),
        ("gpt/block_0/mlp_out/kernel:0", (64, 32)),
        ("gpt/block_0/mlp_out/bias:0", (32,)),
        ("gpt/final_norm/gamma:0", (32,)),
        ("gpt/final_norm/beta:0", (32,)),
    ]
    assert parameter_count(backbone.architecture, VOCAB) == backbone.count_params()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_decodes_with_the_cache_as_without_it_and_counts_its_parameters(family):
    trained = _peaked(FAMILIES[family])
    config = trained.architecture
    assert parameter_count(config, VOCAB) == trained.count_params()
    served = serving_backbone(trained)
    tokens = tf.constant(np.random.default_rng(0).integers(3, VOCAB, size=(2, 20)), tf.int64)
    np.testing.assert_allclose(served(tokens).numpy(), trained(tokens).numpy(), atol=1e-4, rtol=1e-5)
    _, cache = trained.prefill(tokens, 24, tf.constant([19, 19]))
    assert cache[0][0].shape == (2, config.kv_heads, 24, config.model_dim // config.num_heads)  # only the kv heads
    reference, _ = decoding.generate_tokens_without_cache(trained, _prompts(), 16, 0.0, 0, 1.0, 0)
    for jit_compile in (False, True):
        cached, _ = decoding.generate_tokens(served, _prompts(), 16, 0.0, 0, 1.0, 0, jit_compile=jit_compile)
        assert cached.to_list() == reference.to_list(), f"jit_compile={jit_compile}"


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_int8_copy_and_a_saved_generate_function_work_for_each_family(family, tmp_path):
    trained = _peaked(FAMILIES[family], seed=1)
    quantized = serving_backbone(trained, "int8")
    tokens = tf.constant(np.random.default_rng(1).integers(3, VOCAB, size=(2, 16)), tf.int64)
    assert np.mean(np.argmax(quantized(tokens), -1) == np.argmax(trained(tokens), -1)) > 0.9

    module = tf.Module()
    module.backbone = quantized
    module.generate = tf.function(
        lambda prompts: decoding.generate_tokens(
            module.backbone, tf.RaggedTensor.from_tensor(prompts), 8, 0.0, 0, 1.0, 0
        )[0].to_tensor(),
        input_signature=[tf.TensorSpec([None, None], tf.int64)],
    )
    expected = module.generate(tf.constant([[5, 6, 7]], tf.int64)).numpy()
    tf.saved_model.save(module, str(tmp_path / "model"))
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    np.testing.assert_array_equal(loaded.generate(tf.constant([[5, 6, 7]], tf.int64)).numpy(), expected)


def test_mixed_bfloat16_computes_the_llama_family_close_to_float32():
    trained = _peaked(FAMILIES["llama"], seed=2)
    with keras_policy("mixed_bfloat16"):
        mixed = build_backbone(trained.architecture, VOCAB)
    mixed.set_weights(trained.get_weights())
    tokens = tf.constant(np.random.default_rng(2).integers(3, VOCAB, size=(2, 16)), tf.int64)
    logits = mixed(tokens)
    assert logits.dtype == tf.float32
    assert np.mean(np.argmax(logits, -1) == np.argmax(trained(tokens), -1)) > 0.8


def test_llama3_scaling_keeps_short_wavelengths_divides_long_ones_and_blends_between():
    plain = rotary_inverse_frequency(16, 500000.0)
    scaled = rotary_inverse_frequency(16, 500000.0, LLAMA3)
    wavelength = 2 * np.pi / plain
    short, long = wavelength < 64 / 4.0, wavelength > 64 / 1.0
    assert short.any() and long.any() and (~short & ~long).any()
    np.testing.assert_allclose(scaled[short], plain[short])
    np.testing.assert_allclose(scaled[long], plain[long] / 8.0)
    middle = ~short & ~long
    assert np.all((scaled[middle] < plain[middle]) & (scaled[middle] > plain[middle] / 8.0))


def test_option_errors_name_the_fields():
    with pytest.raises(ValueError, match="model.num_heads .4. must be divisible by model.num_kv_heads .3."):
        ModelOptions(**SHAPE, num_kv_heads=3)
    with pytest.raises(ValueError, match="high_freq_factor must exceed low_freq_factor"):
        RopeScaling(factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0, original_max_position_embeddings=16)
