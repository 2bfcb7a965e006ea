"""Importing Hugging Face checkpoints: equal to transformers on the committed fixtures, clear errors on bad ones.

The fixtures (tests/fixtures/hf/, made by tests/fixtures/make_hf_checkpoints.py in the reference
environment) hold tiny random checkpoints and what transformers computed on them, so these tests
need no torch.
"""

import json
import os
import shutil
import struct

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from components.tokenizer.special import LEARNED
from components.trainer.checkpoint.errors import CheckpointError
from components.trainer.checkpoint.hf_config import checkpoint_model_options, read_config
from components.trainer.checkpoint.hf_weights import import_checkpoint
from components.trainer.model import decoding
from components.trainer.options import ModelOptions
from components.trainer.serving.weights import serving_backbone

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "hf")
LOGIT_TOLERANCE = 1e-4


def _expected(name: str) -> dict:
    with np.load(os.path.join(FIXTURES, name, "expected.npz")) as arrays:
        return dict(arrays)


@pytest.fixture(scope="module")
def imported():
    """Each fixture imported once: name -> backbone."""
    return {name: import_checkpoint(os.path.join(FIXTURES, name))[0] for name in ("gpt2", "gpt2-sharded", "llama")}


@pytest.mark.parametrize("name", ["gpt2", "gpt2-sharded", "llama"])
def test_logits_equal_transformers(imported, name):
    expected = _expected(name)
    logits = imported[name](tf.constant(expected["logit_inputs"])).numpy()
    error = float(np.max(np.abs(logits - expected["logits"])))
    print(
        f"{name}: largest logit difference from transformers {error:.2e} (logits up to {np.abs(expected['logits']).max():.1f})"
    )
    assert error < LOGIT_TOLERANCE


def test_the_llama_fixture_exercises_its_options(imported):
    config = imported["llama"].architecture
    assert (config.norm, config.mlp, config.num_heads, config.kv_heads, config.tie_embeddings) == (
        "rms",
        "swiglu",
        4,
        2,
        False,
    )
    assert config.rope_theta == 50000.0 and config.rope_scaling.factor == 8.0
    assert (imported["gpt2"].architecture.mlp, imported["gpt2"].architecture.tie_embeddings) == ("gelu_tanh", True)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_generation_of_the_saved_serving_copy_equals_transformers(imported, name, jit_compile, tmp_path):
    expected = _expected(name)
    count = sum(key.startswith("prompt_") for key in expected)
    prompts = tf.ragged.constant([expected[f"prompt_{i}"].tolist() for i in range(count)], dtype=tf.int64)
    wanted = [expected[f"generated_{i}"].tolist() for i in range(count)]
    assert int(expected["eos_token_id"]) == LEARNED.eos_id
    # The separator + the longest prompt + its generation runs past the first cache size (graph
    # mode grows the cache then), the prompts have different lengths (one batch, each row alone),
    # and one row stops at EOS while the others go on.
    assert max(1 + len(expected[f"prompt_{i}"]) + len(wanted[i]) for i in range(count)) > decoding.CACHE_GROWTH
    assert len({len(expected[f"prompt_{i}"]) for i in range(count)}) == count
    assert any(
        tokens[-1] == LEARNED.eos_id and len(tokens) < max(map(len, wanted)) for tokens in wanted
    )  # a row stops early
    max_new = max(len(tokens) for tokens in wanted)
    # What the export does (serving/export.py): the serving copy's cached decoding, saved and loaded.
    module = tf.Module()
    module.backbone = serving_backbone(imported[name])
    module.generate = tf.function(
        lambda ids: decoding.generate_tokens(module.backbone, ids, max_new, 0.0, 0, 1.0, 0, jit_compile=jit_compile),
        input_signature=[tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1)],
    )
    tf.saved_model.save(module, str(tmp_path / "model"))
    loaded = tf.saved_model.load(str(tmp_path / "model"))
    tokens, counts = loaded.generate(prompts)
    assert tokens.to_list() == wanted
    assert counts.numpy().tolist() == [len(tokens) for tokens in wanted]


