"""Numeric precision and compilation choices per device.

`auto` precision is mixed_float16 on GPUs (with dynamic loss scaling) and mixed_bfloat16 on TPUs.
On CPUs it is mixed_bfloat16 when the CPU multiplies bfloat16 natively (AMX-BF16 or
AVX512-BF16, read from the CPU's feature flags), else float32; on a CPU without those units
bfloat16 is emulated and gains nothing.
`auto` XLA is on, except on a CPU under mixed_bfloat16. There XLA + bfloat16 is the faster
configuration at the 10m shape, but TensorFlow 2.16's XLA CPU backend cannot emit every bfloat16
dot (a one-layer width-64 model fails with "unsupported operand type BF16 in op dot"), and at the
default preset the gain is small. So auto keeps to graph mode there (oneDNN's bfloat16 kernels)
and `jit_compile=on` opts in. Auto is also off on a CPU with activation recomputation
(`training.recompute`): there XLA keeps most of the memory recomputation frees in graph mode (the
10m preset in 4 GiB: 4x the context in graph mode, 1.3x under XLA; benchmarks/README.md,
"Activation recomputation"), and memory is what recomputation is asked for. Wherever auto does choose XLA and XLA cannot compile the step, the
trainer falls back to graph mode with a warning; under `on` it fails with an error naming the
settings (`loop.LanguageModelTrainer`). Measurements: benchmarks/README.md ("Speed: training,
decoding, serving").
The model is exported with the policy it was trained under, except mixed_bfloat16, whose serving
copy computes in float32 (components/trainer/serving/weights.py).

LoRA's frozen weights under mixed_bfloat16 are stored as bfloat16 where that loses nothing
(`frozen_weight_dtype`): every matmul and lookup of the mixed_bfloat16 graph casts a float32
weight to bfloat16 before reading it, so a weight that never trains needs no float32 copy. The
exports (float32) hold the same values as before only when the stored values were bfloat16
already: a bfloat16 checkpoint, without a warm start from a float32 export.
"""

from typing import AbstractSet, Optional

import tensorflow as tf

from components.trainer.options import LoraOptions


def accelerator_kind(strategy: tf.distribute.Strategy) -> str:
    """'tpu', 'gpu' or 'cpu': what the strategy's replicas run on."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


CPUINFO = "/proc/cpuinfo"


def cpu_flags(cpuinfo_path: str = CPUINFO) -> frozenset:
    """The CPU feature flags Linux reports (empty when unreadable)."""
    try:
        with open(cpuinfo_path, encoding="utf-8") as handle:
            return frozenset(next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), []))
    except OSError:
        return frozenset()


def cpu_has_native_bfloat16(cpuinfo_path: str = CPUINFO) -> bool:
    """Whether this machine's CPU flags include AMX-BF16 or AVX512-BF16."""
    return bool({"amx_bf16", "avx512_bf16"} & cpu_flags(cpuinfo_path))


def resolve_precision(precision: str, device: str) -> str:
    """The Keras policy name for `precision` ('auto' chooses per `device`, see the module docstring)."""
    if precision != "auto":
        return precision
    if device == "cpu":
        return "mixed_bfloat16" if cpu_has_native_bfloat16() else "float32"
    return {"gpu": "mixed_float16", "tpu": "mixed_bfloat16"}.get(device, "float32")


def resolve_jit_compile(jit_compile: str, device: str, policy_name: str, recompute: str = "off") -> bool:
    """Whether to XLA-compile the train step ('auto' = on, except on a CPU under mixed_bfloat16 or
    with `training.recompute`, see the module docstring)."""
    if jit_compile != "auto":
        return jit_compile == "on"
    return not (device == "cpu" and (policy_name == "mixed_bfloat16" or recompute != "off"))


def frozen_weight_dtype(
    lora: Optional[LoraOptions], policy_name: str, checkpoint_dtypes: AbstractSet[str], warm_start: bool
) -> Optional[str]:
    """ "bfloat16" when a LoRA run's frozen weights are stored as bfloat16 (`training.lora.frozen_dtype`),
    else None (float32, the policy's variable dtype). `checkpoint_dtypes`: the safetensors dtypes of
    `model.checkpoint`'s weights (empty without one); `warm_start`: `training.warm_start`.

    Only under mixed_bfloat16, whose graph reads every frozen weight as bfloat16 (training computes
    the same either way), and only with LoRA (full fine-tuning trains every weight, which keeps a
    float32 master). `auto` also needs nothing to be lost: the weights loaded must be bfloat16
    already (a BF16 checkpoint), and a warm start would load the production model's float32
    merged weights, so it keeps float32. `bfloat16` rounds whatever is loaded once.
    """
    if lora is None or lora.rank == 0 or policy_name != "mixed_bfloat16" or lora.frozen_dtype == "float32":
        return None
    if lora.frozen_dtype == "bfloat16" or (set(checkpoint_dtypes) == {"BF16"} and not warm_start):
        return "bfloat16"
    return None
