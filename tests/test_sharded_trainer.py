"""Sharded (DTensor) training through the Trainer's run_fn (`training.sharding`), and the settings
the config refuses with it.

The run happens in a fresh process (tests/sharded_run.py): a 2 x 2 mesh on a machine without
GPUs needs 4 logical CPU devices, which run_fn can only make before TensorFlow initialises, and
this test process (one for the whole suite) has long initialised it.
"""

import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from components.trainer.options import GenerationOptions, ModelOptions, ShardingOptions, TrainingOptions
from components.trainer.training import record, sharded_loop, tfjob
from pipeline.config import ConfigError, load_config
from tests.conftest import FIXTURE_VOCAB_SIZE

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ModelOptions(preset="tiny")
STEPS = 12
SHARDED_TRAINING = dict(
    train_steps=STEPS,
    batch_size=8,
    learning_rate=3e-3,
    warmup_steps=2,
    log_every=4,
    eval_batches=1,
    seed=7,
    precision="float32",
    sharding=ShardingOptions(batch=2, model=2),
)


# --- configuration: what sharding refuses, and what `auto` resolves to ------------------------

MESH = "training.sharding.batch=2", "training.sharding.model=2"


@pytest.mark.parametrize(
    "override, message",
    [
        ("training.jit_compile=on", "training.jit_compile=on cannot be combined with training.sharding"),
        ("training.precision=mixed_float16", "training.precision=mixed_float16 cannot be combined"),
        ("training.precision=mixed_bfloat16", "training.precision=mixed_bfloat16 cannot be combined"),
        ("training.lora.rank=4", "training.lora.rank=4 cannot be combined"),
        ("training.recompute=block", "training.recompute=block cannot be combined"),
        ("training.gradient_accumulation_steps=2", "training.gradient_accumulation_steps=2 cannot be combined"),
        ("training.distribution=mirrored", "training.distribution=mirrored cannot be combined"),
        ("training.distribution=parameter_server", "multi-client DTensor is not supported"),
        ("training.warm_start=true", "training.warm_start=true cannot be combined"),
        ("model.dropout=0.1", "model.dropout=0.1 cannot be combined"),
        ("training.sharding.model=3", r"model.model_dim \(128\) must be divisible by the mesh's model axis"),
        (
            "training.sharding.batch=3",
            r"global batch \(32 sequences\) must be divisible by training.sharding.batch \(3\)",
        ),
        ("kubeflow.tfjob.enabled=true", "kubeflow.tfjob.workers=2 and parameter_servers=0 cannot be combined"),
    ],
)
def test_settings_sharding_does_not_support_are_refused_naming_the_field(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=[*MESH, override])


def test_sharding_with_auto_settings_and_a_one_pod_tfjob_is_accepted():
    config = load_config(
        overrides=[*MESH, "kubeflow.tfjob.enabled=true", "kubeflow.tfjob.workers=0", "kubeflow.tfjob.gpus=4"]
    )
    assert config.training.sharding.enabled and config.training.sharding.devices == 4
    # Without a mesh the same settings stay as they were.
    assert load_config(overrides=["training.jit_compile=on", "model.dropout=0.1"]).training.jit_compile == "on"


def test_auto_precision_under_sharding_is_float32():
    assert sharded_loop.resolve_sharded_precision("auto") == "float32"
    assert sharded_loop.resolve_sharded_precision("float32") == "float32"
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        sharded_loop.resolve_sharded_precision("mixed_bfloat16")


def test_a_tf_config_cluster_is_refused_as_multi_client(monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})
    )
    with pytest.raises(ValueError, match="multi-client DTensor is not supported"):
        sharded_loop.check_single_client("auto", "")
    monkeypatch.delenv("TF_CONFIG")
    sharded_loop.check_single_client("auto", "")


def test_a_one_pod_tfjob_is_a_single_client_with_the_mesh_gpus(monkeypatch):
    """kubeflow.tfjob.workers=0, gpus=4: one chief pod with 4 GPUs, whose TF_CONFIG the sharded loop accepts."""
    spec = tfjob.TFJobSpec(name="sharded", namespace="test", image="textgen:test", command=["run"], workers=0, gpus=4)
    replicas = tfjob.build_manifest(spec)["spec"]["tfReplicaSpecs"]
    assert list(replicas) == ["Chief"] and replicas["Chief"]["replicas"] == 1
    (container,) = replicas["Chief"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["a:1"]}, "task": {"type": "chief", "index": 0}}))
    sharded_loop.check_single_client("auto", "")


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="the CPU path: no GPUs")
def test_a_mesh_larger_than_the_initialised_host_names_both_counts():
    tf.constant(1.0) + 1.0  # the runtime is initialised from here on
    existing = len(tf.config.list_logical_devices("CPU"))
    with pytest.raises(ValueError, match=f"needs 64 devices; this host has no GPU and {existing} CPU device"):
        sharded_loop.prepare_devices(ShardingOptions(batch=8, model=8))


# --- run_fn in a fresh process on a 2 x 2 mesh of logical CPUs --------------------------------


