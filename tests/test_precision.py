"""The documented precision and XLA rules per device (components/trainer/precision.py), read from
a CPU's feature flags."""
import pytest

from components.trainer.training.precision import cpu_has_amx, cpu_has_native_bfloat16, resolve_jit_compile, resolve_precision

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


@pytest.mark.parametrize("flags, native, amx", [(SAPPHIRE_RAPIDS, True, True), (ZEN4, True, False), (OLDER, False, False)])
def test_cpu_features_come_from_the_flags(cpuinfo, flags, native, amx):
    path = cpuinfo(flags)
    assert (cpu_has_native_bfloat16(path), cpu_has_amx(path)) == (native, amx)


def test_unreadable_cpuinfo_means_no_bfloat16(tmp_path):
    assert not cpu_has_native_bfloat16(str(tmp_path / "missing")) and not cpu_has_amx(str(tmp_path / "missing"))


@pytest.mark.parametrize("flags, jit", [(SAPPHIRE_RAPIDS, False), (ZEN4, True)])
def test_auto_xla_is_off_only_on_an_amx_cpu_under_bfloat16(cpuinfo, flags, jit):
    path = cpuinfo(flags)
    assert resolve_jit_compile("auto", "cpu", "mixed_bfloat16", path) is jit
    assert resolve_jit_compile("auto", "cpu", "float32", path) is True
    assert resolve_jit_compile("auto", "gpu", "mixed_float16", path) is True


def test_explicit_settings_win(cpuinfo):
    path = cpuinfo(SAPPHIRE_RAPIDS)
    assert resolve_jit_compile("on", "cpu", "mixed_bfloat16", path) is True
    assert resolve_jit_compile("off", "gpu", "float32", path) is False
    assert resolve_precision("float32", "gpu") == "float32"


def test_auto_precision_on_accelerators():
    assert resolve_precision("auto", "gpu") == "mixed_float16"
    assert resolve_precision("auto", "tpu") == "mixed_bfloat16"
