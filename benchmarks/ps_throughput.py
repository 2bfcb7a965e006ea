"""Parameter-server training vs MultiWorkerMirrored at the same worker count, local processes.

Both run the project's training loop on the same model, synthetic token blocks and global batch
(B sequences of T tokens per optimizer step), with N worker processes on this machine:

    multi_worker       N workers with MultiWorkerMirroredStrategy: every step splits the global
                       batch over the N workers and all-reduces the gradients (synchronous);
    parameter_server   a chief (ClusterCoordinator), N workers and P ps tasks: every step runs one
                       global batch on whichever worker is free and updates the variables on the
                       ps tasks (asynchronous; ps_loop.py).

Tokens/s = steps x B x T / seconds, measured by the training loop's progress report over the
last `--steps` steps, after as many warm-up steps (tracing, cluster start-up). Graph mode and
float32 on both sides (XLA cannot compile steps that read variables on ps tasks; ps_loop.py).
Processes run on localhost ports, so gRPC goes over loopback and all of them share this
machine's cores: the numbers compare the two strategies' overheads here, not a cluster's scaling.

Usage:
    python benchmarks/ps_throughput.py [--workers 2] [--ps 1] [--preset tiny] [--context-length 64]
        [--batch-size 8] [--steps 20] [--steps-per-call 1] [--wait-for-quiet 600]

Prints a table and writes benchmarks/results/ps_throughput.json. Refuses to start above load
1.5 unless --allow-high-load (then the results are marked NOT VALID).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import machine  # noqa: E402
from train_throughput import synthetic_batches  # noqa: E402

from tests.local_cluster import free_ports  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT = "RESULT "


def train_here(args) -> dict:
    """Runs the loop in this process under the strategy TF_CONFIG selects (`--distribution`);
    returns the last progress report's tokens/s and loss."""
    import tf_keras as keras

    from components.trainer.model.backbone import build_backbone
    from components.trainer.options import ModelOptions, TrainingOptions
    from components.trainer.training import data
    from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
    from components.trainer.training.optimizer import make_optimizer
    from components.trainer.training.ps_loop import ParameterServerTrainer
    from components.trainer.training.strategy import choose_strategy

    strategy = choose_strategy(args.distribution)
    keras.utils.set_random_seed(0)
    model_config = ModelOptions(preset=args.preset, context_length=args.context_length)
    total = 2 * args.steps
    settings = LoopSettings(
        total_steps=total,
        global_batch_size=args.batch_size,
        context_length=args.context_length,
        steps_per_call=args.steps_per_call,
        log_every=args.steps,
        checkpoint_every=10**9,
        jit_compile=False,
    )
    with strategy.scope():
        backbone = build_backbone(model_config, args.vocab_size)
        optimizer = make_optimizer(
            TrainingOptions(train_steps=total, batch_size=args.batch_size, warmup_steps=2), "float32"
        )
    parameter_server = args.distribution == "parameter_server"
    trainer = (ParameterServerTrainer if parameter_server else LanguageModelTrainer)(
        backbone, optimizer, strategy, settings, checkpoint_dir=tempfile.mkdtemp(prefix="ps-bench-")
    )
    batches = lambda: synthetic_batches(args.vocab_size, args.batch_size, args.context_length)
    if parameter_server:
        make_iterator = lambda _: trainer.per_worker_iterator(batches)
    else:
        make_iterator = lambda _: iter(data.distributed_blocks(strategy, batches, args.batch_size))
    reports = []
    trainer.train(make_iterator, on_report=reports.append)
    return {"tokens_per_s": reports[-1].tokens_per_sec, "final_loss": reports[-1].loss, "steps": trainer.step}


