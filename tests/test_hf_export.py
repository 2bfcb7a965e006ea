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


def test_weights_over_the_shard_size_are_written_as_indexed_shards_that_import_back(tmp_path, monkeypatch):
    """A model larger than `MAX_SHARD_BYTES` (here 64 KiB, so the fixture's 512 x 64 embedding is a
    shard of its own) is written as `model-0000i-of-0000N.safetensors` plus
    `model.safetensors.index.json`, as save_pretrained shards: every tensor once, its shape kept,
    the index's total the tensors' bytes; importing it back gives identical logits. Exporting again
    with one file leaves no shard behind."""
    from components.trainer.checkpoint import hf_export

    checkpoint = checkpoint_with_tokenizer("llama", str(tmp_path / "checkpoint"))
    trained, _ = import_checkpoint(checkpoint)
    _perturb(trained, 2)
    monkeypatch.setattr(hf_export, "MAX_SHARD_BYTES", 64 * 1024)
    exported = export_hugging_face(trained, checkpoint, str(tmp_path / "exported"))
    index = json.load(open(os.path.join(exported, "model.safetensors.index.json")))
    files = sorted({name for name in index["weight_map"].values()})
    assert len(files) > 2 and files == sorted(name for name in os.listdir(exported) if name.startswith("model-"))
    assert files[0] == f"model-00001-of-{len(files):05d}.safetensors" and "model.safetensors" not in os.listdir(
        exported
    )
    shapes = {}
    for name in files:
        shapes.update(_tensor_shapes(os.path.join(exported, name)))
    assert shapes == _tensor_shapes(os.path.join(FIXTURES, "llama", "model.safetensors"))
    assert set(index["weight_map"]) == set(shapes)
    assert index["metadata"]["total_size"] == 4 * sum(int(np.prod(shape)) for shape in shapes.values())
    reimported, _ = import_checkpoint(exported)
    ids = tf.constant(np.random.default_rng(0).integers(0, 512, size=(2, 11)))
    np.testing.assert_array_equal(reimported(ids).numpy(), trained(ids).numpy())

    monkeypatch.setattr(hf_export, "MAX_SHARD_BYTES", 2**30)
    export_hugging_face(trained, checkpoint, exported)
    assert sorted(name for name in os.listdir(exported) if name.startswith("model")) == ["model.safetensors"]
