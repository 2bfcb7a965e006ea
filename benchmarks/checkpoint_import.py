"""Hugging Face checkpoint import: seconds and peak memory against the checkpoint's size, and the
memory of a LoRA fine-tuning step with the frozen weights in bfloat16 or float32.

Makes random checkpoints in the Hugging Face layout with numpy (no torch) in a temporary
directory: GPT-2 124M (12 layers, width 768, vocabulary 50,257, 1,024 positions) and a 1.1B Llama
shape (TinyLlama: 22 layers, width 2048, 32 heads, 4 key/value heads, MLP 5632, vocabulary 32,000,
2,048 positions), sharded at about 1 GiB with an index as save_pretrained does, in float32 or (as
TinyLlama ships) bfloat16 (`--weights-dtype`).

Import (the default): each checkpoint is imported (`checkpoint.hf_weights.import_checkpoint`:
config, backbone built, weights read tensor by tensor) in a fresh process, which reports the
import's seconds and its peak resident memory (VmHWM); the table shows the peak against the
checkpoint's size (goal <= 1.5x) and what the process held before importing (Python +
TensorFlow).

`--lora-step`: as the Trainer fine-tunes with LoRA under mixed_bfloat16 (the CPU default where
bfloat16 is native): backbone built with rank-8 adapters on the attention projections, the
checkpoint loaded, everything but the adapters frozen, then one training step (1 x 256 tokens,
graph mode, AdamW, the end-of-training checkpoint written, as `LanguageModelTrainer.train` does),
in a fresh process per setting of `training.lora.frozen_dtype`: `auto` (bfloat16 frozen weights
for a bfloat16 checkpoint, components/trainer/training/precision.py) and `float32` (every frozen
weight widened). Peak RSS is read after the import and, reset in between (/proc/self/clear_refs),
over the step.

Writes benchmarks/results/checkpoint_import.json (or checkpoint_lora_step.json).

    python benchmarks/checkpoint_import.py [--only gpt2-124m] [--keep DIR] [--wait-for-quiet 600]
    python benchmarks/checkpoint_import.py --lora-step --weights-dtype bf16 --only llama-1.1b [--keep DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.machine import LoadGuard, add_load_arguments, command_line, machine_description, write_results  # noqa: E402

SHAPES = {
    "gpt2-124m": dict(
        model_type="gpt2",
        n_layer=12,
        n_head=12,
        n_embd=768,
        n_positions=1024,
        vocab_size=50257,
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
    ),
    "llama-1.1b": dict(
        model_type="llama",
        num_hidden_layers=22,
        num_attention_heads=32,
        num_key_value_heads=4,
        hidden_size=2048,
        intermediate_size=5632,
        max_position_embeddings=2048,
        vocab_size=32000,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        hidden_act="silu",
        tie_word_embeddings=False,
    ),
}
SHARD_BYTES = 1 << 30


def _gpt2_tensors(config: dict):
    width, inner, vocab = config["n_embd"], 4 * config["n_embd"], config["vocab_size"]
    yield "transformer.wte.weight", (vocab, width)
    yield "transformer.wpe.weight", (config["n_positions"], width)
    for index in range(config["n_layer"]):
        name = f"transformer.h.{index}."
        for part, shape in (
            ("ln_1.weight", (width,)),
            ("ln_1.bias", (width,)),
            ("attn.c_attn.weight", (width, 3 * width)),
            ("attn.c_attn.bias", (3 * width,)),
            ("attn.c_proj.weight", (width, width)),
            ("attn.c_proj.bias", (width,)),
            ("ln_2.weight", (width,)),
            ("ln_2.bias", (width,)),
            ("mlp.c_fc.weight", (width, inner)),
            ("mlp.c_fc.bias", (inner,)),
            ("mlp.c_proj.weight", (inner, width)),
            ("mlp.c_proj.bias", (width,)),
        ):
            yield name + part, shape
    yield "transformer.ln_f.weight", (width,)
    yield "transformer.ln_f.bias", (width,)


def _llama_tensors(config: dict):
    width, inner, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    key_value = config["num_key_value_heads"] * width // config["num_attention_heads"]
    yield "model.embed_tokens.weight", (vocab, width)
    for index in range(config["num_hidden_layers"]):
        name = f"model.layers.{index}."
        for part, shape in (
            ("input_layernorm.weight", (width,)),
            ("self_attn.q_proj.weight", (width, width)),
            ("self_attn.k_proj.weight", (key_value, width)),
            ("self_attn.v_proj.weight", (key_value, width)),
            ("self_attn.o_proj.weight", (width, width)),
            ("post_attention_layernorm.weight", (width,)),
            ("mlp.gate_proj.weight", (inner, width)),
            ("mlp.up_proj.weight", (inner, width)),
            ("mlp.down_proj.weight", (width, inner)),
        ):
            yield name + part, shape
    yield "model.norm.weight", (width,)
    yield "lm_head.weight", (vocab, width)


_DTYPE_BYTES = {"F32": 4, "BF16": 2}


def _tensor_bytes(array: np.ndarray, dtype: str) -> bytes:
    """A float32 array stored as safetensors `dtype` (BF16: the upper half of each float32)."""
    if dtype == "BF16":
        return (np.ascontiguousarray(array).view(np.uint32) >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(array, "<f4").tobytes()


def _write_shard(path: str, shapes: dict, dtype: str, rng) -> int:
    """Writes one safetensors file of random tensors (`shapes`: name -> shape), one tensor in memory
    at a time; returns its tensor bytes."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = _DTYPE_BYTES[dtype] * int(np.prod(shape))
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # safetensors aligns the data section to 8 bytes
    with open(path, "wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little") + encoded)
        for shape in shapes.values():
            handle.write(_tensor_bytes(0.02 * rng.standard_normal(shape, dtype=np.float32), dtype))
    return offset


