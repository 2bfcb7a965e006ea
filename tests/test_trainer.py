"""The training loop, the strategy factory and the Trainer's run_fn, including real multi-process
runs: two MultiWorkerMirroredStrategy workers on localhost, MirroredStrategy over two logical
CPUs, and a trainer killed with SIGKILL and restarted.

Every real process is started exactly as a TFJob replica is: the container command and
environment of the manifest `tfjob.launch` submits (`python -m components.trainer.training.replica
--fn-args <file>`), with the FnArgs file written the way the launcher writes it."""

import json
import os
import signal
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components.tokenizer import model_file
from components.trainer.model.backbone import build_backbone
from components.trainer.model.dtype_policy import keras_policy
from components.trainer.model.model_size import parameter_count, training_flops_per_token
from components.trainer.options import GenerationOptions, ModelOptions, TrainingOptions
from components.trainer.training import data, tfjob
from components.trainer.training.loop import LanguageModelTrainer, LoopSettings, XlaCompileError
from components.trainer.training.optimizer import make_optimizer
from components.trainer.training.strategy import resolve_distribution
from pipeline.config import ConfigError, load_config
from tests.local_cluster import free_ports

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ModelOptions(preset="tiny")


def _vocab_size(transform_dir: str) -> int:
    return model_file.read_model(model_file.transform_graph_model_path(transform_dir)).vocab_size


def _train_in_process(
    transform_artifacts, training: TrainingOptions, model_config: ModelOptions = TINY, policy="float32"
):
    """Trains with the default strategy through LanguageModelTrainer; returns (backbone, reports)."""
    import tf_keras as keras

    transform_dir, examples, _ = transform_artifacts
    spec = tft.TFTransformOutput(transform_dir).transformed_feature_spec()
    strategy = tf.distribute.get_strategy()
    batch = training.resolved_batch_size(model_config.context_length)
    settings = LoopSettings(
        total_steps=training.train_steps,
        global_batch_size=batch,
        context_length=model_config.context_length,
        accumulation=training.gradient_accumulation_steps,
        steps_per_call=training.steps_per_call,
        log_every=training.log_every,
        checkpoint_every=training.checkpoint_every,
        jit_compile=training.jit_compile != "off",
        flops_per_token=1.0,
        peak_flops=1.0,
    )
    reports = []
    keras.utils.set_random_seed(training.seed)
    with keras_policy(policy):
        backbone = build_backbone(model_config, _vocab_size(transform_dir))
        optimizer = make_optimizer(training, policy)
        trainer = LanguageModelTrainer(backbone, optimizer, strategy, settings, checkpoint_dir=_tmpdir())
        blocks = lambda: data.packed_blocks(
            examples, spec, model_config.context_length, batch, seed=training.seed, shuffle_buffer=64, repeat=True
        )
        trainer.train(lambda start: iter(data.distributed_blocks(strategy, blocks, batch)), on_report=reports.append)
    return backbone, reports


def _tmpdir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="textgen-loop-")


def test_parameter_count_and_flops_match_the_built_model():
    for encoding in ("learned", "rotary"):
        config = ModelOptions(preset="tiny", position_encoding=encoding)
        assert build_backbone(config, 600).count_params() == parameter_count(config, 600)
    gpt2 = ModelOptions(preset="gpt2-124m")
    assert parameter_count(gpt2, 50257) == 124_439_808  # GPT-2 small's published size
    # 6N dominates; the attention term is 12 * L * d * T.
    assert training_flops_per_token(gpt2, 50257) == pytest.approx(
        6 * (12 * (4 * 768**2 + 2 * 768 * 3072) + 50257 * 768) + 12 * 12 * 768 * 1024
    )
    # LoRA: frozen weights get no weight gradient, only the activations' (4N, not 6N).
    assert training_flops_per_token(gpt2, 50257, weight_gradients=False) == pytest.approx(
        4 * (12 * (4 * 768**2 + 2 * 768 * 3072) + 50257 * 768) + 12 * 12 * 768 * 1024
    )


