"""Parameter-server training (training.distribution=parameter_server).

The end-to-end test runs a real local cluster on localhost ports: one chief, two workers and one
parameter server, each a process started with the TFJob replica command and the TF_CONFIG the
Training Operator would set (tests/test_trainer.py's helpers). The workers and the ps serve
(tf.distribute.Server); the chief runs run_fn with ParameterServerStrategy and a ClusterCoordinator.
A worker is SIGKILLed mid-run: per ClusterCoordinator's documented fault tolerance, its step is run
again by the other worker and training goes on. A second chief, started after the worker is back,
resumes from the first chief's checkpoint. Another test checks that the workers draw the training data in
different orders.

The other tests check the settings that cannot work and the cluster descriptions that are wrong,
without starting a cluster (ParameterServerStrategy would connect this test process to one).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from components.trainer.training import strategy
from components.trainer.training.ps_loop import check_parameter_server_settings
from tests.local_cluster import free_ports
from tests.test_trainer import REPO_ROOT, _finish, _start, _write_args


def _tf_config(cluster: dict, task_type: str, index: int = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"], "ps": ["localhost:4"]}


def test_auto_picks_parameter_servers_when_the_cluster_has_ps_tasks(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.setenv("TF_CONFIG", _tf_config(CLUSTER, "chief"))
    assert strategy.resolve_distribution("auto") == "parameter_server"
    assert strategy.parameter_server_role("auto") == ""  # the chief trains
    for task_type in ("worker", "ps"):
        monkeypatch.setenv("TF_CONFIG", _tf_config(CLUSTER, task_type, 1 if task_type == "worker" else 0))
        assert strategy.parameter_server_role("auto") == task_type
        assert strategy.parameter_server_role("multi_worker") == ""  # only parameter-server clusters serve
    monkeypatch.setenv("TF_CONFIG", _tf_config({"worker": ["a:1", "b:2"]}, "worker"))
    assert strategy.resolve_distribution("auto") == "multi_worker"


NEEDS = r"training.distribution=parameter_server needs TF_CONFIG with one chief, at least one worker and at least one ps task "


@pytest.mark.parametrize(
    "cluster, task_type, message",
    [
        ({"chief": ["a:1"], "worker": ["b:1"]}, "chief", NEEDS + r"\(found 1 chief, 1 worker, 0 ps\)"),
        ({"worker": ["b:1"], "ps": ["c:1"]}, "worker", NEEDS + r"\(found 0 chief, 1 worker, 1 ps\)"),
        (CLUSTER, "worker", "training.distribution=parameter_server trains in the chief task, not in a worker task"),
    ],
)
def test_a_cluster_parameter_servers_cannot_use_is_named(monkeypatch, cluster, task_type, message):
    monkeypatch.setenv("TF_CONFIG", _tf_config(cluster, task_type))
    with pytest.raises(ValueError, match=message):
        strategy.choose_strategy("parameter_server")


def test_settings_that_do_not_work_with_parameter_servers_are_named():
    check_parameter_server_settings("float32", "auto")
    check_parameter_server_settings("mixed_bfloat16", "off")
    with pytest.raises(ValueError, match="training.precision resolves to mixed_float16"):
        check_parameter_server_settings("mixed_float16", "auto")
    with pytest.raises(
        ValueError, match="training.jit_compile=on does not work with training.distribution=parameter_server"
    ):
        check_parameter_server_settings("float32", "on")


# --- a real cluster -------------------------------------------------------------------------

PROGRESS = re.compile(r"step (\d+)/(\d+) loss ([0-9.]+)")


def _progress(lines) -> list:
    """(step, loss) of each progress line the chief printed."""
    return [(int(m.group(1)), float(m.group(3))) for m in (PROGRESS.search(line) for line in lines) if m]


def _stop(processes) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.mark.slow
def test_parameter_server_cluster_trains_through_a_killed_worker_and_resumes(transform_artifacts, tmp_path):
    chief_port, *worker_ports, ps_port = free_ports(4)
    cluster = {
        "chief": [f"localhost:{chief_port}"],
        "worker": [f"localhost:{port}" for port in worker_ports],
        "ps": [f"localhost:{ps_port}"],
    }
    config = lambda task_type, index=0: {"cluster": cluster, "task": {"type": task_type, "index": index}}
    # train_steps: enough steps that the kill lands while the chief still has steps to schedule;
    # peak_flops given: no matmul measured at start.
    first = _write_args(
        tmp_path,
        transform_artifacts,
        train_steps=60,
        distribution="parameter_server",
        log_every=10,
        checkpoint_every=10,
        steps_per_call=1,
        peak_flops=1e9,
    )
    servers = [_start(first, config("worker", 0)), _start(first, config("worker", 1)), _start(first, config("ps"))]
    try:
        chief = _start(first, config("chief"))
        seen, deadline = [], time.time() + 600
        for line in chief.stdout:  # wait for the first progress line, then kill worker 0 mid-run
            seen.append(line)
            if "step 10/60" in line or time.time() > deadline:
                break
        servers[0].send_signal(signal.SIGKILL)
        servers[0].wait()
        output = "".join(seen) + _finish(chief, timeout=600)
        assert "Distribution: parameter_server (ParameterServerStrategyV2) with 1 replica(s)" in output
        # The coordinator saw the worker fail during training, put its step back, and went on.
        assert "Worker /job:worker/replica:0/task:0 failed with UnavailableError" in output, output[-4000:]
        progress = _progress(output.splitlines())
        assert [step for step, _ in progress] == [10, 20, 30, 40, 50, 60], output[-4000:]
        assert progress[-1][1] < progress[0][1] - 0.3, progress  # the loss went down
        assert progress[-1][1] < progress[-3][1], progress
        assert os.path.exists(tmp_path / "serving" / "saved_model.pb")
        checkpoints = sorted(os.listdir(tmp_path / "model_run" / "checkpoints"))
        assert "ckpt-60.index" in checkpoints, checkpoints

        # The worker comes back (as the operator would restart it); a new chief connects to the
        # same cluster and resumes from the first chief's last checkpoint.
        servers[0] = _start(first, config("worker", 0))
        second = _write_args(
            tmp_path,
            transform_artifacts,
            train_steps=70,
            distribution="parameter_server",
            log_every=10,
            checkpoint_every=10,
            steps_per_call=2,
            peak_flops=1e9,
        )
        output = _finish(_start(second, config("chief")), timeout=600)
        assert re.search(r"Resumed from checkpoint \S+ckpt-60 at step 60", output), output[-4000:]
        assert "Trained steps 60..70" in output and [step for step, _ in _progress(output.splitlines())] == [70]
    finally:
        _stop(servers + [chief] if "chief" in locals() else servers)


def test_a_ps_replica_serves_until_it_is_ended(tmp_path):
    """A ps replica started with the TFJob command runs a tf.distribute.Server and keeps running
    (the chief and the operator end it); it reads no data, so the FnArgs paths here are unused."""
    (port,) = free_ports(1)
    args = _write_args(
        tmp_path, ("unused-transform-dir", "unused-examples", None), train_steps=1, distribution="parameter_server"
    )
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": [f"localhost:{port}"]}
    process = _start(args, {"cluster": cluster, "task": {"type": "ps", "index": 0}})
    try:
        lines, deadline = [], time.time() + 120
        for line in process.stdout:
            lines.append(line)
            if "serving at" in line or time.time() > deadline:
                break
        assert any(
            f"Parameter-server cluster: ps task 0 serving at grpc://localhost:{port}" in line for line in lines
        ), "".join(lines)[-3000:]
        time.sleep(1)
        assert process.poll() is None  # still serving
    finally:
        process.kill()
        process.communicate()


# The chief of a small cluster (run in a process of its own: ParameterServerStrategy connects the
# whole process to the cluster): 12 steps each take the first token of their worker's next batch
# from ParameterServerTrainer.per_worker_iterator over a seeded-looking pipeline (a shuffle of
# 100,000 distinct blocks, under the global seed run_fn sets).
_SHUFFLE_CHIEF = """
import json, sys
import tensorflow as tf, tf_keras as keras
from components.trainer.model.backbone import build_backbone
from components.trainer.options import ModelOptions, TrainingOptions
from components.trainer.training.loop import LoopSettings
from components.trainer.training.optimizer import make_optimizer
from components.trainer.training.ps_loop import ParameterServerTrainer
from components.trainer.training.strategy import choose_strategy
from components.filesystems import exit_process