def make_checkpoint(directory: str, config: dict, dtype: str = "F32") -> int:
    """Writes a random checkpoint of safetensors `dtype` (config.json, shards of about SHARD_BYTES,
    index); returns its weight bytes."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump({**config, "torch_dtype": "bfloat16" if dtype == "BF16" else "float32"}, handle)
    tensors = list(_gpt2_tensors(config) if config["model_type"] == "gpt2" else _llama_tensors(config))
    rng = np.random.default_rng(0)
    shards, current, size = [], {}, 0
    for name, shape in tensors:
        current[name] = shape
        size += _DTYPE_BYTES[dtype] * int(np.prod(shape))
        if size >= SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
    shards += [current] if current else []
    weight_map, total = {}, 0
    for number, shard in enumerate(shards, 1):
        file_name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        total += _write_shard(os.path.join(directory, file_name), shard, dtype, rng)
        weight_map.update({name: file_name for name in shard})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, handle)
    return total


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))


def _current_rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


def _reset_peak_rss() -> None:
    """Starts a new VmHWM measurement for this process (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def child(directory: str) -> None:
    """Runs in a fresh process: imports the checkpoint and prints one JSON line."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from components.trainer.checkpoint.hf_weights import import_checkpoint

    before = _current_rss_bytes()
    start = time.perf_counter()
    backbone, _ = import_checkpoint(directory)
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_rss_bytes": _peak_rss_bytes(),
                "rss_before_import_bytes": before,
                "parameters": int(backbone.count_params()),
            }
        )
    )


LORA_STEP = dict(rank=8, context_length=256, batch_size=1, policy="mixed_bfloat16")


def child_lora_step(directory: str, frozen_dtype: str) -> None:
    """Runs in a fresh process: the Trainer's LoRA path (module docstring) with
    `training.lora.frozen_dtype=frozen_dtype`; prints one JSON line."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    from components.trainer.checkpoint.hf_config import checkpoint_model_options, read_config
    from components.trainer.checkpoint.hf_weights import load_weights, stored_weight_dtypes
    from components.trainer.model import lora
    from components.trainer.model.backbone import build_backbone
    from components.trainer.model.dtype_policy import keras_policy
    from components.trainer.options import LoraOptions, ModelOptions, TrainingOptions
    from components.trainer.training import data
    from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
    from components.trainer.training.optimizer import make_optimizer
    from components.trainer.training.precision import frozen_weight_dtype

    policy, length, batch = LORA_STEP["policy"], LORA_STEP["context_length"], LORA_STEP["batch_size"]
    options = LoraOptions(rank=LORA_STEP["rank"], frozen_dtype=frozen_dtype)
    before = _current_rss_bytes()
    start = time.perf_counter()
    checkpoint = read_config(directory)
    config = checkpoint_model_options(ModelOptions(checkpoint=directory, context_length=length), checkpoint)
    stored = frozen_weight_dtype(options, policy, stored_weight_dtypes(directory), warm_start=False)
    strategy = tf.distribute.get_strategy()
    with keras_policy(policy):
        backbone = build_backbone(config, checkpoint.vocab_size, options, frozen_dtype=stored)
        load_weights(backbone, directory, checkpoint)
        lora.freeze_all_but_adapters(backbone)
        import_seconds, import_peak = time.perf_counter() - start, _peak_rss_bytes()
        variable_bytes = sum(v.shape.num_elements() * v.dtype.size for v in backbone.variables)
        _reset_peak_rss()
        start = time.perf_counter()
        training = TrainingOptions(train_steps=1, batch_size=batch, learning_rate=2e-4, warmup_steps=0)
        settings = LoopSettings(
            total_steps=1,
            global_batch_size=batch,
            context_length=length,
            jit_compile=False,
            log_every=1,
            checkpoint_every=10**9,
        )
        with tempfile.TemporaryDirectory(dir=os.path.dirname(directory)) as checkpoints:
            trainer = LanguageModelTrainer(backbone, make_optimizer(training, policy), strategy, settings, checkpoints)
            blocks = lambda: (
                tf.data.Dataset.random(seed=0)
                .batch(length + 1)
                .map(lambda ids: ids % checkpoint.vocab_size)
                .batch(batch, drop_remainder=True)
                .map(lambda b: (b[:, :-1], b[:, 1:]))
                .repeat()
            )
            reports = []
            trainer.train(lambda _: iter(data.distributed_blocks(strategy, blocks, batch)), on_report=reports.append)
        step_seconds, step_peak = time.perf_counter() - start, _peak_rss_bytes()
    print(
        json.dumps(
            {
                "frozen_dtype_setting": frozen_dtype,
                "frozen_weights": stored or "float32",
                "parameters": int(backbone.count_params()),
                "variable_bytes": int(variable_bytes),
                "trainable_parameters": sum(int(v.shape.num_elements()) for v in backbone.trainable_variables),
                "rss_before_import_bytes": before,
                "import_seconds": import_seconds,
                "import_peak_rss_bytes": import_peak,
                "step_seconds": step_seconds,
                "step_peak_rss_bytes": step_peak,
                "loss": reports[-1].loss,
            }
        )
    )


def measure(directory: str, *extra: str) -> dict:
    """Runs this script's child mode on `directory` in a subprocess; returns its JSON report."""
    output = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *extra, "--child", directory],
        check=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def _lora_step_table(rows: list) -> None:
    print(
        "| checkpoint | frozen weights (frozen_dtype) | variables GiB | import s | peak RSS import GiB | "
        "step s (incl. checkpoint) | peak RSS step GiB | RSS before import GiB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['checkpoint']} ({row['weights_dtype']}) | {row['frozen_weights']} ({row['frozen_dtype_setting']}) | "
            f"{row['variable_bytes'] / 2**30:.2f} | {row['import_seconds']:.1f} | {row['import_peak_rss_bytes'] / 2**30:.2f} | "
            f"{row['step_seconds']:.1f} | {row['step_peak_rss_bytes'] / 2**30:.2f} | {row['rss_before_import_bytes'] / 2**30:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(SHAPES), action="append", help="Measure only these shapes.")
    parser.add_argument("--keep", help="Make the checkpoints here and keep them (default: a temporary directory).")
    parser.add_argument(
        "--weights-dtype", choices=["f32", "bf16"], default="f32", help="How the checkpoints store weights."
    )
    parser.add_argument(
        "--lora-step",
        action="store_true",
        help="Measure import + one LoRA step with frozen_dtype auto and float32 (module docstring).",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-frozen-dtype", help=argparse.SUPPRESS)
    add_load_arguments(parser)
    args = parser.parse_args()
    if args.child:
        if args.child_frozen_dtype:
            child_lora_step(args.child, args.child_frozen_dtype)
        else:
            child(args.child)
        return
    dtype = args.weights_dtype.upper()
    root = args.keep or tempfile.mkdtemp(prefix="checkpoint-import-")
    guard = LoadGuard(args)
    rows = []
    try:
        for name in args.only or sorted(SHAPES):
            directory = os.path.join(root, name if dtype == "F32" else f"{name}-{args.weights_dtype}")
            if not os.path.exists(os.path.join(directory, "model.safetensors.index.json")):
                make_checkpoint(directory, SHAPES[name], dtype)
            size = sum(os.path.getsize(os.path.join(directory, entry)) for entry in os.listdir(directory))
            if args.lora_step:
                for frozen in ("auto", "float32"):
                    rows.append(
                        {
                            "checkpoint": name,
                            "weights_dtype": dtype,
                            "file_bytes": size,
                            **measure(directory, "--child-frozen-dtype", frozen),
                        }
                    )
                continue
            row = {"checkpoint": name, "weights_dtype": dtype, "file_bytes": size, **measure(directory)}
            row["peak_over_file"] = row["peak_rss_bytes"] / size
            rows.append(row)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    load = guard.finish()
    print(guard.banner())
    if args.lora_step:
        _lora_step_table(rows)
    else:
        print(
            "| checkpoint | parameters | files GiB | import s | peak RSS GiB | peak / files | RSS before import GiB |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        for row in rows:
            print(
                f"| {row['checkpoint']} | {row['parameters']:,} | {row['file_bytes'] / 2**30:.2f} | {row['seconds']:.1f} | "
                f"{row['peak_rss_bytes'] / 2**30:.2f} | {row['peak_over_file']:.2f}x | "
                f"{row['rss_before_import_bytes'] / 2**30:.2f} |"
            )
    results = {"command": command_line(), "machine": machine_description(), "load": load, "rows": rows}
    if args.lora_step:
        results["lora_step"] = LORA_STEP
    path = write_results("checkpoint_lora_step" if args.lora_step else "checkpoint_import", results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