def _write_fn_args(directory, transform_artifacts, model: str = "model", **training) -> str:
    """The FnArgs file of a run in `directory` (its model run directory shared by every run there)
    exporting to `directory/<model>`."""
    transform_dir, examples, _ = transform_artifacts
    fields = {
        "transform_output": transform_dir,
        "train_files": [examples],
        "eval_files": [examples],
        "model_run_dir": str(directory / "model_run"),
        "serving_model_dir": str(directory / model / "Format-Serving"),
        "custom_config": {
            "model": TINY.to_parameter(),
            "training": TrainingOptions(**{**SHARDED_TRAINING, **training}).to_parameter(),
            "generation": GenerationOptions(max_new_tokens=4).to_parameter(),
        },
    }
    path = directory / f"{model}_fn_args.json"
    path.write_text(tfjob.fn_args_to_json(types.SimpleNamespace(**fields)))
    return str(path)


def _run(directory, fn_args_path: str) -> str:
    """Runs tests/sharded_run.py (run_fn in a fresh process) on the probe in `directory`; returns its log."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    command = [
        sys.executable,
        os.path.join(REPO_ROOT, "tests", "sharded_run.py"),
        fn_args_path,
        str(directory / "probe.npy"),
        str(directory / "logits.npy"),
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


@pytest.fixture(scope="module")
def sharded_run(transform_artifacts, tmp_path_factory):
    """(directory, log, probe blocks, the gathered backbone's logits on them) of one sharded run_fn."""
    directory = tmp_path_factory.mktemp("sharded")
    # Ids above the special tokens, so score_tokens masks nothing.
    blocks = np.random.default_rng(3).integers(16, FIXTURE_VOCAB_SIZE, size=(2, 17))
    np.save(directory / "probe.npy", blocks[:, :-1])
    log = _run(directory, _write_fn_args(directory, transform_artifacts))
    return directory, log, blocks, np.load(directory / "logits.npy")


@pytest.mark.slow
def test_run_fn_trains_on_the_mesh_with_progress_eval_and_summaries(sharded_run):
    directory, log, _, _ = sharded_run
    assert "Sharded training on a 4-device CPU mesh (batch=2, model=2)" in log
    progress = [
        (int(step), float(loss), float(eval_loss))
        for step, loss, eval_loss in re.findall(r"step (\d+)/12 loss ([\d.]+) eval_loss ([\d.]+)", log)
    ]
    assert [step for step, _, _ in progress] == [4, 8, 12], log[-3000:]
    assert progress[-1][1] < progress[0][1] - 0.05, progress  # the train loss falls
    assert progress[-1][2] < progress[0][2], progress  # and so does the eval loss
    assert tf.io.gfile.glob(str(directory / "model_run" / "train" / "events.out.tfevents.*"))
    assert tf.train.latest_checkpoint(str(directory / "model_run" / "checkpoints")).endswith("ckpt-12")
    written = record.read(str(directory / "model"))
    assert written["training"]["sharding"] == {"batch": 2, "model": 2} and written["steps_run"] == STEPS
    assert written["xla"] is False and written["precision"] == "float32"


@pytest.mark.slow
def test_the_export_has_the_signatures_of_an_ordinary_export(sharded_run, exported_model):
    directory, _, _, _ = sharded_run
    reference, _ = exported_model  # the ordinary (unsharded) export of a backbone, same transform graph
    loaded = tf.saved_model.load(str(directory / "model" / "Format-Serving"))

    def specs(structure: dict) -> dict:
        return {key: (spec.dtype.name, tuple(spec.shape.as_list())) for key, spec in structure.items()}

    def described(model):
        return {
            name: (
                function.structured_input_signature[0],
                specs(function.structured_input_signature[1]),
                specs(function.structured_outputs),
            )
            for name, function in model.signatures.items()
        }

    assert described(loaded) == described(reference)
    assert len(loaded.signatures) == 5


@pytest.mark.slow
def test_the_exported_model_computes_what_the_gathered_backbone_does(sharded_run):
    directory, log, blocks, logits = sharded_run
    # The run checked the gathered backbone against the sharded model before exporting it.
    difference = float(re.search(r"largest logit difference on a probe batch: ([\d.e+-]+)", log).group(1))
    assert difference < 1e-5
    loaded = tf.saved_model.load(str(directory / "model" / "Format-Serving"))
    scored = loaded.signatures["score_tokens"](blocks=tf.constant(blocks, tf.int64))
    log_probabilities = tf.nn.log_softmax(tf.constant(logits, tf.float32)).numpy()
    expected = -np.take_along_axis(log_probabilities, blocks[:, 1:, None], axis=2)[..., 0].sum(axis=1)
    np.testing.assert_allclose(scored["nll_sum"].numpy(), expected, rtol=1e-5)
    assert scored["num_tokens"].numpy().tolist() == [16, 16]


@pytest.mark.slow
def test_a_restarted_trainer_resumes_the_sharded_run_from_its_checkpoint(sharded_run, transform_artifacts):
    directory, _, _, _ = sharded_run
    # The same model run directory (checkpoint at step 12), now asked for 16 steps.
    log = _run(directory, _write_fn_args(directory, transform_artifacts, model="resumed", train_steps=16))
    assert re.search(r"Resumed from checkpoint \S+ckpt-12 at step 12", log), log[-3000:]
    assert "Trained steps 12..16" in log
    assert record.read(str(directory / "resumed"))["steps_run"] == 4
