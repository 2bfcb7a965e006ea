"""Hugging Face checkpoint import: seconds and peak memory against the checkpoint's size.

Makes random float32 checkpoints in the Hugging Face layout with numpy + safetensors (no torch) in
a temporary directory: GPT-2 124M (12 layers, width 768, vocabulary 50,257, 1,024 positions) and
a 1.1B Llama shape (TinyLlama: 22 layers, width 2048, 32 heads, 4 key/value heads, MLP 5632,
vocabulary 32,000, 2,048 positions), sharded at about 1 GiB with an index as save_pretrained does.
Each is imported (`checkpoint.hf_weights.import_checkpoint`: config, backbone built, weights read
tensor by tensor) in a fresh process, which reports the import's seconds and its peak resident
memory (VmHWM); the table shows the peak against the checkpoint's size (goal <= 1.5x) and what the
process held before importing (Python + TensorFlow). Writes benchmarks/results/checkpoint_import.json.

    python benchmarks/checkpoint_import.py [--only gpt2-124m] [--keep DIR] [--wait-for-quiet 600]
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
    "gpt2-124m": dict(model_type="gpt2", n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257,
                      activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True),
    "llama-1.1b": dict(model_type="llama", num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                       hidden_size=2048, intermediate_size=5632, max_position_embeddings=2048, vocab_size=32000,
                       rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu", tie_word_embeddings=False),
}
SHARD_BYTES = 1 << 30


def _gpt2_tensors(config: dict):
    width, inner, vocab = config["n_embd"], 4 * config["n_embd"], config["vocab_size"]
    yield "transformer.wte.weight", (vocab, width)
    yield "transformer.wpe.weight", (config["n_positions"], width)
    for index in range(config["n_layer"]):
        name = f"transformer.h.{index}."
        for part, shape in (("ln_1.weight", (width,)), ("ln_1.bias", (width,)), ("attn.c_attn.weight", (width, 3 * width)),
                            ("attn.c_attn.bias", (3 * width,)), ("attn.c_proj.weight", (width, width)), ("attn.c_proj.bias", (width,)),
                            ("ln_2.weight", (width,)), ("ln_2.bias", (width,)), ("mlp.c_fc.weight", (width, inner)),
                            ("mlp.c_fc.bias", (inner,)), ("mlp.c_proj.weight", (inner, width)), ("mlp.c_proj.bias", (width,))):
            yield name + part, shape
    yield "transformer.ln_f.weight", (width,)
    yield "transformer.ln_f.bias", (width,)


def _llama_tensors(config: dict):
    width, inner, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    key_value = config["num_key_value_heads"] * width // config["num_attention_heads"]
    yield "model.embed_tokens.weight", (vocab, width)
    for index in range(config["num_hidden_layers"]):
        name = f"model.layers.{index}."
        for part, shape in (("input_layernorm.weight", (width,)), ("self_attn.q_proj.weight", (width, width)),
                            ("self_attn.k_proj.weight", (key_value, width)), ("self_attn.v_proj.weight", (key_value, width)),
                            ("self_attn.o_proj.weight", (width, width)), ("post_attention_layernorm.weight", (width,)),
                            ("mlp.gate_proj.weight", (inner, width)), ("mlp.up_proj.weight", (inner, width)),
                            ("mlp.down_proj.weight", (width, inner))):
            yield name + part, shape
    yield "model.norm.weight", (width,)
    yield "lm_head.weight", (vocab, width)


def make_checkpoint(directory: str, config: dict) -> int:
    """Writes a random float32 checkpoint (config.json, shards of about SHARD_BYTES, index); returns its weight bytes."""
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        json.dump(config, handle)
    tensors = list(_gpt2_tensors(config) if config["model_type"] == "gpt2" else _llama_tensors(config))
    rng = np.random.default_rng(0)
    shards, current, size = [], {}, 0
    for name, shape in tensors:
        current[name] = shape
        size += 4 * int(np.prod(shape))
        if size >= SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
    shards += [current] if current else []
    weight_map, total = {}, 0
    for number, shard in enumerate(shards, 1):
        file_name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        arrays = {name: (0.02 * rng.standard_normal(shape, dtype=np.float32)) for name, shape in shard.items()}
        save_file(arrays, os.path.join(directory, file_name))
        total += sum(array.nbytes for array in arrays.values())
        del arrays
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


def child(directory: str) -> None:
    """Runs in a fresh process: imports the checkpoint and prints one JSON line."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from components.trainer.checkpoint.hf_weights import import_checkpoint

    before = _current_rss_bytes()
    start = time.perf_counter()
    backbone, _ = import_checkpoint(directory)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": _peak_rss_bytes(), "rss_before_import_bytes": before,
                      "parameters": int(backbone.count_params())}))


def measure(directory: str) -> dict:
    """Imports `directory` in a subprocess; returns its JSON report."""
    output = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", directory], check=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=sorted(SHAPES), action="append", help="Measure only these shapes.")
    parser.add_argument("--keep", help="Make the checkpoints here and keep them (default: a temporary directory).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_load_arguments(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    root = args.keep or tempfile.mkdtemp(prefix="checkpoint-import-")
    guard = LoadGuard(args)
    rows = []
    try:
        for name in args.only or sorted(SHAPES):
            directory = os.path.join(root, name)
            if not os.path.exists(os.path.join(directory, "model.safetensors.index.json")):
                make_checkpoint(directory, SHAPES[name])
            size = sum(os.path.getsize(os.path.join(directory, entry)) for entry in os.listdir(directory))
            row = {"checkpoint": name, "file_bytes": size, **measure(directory)}
            row["peak_over_file"] = row["peak_rss_bytes"] / size
            rows.append(row)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    load = guard.finish()
    print(guard.banner())
    print("| checkpoint | parameters | files GiB | import s | peak RSS GiB | peak / files | RSS before import GiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['checkpoint']} | {row['parameters']:,} | {row['file_bytes'] / 2**30:.2f} | {row['seconds']:.1f} | "
              f"{row['peak_rss_bytes'] / 2**30:.2f} | {row['peak_over_file']:.2f}x | {row['rss_before_import_bytes'] / 2**30:.2f} |")
    path = write_results("checkpoint_import", {"command": command_line(), "machine": machine_description(), "load": load, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
