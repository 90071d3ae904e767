"""The choices made from CPU flags, against the recorded /proc/cpuinfo of every CPU kind the
project has run on (tests/cpuinfo/): which library multiplies the fused update's float32
products, whether oneDNN's matmul can run at all, and whether bfloat16 products run in hardware.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sacbench.sac.cpu_features import cpu_flags, has_native_bf16, onednn_matmul_missing
from sacbench.sac.fused import FLOAT32_PRODUCTS_VARIABLE, float32_products_library
from sacbench.sac.mixed_precision import native_bf16_products

CPUINFO = Path(__file__).parent / "cpuinfo"

# kind: (the float32 products' library by default, bfloat16 products in hardware)
EXPECTED = {
    "zen3": ("aten", False),  # AVX2 only: oneDNN's matmul does not run, bf16 is emulated
    "zen4": ("onednn", True),  # AVX-512 at 256-bit width, AVX512-BF16
    "zen5": ("onednn", True),  # AVX-512 at full width, AVX512-BF16
    "intel-xeon-amx": ("onednn", True),  # AVX-512, AMX-BF16
}


def recorded(kind: str) -> str:
    return (CPUINFO / f"{kind}.txt").read_text()


def test_every_recorded_kind_has_an_expectation():
    assert sorted(path.stem for path in CPUINFO.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_cpu_kind_chooses_by_its_flags(kind: str):
    library, native_bf16 = EXPECTED[kind]
    flags = cpu_flags(recorded(kind))
    assert "avx2" in flags and "fma" in flags  # the line was read, not an empty set
    assert float32_products_library(cpuinfo=recorded(kind), environ={}) == library
    assert (onednn_matmul_missing(flags) is None) == (library == "onednn")
    assert has_native_bf16(flags) == native_bf16
    assert native_bf16_products(torch.device("cpu"), cpuinfo=CPUINFO / f"{kind}.txt") == (
        native_bf16
    )


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_the_variable_chooses_any_library_the_cpu_can_run(kind: str):
    cpuinfo = recorded(kind)
    assert float32_products_library(cpuinfo=cpuinfo, environ={FLOAT32_PRODUCTS_VARIABLE: "aten"})
    can_run_onednn = EXPECTED[kind][0] == "onednn"
    environ = {FLOAT32_PRODUCTS_VARIABLE: "onednn"}
    if can_run_onednn:
        assert float32_products_library(cpuinfo=cpuinfo, environ=environ) == "onednn"
    else:
        with pytest.raises(ValueError) as refused:
            float32_products_library(cpuinfo=cpuinfo, environ=environ)
        message = str(refused.value)
        assert f"${FLOAT32_PRODUCTS_VARIABLE} is 'onednn'" in message
        assert "lack avx512bw and avx512dq and avx512vl (or avx_ne_convert)" in message


def test_an_unknown_library_is_refused_by_name():
    with pytest.raises(ValueError, match=r"\$SACBENCH_FLOAT32_PRODUCTS is 'mkl'; it must be one"):
        float32_products_library(
            cpuinfo=recorded("zen5"), environ={FLOAT32_PRODUCTS_VARIABLE: "mkl"}
        )


def test_without_cpu_flags_nothing_optional_is_assumed(tmp_path: Path):
    assert float32_products_library(cpuinfo="", environ={}) == "aten"
    assert not native_bf16_products(torch.device("cpu"), cpuinfo=tmp_path / "absent")


def test_only_the_first_processors_flags_count_and_arm_features_are_read():
    two_processors = recorded("zen3") + "\nprocessor\t: 1\nflags\t\t: avx512bw avx512vl avx512dq\n"
    assert onednn_matmul_missing(cpu_flags(two_processors)) is not None
    graviton = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\nCPU part\t: 0xd40\n"
    assert cpu_flags(graviton) == {"fp", "asimd", "sve", "bf16", "i8mm"}
