"""Activation recomputation (`training.recompute`): peak memory and step time against context length.

For each XLA setting and context length, the project's training loop (LanguageModelTrainer, through
`train_throughput.measure_ours`: AdamW, the default strategy, synthetic tokens) trains the same
model with `training.recompute=off` (the baseline: every activation kept for the backward pass),
`=attention` (the attention core recomputed in query chunks) and `=block` (each block recomputed). Every measurement runs in a fresh
process, so its peak resident set size (VmHWM; device memory on a GPU) is that of this one
configuration: the TensorFlow runtime, the weights and optimizer state, the compiled step and the
step's activations. The parent watches each child's peak and stops it once it passes the memory
budget (`--budget-gib`): that context does not train within the budget, and longer ones are not
tried for that setting.

Reported per setting and recomputing mode: the longest context that trains within the budget with
it and without recomputation (their ratio: the issue's goal is at least 3x) and the step-time cost
of recomputation at each context both fit (the goal: at most 35% more).

Usage:
    python benchmarks/recompute.py [--preset 10m] [--vocab-size 4096] [--batch-size 1]
        [--contexts 256 512 1024 2048 4096 8192] [--budget-gib 4] [--jit off on]
        [--modes off attention block] [--steps 4] [--wait-for-quiet 600]

Prints a table and writes benchmarks/results/recompute.json. Refuses to start above load 1.5
unless --allow-high-load (then the results are marked NOT VALID).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import machine  # noqa: E402

MODES = ("off", "attention", "block")  # training.recompute; "off" is the baseline
_POLL_SECONDS = 0.1


def _peak_rss_bytes(pid: int) -> int:
    """The peak resident set size (VmHWM) of process `pid` so far; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure_in_child(child: dict) -> dict:
    """Trains `child`'s configuration in this process; returns its step time and peak memory."""
    import tensorflow as tf
    from train_throughput import measure_ours

    from components.trainer.options import ModelOptions
    from components.trainer.training.hardware import peak_memory

    model_config = ModelOptions(preset=child["preset"], context_length=child["context"])
    result = measure_ours(
        model_config,
        child["vocab_size"],
        child["batch_size"],
        child["steps"],
        child["precision"],
        child["jit"],
        eager=False,
        recompute=child["mode"],
    )
    peak, where = peak_memory()
    tokens = child["batch_size"] * child["context"]
    return {
        "step_s": tokens / result["tokens_per_s"],
        "peak_bytes": peak,
        "memory": where,
        "xla": result["xla"],
        "final_loss": result["final_loss"],
        "gpu": bool(tf.config.list_physical_devices("GPU")),
    }


def run_child(child: dict, budget_bytes: float) -> dict:
    """Runs `measure_in_child` in a fresh process, stopped once its peak RSS passes `budget_bytes`."""
    process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(child)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    while process.poll() is None:
        peak = max(peak, _peak_rss_bytes(process.pid))
        if peak > budget_bytes:
            process.kill()
            process.communicate()
            return {"fits": False, "peak_bytes": peak, "reason": "over budget"}
        time.sleep(_POLL_SECONDS)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        return {"fits": False, "peak_bytes": peak, "reason": f"exit {process.returncode}: {stderr.strip()[-300:]}"}
    result = json.loads(stdout.strip().splitlines()[-1])
    # The child's own number (device memory on a GPU, else its VmHWM) decides.
    return {"fits": result["peak_bytes"] <= budget_bytes, **result}


def sweep(args, jit: str, mode: str, budget_bytes: float) -> list:
    """Rows for one setting, context lengths ascending, up to the first that does not fit."""
    rows = []
    for context in sorted(args.contexts):
        child = {
            "preset": args.preset,
            "vocab_size": args.vocab_size,
            "batch_size": args.batch_size,
            "steps": args.steps,
            "precision": args.precision,
            "jit": jit,
            "mode": mode,
            "context": context,
        }
        result = run_child(child, budget_bytes)
        rows.append({"jit": jit, "recompute": mode, "context": context, **result})
        state = f"{result['step_s']:.3f} s/step" if result["fits"] else result.get("reason", "over budget")
        print(
            f"  XLA {jit}, recompute {mode}, context {context}: peak {result['peak_bytes'] / 2**30:.2f} GiB, {state}",
            flush=True,
        )
        if not result["fits"]:
            break
    return rows


