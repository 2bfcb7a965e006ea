"""Training-throughput benchmark: our trainer vs Hugging Face GPT-2 on PyTorch, in one run.

Same architecture on both sides (pre-LayerNorm GPT, tied embeddings, GELU MLP, learned positions),
same shape, same tokens per step, random initialisation, synthetic token ids (throughput does not
depend on the text). For each configuration it reports tokens/s after warm-up, the first call's
extra time (tracing / compilation), and MFU = tokens/s x FLOPs per token / the machine's
measured matmul ceiling. FLOPs per token = 6N + 12*L*d*T (PaLM, appendix B; see
components/trainer/model/model_size.py).

    ours eager           the training loop with every tf.function run eagerly
    ours graph           tf.function, no XLA
    ours graph+XLA       tf.function with the forward/backward step jit-compiled
    ours XLA+bf16        as above under the mixed_bfloat16 policy (mixed_float16 on a GPU)
    ours graph+bf16      tf.function without XLA under that policy (oneDNN's bfloat16 kernels)
    ours default         the configuration `training.precision=auto`, `jit_compile=auto` picks here
    reference eager      transformers GPT2LMHeadModel + torch.optim.AdamW
    reference compiled   the same under torch.compile

With --lora-rank R both sides fine-tune with LoRA adapters of rank R on the attention projections,
every other weight frozen: ours through `training.lora`, the reference through PEFT's LoraConfig
(c_attn and attn.c_proj, fan_in_fan_out for GPT-2's Conv1D). MFU then still counts the full
6N FLOPs per token, so it is comparable only between rows of the same run.

The reference runs in its own environment (benchmarks/make_reference_env.sh builds it; torch and
transformers are never installed in the product's environment).

Usage:
    python benchmarks/train_throughput.py [--preset 10m] [--context-length 256] [--batch-size 8]
        [--vocab-size 4096] [--steps 20] [--skip-reference] [--configs "ours graph" ...] [--wait-for-quiet 600]

Prints a table and writes benchmarks/results/train_throughput.json. Refuses to start above load
1.5 unless --allow-high-load (then the results are marked NOT VALID).
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

HERE = os.path.dirname(os.path.abspath(__file__))


def synthetic_batches(vocab_size: int, batch_size: int, context_length: int, seed: int = 0):
    """An endless dataset of random (inputs, targets) token blocks."""
    import tensorflow as tf

    blocks = tf.data.Dataset.random(seed=seed).batch(context_length + 1).map(lambda x: x % vocab_size)
    return blocks.batch(batch_size, drop_remainder=True).map(lambda b: (b[:, :-1], b[:, 1:])).repeat().prefetch(4)


def make_trainer(
    model_config,
    vocab_size: int,
    batch_size: int,
    total_steps: int,
    steps_per_call: int,
    log_every: int,
    policy: str,
    jit: str,
    lora_rank: int = 0,
    recompute: str = "off",
):
    """The project's training loop (LanguageModelTrainer) on a randomly initialised backbone, built
    under the current Keras policy (`keras_policy(policy)`), as run_fn builds it: `jit` as
    `training.jit_compile` (on, off, or auto = XLA unless it cannot compile the step); `lora_rank`
    > 0: LoRA adapters on the attention projections, everything else frozen; `recompute` as
    `training.recompute`. No checkpoint is ever written during the run (only at its end)."""
    import tempfile

    import tensorflow as tf

    from components.trainer.model import lora
    from components.trainer.model.backbone import build_backbone
    from components.trainer.options import LoraOptions, TrainingOptions
    from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
    from components.trainer.training.optimizer import make_optimizer

    training = TrainingOptions(train_steps=total_steps, batch_size=batch_size, warmup_steps=2)
    settings = LoopSettings(
        total_steps=total_steps,
        global_batch_size=batch_size,
        context_length=model_config.context_length,
        steps_per_call=steps_per_call,
        log_every=log_every,
        checkpoint_every=10**9,
        jit_compile=jit != "off",
        xla_fallback=jit == "auto",
    )
    backbone = build_backbone(model_config, vocab_size, LoraOptions(rank=lora_rank) if lora_rank else None, recompute)
    if lora_rank:
        lora.freeze_all_but_adapters(backbone)
    return LanguageModelTrainer(
        backbone,
        make_optimizer(training, policy),
        tf.distribute.get_strategy(),
        settings,
        checkpoint_dir=tempfile.mkdtemp(),
    )


def measure_ours(
    model_config,
    vocab_size: int,
    batch_size: int,
    steps: int,
    policy: str,
    jit: str,
    eager: bool,
    lora_rank: int = 0,
    recompute: str = "off",
) -> dict:
    """Tokens/s of the project's training loop (LanguageModelTrainer) with the given settings
    (`make_trainer`), `steps` measured after as many warm-up steps."""
    import tensorflow as tf

    from components.trainer.model.dtype_policy import keras_policy
    from components.trainer.training import data

    strategy = tf.distribute.get_strategy()
    reports = []
    tf.config.run_functions_eagerly(eager)
    try:
        with keras_policy(policy):
            trainer = make_trainer(
                model_config, vocab_size, batch_size, 2 * steps, steps, steps, policy, jit, lora_rank, recompute
            )
            dataset = lambda: synthetic_batches(vocab_size, batch_size, model_config.context_length)
            start = time.perf_counter()
            trainer.train(
                lambda _: iter(data.distributed_blocks(strategy, dataset, batch_size)), on_report=reports.append
            )
            total = time.perf_counter() - start
    finally:
        tf.config.run_functions_eagerly(False)
    steady = reports[-1].tokens_per_sec
    tokens = steps * batch_size * model_config.context_length
    return {
        "tokens_per_s": steady,
        "first_call_extra_s": max(total - 2 * tokens / steady, 0.0),
        "final_loss": reports[-1].loss,
        "xla": trainer.jit_compile,
    }


def reference_shape_arguments(model_config, vocab_size: int) -> list:
    """`model_config`'s shape as the flags of reference_gpt2_train.add_shape_arguments."""
    return [
        "--layers",
        str(model_config.num_layers),
        "--heads",
        str(model_config.num_heads),
        "--width",
        str(model_config.model_dim),
        "--mlp",
        str(model_config.mlp_dim),
        "--context-length",
        str(model_config.context_length),
        "--vocab-size",
        str(vocab_size),
        "--activation",
        "gelu_new" if model_config.mlp == "gelu_tanh" else "gelu",
    ]


