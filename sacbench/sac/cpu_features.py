"""What this CPU can run, read from the flags of /proc/cpuinfo, never from its vendor or model,
and which code path MKL, ATen's library, runs on it, as MKL itself reports it.

Every choice the fast path makes by CPU (which library multiplies the fused update's float32
products, whether bfloat16 products run in hardware) goes through these functions, so that
tests/test_cpu_features.py can check each choice against the recorded flags of every CPU kind
the project runs on (tests/cpuinfo/).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
import tempfile
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

# x86 flags of CPUs that multiply bfloat16 matrices in hardware.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})

# oneDNN's matmul, as libtorch calls it (at::native::mkldnn_matmul), refuses to run unless the
# CPU has one of these sets (torch's mkldnn_bf16_device_check; Arm's Graviton3 aside, which no
# flag names): on an AVX2-only CPU it stops with a RuntimeError, whatever the dtype.
ONEDNN_MATMUL_FLAG_SETS = (
    frozenset({"avx512bw", "avx512vl", "avx512dq"}),
    frozenset({"avx_ne_convert"}),
)


def read_cpuinfo(path: Path = CPUINFO) -> str:
    """The text of /proc/cpuinfo, or "" where there is none (not Linux, a sandbox)."""
    try:
        return path.read_text()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of the first processor listed (x86 "flags", Arm "Features")."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def has_native_bf16(flags: frozenset[str]) -> bool:
    """Whether the CPU multiplies bfloat16 matrices in hardware (else torch emulates them)."""
    return bool(flags & NATIVE_BF16_FLAGS)


def onednn_matmul_missing(flags: frozenset[str]) -> str | None:
    """None where oneDNN's matmul runs on a CPU with these flags; otherwise what it lacks."""
    if any(needed <= flags for needed in ONEDNN_MATMUL_FLAG_SETS):
        return None
    first, *others = (" and ".join(sorted(needed - flags)) for needed in ONEDNN_MATMUL_FLAG_SETS)
    return first + "".join(f" (or {other})" for other in others)


# The instruction sets of MKL's AVX2 code path (Intel's Haswell and later). MKL runs it on Intel's
# CPUs only; on another vendor's it runs its generic x86 code path, unless told the CPU is Intel's
# (sacbench.sac.fused, answer_mkl_vendor_checks in fused_update.cpp).
MKL_AVX2_FLAGS = frozenset({"avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"})


def mkl_avx2_kernels_apply(flags: frozenset[str]) -> bool:
    """Whether the fused update has MKL run its AVX2 kernels whatever the CPU's vendor: where the
    CPU has their instruction sets and oneDNN's matmul cannot run, so that MKL multiplies every
    float32 product (AVX2-only CPUs, e.g. AMD's Zen 3). On AVX-512 CPUs the products are oneDNN's
    or MKL's own AVX-512 ones (sacbench.sac.fused.float32_products_library)."""
    return flags >= MKL_AVX2_FLAGS and onednn_matmul_missing(flags) is not None


# How MKL's verbose mode names its AVX-512 code path in the first line it prints, e.g. "MKL_VERBOSE
# oneMKL 2024.0 ... for Intel(R) 64 architecture Intel(R) Advanced Vector Extensions 512 (Intel(R)
# AVX-512) ...". MKL picks its kernels itself and keeps the AVX-512 ones for Intel's CPUs: on
# AMD's AVX-512 CPUs it runs its AVX2 ones.
MKL_AVX512 = re.compile(r"AVX-?512")


@functools.cache
def mkl_code_path() -> str | None:
    """The line in which MKL names the code path it runs on this CPU: the first line of its
    verbose mode, which it prints once per process, on its first call with verbose on. One 8x8
    product is run with verbose on and the process's standard output (file descriptor 1)
    captured meanwhile, so nothing reaches the console or a log. None where torch has no MKL
    or MKL printed no such line (its verbose mode was already on: $MKL_VERBOSE)."""
    import torch

    if not torch.backends.mkl.is_available():
        return None
    sys.stdout.flush()
    libc = ctypes.CDLL(None)
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(1)
        try:
            os.dup2(captured.fileno(), 1)
            try:
                with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                    torch.mm(torch.ones(8, 8), torch.ones(8, 8))
            finally:
                libc.fflush(None)  # MKL prints through C's buffered stdout
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        captured.seek(0)
        printed = captured.read().decode(errors="replace")
    for line in printed.splitlines():
        if line.startswith("MKL_VERBOSE") and "architecture" in line:
            return line
    return None


def mkl_runs_avx512(code_path: str | None) -> bool:
    """Whether MKL's report of its code path (mkl_code_path) names AVX-512 kernels."""
    return code_path is not None and MKL_AVX512.search(code_path) is not None
