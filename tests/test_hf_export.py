"""Export back to the Hugging Face layout (components/trainer/checkpoint/hf_export.py): the
exported directory has exactly the tensors, shapes and files transformers' own save_pretrained
wrote for the fixture, and importing it again gives identical logits (with LoRA adapters merged)."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from safetensors import safe_open

from components.trainer.checkpoint.hf_export import export_hugging_face
from components.trainer.checkpoint.hf_weights import import_checkpoint
from components.trainer.model import lora
from components.trainer.model.backbone import build_backbone
from components.trainer.options import LoraOptions
from tests.hf_checkpoints import FIXTURES, checkpoint_with_tokenizer


def _tensor_shapes(path: str) -> dict:
    with safe_open(path, framework="np") as handle:
        return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}


def _perturb(backbone, seed: int) -> None:
    """Stands in for training: every weight moves, so a wrong mapping cannot pass unnoticed."""
    rng = np.random.default_rng(seed)
    for variable in backbone.variables:
        variable.assign(variable.numpy() + rng.normal(0, 0.02, variable.shape).astype(np.float32))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_export_then_import_gives_identical_logits_and_the_layout_transformers_saved(family, tmp_path):
    checkpoint = checkpoint_with_tokenizer(family, str(tmp_path / "checkpoint"))
    trained, _ = import_checkpoint(checkpoint)
    _perturb(trained, 1)
    exported = export_hugging_face(trained, checkpoint, str(tmp_path / "exported"))
    reimported, _ = import_checkpoint(exported)
    ids = tf.constant(np.random.default_rng(0).integers(0, 512, size=(2, 11)))
    np.testing.assert_array_equal(reimported(ids).numpy(), trained(ids).numpy())
    original = _tensor_shapes(os.path.join(FIXTURES, family, "model.safetensors"))
    assert _tensor_shapes(os.path.join(exported, "model.safetensors")) == original
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= set(os.listdir(exported))
    assert ("tokenizer.model" if family == "llama" else "tokenizer.json") in os.listdir(exported)
    config = json.load(open(os.path.join(exported, "config.json")))
    assert config["torch_dtype"] == "float32" and config["vocab_size"] == 512


def test_a_lora_model_is_exported_with_its_adapters_merged(tmp_path):
    checkpoint = checkpoint_with_tokenizer("llama", str(tmp_path / "checkpoint"))
    base, _ = import_checkpoint(checkpoint)
    adapted = build_backbone(base.architecture, base.vocab_size, LoraOptions(rank=4, targets=["attention", "mlp"]))
    by_name = {w.name: w for w in base.weights}
    for weight in adapted.weights:
        if not lora.is_adapter_variable(weight):
            weight.assign(by_name[weight.name])
    rng = np.random.default_rng(3)
    for layer in lora.adapter_layers(adapted):
        layer.lora_b.assign(rng.normal(0, 0.1, layer.lora_b.shape).astype(np.float32))
    reimported, _ = import_checkpoint(export_hugging_face(adapted, checkpoint, str(tmp_path / "exported")))
    ids = tf.constant(rng.integers(0, 512, size=(2, 9)))
    np.testing.assert_allclose(reimported(ids).numpy(), adapted(ids).numpy(), atol=1e-4)
    assert np.abs(reimported(ids).numpy() - base(ids).numpy()).max() > 1e-2  # the adapters are in it