def run_reference(python: str, script: str, arguments: list):
    """Runs `script` (in benchmarks/) with the reference environment's `python`; returns the JSON
    of its last stdout line."""
    completed = subprocess.run(
        [python, os.path.join(HERE, script), *arguments], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"reference benchmark {script} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure_reference(args, model_config, python: str) -> list:
    """Runs benchmarks/reference_gpt2_train.py in the reference environment; returns its rows."""
    return run_reference(
        python,
        "reference_gpt2_train.py",
        [
            *reference_shape_arguments(model_config, args.vocab_size),
            "--batch-size",
            str(args.batch_size),
            "--steps",
            str(args.steps),
            "--lora-rank",
            str(args.lora_rank),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="10m")
    parser.add_argument("--context-length", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20, help="measured steps (after as many warm-up steps)")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument(
        "--reference-python", default=os.path.expanduser("~/.cache/textgen-tfx/bench-reference/bin/python")
    )
    parser.add_argument("--configs", nargs="+", help="Only these of our configurations (names as in the table).")
    parser.add_argument(
        "--lora-rank",
        type=int,
        default=0,
        help="Fine-tuning with LoRA adapters of this rank on the attention projections (ours: "
        "training.lora; reference: PEFT LoRA on c_attn and attn.c_proj); 0 = every weight trains.",
    )
    parser.add_argument(
        "--mlp",
        default="gelu",
        choices=["gelu", "gelu_tanh"],
        help="MLP activation; gelu_tanh is GPT-2's (what an imported GPT-2 checkpoint trains with).",
    )
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    guard = machine.LoadGuard(args)

    import tensorflow as tf

    from components.trainer.model.model_size import parameter_count, training_flops_per_token
    from components.trainer.options import ModelOptions
    from components.trainer.training.hardware import measure_matmul_flops
    from components.trainer.training.precision import resolve_jit_compile, resolve_precision

    model_config = ModelOptions(preset=args.preset, context_length=args.context_length, mlp=args.mlp)
    flops_per_token = training_flops_per_token(model_config, args.vocab_size, weight_gradients=not args.lora_rank)
    on_gpu = bool(tf.config.list_physical_devices("GPU"))
    mixed = "mixed_float16" if on_gpu else "mixed_bfloat16"
    ceiling = {
        "float32": measure_matmul_flops(tf.float32, size=2048),
        mixed: measure_matmul_flops(tf.bfloat16 if mixed == "mixed_bfloat16" else tf.float16, size=2048),
    }
    print(
        f"model: {args.preset} preset{f', LoRA rank {args.lora_rank}' if args.lora_rank else ''}, context {args.context_length}, {parameter_count(model_config, args.vocab_size):,} parameters, "
        f"{flops_per_token / 1e6:.1f} MFLOPs/token; batch {args.batch_size} x {args.context_length} tokens"
    )
    print(
        f"measured matmul ceiling: float32 {ceiling['float32'] / 1e9:.1f} GFLOP/s, {mixed} {ceiling[mixed] / 1e9:.1f} GFLOP/s"
    )

    device = "gpu" if on_gpu else "cpu"
    default_policy = resolve_precision("auto", device)
    default_jit = "auto" if resolve_jit_compile("auto", device, default_policy) else "off"
    short = mixed.split("_")[1]
    configurations = [
        ("ours eager", "float32", "off", True),
        ("ours graph", "float32", "off", False),
        ("ours graph+XLA", "float32", "on", False),
        (f"ours XLA+{short}", mixed, "on", False),
        (f"ours graph+{short}", mixed, "off", False),
        (f"ours default ({default_policy}, XLA {default_jit})", default_policy, default_jit, False),
    ]
    rows = []
    for name, policy, jit, eager in configurations:
        if args.configs and not any(name.startswith(wanted) for wanted in args.configs):
            continue
        steps = max(2, args.steps // 5) if eager else args.steps
        result = measure_ours(model_config, args.vocab_size, args.batch_size, steps, policy, jit, eager, args.lora_rank)
        if jit == "auto":
            name += " -> XLA" if result["xla"] else " -> graph (XLA could not compile)"
        rows.append({"name": name, "precision": policy, **result})
        print(f"  {name}: {result['tokens_per_s']:,.0f} tokens/s", flush=True)
    if not args.skip_reference:
        for row in measure_reference(args, model_config, args.reference_python):
            rows.append(
                {
                    "name": f"reference {row['mode']}",
                    "precision": "float32",
                    **{k: v for k, v in row.items() if k != "mode"},
                }
            )
            print(f"  reference {row['mode']}: {row['tokens_per_s']:,.0f} tokens/s", flush=True)
    for row in rows:
        peak = ceiling[row["precision"]] if row["precision"] in ceiling else ceiling["float32"]
        row["mfu"] = row["tokens_per_s"] * flops_per_token / peak
        row["mfu_vs_fp32_ceiling"] = row["tokens_per_s"] * flops_per_token / ceiling["float32"]

    load = guard.finish()
    print(f"\n{machine.command_line()}\n{guard.banner()}")
    print("| configuration | tokens/s | first call extra s | MFU (own precision) | share of fp32 ceiling |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['name']} | {row['tokens_per_s']:,.0f} | {row['first_call_extra_s']:.1f} | {row['mfu']:.1%} | {row['mfu_vs_fp32_ceiling']:.1%} |"
        )
    path = machine.write_results(
        "train_throughput",
        {
            "command": machine.command_line(),
            "load": load,
            "machine": {**machine.machine_description(), "platform": platform.platform(), "gpu": on_gpu},
            "model": {**model_config.model_dump(), "vocab_size": args.vocab_size, "flops_per_token": flops_per_token},
            "batch_size": args.batch_size,
            "lora_rank": args.lora_rank,
            "ceiling_flops": ceiling,
            "rows": rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