def test_presets_are_overridable_and_batch_settings_validated():
    config = load_config(overrides=["model.preset=10m", "model.context_length=64"])
    assert (config.model.num_layers, config.model.model_dim, config.model.context_length) == (6, 384, 64)
    assert load_config(overrides=["training.global_batch_tokens=512"]).training.resolved_batch_size(128) == 4
    with pytest.raises(ConfigError, match="multiple of model.context_length"):
        load_config(overrides=["training.global_batch_tokens=500"])
    with pytest.raises(ConfigError, match="gradient_accumulation_steps"):
        load_config(overrides=["training.batch_size=6", "training.gradient_accumulation_steps=4"])


def test_strategy_is_chosen_from_config_and_environment(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv("TPU_NAME", raising=False)
    assert resolve_distribution("auto") == "default"
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}})
    )
    assert resolve_distribution("auto") == "multi_worker"
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})
    )
    assert resolve_distribution("auto") == "default"
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert resolve_distribution("auto") == "tpu"
    assert resolve_distribution("mirrored") == "mirrored"


def test_tiny_preset_memorises_a_tiny_corpus(transform_artifacts):
    """The fixture corpus is 4 documents repeated 6 times; the tiny model must learn it: the mean
    training loss of the last 20 steps falls below 1.0 nats/token (from ~6.3 at the start)."""
    training = TrainingOptions(
        train_steps=200,
        batch_size=8,
        learning_rate=1e-2,
        warmup_steps=10,
        log_every=20,
        steps_per_call=10,
        checkpoint_every=1000,
    )
    _, reports = _train_in_process(transform_artifacts, training)
    assert reports[0].loss > 4.0
    assert reports[-1].loss < 1.0, [round(report.loss, 3) for report in reports]


def test_gradient_accumulation_matches_one_large_batch(transform_artifacts):
    """Two micro-batches of 4 give the same update as one batch of 8 (the loss is normalised by
    the global batch's tokens, not per micro-batch)."""
    common = dict(train_steps=3, batch_size=8, log_every=3, steps_per_call=3, checkpoint_every=100, jit_compile="off")
    whole, _ = _train_in_process(transform_artifacts, TrainingOptions(**common))
    split, _ = _train_in_process(transform_artifacts, TrainingOptions(gradient_accumulation_steps=2, **common))
    for a, b in zip(whole.weights, split.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=2e-5)


@pytest.mark.parametrize("policy,jit", [("float32", "on"), ("mixed_bfloat16", "on"), ("mixed_float16", "off")])
def test_mixed_precision_and_xla_paths_train_with_finite_losses(transform_artifacts, policy, jit):
    training = TrainingOptions(
        train_steps=6, batch_size=4, log_every=3, steps_per_call=3, checkpoint_every=100, jit_compile=jit
    )
    backbone, reports = _train_in_process(transform_artifacts, training, policy=policy)
    assert all(np.isfinite(report.loss) and np.isfinite(report.gradient_norm) for report in reports)
    assert reports[-1].loss < reports[0].loss + 0.5
    assert backbone.blocks[0].attention.qkv.compute_dtype == (
        "float32" if policy == "float32" else policy.split("_")[1]
    )
    assert backbone(tf.ones([1, 4], tf.int64)).dtype == tf.float32  # logits stay float32


def _width_64_bfloat16_trainer(xla_fallback: bool) -> LanguageModelTrainer:
    """A one-layer width-64 mixed_bfloat16 trainer whose XLA step fails to compile the way TF 2.16's
    CPU backend fails on CPUs with AVX512-BF16 (`_fail_xla_compilation`)."""
    import tf_keras as keras

    model_config = ModelOptions(preset="tiny", num_layers=1, model_dim=64, mlp_dim=128, context_length=64)
    settings = LoopSettings(
        total_steps=2,
        global_batch_size=8,
        context_length=64,
        jit_compile=True,
        xla_fallback=xla_fallback,
        steps_per_call=2,
        log_every=2,
        checkpoint_every=10,
    )
    keras.utils.set_random_seed(0)
    trainer = LanguageModelTrainer(
        build_backbone(model_config, 1024),
        make_optimizer(TrainingOptions(), "mixed_bfloat16"),
        tf.distribute.get_strategy(),
        settings,
        checkpoint_dir=_tmpdir(),
    )
    _fail_xla_compilation(trainer)
    return trainer


