"""Decode throughput and first-token latency: our decoding paths against Hugging Face, in one run.

For each model shape (the ~10M preset and GPT-2 124M's shape, random weights) and batch size (1, 8):
  ours no-cache   `generate_tokens_without_cache`: the whole prefix recomputed every step
  ours cache      `generate_tokens`: prefill + KV-cache tf.while_loop, TF graph mode
  ours cache XLA  the same loop compiled with XLA (jit_compile=True)
  ours int8 ...   the cached paths on the int8 serving copy (generation.weight_quantization=int8)
The cached paths run on the serving copy the export writes (`serving.weights.serving_backbone`:
pre-transposed output projection, in-place cache writes in graph mode).
  reference       Hugging Face GPT2LMHeadModel.generate(use_cache=True), PyTorch CPU, same shape,
                  run in the separate benchmark env (benchmarks/make_reference_env.sh)
plus the batch-1 memory-bandwidth bound: fp32 weight bytes read per token over the copy bandwidth
numpy measures here. Greedy decoding of exactly the requested number of tokens from a 16-token
prompt (the [EOS] embedding row is zeroed so a random model never stops early; HF gets
min_new_tokens), each generation timed `--repeats` times, ours and the reference's alike, and
tokens/s taken from the median: this vCPU's speed varies from call to call. Prints a table and
writes benchmarks/results/decode_throughput_<shapes>.json.
With --checkpoint DIR (a Hugging Face GPT-2 directory, e.g. the random 124M one
`benchmarks/checkpoint_import.py --keep DIR` writes) our side imports it and the reference loads it
with from_pretrained: the decoding speed of a fine-tuned checkpoint's export.
Refuses to start above load 1.5 unless --allow-high-load (then the results are marked NOT VALID).

    python benchmarks/decode_throughput.py [--shapes 10m gpt2-124m] [--new-tokens '{"10m": 256, "gpt2-124m": 256}']
        [--paths "cache graph" "cache XLA" ...] [--wait-for-quiet 600]
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402
import tensorflow as tf  # noqa: E402

from components.tokenizer.ids import EOS_ID  # noqa: E402
from components.trainer.model import decoding  # noqa: E402
from components.trainer.model.backbone import build_backbone  # noqa: E402
from components.trainer.model.model_size import parameter_count  # noqa: E402
from components.trainer.options import ModelOptions  # noqa: E402
from components.trainer.serving.weights import serving_backbone  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE_PYTHON = os.path.expanduser("~/.cache/textgen-tfx/bench-reference/bin/python")
PROMPT_TOKENS = 16
BATCHES = (1, 8)
PATHS = ("no-cache", "cache graph", "cache XLA", "int8 cache graph", "int8 cache XLA")
# Vocabulary and context per benchmark shape. The 10m preset's 256-token context cannot hold a
# 16-token prompt plus 256 new tokens, so its benchmark shape uses a 512-token context.
SHAPES = {
    "10m": dict(vocab=4096, context_length=512),
    "gpt2-124m": dict(vocab=50257, context_length=1024),
}


def _seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _backbone(shape: str, checkpoint: str = ""):
    """The benchmark backbone: random weights of the preset's shape or, with `checkpoint`, the
    Hugging Face checkpoint imported (checkpoint/hf_weights.py), as a fine-tuning run starts."""
    spec = SHAPES[shape]
    tf.keras.utils.set_random_seed(0)
    if checkpoint:
        from components.trainer.checkpoint.hf_weights import import_checkpoint

        backbone, _ = import_checkpoint(
            checkpoint, ModelOptions(checkpoint=checkpoint, context_length=spec["context_length"])
        )
        config = backbone.architecture
    else:
        config = ModelOptions(preset=shape, context_length=spec["context_length"])
        backbone = build_backbone(config, spec["vocab"])
    embeddings = backbone.token_embedding.embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[EOS_ID]], tf.zeros([1, config.model_dim])))
    return backbone, config


def _decoder(backbone, path: str):
    """A tf.function(prompts, max_new_tokens) -> counts for one of our decoding paths."""
    if path == "no-cache":

        def run(prompts, max_new_tokens):
            return decoding.generate_tokens_without_cache(backbone, prompts, max_new_tokens, 0.0, 0, 1.0, 0)[1]
    else:
        jit = path.endswith("XLA")

        def run(prompts, max_new_tokens):
            return decoding.generate_tokens(backbone, prompts, max_new_tokens, 0.0, 0, 1.0, 0, jit_compile=jit)[1]

    return tf.function(
        run,
        input_signature=[
            tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1),
            tf.TensorSpec([], tf.int32),
        ],
    )


def measure_ours(backbone, path: str, batch: int, new_tokens: int, vocab: int, repeats: int) -> dict:
    """First call (trace + compile), first-token latency and new tokens/s (median of `repeats` generations) of one path."""
    rng = np.random.default_rng(batch)
    prompts = tf.ragged.constant(rng.integers(3, vocab, size=(batch, PROMPT_TOKENS)).tolist(), dtype=tf.int64)
    decode = _decoder(backbone, path)
    result = {"new_tokens": new_tokens}
    # The first call traces the graph (and, with XLA, compiles the shapes of its buckets).
    result["first_call_s"] = _seconds(lambda: decode(prompts, tf.constant(1)).numpy())
    result["first_token_s"] = min(_seconds(lambda: decode(prompts, tf.constant(1)).numpy()) for _ in range(2))
    if path.endswith("XLA"):  # a longer generation uses a larger cache bucket: one more compilation
        result["first_call_long_bucket_s"] = _seconds(lambda: decode(prompts, tf.constant(new_tokens)).numpy())
    totals = []
    for _ in range(repeats):
        start = time.perf_counter()
        counts = decode(prompts, tf.constant(new_tokens)).numpy()
        totals.append(time.perf_counter() - start)
        assert (counts == new_tokens).all(), counts
    result["total_s"], result["total_s_each"] = float(np.median(totals)), totals
    result["tokens_per_s"] = batch * new_tokens / result["total_s"]
    return result


def measure_reference(
    shape: str, config: ModelOptions, new_tokens: int, repeats: int, python: str, checkpoint: str = ""
) -> dict:
    """The Hugging Face reference, in its own environment and process (`checkpoint`: the same
    checkpoint loaded with from_pretrained)."""
    spec = dict(
        layers=config.num_layers,
        heads=config.num_heads,
        dim=config.model_dim,
        mlp=config.mlp_dim,
        vocab=SHAPES[shape]["vocab"],
        context=config.context_length,
        prompt_tokens=PROMPT_TOKENS,
        new_tokens=new_tokens,
        repeats=repeats,
        batches=list(BATCHES),
        threads=os.cpu_count(),
        checkpoint=checkpoint,
    )
    result = subprocess.run(
        [python, os.path.join(HERE, "reference_hf_generate.py"), json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument(
        "--new-tokens",
        type=json.loads,
        default={"10m": 256, "gpt2-124m": 256},
        help="New tokens of the cached paths and the reference per shape (JSON).",
    )
    parser.add_argument(
        "--no-cache-tokens",
        type=json.loads,
        default={"10m": {"1": 256, "8": 64}, "gpt2-124m": {"1": 32, "8": 32}},
        help="New tokens for the slow no-cache path per shape and batch (JSON).",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="Generations timed per row, ours and the reference's; tokens/s is from their median.",
    )
    parser.add_argument("--reference-python", default=REFERENCE_PYTHON)
    parser.add_argument("--paths", nargs="+", default=[path for path in PATHS if path != "no-cache"], choices=PATHS)
    parser.add_argument("--no-reference", action="store_true", help="Skip the Hugging Face reference.")
    parser.add_argument(
        "--checkpoint",
        default="",
        help="A GPT-2 Hugging Face checkpoint directory to import (one shape only, e.g. gpt2-124m); the "
        "reference loads the same directory. `make` makes a random one: see checkpoint_import.py.",
    )
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    guard = machine.LoadGuard(args)

    bandwidth = machine.copy_bandwidth_bytes_per_s()
    results = {
        "command": machine.command_line(),
        "machine": {
            **machine.machine_description(),
            "copy_bandwidth_GBps": bandwidth / 1e9,
            "tensorflow": tf.__version__,
        },
        "prompt_tokens": PROMPT_TOKENS,
        "shapes": {},
    }
    rows = []
    for shape in args.shapes:
        trained, config = _backbone(shape, args.checkpoint)
        backbones = {"no-cache": trained, "fp32": serving_backbone(trained), "int8": serving_backbone(trained, "int8")}
        vocab = SHAPES[shape]["vocab"]
        weight_bytes = 4 * (parameter_count(config, vocab) - config.context_length * config.model_dim)
        entry = {
            "config": config.model_dump(),
            "vocab": vocab,
            "parameters": parameter_count(config, vocab),
            "bandwidth_bound_tokens_per_s_batch1": bandwidth / weight_bytes,
            "ours": {},
        }
        for path in args.paths:
            backbone = backbones["no-cache" if path == "no-cache" else "int8" if path.startswith("int8") else "fp32"]
            for batch in BATCHES:
                tokens = args.no_cache_tokens[shape][str(batch)] if path == "no-cache" else args.new_tokens[shape]
                result = measure_ours(backbone, path, batch, tokens, vocab, args.repeats)
                entry["ours"][f"{path} b{batch}"] = result
                rows.append((shape, f"ours {path}", batch, result))
                print(f"{shape} ours {path} b{batch}: {result}", flush=True)
        if not args.no_reference:
            reference = measure_reference(
                shape, config, args.new_tokens[shape], args.repeats, args.reference_python, args.checkpoint
            )
            entry["reference"] = reference
            print(f"{shape} reference: {reference}", flush=True)
            for batch in BATCHES:
                rows.append((shape, "HF GPT2LMHeadModel.generate", batch, reference["batches"][str(batch)]))
        results["shapes"][shape] = entry
    results["load"] = guard.finish()

    print(f"\n{results['command']}\ncopy bandwidth {bandwidth / 1e9:.1f} GB/s; {guard.banner()}")
    print("| shape | implementation | batch | new tokens | first call s | first token ms | tokens/s | x reference |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for shape, name, batch, result in rows:
        first_call = f"{result['first_call_s']:.1f}" if "first_call_s" in result else "-"
        reference = results["shapes"][shape].get("reference", {}).get("batches", {}).get(str(batch))
        ratio = f"{result['tokens_per_s'] / reference['tokens_per_s']:.2f}" if reference else "-"
        print(
            f"| {shape} | {name} | {batch} | {result['new_tokens']} | {first_call} | "
            f"{1000 * result['first_token_s']:.0f} | {result['tokens_per_s']:.1f} | {ratio} |"
        )
    for shape in args.shapes:
        print(
            f"| {shape} | memory-bandwidth bound (fp32 weights) | 1 | - | - | - | "
            f"{results['shapes'][shape]['bandwidth_bound_tokens_per_s_batch1']:.1f} |"
        )
    path = machine.write_results(f"decode_throughput_{'_'.join(args.shapes)}", results)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
