"""What this CPU can run, read from the flags of /proc/cpuinfo, never from its vendor or model.

Every choice the fast path makes by CPU (which library multiplies the fused update's float32
products, whether bfloat16 products run in hardware) goes through these functions, so that
tests/test_cpu_features.py can check each choice against the recorded flags of every CPU kind
the project runs on (tests/cpuinfo/).
"""

from __future__ import annotations

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