def _launch(args, role: str, cluster: dict, task_type: str, index: int, distribution: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--role",
        role,
        "--distribution",
        distribution,
        "--preset",
        args.preset,
        "--context-length",
        str(args.context_length),
        "--batch-size",
        str(args.batch_size),
        "--vocab-size",
        str(args.vocab_size),
        "--steps",
        str(args.steps),
        "--steps-per-call",
        str(args.steps_per_call),
    ]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _result(process: subprocess.Popen, timeout: float) -> dict:
    output, _ = process.communicate(timeout=timeout)
    lines = [line for line in output.splitlines() if line.startswith(RESULT)]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark process failed (exit {process.returncode}):\n{output[-3000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def measure(args, distribution: str) -> dict:
    """Starts the local cluster for `distribution`, returns the training process's result; every
    process it started is ended before it returns."""
    processes = []
    try:
        if distribution == "multi_worker":
            ports = free_ports(args.workers)
            cluster = {"worker": [f"localhost:{port}" for port in ports]}
            processes = [
                _launch(args, "train", cluster, "worker", index, distribution) for index in range(args.workers)
            ]
            results = [_result(process, args.timeout) for process in processes]
            return results[0]  # worker 0 is the chief; every worker reports the same steps
        chief, *ports = free_ports(1 + args.workers + args.ps)
        cluster = {
            "chief": [f"localhost:{chief}"],
            "worker": [f"localhost:{port}" for port in ports[: args.workers]],
            "ps": [f"localhost:{port}" for port in ports[args.workers :]],
        }
        processes = [_launch(args, "serve", cluster, "worker", index, distribution) for index in range(args.workers)]
        processes += [_launch(args, "serve", cluster, "ps", index, distribution) for index in range(args.ps)]
        trainer = _launch(args, "train", cluster, "chief", 0, distribution)
        processes.append(trainer)
        return _result(trainer, args.timeout)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=1, help="parameter-server tasks (parameter_server only)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--context-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8, help="global batch, sequences per optimizer step")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="measured steps (after as many warm-up steps)")
    parser.add_argument("--steps-per-call", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for one configuration")
    parser.add_argument("--role", choices=["bench", "train", "serve"], default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--distribution", default="", help=argparse.SUPPRESS)
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    if args.role == "serve":
        from components.trainer.training.strategy import serve_parameter_server_task

        serve_parameter_server_task()
    if args.role == "train":
        print(RESULT + json.dumps(train_here(args)), flush=True)
        os._exit(0)  # the coordinator's threads would keep calling the servers the parent ends
    if args.batch_size % args.workers:
        parser.error(f"--batch-size ({args.batch_size}) must be divisible by --workers ({args.workers})")

    guard = machine.LoadGuard(args)
    rows = []
    for distribution in ("multi_worker", "parameter_server"):
        result = measure(args, distribution)
        rows.append(
            {
                "strategy": distribution,
                "workers": args.workers,
                "ps": args.ps if distribution == "parameter_server" else 0,
                **result,
            }
        )
        print(f"  {distribution}: {result['tokens_per_s']:,.0f} tokens/s", flush=True)
    load = guard.finish()
    baseline = rows[0]["tokens_per_s"]
    print(f"\n{machine.command_line()}\n{guard.banner()}")
    print(
        f"model: {args.preset} preset, context {args.context_length}, vocabulary {args.vocab_size}; "
        f"global batch {args.batch_size} x {args.context_length} tokens; {args.steps} measured steps"
    )
    print("| strategy | workers | ps | tokens/s | vs multi_worker | final loss |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['strategy']} | {row['workers']} | {row['ps']} | {row['tokens_per_s']:,.0f} | "
            f"{row['tokens_per_s'] / baseline:.2f}x | {row['final_loss']:.3f} |"
        )
    path = machine.write_results(
        "ps_throughput",
        {
            "command": machine.command_line(),
            "load": load,
            "machine": {**machine.machine_description(), "platform": platform.platform()},
            "model": {"preset": args.preset, "context_length": args.context_length, "vocab_size": args.vocab_size},
            "batch_size": args.batch_size,
            "steps": args.steps,
            "steps_per_call": args.steps_per_call,
            "rows": rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
