"""Profile of one cached decoding step: where its time goes, against the weight-bandwidth bound.

For one model shape (random weights) and batch size, times with a cache of `--cache-length`
positions:
  step            one `decode_step` (all blocks + output projection + cache writes), per variant:
                    before      tied projection `matmul(h, E, transpose_b=True)`, cache rewritten
                                with tensor_scatter_nd_update (the code before issue 15)
                    fp32        serving copy: pre-transposed [d, vocab] projection, in-place cache
                    int8        serving copy with int8 weights (weight_quantization=int8)
                  each in graph mode and with XLA (XLA always uses the scatter: no InplaceUpdate kernel)
  pieces          the output projection alone (tied/transposed, pre-transposed, int8 as exported,
                  and core TF's QuantizedMatMul, which also quantizes the activations) and the
                  cache writes of all layers (scatter vs in place)
  bound           weight bytes read per token / copy bandwidth measured here (fp32 and int8)
Median of `--repeats` calls after two warm-up calls. Prints a table, writes
benchmarks/results/decode_step_profile_<shape>_b<batch>.json.

    python benchmarks/decode_step_profile.py [--shape gpt2-124m] [--batch 1] [--cache-length 256]
"""

import argparse
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402
import tensorflow as tf  # noqa: E402

from components.trainer.model.backbone import build_backbone, decode_slots, write_cache_position  # noqa: E402
from components.trainer.model.model_size import parameter_count  # noqa: E402
from components.trainer.options import ModelOptions  # noqa: E402
from components.trainer.serving.weights import dequantizing_matmul, quantize_per_channel, serving_backbone  # noqa: E402

SHAPES = {"10m": dict(vocab=4096, context_length=512), "gpt2-124m": dict(vocab=50257, context_length=1024)}


