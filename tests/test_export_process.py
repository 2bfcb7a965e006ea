"""The Trainer's exports in a child process (components/trainer/serving/export_process.py).

A child export must be the same SavedModel the Trainer writes inline (LoRA adapters merged, same
scores to float tolerance), the choice between the two must follow `training.export_process`, and
a child that fails must fail the Trainer with the child's own error, not a missing directory later.
The whole path (base and candidate exports, the Hugging Face export, bf16 frozen weights) also runs
in tests/test_fine_tune_e2e.py, whose Llama run exports in a child.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from components.trainer.model.backbone import build_backbone
from components.trainer.options import GenerationOptions, LoraOptions, ModelOptions
from components.trainer.serving.export_process import (
    CHILD_EXPORT_MIN_PARAMETERS,
    BackboneRecipe,
    Exporter,
    resolve_export_process,
)
from tests.conftest import FIXTURE_VOCAB_SIZE, TINY_MODEL_KWARGS

LORA = LoraOptions(rank=4, targets=["attention", "mlp"])
GENERATION = GenerationOptions(max_new_tokens=6, temperature=0.0, top_k=0)


@pytest.mark.parametrize(
    "choice,distribution,sharded,parameters,expected",
    [
        ("auto", "default", False, CHILD_EXPORT_MIN_PARAMETERS, "child"),
        ("auto", "mirrored", False, 1_100_000_000, "child"),
        ("auto", "default", False, CHILD_EXPORT_MIN_PARAMETERS - 1, "inline"),
        ("auto", "multi_worker", False, 1_100_000_000, "inline"),
        ("auto", "parameter_server", False, 1_100_000_000, "inline"),
        ("auto", "tpu", False, 1_100_000_000, "inline"),
        ("auto", "default", True, 1_100_000_000, "inline"),
        ("child", "default", False, 1_000, "child"),
        ("inline", "default", False, 1_100_000_000, "inline"),
    ],
)
def test_the_export_process_follows_the_setting_the_size_and_the_distribution(
    choice, distribution, sharded, parameters, expected
):
    assert resolve_export_process(choice, distribution, sharded, parameters) == expected


@pytest.mark.parametrize(
    "distribution,sharded", [("multi_worker", False), ("parameter_server", False), ("default", True)]
)
def test_a_child_export_is_refused_where_the_variables_live_in_other_processes(distribution, sharded):
    with pytest.raises(ValueError, match="training.export_process=child needs a Trainer that is one process"):
        resolve_export_process("child", distribution, sharded, 1_000)


def _trained_lora_backbone():
    """A tiny backbone with LoRA adapters whose weights are not their initial values (so a child
    that built the model but did not read the weights would score differently)."""
    tf.keras.utils.set_random_seed(3)
    config = ModelOptions(**TINY_MODEL_KWARGS)
    backbone = build_backbone(config, FIXTURE_VOCAB_SIZE, LORA)
    for variable in backbone.trainable_variables:
        variable.assign(tf.random.stateless_normal(variable.shape, seed=[7, len(variable.name)]) * 0.05)
    recipe = BackboneRecipe(config.model_dump(), FIXTURE_VOCAB_SIZE, LORA.model_dump(), "off", None, "float32")
    return backbone, recipe


def test_a_child_export_scores_and_generates_as_the_inline_export(transform_artifacts, tmp_path):
    transform_output, _, _ = transform_artifacts
    backbone, recipe = _trained_lora_backbone()
    inline_dir, child_dir = str(tmp_path / "inline"), str(tmp_path / "child")
    Exporter(transform_output, GENERATION.model_dump()).write(backbone, inline_dir)
    Exporter(transform_output, GENERATION.model_dump(), recipe).write(backbone, child_dir)

    inline, child = tf.saved_model.load(inline_dir), tf.saved_model.load(child_dir)
    texts = tf.constant(["the quick brown fox", "a longer text to score, with more words in it"])
    scored_inline = inline.signatures["score"](texts=texts)
    scored_child = child.signatures["score"](texts=texts)
    np.testing.assert_allclose(scored_child["mean_nll"].numpy(), scored_inline["mean_nll"].numpy(), rtol=1e-5)
    # Both are the trained backbone itself (adapters merged): its own NLL of a packed block.
    block = tf.constant(np.random.default_rng(0).integers(3, FIXTURE_VOCAB_SIZE, size=(2, 17)), tf.int64)
    logits = backbone(block[:, :-1])
    expected = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=block[:, 1:], logits=logits), axis=1)
    np.testing.assert_allclose(
        child.signatures["score_tokens"](blocks=block)["nll_sum"].numpy(), expected.numpy(), rtol=1e-4
    )
    prompts = tf.constant(["the quick", "once upon"])
    generated = [
        model.signatures["serving_default"](prompts=prompts)["generations"].numpy().tolist()
        for model in (inline, child)
    ]
    assert generated[0] == generated[1]


def test_a_failing_child_fails_the_export_with_its_own_error(tmp_path):
    backbone, recipe = _trained_lora_backbone()
    missing = str(tmp_path / "no_transform_graph")
    with pytest.raises(RuntimeError, match=r"(?s)the export process exited with status 1.*no_transform_graph"):
        Exporter(missing, GENERATION.model_dump(), recipe).write(backbone, str(tmp_path / "model"))
    assert not os.path.exists(tmp_path / "model" / "saved_model.pb")