strategy = choose_strategy("parameter_server")
keras.utils.set_random_seed(3)
with strategy.scope():
    model = build_backbone(ModelOptions(preset="tiny", context_length=8), 64)
    optimizer = make_optimizer(TrainingOptions(), "float32")
trainer = ParameterServerTrainer(model, optimizer, strategy, LoopSettings(total_steps=1, global_batch_size=2, context_length=8),
                                 checkpoint_dir=sys.argv[1])
blocks = lambda: tf.data.Dataset.range(100000).shuffle(100000).map(lambda i: tf.fill([9], i)).batch(2).map(lambda b: (b[:, :-1], b[:, 1:]))
iterator = trainer.per_worker_iterator(blocks)
first_token = tf.function(lambda it: strategy.run(lambda inputs, targets: inputs[0, 0], args=next(it)))
results = [trainer.coordinator.schedule(first_token, args=(iterator,)) for _ in range(12)]
trainer.coordinator.join()
print("FIRST_TOKENS " + json.dumps([int(result.fetch()) for result in results]), flush=True)
exit_process(0)
"""


@pytest.mark.slow
def test_each_worker_draws_the_training_data_in_its_own_order(tmp_path):
    """With the global seed set, a seeded shuffle would give both workers the same order, so the
    12 steps would see repeated blocks (with the seed left set: 7 distinct of 12); each worker's own
    unseeded order makes a repeat among 12 of 100,000 blocks unlikely (p < 0.001)."""
    chief_port, *ports = free_ports(4)
    cluster = {
        "chief": [f"localhost:{chief_port}"],
        "worker": [f"localhost:{port}" for port in ports[:2]],
        "ps": [f"localhost:{ports[2]}"],
    }
    args = _write_args(
        tmp_path, ("unused-transform-dir", "unused-examples", None), train_steps=1, distribution="parameter_server"
    )
    servers = [
        _start(args, {"cluster": cluster, "task": {"type": kind, "index": index}})
        for kind, index in (("worker", 0), ("worker", 1), ("ps", 0))
    ]
    env = {
        **os.environ,
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}),
        "PYTHONPATH": os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")])),
    }
    chief = subprocess.Popen(
        [sys.executable, "-c", _SHUFFLE_CHIEF, str(tmp_path / "checkpoints")],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = _finish(chief, timeout=300)
    finally:
        _stop(servers + [chief])
    (line,) = [line for line in output.splitlines() if line.startswith("FIRST_TOKENS ")]
    tokens = json.loads(line.split(" ", 1)[1])
    assert len(tokens) == 12 and len(set(tokens)) == 12, tokens