def test_a_checkpoint_on_another_filesystem_is_read_through_gfile(tmp_path):
    remote = "ram://checkpoints/gpt2-sharded"
    source = os.path.join(FIXTURES, "gpt2-sharded")
    tf.io.gfile.makedirs(remote)
    for entry in os.listdir(source):
        tf.io.gfile.copy(os.path.join(source, entry), f"{remote}/{entry}", overwrite=True)
    backbone, _ = import_checkpoint(remote)
    expected = _expected("gpt2-sharded")
    np.testing.assert_allclose(
        backbone(tf.constant(expected["logit_inputs"])).numpy(), expected["logits"], atol=LOGIT_TOLERANCE
    )


def _write_bfloat16_safetensors(path: str, tensors: dict) -> dict:
    """Writes `tensors` as BF16 (float32 truncated to its upper 16 bits) in the safetensors layout;
    returns the float32 values the file holds exactly."""
    header, chunks, offset, exact = {}, [], 0, {}
    for name, array in tensors.items():
        halves = (np.ascontiguousarray(array, np.float32).view(np.uint32) >> 16).astype("<u2")
        exact[name] = (halves.astype(np.uint32) << 16).view(np.float32)
        data = halves.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode("utf-8")
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))
    return exact


def test_bfloat16_tensors_are_widened_to_float32(tmp_path):
    directory = tmp_path / "gpt2-bf16"
    directory.mkdir()
    shutil.copy(os.path.join(FIXTURES, "gpt2", "config.json"), directory)
    exact = _write_bfloat16_safetensors(
        str(directory / "model.safetensors"), load_file(os.path.join(FIXTURES, "gpt2", "model.safetensors"))
    )
    backbone, _ = import_checkpoint(str(directory))
    np.testing.assert_array_equal(backbone.token_embedding.embeddings.numpy(), exact["transformer.wte.weight"])
    np.testing.assert_array_equal(backbone.blocks[1].mlp_out.kernel.numpy(), exact["transformer.h.1.mlp.c_proj.weight"])


def test_a_bfloat16_checkpoint_stays_bfloat16_in_a_lora_backbones_frozen_weights_and_exports_float32(tmp_path):
    """Under mixed_bfloat16 with LoRA the frozen weights are bfloat16 variables holding the file's
    bits unwidened; the Hugging Face export (adapters merged) is float32 and holds the same values."""
    from components.trainer.checkpoint.hf_export import export_hugging_face
    from components.trainer.checkpoint.hf_weights import load_weights
    from components.trainer.model.backbone import build_backbone
    from components.trainer.model.dtype_policy import keras_policy
    from components.trainer.options import LoraOptions
    from tests.hf_checkpoints import checkpoint_with_tokenizer

    directory = checkpoint_with_tokenizer("gpt2", str(tmp_path / "gpt2-bf16"))
    weights = os.path.join(directory, "model.safetensors")
    exact = _write_bfloat16_safetensors(weights, load_file(weights))
    checkpoint = read_config(directory)
    with keras_policy("mixed_bfloat16"):
        config = checkpoint_model_options(ModelOptions(checkpoint=directory), checkpoint)
        backbone = build_backbone(config, checkpoint.vocab_size, LoraOptions(rank=2), frozen_dtype="bfloat16")
        load_weights(backbone, directory, checkpoint)
        kernel = backbone.blocks[1].attention.qkv.kernel
        assert kernel.dtype == tf.bfloat16 and backbone.token_embedding.embeddings.dtype == tf.bfloat16
        np.testing.assert_array_equal(kernel.numpy().astype(np.float32), exact["transformer.h.1.attn.c_attn.weight"])
        exported = export_hugging_face(backbone, directory, str(tmp_path / "exported"))
    reimported, _ = import_checkpoint(exported)
    np.testing.assert_array_equal(reimported.token_embedding.embeddings.numpy(), exact["transformer.wte.weight"])
    np.testing.assert_array_equal(
        reimported.blocks[1].attention.qkv.kernel.numpy(), exact["transformer.h.1.attn.c_attn.weight"]
    )


# Bad checkpoints: one line naming the file and the field or tensor.


def _copy_fixture(tmp_path, name: str) -> str:
    directory = str(tmp_path / name)
    shutil.copytree(os.path.join(FIXTURES, name), directory)
    return directory