def median_ms(function, repeats: int) -> float:
    """Median wall time of `function()` (which returns a tensor or tuple) in ms, after 2 warm-ups."""
    function(), function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tf.nest.map_structure(lambda tensor: tensor.numpy(), function())
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def step_ms(backbone, batch: int, cache_length: int, jit: bool, in_place: bool, repeats: int) -> float:
    """One decode_step at position cache_length // 2, its cache fed back from the previous call."""
    config = backbone.architecture
    head_dim = config.model_dim // config.num_heads
    shape = [batch, config.num_heads, cache_length, head_dim]
    state = {"cache": tuple((tf.zeros(shape), tf.zeros(shape)) for _ in range(config.num_layers))}
    ids = tf.fill([batch], tf.constant(7, tf.int64))
    positions = tf.fill([batch], cache_length // 2)
    step = tf.function(
        lambda ids, positions, cache: backbone.decode_step(ids, positions, cache, in_place), jit_compile=jit
    )

    def call():
        logits, state["cache"] = step(ids, positions, state["cache"])
        return logits

    return median_ms(call, repeats)


def piece_timings(backbone, batch: int, cache_length: int, repeats: int) -> dict:
    """The output projection variants and the cache writes of all layers, alone (graph mode)."""
    config = backbone.architecture
    hidden = tf.random.normal([batch, config.model_dim])
    embeddings = tf.constant(backbone.token_embedding.embeddings)
    transposed = tf.Variable(tf.transpose(embeddings))
    quantized, scale = (tf.Variable(tensor) for tensor in quantize_per_channel(transposed))
    head_dim = config.model_dim // config.num_heads
    cache = tf.zeros([batch, config.num_heads, cache_length, head_dim])
    new = tf.random.normal([batch, config.num_heads, head_dim])
    positions = tf.fill([batch], cache_length // 2)

    weight_range = float(tf.reduce_max(tf.abs(transposed)))
    quint8_weights = tf.Variable(tf.quantization.quantize(transposed, -weight_range, weight_range, tf.quint8).output)

    @tf.function
    def quantized_matmul():
        # Core TF's only int8 matrix product: activations are quantized too (quint8 x quint8 -> qint32).
        rows = tf.quantization.quantize(hidden, tf.reduce_min(hidden), tf.reduce_max(hidden), tf.quint8)
        product = tf.raw_ops.QuantizedMatMul(
            a=rows.output,
            b=quint8_weights,
            min_a=rows.output_min,
            max_a=rows.output_max,
            min_b=-weight_range,
            max_b=weight_range,
            Toutput=tf.qint32,
        )
        return tf.quantization.dequantize(product.out, product.min_out, product.max_out)

    def writes(in_place):
        @tf.function
        def run(cache):
            slots = decode_slots(cache, positions, in_place)
            for _ in range(2 * config.num_layers):
                cache = write_cache_position(cache, slots, new)
            return cache

        return lambda: run(cache)

    return {
        "projection tied (transpose_b)": median_ms(
            tf.function(lambda: tf.matmul(hidden, embeddings, transpose_b=True)), repeats
        ),
        "projection pre-transposed": median_ms(tf.function(lambda: tf.matmul(hidden, transposed)), repeats),
        "projection int8": median_ms(tf.function(lambda: dequantizing_matmul(hidden, quantized, scale)), repeats),
        "projection int8, QuantizedMatMul (quint8 activations)": median_ms(quantized_matmul, repeats),
        "cache writes, scatter (all layers)": median_ms(writes(False), repeats),
        "cache writes, in place (all layers)": median_ms(writes(True), repeats),
    }


def weight_bytes(config: ModelOptions, vocab: int, int8: bool) -> int:
    """Bytes of weights one batch-1 step reads (each matmul weight once; lookups read one row)."""
    parameters = parameter_count(config, vocab) - config.context_length * config.model_dim
    if not int8:
        return 4 * parameters
    per_layer = 4 * config.model_dim * config.model_dim + 2 * config.model_dim * config.mlp_dim  # qkv, output, MLP
    matmul = config.num_layers * per_layer + vocab * config.model_dim  # + the output projection
    return matmul + 4 * (parameters - matmul)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="gpt2-124m", choices=list(SHAPES))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--cache-length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-xla", action="store_true", help="Skip the XLA variants (their compilation is slow).")
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    guard = machine.LoadGuard(args)

    bandwidth = machine.copy_bandwidth_bytes_per_s()
    spec = SHAPES[args.shape]
    config = ModelOptions(preset=args.shape, context_length=spec["context_length"])
    tf.keras.utils.set_random_seed(0)
    trained = build_backbone(config, spec["vocab"])
    variants = {
        "before": (trained, False),
        "fp32": (serving_backbone(trained), True),
        "int8": (serving_backbone(trained, "int8"), True),
    }
    rows = {}
    for name, (backbone, in_place) in variants.items():
        rows[f"step {name}, graph"] = step_ms(backbone, args.batch, args.cache_length, False, in_place, args.repeats)
        print(f"step {name}, graph: {rows[f'step {name}, graph']:.2f} ms", flush=True)
        if not args.no_xla:
            rows[f"step {name}, XLA"] = step_ms(backbone, args.batch, args.cache_length, True, False, args.repeats)
            print(f"step {name}, XLA: {rows[f'step {name}, XLA']:.2f} ms", flush=True)
    rows.update(piece_timings(trained, args.batch, args.cache_length, args.repeats))
    bounds = {
        f"bound {kind} ({weight_bytes(config, spec['vocab'], kind == 'int8') / 1e6:.0f} MB)": 1000
        * weight_bytes(config, spec["vocab"], kind == "int8")
        / bandwidth
        for kind in ("fp32", "int8")
    }
    load = guard.finish()

    print(f"\n{machine.command_line()}")
    print(
        f"{args.shape}, batch {args.batch}, cache {args.cache_length}; copy bandwidth {bandwidth / 1e9:.1f} GB/s; {guard.banner()}"
    )
    print("| what | ms | x fp32 bound |")
    print("|---|---:|---:|")
    fp32_bound = next(iter(bounds.values()))
    for name, value in {**rows, **bounds}.items():
        print(f"| {name} | {value:.2f} | {value / fp32_bound:.2f} |")
    path = machine.write_results(
        f"decode_step_profile_{args.shape}_b{args.batch}",
        {
            "command": machine.command_line(),
            "machine": machine.machine_description(),
            "load": load,
            "copy_bandwidth_GBps": bandwidth / 1e9,
            "shape": args.shape,
            "batch": args.batch,
            "cache_length": args.cache_length,
            "milliseconds": {**rows, **bounds},
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