def summarise(rows: list, jit: str, modes: list) -> list:
    """Per recomputing mode: the longest context within the budget with it and with `off`, their
    ratio, and the step-time and peak-memory ratios at the contexts both fit."""
    fitting = {
        mode: {row["context"]: row for row in rows if row["jit"] == jit and row["recompute"] == mode and row["fits"]}
        for mode in modes
    }
    longest_off = max(fitting["off"], default=0)
    summaries = []
    for mode in modes[1:]:
        common = sorted(set(fitting["off"]) & set(fitting[mode]))
        longest = max(fitting[mode], default=0)
        summaries.append(
            {
                "jit": jit,
                "recompute": mode,
                "longest_off": longest_off,
                "longest": longest,
                "context_ratio": longest / longest_off if longest_off else None,
                "step_time_ratio": {
                    context: fitting[mode][context]["step_s"] / fitting["off"][context]["step_s"] for context in common
                },
                "peak_memory_ratio": {
                    context: fitting[mode][context]["peak_bytes"] / fitting["off"][context]["peak_bytes"]
                    for context in common
                },
            }
        )
    return summaries


def print_table(rows: list, jits: list, modes: list) -> None:
    """One row per XLA setting and context: each mode's peak memory and step time, and the
    recomputing modes' step time relative to `off`."""
    others = modes[1:]
    print(
        "| XLA | context | "
        + " | ".join(f"peak GiB, {mode}" for mode in modes)
        + " | "
        + " | ".join(f"s/step, {mode}" for mode in modes)
        + " | "
        + " | ".join(f"time {mode}/off" for mode in others)
        + " |"
    )
    print("|---|---:|" + "---:|" * (2 * len(modes) + len(others)))

    def peak(row):
        return "-" if row is None else f"{row['peak_bytes'] / 2**30:.2f}" + ("" if row["fits"] else " (over)")

    def step(row):
        return f"{row['step_s']:.3f}" if row and row["fits"] else "-"

    for jit in jits:
        by_mode = {(row["recompute"], row["context"]): row for row in rows if row["jit"] == jit}
        for context in sorted({context for _, context in by_mode}):
            cells = {mode: by_mode.get((mode, context)) for mode in modes}
            off = cells["off"]

            def ratio(row, off=off):
                return f"{row['step_s'] / off['step_s']:.2f}" if off and row and off["fits"] and row["fits"] else "-"

            print(
                f"| {jit} | {context} | "
                + " | ".join(peak(cells[mode]) for mode in modes)
                + " | "
                + " | ".join(step(cells[mode]) for mode in modes)
                + " | "
                + " | ".join(ratio(cells[mode]) for mode in others)
                + " |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="10m")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument(
        "--budget-gib", type=float, default=4.0, help="Memory budget: peak RSS (device memory on a GPU)."
    )
    parser.add_argument(
        "--jit", nargs="+", default=["off", "on"], choices=["off", "on"], help="training.jit_compile settings."
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=list(MODES[1:]),
        choices=MODES[1:],
        help="training.recompute modes to measure against off.",
    )
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16", "mixed_float16"])
    parser.add_argument("--steps", type=int, default=4, help="measured steps (after as many warm-up steps)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure_in_child(json.loads(args.child))))
        return
    guard = machine.LoadGuard(args)
    budget = args.budget_gib * 2**30
    print(
        f"model: {args.preset} preset, vocabulary {args.vocab_size}, batch {args.batch_size}, {args.precision}; "
        f"budget {args.budget_gib:g} GiB; contexts {' '.join(map(str, sorted(args.contexts)))}"
    )
    modes = ["off"] + [mode for mode in MODES[1:] if mode in args.modes]
    rows = [row for jit in args.jit for mode in modes for row in sweep(args, jit, mode, budget)]
    summaries = [summary for jit in args.jit for summary in summarise(rows, jit, modes)]

    load = guard.finish()
    print(f"\n{machine.command_line()}\n{guard.banner()}")
    print_table(rows, args.jit, modes)
    print(f"\nWithin {args.budget_gib:g} GiB:")
    for summary in summaries:
        ratio = f"{summary['context_ratio']:.1f}x" if summary["context_ratio"] else "n/a"
        worst = max(summary["step_time_ratio"].values(), default=float("nan"))
        mode = summary["recompute"]
        print(
            f"  XLA {summary['jit']}: longest context off {summary['longest_off']}, {mode} {summary['longest']} "
            f"({ratio}; goal >= 3x); step time {mode}/off at most {worst:.2f} (goal <= 1.35)"
        )
    path = machine.write_results(
        "recompute",
        {
            "command": machine.command_line(),
            "load": load,
            "machine": {**machine.machine_description(), "platform": platform.platform()},
            "model": {"preset": args.preset, "vocab_size": args.vocab_size},
            "batch_size": args.batch_size,
            "precision": args.precision,
            "budget_bytes": budget,
            "rows": rows,
            "summaries": summaries,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