def _edit_config(directory: str, **changes) -> None:
    path = os.path.join(directory, "config.json")
    with open(path) as handle:
        config = json.load(handle)
    config.update(changes)
    with open(path, "w") as handle:
        json.dump(config, handle)


def _error(directory: str, options: ModelOptions = None) -> str:
    with pytest.raises(CheckpointError) as caught:
        import_checkpoint(directory, options)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_missing_weights_file_is_named(tmp_path):
    directory = _copy_fixture(tmp_path, "gpt2")
    os.remove(os.path.join(directory, "model.safetensors"))
    assert "model.safetensors: no such file" in _error(directory)


def test_a_missing_shard_is_named(tmp_path):
    directory = _copy_fixture(tmp_path, "gpt2-sharded")
    os.remove(os.path.join(directory, "model-00002-of-00003.safetensors"))
    assert "model-00002-of-00003.safetensors: no such file" in _error(directory)


def _edit_llama_tensors(tmp_path, edit) -> tuple:
    """A copy of the Llama fixture whose weights `edit(tensors)` changed; returns (directory, file)."""
    directory = _copy_fixture(tmp_path, "llama")
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path)
    return directory, path


def test_a_tensor_of_the_wrong_shape_is_named_with_its_file(tmp_path):
    def swap(tensors):
        tensors["model.layers.1.self_attn.k_proj.weight"] = tensors["model.layers.1.self_attn.q_proj.weight"]

    directory, path = _edit_llama_tensors(tmp_path, swap)
    message = _error(directory)
    assert f"{path}: tensor model.layers.1.self_attn.k_proj.weight has shape [64, 64], expected [32, 64]" in message


def test_a_missing_tensor_is_named(tmp_path):
    directory, _ = _edit_llama_tensors(tmp_path, lambda tensors: tensors.pop("lm_head.weight"))
    assert "tensor lm_head.weight is missing" in _error(directory)


def test_an_unknown_tensor_is_named(tmp_path):
    def add_expert(tensors):
        tensors["model.layers.0.mlp.experts.0.w1.weight"] = tensors["model.norm.weight"]

    directory, _ = _edit_llama_tensors(tmp_path, add_expert)
    assert "tensor model.layers.0.mlp.experts.0.w1.weight is not part of a llama backbone" in _error(directory)


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"model_type": "gpt_neox"}, 'model_type="gpt_neox" is not supported'),
        (
            {"model_type": "mistral", "sliding_window": 4096},
            "sliding_window=4096 is not supported (sliding-window attention)",
        ),
        ({"num_local_experts": 8}, "num_local_experts=8 is not supported (mixture of experts)"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling="),
        ({"hidden_act": "gelu"}, 'hidden_act="gelu" is not supported'),
        ({"head_dim": 32}, "head_dim=32 is not supported"),
    ],
)
def test_unsupported_config_fields_are_named(tmp_path, changes, named):
    directory = _copy_fixture(tmp_path, "llama")
    _edit_config(directory, **changes)
    message = _error(directory)
    assert message.startswith(os.path.join(directory, "config.json") + ": ") and named in message


def test_a_missing_config_is_named(tmp_path):
    directory = _copy_fixture(tmp_path, "gpt2")
    os.remove(os.path.join(directory, "config.json"))
    assert "config.json: no such file" in _error(directory)


def test_the_architecture_comes_from_the_config_and_explicit_conflicts_are_errors():
    directory = os.path.join(FIXTURES, "llama")
    checkpoint = read_config(directory)
    options = ModelOptions(checkpoint=directory, dropout=0.1, num_heads=4, context_length=64)
    resolved = checkpoint_model_options(options, checkpoint)
    assert (resolved.num_layers, resolved.model_dim, resolved.context_length, resolved.dropout) == (2, 64, 64, 0.1)
    # The options cross to the Trainer as JSON with only the given fields, and resolve the same there.
    assert checkpoint_model_options(ModelOptions.from_parameter(options.to_parameter()), checkpoint) == resolved
    assert checkpoint_model_options(ModelOptions(checkpoint=directory), checkpoint).context_length == 128
    assert checkpoint_model_options(ModelOptions(checkpoint=directory, num_kv_heads=2), checkpoint).kv_heads == 2
    with pytest.raises(CheckpointError, match="model.num_layers=6 conflicts with the checkpoint's 2"):
        checkpoint_model_options(ModelOptions(checkpoint=directory, num_layers=6), checkpoint)
    with pytest.raises(
        CheckpointError, match="model.num_heads=3 conflicts with the checkpoint's 4"
    ):  # not a width error
        checkpoint_model_options(ModelOptions(checkpoint=directory, num_heads=3), checkpoint)
    with pytest.raises(CheckpointError, match="model.context_length=256 exceeds the checkpoint's 128 positions"):
        checkpoint_model_options(ModelOptions(checkpoint=directory, context_length=256), checkpoint)


