"""Activation recomputation (`training.recompute`, components/trainer/model/recompute.py): the same
gradients and training as without it, in graph mode, under XLA, under mixed precision and with
LoRA, and an unchanged serving copy (what the export saves)."""
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from components.trainer.model import lora
from components.trainer.model.backbone import build_backbone
from components.trainer.options import LoraOptions, ModelOptions, TrainingOptions
from components.trainer.serving.weights import serving_backbone
from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
from components.trainer.training.optimizer import make_optimizer
from components.trainer.training.precision import keras_policy

VOCAB = 61
# Llama-style (rotary, grouped-query attention, RMSNorm, SwiGLU, untied) and small: 2 blocks, so a
# gradient crosses one recomputed block into another.
CONFIG = ModelOptions(preset="tiny", num_layers=2, model_dim=32, num_heads=4, num_kv_heads=2, mlp_dim=48,
                      context_length=16, position_encoding="rotary", norm="rms", mlp="swiglu", tie_embeddings=False)
IDS = tf.constant(np.random.default_rng(3).integers(0, VOCAB, size=(2, CONFIG.context_length + 1)))


def _pair(lora_options=None, config=CONFIG):
    """The same weights built twice: without recomputation and with `block`."""
    plain = build_backbone(config, VOCAB, lora_options)
    recomputing = build_backbone(config, VOCAB, lora_options, recompute="block")
    recomputing.set_weights(plain.get_weights())
    if lora_options is not None:
        rng = np.random.default_rng(5)  # B off zero, so the adapters' gradients are not trivially related
        for one, other in zip(lora.adapter_layers(plain), lora.adapter_layers(recomputing)):
            value = rng.normal(0, 0.2, one.lora_b.shape).astype(np.float32)
            one.lora_b.assign(value)
            other.lora_b.assign(value)
        lora.freeze_all_but_adapters(plain)
        lora.freeze_all_but_adapters(recomputing)
    return plain, recomputing


def _loss_and_gradients(model, jit_compile: bool):
    @tf.function(jit_compile=jit_compile)
    def step(ids):
        with tf.GradientTape() as tape:
            logits = model(ids[:, :-1], training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids[:, 1:], logits=logits))
        return loss, [tf.convert_to_tensor(gradient) for gradient in tape.gradient(loss, model.trainable_variables)]

    loss, gradients = step(IDS)
    return float(loss.numpy()), {variable.name: gradient.numpy() for variable, gradient in zip(model.trainable_variables, gradients)}


def _count_block_calls(model) -> list:
    """Replaces each block's `call` with one that counts its calls (trace-time calls in a tf.function)."""
    calls = []
    for block in model.blocks:
        original = block.call

        def counted(*args, _original=original, _name=block.name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        block.call = counted
    return calls


def _assert_same(expected: dict, actual: dict, atol: float) -> None:
    assert expected.keys() == actual.keys() and expected
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, rtol=0, atol=atol, err_msg=name)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_gradients_are_the_same_with_and_without_recomputation(jit_compile):
    """float32: the recomputed blocks run the same operations on the same inputs, so every
    gradient matches to float rounding; and each block's forward really runs a second time."""
    plain, recomputing = _pair()
    calls = _count_block_calls(recomputing)
    plain_loss, plain_gradients = _loss_and_gradients(plain, jit_compile)
    loss, gradients = _loss_and_gradients(recomputing, jit_compile)
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    _assert_same(plain_gradients, gradients, atol=1e-6)
    assert max(np.abs(value).max() for value in gradients.values()) > 1e-3  # not trivially zero
    assert sorted(calls) == sorted(2 * [block.name for block in recomputing.blocks])  # forward + recomputation


def test_lora_gradients_are_the_same_with_and_without_recomputation():
    """With LoRA only the adapters train; their gradients through recomputed blocks are the same."""
    plain, recomputing = _pair(LoraOptions(rank=2, targets=["attention", "mlp"]))
    _, plain_gradients = _loss_and_gradients(plain, jit_compile=True)
    _, gradients = _loss_and_gradients(recomputing, jit_compile=True)
    assert all(lora.is_adapter_variable(variable) for variable in recomputing.trainable_variables)
    _assert_same(plain_gradients, gradients, atol=1e-6)


def test_mixed_bfloat16_gradients_are_the_same_with_and_without_recomputation():
    """Under mixed_bfloat16 (graph mode, as `jit_compile=auto` picks on a CPU) the recomputed
    bfloat16 activations are those of the forward pass: same gradients to float32 rounding."""
    with keras_policy("mixed_bfloat16"):
        plain, recomputing = _pair()
        _, plain_gradients = _loss_and_gradients(plain, jit_compile=False)
        _, gradients = _loss_and_gradients(recomputing, jit_compile=False)
    _assert_same(plain_gradients, gradients, atol=1e-5)


def _losses(recompute: str) -> list:
    """Per-step losses of 4 AdamW steps of the training loop (XLA), from the same initial weights."""
    keras.utils.set_random_seed(0)
    backbone = build_backbone(CONFIG, VOCAB, recompute=recompute)
    settings = LoopSettings(total_steps=4, global_batch_size=2, context_length=CONFIG.context_length,
                            steps_per_call=1, log_every=1, checkpoint_every=100, jit_compile=True)
    trainer = LanguageModelTrainer(backbone, make_optimizer(TrainingOptions(learning_rate=1e-2, warmup_steps=0), "float32"),
                                   tf.distribute.get_strategy(), settings, checkpoint_dir=tempfile.mkdtemp())
    batches = tf.data.Dataset.from_tensors((IDS[:, :-1], IDS[:, 1:])).repeat()
    reports = []
    trainer.train(lambda start: iter(batches), on_report=reports.append)
    return [report.loss for report in reports]


def test_training_follows_the_same_loss_trajectory_with_recomputation():
    plain, recomputing = _losses("off"), _losses("block")
    assert len(plain) == 4 and plain[-1] < plain[0] - 0.1  # it trains
    np.testing.assert_allclose(recomputing, plain, rtol=1e-5)


def test_the_serving_copy_is_unchanged_by_recomputation():
    """The export saves `serving_backbone`'s copy: built without recomputation, it computes the
    same logits and cached decoding as the copy of a model trained without it."""
    plain, recomputing = _pair()
    served_plain, served = serving_backbone(plain), serving_backbone(recomputing)
    assert served.recompute == "off" and recomputing.recompute == "block"
    ids = IDS[:, :-1]
    np.testing.assert_array_equal(served(ids).numpy(), served_plain(ids).numpy())
    np.testing.assert_array_equal(recomputing(ids).numpy(), plain(ids).numpy())  # inference never recomputes
    logits, _ = served.prefill(ids, tf.constant(CONFIG.context_length), tf.constant([15, 15]))
    plain_logits, _ = served_plain.prefill(ids, tf.constant(CONFIG.context_length), tf.constant([15, 15]))
    np.testing.assert_array_equal(logits.numpy(), plain_logits.numpy())


def test_recomputation_with_dropout_is_refused_naming_the_settings():
    from pipeline.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"training\.recompute=block needs model\.dropout=0"):
        load_config(overrides=["training.recompute=block", "model.dropout=0.1"])
    with pytest.raises(ConfigError, match=r"training\.recompute"):
        load_config(overrides=["training.recompute=layer"])
    assert load_config(overrides=["training.recompute=off"]).training.recompute == "off"  # YAML reads `off` as False
    with pytest.raises(ValueError, match=r"training\.recompute=block needs model\.dropout=0"):
        build_backbone(CONFIG.model_copy(update={"dropout": 0.1}), VOCAB, recompute="block")
