"""The documented precision and XLA rules per device (components/trainer/precision.py), read from
a CPU's feature flags."""

import pytest

from components.trainer.training.precision import cpu_has_native_bfloat16, resolve_jit_compile, resolve_precision

SAPPHIRE_RAPIDS = "fpu vme avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
ZEN4 = "fpu vme avx512f avx512_bf16"
OLDER = "fpu vme avx2 fma"


@pytest.fixture
def cpuinfo(tmp_path):
    def write(flags: str) -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\n")
        return str(path)

    return write


@pytest.mark.parametrize("flags, native", [(SAPPHIRE_RAPIDS, True), (ZEN4, True), (OLDER, False)])
def test_native_bfloat16_comes_from_the_flags(cpuinfo, flags, native):
    assert cpu_has_native_bfloat16(cpuinfo(flags)) is native


def test_unreadable_cpuinfo_means_no_bfloat16(tmp_path):
    assert not cpu_has_native_bfloat16(str(tmp_path / "missing"))


def test_auto_xla_is_off_on_a_cpu_under_bfloat16_or_with_recomputation_and_on_elsewhere():
    assert resolve_jit_compile("auto", "cpu", "mixed_bfloat16") is False
    assert resolve_jit_compile("auto", "cpu", "float32") is True
    assert resolve_jit_compile("auto", "gpu", "mixed_float16") is True
    assert resolve_jit_compile("auto", "tpu", "mixed_bfloat16") is True
    # XLA on a CPU keeps most of the memory recomputation frees (benchmarks/README.md): auto is off there.
    assert resolve_jit_compile("auto", "cpu", "float32", recompute="block") is False
    assert resolve_jit_compile("auto", "cpu", "float32", recompute="attention") is False
    assert resolve_jit_compile("auto", "gpu", "mixed_float16", recompute="block") is True


def test_explicit_xla_setting_wins():
    assert resolve_jit_compile("on", "cpu", "mixed_bfloat16") is True
    assert resolve_jit_compile("off", "gpu", "float32") is False
    assert resolve_jit_compile("on", "cpu", "float32", recompute="block") is True


def test_explicit_precision_wins():
    assert resolve_precision("float32", "gpu") == "float32"
    assert resolve_precision("mixed_float16", "cpu") == "mixed_float16"


def test_auto_precision_on_accelerators():
    assert resolve_precision("auto", "gpu") == "mixed_float16"
    assert resolve_precision("auto", "tpu") == "mixed_bfloat16"
