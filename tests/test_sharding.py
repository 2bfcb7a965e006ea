"""Sharded (DTensor) training on 4 logical CPU devices against single-device training.

The sharded runs happen in a subprocess (benchmarks/sharding.py): logical devices must be set up
before TensorFlow initialises, which this test process (one for the whole suite) has already done.
"""

import json
import os
import subprocess
import sys

import pytest

from pipeline.config import PROJECT_ROOT

STEPS = 5
# (family, extra benchmark arguments, meshes): this project's GPT-style model on a 4-way tensor-
# parallel mesh and a 2-way data x 2-way tensor mesh; the Llama family's layers (rotary positions,
# RMSNorm, SwiGLU, whose fused gate/up kernel is laid out differently) on the 2 x 2 mesh.
FAMILIES = [
    ("gpt", [], ["1x4", "2x2"]),
    ("llama", ["--positions", "rotary", "--norm", "rms", "--mlp", "swiglu"], ["2x2"]),
]


@pytest.fixture(scope="module")
def runs():
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    found = {}
    for family, extra, meshes in FAMILIES:
        command = [
            sys.executable,
            os.path.join(PROJECT_ROOT, "benchmarks", "sharding.py"),
            "--steps",
            str(STEPS),
        ] + extra
        for mesh in meshes:
            command += ["--mesh", mesh]
        done = subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        for run in json.loads(done.stdout.strip().splitlines()[-1]):
            found[f"{family} {run['mesh']}"] = run
    return found


def test_loss_trajectory_equals_single_device(runs):
    for mesh, run in runs.items():
        assert len(run["losses"]) == STEPS
        # The loss must fall (the same batch every step), and the same way on both.
        assert run["reference_losses"][-1] < run["reference_losses"][0] - 0.01, mesh
        assert run["losses"] == pytest.approx(run["reference_losses"], rel=1e-5, abs=1e-5), mesh


def test_weights_and_optimizer_state_per_device_fall_as_one_over_model_axis(runs):
    for mesh, run in runs.items():
        model_axis = int(mesh.split("model=")[1])
        per_device = run["bytes_per_device"]
        assert len(per_device) == 4 and len(set(per_device)) == 1, per_device
        share = per_device[0] / run["reference_bytes"]
        # Norms, biases of the residual stream and the step counter stay replicated: a little over 1/N.
        assert 1.0 / model_axis <= share < 1.0 / model_axis + 0.05, (mesh, share)


def test_gathered_model_is_an_ordinary_backbone_with_the_same_outputs(runs):
    for mesh, run in runs.items():
        assert run["gathered_is_ordinary"], mesh
        assert run["gathered_logits_max_diff"] < 1e-5, mesh


def test_sharding_options_and_divisibility():
    from components.trainer.options import ModelOptions, ShardingOptions
    from components.trainer.training.sharding import check_shardable

    assert not ShardingOptions().enabled
    options = ShardingOptions(batch=2, model=4)
    assert options.enabled and options.devices == 8
    check_shardable(ModelOptions(preset="tiny"), ShardingOptions(model=4))
    with pytest.raises(ValueError, match="model_dim"):
        check_shardable(ModelOptions(preset="tiny"), ShardingOptions(model=3))
