"""LoRA adapters (components/trainer/model/lora.py): frozen base, trainable adapters, exact merge."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from components.trainer.model import lora
from components.trainer.model.backbone import build_backbone
from components.trainer.options import LoraOptions, ModelOptions
from components.trainer.serving.weights import serving_backbone


class _TwoProjections(keras.Model):
    """A stand-in with an attention-kind and an MLP-kind projection (with an activation), an
    embedding and a norm, built through `lora.projection` as the backbone builds its own."""

    def __init__(self, options):
        super().__init__(name="toy")
        self.embedding = keras.layers.Embedding(50, 16, name="embedding")
        self.norm = keras.layers.LayerNormalization(name="norm")
        self.attention = lora.projection(24, "qkv", lora.ATTENTION, options)
        self.mlp = lora.projection(16, "mlp_in", lora.MLP, options, activation="gelu")

    def call(self, ids):
        return self.mlp(self.attention(self.norm(self.embedding(ids))))


def _build(options):
    model = _TwoProjections(options)
    model(tf.zeros([2, 5], tf.int64))
    return model


IDS = tf.constant(np.random.default_rng(0).integers(0, 50, size=(3, 7)))


def test_only_the_adapters_of_the_chosen_targets_train():
    model = _build(LoraOptions(rank=4, alpha=8.0, targets=["attention"]))
    lora.freeze_all_but_adapters(model)
    trainable = sorted(v.name.split("/", 1)[1] for v in model.trainable_variables)
    assert trainable == ["qkv/lora_a:0", "qkv/lora_b:0"]
    assert isinstance(model.attention, lora.LoraDense) and not isinstance(model.mlp, lora.LoraDense)


def test_rank_zero_builds_plain_dense_layers():
    model = _build(LoraOptions(rank=0))
    assert not lora.adapter_layers(model)
    assert all(not lora.is_adapter_variable(v) for v in model.weights)


def test_a_fresh_adapter_leaves_the_base_model_unchanged():
    plain, adapted = _build(None), _build(LoraOptions(rank=4, targets=["attention", "mlp"]))
    adapted_names = {w.name for w in adapted.weights}
    for weight in plain.weights:
        assert weight.name in adapted_names
    lora.copy_merged_weights(plain, plain)  # same architecture: a no-op copy works
    for weight in adapted.weights:
        if not lora.is_adapter_variable(weight):
            weight.assign(next(w for w in plain.weights if w.name == weight.name))
    np.testing.assert_array_equal(plain(IDS).numpy(), adapted(IDS).numpy())


def test_merged_export_computes_what_the_adapted_model_computes():
    adapted = _build(LoraOptions(rank=3, alpha=6.0, targets=["attention", "mlp"]))
    rng = np.random.default_rng(1)
    for layer in lora.adapter_layers(adapted):  # a trained adapter: B no longer zero
        layer.lora_b.assign(rng.normal(0, 0.5, layer.lora_b.shape).astype(np.float32))
    plain = _build(None)
    lora.copy_merged_weights(adapted, plain)
    expected, merged = adapted(IDS).numpy(), plain(IDS).numpy()
    assert np.abs(expected - plain(IDS).numpy()).max() < 1e-5
    # and the adapters mattered: without them the output differs clearly
    unmerged = _build(None)
    for weight in unmerged.weights:
        weight.assign(next(w for w in adapted.weights if w.name == weight.name))
    assert np.abs(unmerged(IDS).numpy() - merged).max() > 1e-2


def test_gradients_reach_only_the_adapters_and_change_the_output():
    model = _build(LoraOptions(rank=2, targets=["mlp"]))
    lora.freeze_all_but_adapters(model)
    frozen_before = {w.name: w.numpy().copy() for w in model.non_trainable_variables}
    optimizer = keras.optimizers.SGD(0.5)
    before = model(IDS).numpy()
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(IDS) - 1.0))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    assert np.abs(model(IDS).numpy() - before).max() > 1e-3
    for weight in model.non_trainable_variables:
        np.testing.assert_array_equal(weight.numpy(), frozen_before[weight.name])


def test_copying_between_different_architectures_is_refused():
    with pytest.raises(ValueError, match="different architectures"):
        lora.copy_merged_weights(_build(None), _TwoProjectionsWide())


class _TwoProjectionsWide(keras.Model):
    def __init__(self):
        super().__init__(name="toy")
        self.embedding = keras.layers.Embedding(50, 16, name="embedding")
        self.extra = keras.layers.Dense(3, name="extra")
        self(tf.zeros([1, 2], tf.int64))

    def call(self, ids):
        return self.extra(self.embedding(ids))


BACKBONES = {
    "gpt2": ModelOptions(preset="tiny", num_layers=2, model_dim=32, num_heads=4, mlp="gelu_tanh", context_length=16),
    "llama": ModelOptions(
        preset="tiny",
        num_layers=2,
        model_dim=32,
        num_heads=4,
        num_kv_heads=2,
        context_length=16,
        position_encoding="rotary",
        norm="rms",
        mlp="swiglu",
        attention_bias=False,
        mlp_bias=False,
        tie_embeddings=False,
    ),
}


@pytest.mark.parametrize("family", sorted(BACKBONES))
def test_the_serving_copy_of_a_lora_backbone_merges_the_adapters_exactly(family):
    """The backbone's projections take adapters; the serving copy (what the export saves) is a
    plain backbone whose logits equal the adapted model's, and differ from the base weights'."""
    config = BACKBONES[family]
    adapted = build_backbone(config, 97, LoraOptions(rank=4, alpha=8.0, targets=["attention", "mlp"]))
    assert len(lora.adapter_layers(adapted)) == 4 * config.num_layers
    rng = np.random.default_rng(2)
    for layer in lora.adapter_layers(adapted):
        layer.lora_b.assign(rng.normal(0, 0.2, layer.lora_b.shape).astype(np.float32))
    served = serving_backbone(adapted)
    assert not lora.adapter_layers(served) and not any(lora.is_adapter_variable(v) for v in served.weights)
    ids = tf.constant(rng.integers(0, 97, size=(2, 9)))
    np.testing.assert_allclose(served(ids).numpy(), adapted(ids).numpy(), atol=1e-4)
    base = build_backbone(config, 97)
    for weight in base.weights:
        weight.assign(next(w for w in adapted.weights if w.name == weight.name))
    assert np.abs(base(ids).numpy() - adapted(ids).numpy()).max() > 1e-2


def test_a_lora_backbone_trains_only_its_adapters():
    backbone = build_backbone(BACKBONES["llama"], 97, LoraOptions(rank=2))
    lora.freeze_all_but_adapters(backbone)
    names = {v.name.split("/")[-1] for v in backbone.trainable_variables}
    assert names == {"lora_a:0", "lora_b:0"} and len(backbone.trainable_variables) == 2 * 2 * 2


def test_a_resumed_lora_run_restores_its_adapters_and_optimizer_state_and_keeps_the_base_frozen(tmp_path):
    """Training checkpoints hold the adapters (and the frozen base): a restarted Trainer resumes at
    the saved step with the trained adapters, and the base weights never moved."""
    from components.trainer.options import TrainingOptions
    from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
    from components.trainer.training.optimizer import make_optimizer

    def trainer(total_steps):
        backbone = build_backbone(BACKBONES["llama"], 97, LoraOptions(rank=2, targets=["attention", "mlp"]))
        lora.freeze_all_but_adapters(backbone)
        settings = LoopSettings(
            total_steps=total_steps,
            global_batch_size=4,
            context_length=16,
            jit_compile=False,
            steps_per_call=2,
            log_every=2,
            checkpoint_every=2,
        )
        return LanguageModelTrainer(
            backbone,
            make_optimizer(TrainingOptions(learning_rate=1e-2), "float32"),
            tf.distribute.get_strategy(),
            settings,
            checkpoint_dir=str(tmp_path / "checkpoints"),
        )

    batches = tf.data.Dataset.from_tensors(
        (tf.ones([4, 16], tf.int64), tf.fill([4, 16], tf.constant(5, tf.int64)))
    ).repeat()
    tf.keras.utils.set_random_seed(0)
    first = trainer(4)
    base_before = {w.name: w.numpy().copy() for w in first.model.non_trainable_weights}
    first.train(lambda start: iter(batches))
    adapters = {w.name: w.numpy() for w in first.model.trainable_weights}
    assert any(np.abs(value).max() > 0 for name, value in adapters.items() if "lora_b" in name)  # B moved off zero
    for weight in first.model.non_trainable_weights:
        np.testing.assert_array_equal(weight.numpy(), base_before[weight.name])
    tf.keras.utils.set_random_seed(1)  # a fresh process would initialise differently
    resumed = trainer(6)
    assert resumed.restore_latest() == 4
    for weight in resumed.model.trainable_weights:
        np.testing.assert_array_equal(weight.numpy(), adapters[weight.name])
    for weight in resumed.model.non_trainable_weights:
        np.testing.assert_array_equal(weight.numpy(), base_before[weight.name])


def test_frozen_weights_are_bfloat16_only_under_mixed_bfloat16_with_lora_and_by_default_only_when_lossless():
    from components.trainer.training.precision import frozen_weight_dtype

    auto, always, never = (LoraOptions(rank=4, frozen_dtype=dtype) for dtype in ("auto", "bfloat16", "float32"))
    bf16, f32 = frozenset({"BF16"}), frozenset({"F32"})
    assert frozen_weight_dtype(auto, "mixed_bfloat16", bf16, warm_start=False) == "bfloat16"
    assert frozen_weight_dtype(auto, "mixed_bfloat16", f32, warm_start=False) is None  # the exports keep float32 values
    assert frozen_weight_dtype(auto, "mixed_bfloat16", frozenset({"BF16", "F32"}), warm_start=False) is None
    assert frozen_weight_dtype(auto, "mixed_bfloat16", frozenset(), warm_start=False) is None  # no checkpoint
    assert frozen_weight_dtype(auto, "mixed_bfloat16", bf16, warm_start=True) is None  # production's merged float32
    assert frozen_weight_dtype(always, "mixed_bfloat16", f32, warm_start=True) == "bfloat16"
    for policy in ("float32", "mixed_float16"):  # these graphs do not read every weight as bfloat16
        assert frozen_weight_dtype(always, policy, bf16, warm_start=False) is None
    assert frozen_weight_dtype(never, "mixed_bfloat16", bf16, warm_start=False) is None
    assert frozen_weight_dtype(LoraOptions(rank=0), "mixed_bfloat16", bf16, False) is None  # full fine-tuning
    assert frozen_weight_dtype(None, "mixed_bfloat16", bf16, False) is None
    assert build_backbone(BACKBONES["gpt2"], 97, None, frozen_dtype="bfloat16").frozen_dtype is None


@pytest.mark.parametrize("family", sorted(BACKBONES))
def test_bfloat16_frozen_weights_compute_exactly_what_float32_ones_do_under_mixed_bfloat16(family):
    """Every frozen weight is read as bfloat16 by the mixed_bfloat16 graph anyway: stored so, the
    logits and the adapters' gradients are the same to the bit, the adapters and norms stay
    float32, and the float32 serving copy is the same too."""
    from components.trainer.model.dtype_policy import keras_policy

    options = LoraOptions(rank=4, targets=["attention"])
    rng = np.random.default_rng(4)
    ids = tf.constant(rng.integers(0, 97, size=(2, 12)))
    with keras_policy("mixed_bfloat16"):
        halved = build_backbone(BACKBONES[family], 97, options, frozen_dtype="bfloat16")
        full = build_backbone(BACKBONES[family], 97, options)
        by_name = {weight.name: weight for weight in halved.weights}
        for weight in full.weights:
            weight.assign(tf.cast(by_name[weight.name], weight.dtype))
        for pair in zip(lora.adapter_layers(halved), lora.adapter_layers(full)):
            value = rng.normal(0, 0.2, pair[0].lora_b.shape).astype(np.float32)
            for layer in pair:
                layer.lora_b.assign(value)
        stored = {weight.name.split("/")[-1].split(":")[0]: weight.dtype.name for weight in halved.weights}
        assert stored["lora_a"] == stored["lora_b"] == stored["gamma"] == "float32"
        assert stored["kernel"] == stored["embeddings"] == "bfloat16"
        assert sum(w.dtype == tf.bfloat16 for w in halved.weights) == sum(
            not lora.is_adapter_variable(w) and "norm" not in w.name for w in halved.weights
        )
        np.testing.assert_array_equal(halved(ids).numpy(), full(ids).numpy())

        def adapter_gradients(model):
            lora.freeze_all_but_adapters(model)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(ids, training=True))
            return [gradient.numpy() for gradient in tape.gradient(loss, model.trainable_variables)]

        for mine, theirs in zip(adapter_gradients(halved), adapter_gradients(full)):
            np.testing.assert_array_equal(mine, theirs)
        served = serving_backbone(halved)
    assert all(weight.dtype == tf.float32 for weight in served.weights)
    np.testing.assert_array_equal(served(ids).numpy(), serving_backbone(full)(ids).numpy())