def test_special_ids_and_vocabulary_come_from_the_config():
    checkpoint = read_config(os.path.join(FIXTURES, "llama"))
    assert (checkpoint.vocab_size, checkpoint.bos_token_id, checkpoint.eos_token_id, checkpoint.pad_token_id) == (
        512,
        1,
        1,
        0,
    )


# The Trainer: model.checkpoint gives the architecture and the starting weights.


def _fn_args(directory, transform_artifacts, model: ModelOptions):
    import types

    from components.trainer.options import GenerationOptions, TrainingOptions

    transform_dir, examples, _ = transform_artifacts
    training = TrainingOptions(
        train_steps=2,
        batch_size=4,
        learning_rate=1e-9,
        warmup_steps=0,
        steps_per_call=1,
        log_every=1,
        eval_batches=1,
        precision="float32",
        jit_compile="off",
    )
    return types.SimpleNamespace(
        transform_output=transform_dir,
        train_files=[examples],
        eval_files=[examples],
        model_run_dir=str(directory / "model_run"),
        serving_model_dir=str(directory / "serving"),
        custom_config={
            "model": model.to_parameter(),
            "training": training.to_parameter(),
            "generation": GenerationOptions(max_new_tokens=4).to_parameter(),
        },
    )


def test_run_fn_fine_tunes_from_the_checkpoint_and_exports_it(transform_artifacts, tmp_path, caplog):
    from components.trainer.training.run_fn import run_fn

    directory = os.path.join(FIXTURES, "llama")  # the fixture tokenizer has the checkpoint's 512 ids
    caplog.set_level("INFO")
    run_fn(_fn_args(tmp_path, transform_artifacts, ModelOptions(checkpoint=directory, context_length=32)))
    assert "Model architecture from " + os.path.join(directory, "config.json") in caplog.text
    exported = tf.saved_model.load(str(tmp_path / "serving"))
    kernel = exported.backbone.blocks[1].attention.qkv.kernel.numpy()
    stored = load_file(os.path.join(directory, "model.safetensors"))
    parts = [stored[f"model.layers.1.self_attn.{name}_proj.weight"].T for name in "qkv"]
    np.testing.assert_allclose(kernel, np.concatenate(parts, axis=1), atol=1e-6)  # two steps at lr 1e-9
    outputs = exported.signatures["generate"](
        prompts=tf.constant(["Hi"]),
        max_new_tokens=tf.constant(4),
        temperature=tf.constant(0.0),
        top_k=tf.constant(0),
        top_p=tf.constant(1.0),
        seed=tf.constant(0, tf.int64),
    )
    assert int(outputs["num_generated_tokens"][0]) >= 1
    # The untrained checkpoint is exported beside the model (the Evaluator's first baseline); no
    # Hugging Face export, because this run tokenizes with its own learned tokenizer.
    assert tf.saved_model.contains_saved_model(str(tmp_path / "base_model"))
    assert not os.path.exists(tmp_path / "hugging_face")
    assert "Not writing a Hugging Face export" in caplog.text


def test_run_fn_refuses_a_checkpoint_with_another_vocabulary_before_training(transform_artifacts, tmp_path):
    from components.trainer.training.run_fn import run_fn

    directory = _copy_fixture(tmp_path, "gpt2")
    _edit_config(directory, vocab_size=1000)
    with pytest.raises(CheckpointError, match="vocab_size=1000 differs from the run's tokenizer .512 tokens."):
        run_fn(_fn_args(tmp_path, transform_artifacts, ModelOptions(checkpoint=directory)))
    assert not os.path.exists(tmp_path / "serving")