def _fail_xla_compilation(trainer: LanguageModelTrainer) -> None:
    """Makes the trainer's XLA-compiled steps fail as XLA's CPU backend does where it cannot emit a
    bfloat16 dot: on an AMD EPYC with AVX512-BF16, TF 2.16 raised UnimplementedError "unsupported
    operand type BF16 in op dot" for this very trainer when the step first ran, after the
    optimizer's step counter had advanced. On CPUs without AVX512-BF16 (an AMD EPYC with AVX2 only)
    XLA compiles the same step, so the failure is injected here, not left to the CPU. A step
    recompiled in graph mode (the fallback) is the real one."""
    compiled = trainer._train_steps

    def steps(iterator, num_steps):
        if not trainer.jit_compile:
            return compiled(iterator, num_steps)
        trainer.optimizer.iterations.assign_add(1)
        raise tf.errors.UnimplementedError(None, None, "unsupported operand type BF16 in op dot\nmore detail")

    trainer._train_steps = steps


def _constant_tokens() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensors((tf.zeros([8, 64], tf.int32), tf.ones([8, 64], tf.int32))).repeat()


def test_forced_xla_on_a_step_xla_cannot_compile_names_the_settings_to_change():
    with keras_policy("mixed_bfloat16"):
        trainer = _width_64_bfloat16_trainer(xla_fallback=False)
        before = [weight.numpy() for weight in trainer.model.weights]
        with pytest.raises(
            XlaCompileError,
            match=r"\(unsupported operand type BF16 in op dot\); set "
            r"training.jit_compile=auto or off, or training.precision=float32",
        ):
            trainer.train(lambda start: iter(_constant_tokens()))
    # The failed step changed nothing: weights as initialised, the optimizer's counter put back.
    assert trainer.step == 0
    for initial, weight in zip(before, trainer.model.weights):
        np.testing.assert_array_equal(initial, weight.numpy())


def test_auto_xla_trains_in_graph_mode_where_xla_cannot_compile_the_step(caplog):
    """training.jit_compile=auto: the same trainer falls back to graph mode, says so, and trains
    every step."""
    with keras_policy("mixed_bfloat16"):
        trainer = _width_64_bfloat16_trainer(xla_fallback=True)
        reports = []
        with caplog.at_level("WARNING"):
            trainer.train(lambda start: iter(_constant_tokens()), on_report=reports.append)
    assert trainer.step == 2 and trainer.jit_compile is False
    assert np.isfinite(reports[-1].loss)
    assert any("training in graph mode instead" in record.getMessage() for record in caplog.records)


def _tokens(target: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensors((tf.zeros([8, 64], tf.int32), tf.fill([8, 64], target))).repeat()


def _selection_trainer(
    checkpoint_dir: str, total_steps: int, patience: int, keep_best: bool = True
) -> LanguageModelTrainer:
    import tf_keras as keras

    keras.utils.set_random_seed(7)
    settings = LoopSettings(
        total_steps=total_steps,
        global_batch_size=8,
        context_length=64,
        jit_compile=False,
        steps_per_call=2,
        log_every=2,
        checkpoint_every=100,
        eval_batches=1,
        keep_best=keep_best,
        early_stopping_patience=patience,
    )
    return LanguageModelTrainer(
        build_backbone(ModelOptions(preset="tiny", context_length=64), 64),
        make_optimizer(TrainingOptions(learning_rate=1e-2, warmup_steps=0), "float32"),
        tf.distribute.get_strategy(),
        settings,
        checkpoint_dir=checkpoint_dir,
    )


def test_a_model_that_gets_worse_on_the_eval_split_stops_early_and_keeps_its_best_weights(tmp_path):
    """Train on targets 1, measure on targets 2: every step makes the eval loss worse (a corpus
    being memorised), so the first measurement is the best one."""
    trainer = _selection_trainer(str(tmp_path / "run"), total_steps=40, patience=2)
    reports = []
    assert trainer.train(lambda start: iter(_tokens(1)), lambda: iter(_tokens(2)), on_report=reports.append) == 6
    eval_losses = [report.eval_loss for report in reports]
    assert [report.step for report in reports] == [2, 4, 6] and eval_losses[0] < eval_losses[1] < eval_losses[2]
    assert trainer.best_step_restored == 2
    reference = _selection_trainer(str(tmp_path / "reference"), total_steps=2, patience=0, keep_best=False)
    reference.train(lambda start: iter(_tokens(1)))
    for kept, expected in zip(trainer.model.weights, reference.model.weights):
        np.testing.assert_allclose(kept.numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)
    # A restarted trainer finds the stop in the checkpoint: it trains nothing and keeps step 2 again.
    restarted = _selection_trainer(str(tmp_path / "run"), total_steps=40, patience=2)
    assert restarted.train(lambda start: iter(_tokens(1)), lambda: iter(_tokens(2))) == 0
    assert restarted.step == 6 and restarted.best_step_restored == 2


def test_a_model_that_keeps_improving_trains_every_step_and_exports_the_last_weights(tmp_path):
    trainer = _selection_trainer(str(tmp_path / "run"), total_steps=8, patience=2)
    reports = []
    assert trainer.train(lambda start: iter(_tokens(1)), lambda: iter(_tokens(1)), on_report=reports.append) == 8
    assert [report.step for report in reports] == [2, 4, 6, 8]
    assert reports[-1].eval_loss < reports[0].eval_loss
    assert trainer.best_step_restored is None


def test_progress_summaries_hold_step_time_throughput_and_peak_memory(tmp_path):
    """TensorBoard gets what an operator watches besides the loss: seconds per step, tokens/s and
    the peak memory in use (process RSS here, device memory on an accelerator)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    settings = LoopSettings(
        total_steps=4,
        global_batch_size=8,
        context_length=64,
        jit_compile=False,
        steps_per_call=2,
        log_every=2,
        checkpoint_every=10,
    )
    trainer = LanguageModelTrainer(
        build_backbone(ModelOptions(preset="tiny", context_length=64), 1024),
        make_optimizer(TrainingOptions(), "float32"),
        tf.distribute.get_strategy(),
        settings,
        checkpoint_dir=_tmpdir(),
        summary_dir=str(tmp_path / "train"),
    )
    trainer.train(lambda start: iter(_constant_tokens()))
    events = EventAccumulator(str(tmp_path / "train"), size_guidance={"tensors": 0})
    events.Reload()
    written = {
        tag: [tf.make_ndarray(e.tensor_proto).item() for e in events.Tensors(tag)] for tag in events.Tags()["tensors"]
    }
    assert len(written["step_seconds"]) == 2 and all(value > 0 for value in written["step_seconds"])
    assert all(value > 0 for value in written["tokens_per_sec"])
    assert all(0.05 < value < 64 for value in written["peak_memory_gib"])  # a TF process: tens of MiB to a few GiB


# --- run_fn in real processes, started as TFJob replicas ------------------------------------

# float32: these tests compare strategies with a float32 tolerance; `auto` precision is
# mixed_bfloat16 on CPUs with native bfloat16 (precision.py), whose rounding is far coarser.
RUN_TRAINING = dict(
    batch_size=8,
    learning_rate=3e-3,
    warmup_steps=2,
    log_every=4,
    steps_per_call=2,
    eval_batches=1,
    seed=7,
    precision="float32",
)


def _write_args(directory, transform_artifacts, train_steps: int, model_run_dir: str = "", **training_overrides) -> str:
    transform_dir, examples, _ = transform_artifacts
    training = TrainingOptions(train_steps=train_steps, **{**RUN_TRAINING, **training_overrides})
    fields = {
        "transform_output": transform_dir,
        "train_files": [examples],
        "eval_files": [examples],
        "model_run_dir": model_run_dir or str(directory / "model_run"),
        "serving_model_dir": str(directory / "serving"),
        "custom_config": {
            "model": TINY.to_parameter(),
            "training": training.to_parameter(),
            "generation": GenerationOptions(max_new_tokens=4).to_parameter(),
        },
    }
    path = directory / "tfjob_fn_args.json"
    path.write_text(tfjob.fn_args_to_json(types.SimpleNamespace(**fields)))  # as the launcher writes it
    return str(path)


def _replica_container(args_path: str) -> dict:
    """The chief's container in the TFJob manifest the launcher would submit for `args_path`."""
    spec = tfjob.TFJobSpec(
        name="textgen-train-test",
        namespace="test",
        image="textgen:test",
        command=tfjob.replica_command(args_path),
        workers=1,
    )
    (container,) = tfjob.build_manifest(spec)["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"]
    return container


def _start(args_path: str, tf_config=None, extra=(), base_env=None) -> subprocess.Popen:
    """Runs the replica's command (its `python` being this interpreter) with the replica's environment
    over `base_env` (default: this process's); `tf_config` is what the Training Operator would set;
    `extra` adds options the TFJob does not pass."""
    container = _replica_container(args_path)
    program, *arguments = container["command"]
    assert program == "python"
    env = {
        **(base_env or os.environ),
        "PYTHONUNBUFFERED": "1",
        **{item["name"]: item["value"] for item in container["env"]},
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")]))
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen(
        [sys.executable, *arguments, *extra],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(process: subprocess.Popen, timeout: int = 900) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-4000:]
    return output


def _exported_weights(serving_dir) -> dict:
    prefix = os.path.join(str(serving_dir), "variables", "variables")
    reader = tf.train.load_checkpoint(prefix)
    return {
        name: reader.get_tensor(name)
        for name, _ in tf.train.list_variables(prefix)
        if name.startswith("backbone/") and name.endswith("VARIABLE_VALUE")
    }


def _assert_same_weights(expected: dict, actual: dict, atol: float) -> None:
    assert expected.keys() == actual.keys() and expected
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def single_process_run(transform_artifacts, tmp_path_factory):
    """Reference: run_fn with the default strategy, 8 steps, in a process of its own."""
    directory = tmp_path_factory.mktemp("single")
    output = _finish(_start(_write_args(directory, transform_artifacts, train_steps=8)))
    assert "Distribution: default (_DefaultDistributionStrategy) with 1 replica(s)" in output
    return _exported_weights(directory / "serving")


# Tolerance for runs that sum the same gradients in another order (all-reduce vs one batch):
# float32 rounding differences, through 8 Adam steps of lr 3e-3, stay far below 1e-4.
SAME_RESULT_ATOL = 1e-4


@pytest.mark.slow
def test_two_workers_train_synchronously_and_match_single_process(transform_artifacts, tmp_path, single_process_run):
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    args = _write_args(tmp_path, transform_artifacts, train_steps=8)
    workers = [_start(args, {"cluster": cluster, "task": {"type": "worker", "index": index}}) for index in range(2)]
    outputs = [_finish(worker) for worker in workers]
    for output in outputs:
        assert "Distribution: multi_worker (CollectiveAllReduceStrategy) with 2 replica(s)" in output
        assert "step 8/8" in output
    # Worker 0 is the chief: it alone wrote the export, checkpoints and summaries, and worker 1's
    # temporary directories are gone.
    assert os.path.exists(tmp_path / "serving" / "saved_model.pb")
    assert sorted(os.listdir(tmp_path / "model_run")) == ["checkpoints", "train"]
    assert not [name for name in os.listdir("/tmp") if name.startswith("textgen-worker-1-")]
    _assert_same_weights(single_process_run, _exported_weights(tmp_path / "serving"), SAME_RESULT_ATOL)


@pytest.mark.slow
def test_mirrored_over_two_logical_cpus_matches_default_strategy(transform_artifacts, tmp_path, single_process_run):
    args = _write_args(tmp_path, transform_artifacts, train_steps=8, distribution="mirrored")
    output = _finish(_start(args, extra=["--logical-cpus", "2"]))
    assert "Distribution: mirrored (MirroredStrategy) with 2 replica(s)" in output
    _assert_same_weights(single_process_run, _exported_weights(tmp_path / "serving"), SAME_RESULT_ATOL)


@pytest.fixture
def s3_server():
    """A real S3 API server on localhost (tests/object_store.py)."""
    from tests.object_store import start_server

    server = start_server()
    yield server
    server.server.stop()


@pytest.mark.slow
def test_checkpoints_on_s3_resume_a_restarted_trainer(transform_artifacts, tmp_path, s3_server):
    """Shared storage: with the ModelRun directory on s3:// the trainer writes its checkpoints
    there, and a restarted trainer (a new process, as a rescheduled pod) resumes from the newest
    one and trains on to `train_steps`. The restart also turns activation recomputation on (same
    variables, so the checkpoint restores), which run_fn passes to the backbone."""
    model_run = s3_server.create_bucket("training") + "/model_run"
    checkpoints = "model_run/checkpoints/"
    first = _write_args(tmp_path, transform_artifacts, train_steps=8, model_run_dir=model_run, checkpoint_every=4)
    output = _finish(_start(first, base_env=s3_server.env()))
    assert "step 8/8" in output and "Resumed from checkpoint" not in output and "recompute off" in output
    keys = set(s3_server.keys("training", checkpoints))
    assert {checkpoints + "checkpoint", checkpoints + "ckpt-8.index"} <= keys, sorted(keys)

    resumed = _write_args(
        tmp_path, transform_artifacts, train_steps=12, model_run_dir=model_run, checkpoint_every=4, recompute="block"
    )
    output = _finish(_start(resumed, base_env=s3_server.env()))
    assert "XLA off, recompute block" in output  # jit_compile=auto on a CPU with recomputation (precision.py)
    assert f"Resumed from checkpoint {model_run}/checkpoints/ckpt-8 at step 8" in output, output[-3000:]
    assert "Trained steps 8..12" in output and "step 12/12" in output
    keys = set(s3_server.keys("training", checkpoints))
    assert checkpoints + "ckpt-12.index" in keys and checkpoints + "ckpt-4.index" not in keys  # the newest two kept
    assert any(key.startswith("model_run/train/") for key in s3_server.keys("training"))  # TensorBoard summaries
    assert os.path.exists(tmp_path / "serving" / "saved_model.pb")


@pytest.mark.slow
def test_sigkilled_trainer_resumes_from_its_checkpoint(transform_artifacts, tmp_path):
    args = _write_args(tmp_path, transform_artifacts, train_steps=40, checkpoint_every=8, log_every=4, steps_per_call=1)
    process = _start(args)
    seen = []
    deadline = time.time() + 900
    for line in process.stdout:  # wait until a checkpoint exists and training has moved past it
        seen.append(line)
        if "step 12/40" in line or time.time() > deadline:
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert any("step 12/40" in line for line in seen), "".join(seen)[-3000:]
    assert not os.path.exists(tmp_path / "serving" / "saved_model.pb")

    output = _finish(_start(args))
    resumed = [line for line in output.splitlines() if "Resumed from checkpoint" in line]
    assert resumed and not resumed[0].endswith("at step 0"), output[-3000:]
    resumed_step = int(resumed[0].rsplit(" ", 1)[1])
    assert 8 <= resumed_step < 40
    assert f"Trained steps {resumed_step}..40" in output
    assert "step 40/40" in output
    model = tf.saved_model.load(str(tmp_path / "serving"))
    scores = model.signatures["score"](texts=tf.constant(["Hi Zoë, thanks for writing about sync."]))
    assert np.isfinite(scores["mean_nll"].numpy()).all()


def test_warm_start_copies_weights_only_when_shapes_match(exported_model, tiny_backbone, tokenizer_model):
    from components.trainer.training.warm_start import warm_start_from
    from tests.conftest import TINY_MODEL_KWARGS

    _, export_dir = exported_model
    tokenizer_sha256 = model_file.read_model(tokenizer_model).sha256
    same_shape = build_backbone(ModelOptions(**TINY_MODEL_KWARGS), tiny_backbone.vocab_size)
    assert warm_start_from(same_shape, export_dir, tokenizer_sha256)
    for a, b in zip(tiny_backbone.weights, same_shape.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    wider = build_backbone(ModelOptions(**{**TINY_MODEL_KWARGS, "model_dim": 64}), tiny_backbone.vocab_size)
    before = [weight.numpy() for weight in wider.weights]
    assert not warm_start_from(wider, export_dir, tokenizer_sha256)
    for a, b in zip(before, wider.weights):
        np.testing.assert_array_equal(a, b.numpy())


def test_warm_start_with_lora_starts_from_the_merged_production_model(transform_artifacts, tokenizer_model, tmp_path):
    """The next run of a LoRA fine-tune: production was exported with its adapters merged; a fresh
    LoRA backbone warm-starts from it (the merged kernels fill its frozen ones, its new adapters
    start at zero), so it computes what production computes and only the new adapters train. So
    too with its frozen weights stored as bfloat16 (mixed_bfloat16), rounded once from the export."""
    from components.trainer.model import lora
    from components.trainer.options import LoraOptions
    from components.trainer.serving import export
    from components.trainer.training.warm_start import warm_start_from
    from tests.conftest import FIXTURE_VOCAB_SIZE, TINY_MODEL_KWARGS

    config, options = ModelOptions(**TINY_MODEL_KWARGS), LoraOptions(rank=2, targets=["attention", "mlp"])
    production = build_backbone(config, FIXTURE_VOCAB_SIZE, options)
    rng = np.random.default_rng(5)
    for layer in lora.adapter_layers(production):
        layer.lora_b.assign(rng.normal(0, 0.2, layer.lora_b.shape).astype(np.float32))
    export_dir = str(tmp_path / "production")
    export.export_serving_model(
        production, tft.TFTransformOutput(transform_artifacts[0]), GenerationOptions(max_new_tokens=4), export_dir
    )
    tokenizer_sha256 = model_file.read_model(tokenizer_model).sha256
    ids = tf.constant(rng.integers(0, FIXTURE_VOCAB_SIZE, size=(2, 10)))

    fresh = build_backbone(config, FIXTURE_VOCAB_SIZE, options)
    lora.freeze_all_but_adapters(fresh)
    assert np.abs(fresh(ids).numpy() - production(ids).numpy()).max() > 1e-2
    assert warm_start_from(fresh, export_dir, tokenizer_sha256)
    np.testing.assert_allclose(fresh(ids).numpy(), production(ids).numpy(), atol=1e-5)
    assert not any(layer.lora_b.numpy().any() for layer in lora.adapter_layers(fresh))
    assert {v.name.split("/")[-1] for v in fresh.trainable_variables} == {"lora_a:0", "lora_b:0"}
    with keras_policy("mixed_bfloat16"):
        halved = build_backbone(config, FIXTURE_VOCAB_SIZE, options, frozen_dtype="bfloat16")
        assert warm_start_from(halved, export_dir, tokenizer_sha256)
    merged = fresh.blocks[1].mlp_in.kernel
    assert halved.blocks[1].mlp_in.kernel.dtype == tf.bfloat16
    np.testing.assert_array_equal(halved.blocks[1].mlp_in.kernel.numpy(), tf.cast(merged, tf.bfloat16).numpy())


def test_warm_start_refuses_a_model_with_another_tokenizer(exported_model, tiny_backbone, tmp_path, caplog):
    """Same shapes, same vocabulary size, other pieces: the ids mean other text, so no warm start."""
    from components.trainer.training.warm_start import warm_start_from
    from tests.conftest import FIXTURE_VOCAB_SIZE, TINY_MODEL_KWARGS, learn_fixture_tokenizer

    other = model_file.read_model(learn_fixture_tokenizer(str(tmp_path / "other.model"), max_bytes=20_000))
    assert other.vocab_size == FIXTURE_VOCAB_SIZE
    same_shape = build_backbone(ModelOptions(**TINY_MODEL_KWARGS), tiny_backbone.vocab_size)
    before = [weight.numpy() for weight in same_shape.weights]
    with caplog.at_level("WARNING"):
        assert not warm_start_from(same_shape, exported_model[1], other.sha256)
    assert "its tokenizer differs" in caplog.text and other.sha256[:12] in caplog.text
    assert "tokenizer.policy=reuse" in caplog.text
    for a, b in zip(before, same_shape.weights):
        np.testing.assert_array_equal(a, b.numpy())
