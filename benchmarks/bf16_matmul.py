"""Does this machine gain from --precision bf16? A bfloat16 matrix product against float32.

Times a lone 256x256x256 product (the size of the networks' hidden layers) in float32 and in
bfloat16 on one thread, alternating, best of 7 x 50 products each time, and prints GFLOP/s and
the median of the per-round ratios bfloat16 / float32, next to what sacbench reads of the CPU's
bfloat16 units (sacbench.sac.mixed_precision.native_bf16_products). A ratio below 1 means torch
emulates bfloat16 here and --precision bf16 would slow training down.

oneDNN's instruction set can be capped to see the emulation on a CPU that has the units:

    python benchmarks/bf16_matmul.py
    ONEDNN_MAX_CPU_ISA=AVX512_CORE python benchmarks/bf16_matmul.py   # AVX-512 without BF16
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/bf16_matmul.py          # as on AMD Zen 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the sibling module

from profile_step import matmul_peak_gflops  # noqa: E402

from sacbench.sac.mixed_precision import native_bf16_products  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating float32/bf16 rounds")
    args = parser.parse_args(argv)
    if args.rounds <= 0:
        parser.error(f"--rounds must be positive, got {args.rounds}")
    return args


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(1)
    rates: dict[torch.dtype, list[float]] = {torch.float32: [], torch.bfloat16: []}
    for _ in range(options.rounds):
        for dtype, measured in rates.items():
            measured.append(matmul_peak_gflops(dtype))
    ratio = statistics.median(
        low / high for low, high in zip(rates[torch.bfloat16], rates[torch.float32], strict=True)
    )
    print(
        tabulate(
            [
                [str(dtype).removeprefix("torch."), f"{statistics.median(measured):.0f}"]
                for dtype, measured in rates.items()
            ],
            headers=["256x256x256 product", "GFLOP/s (median of rounds)"],
            tablefmt="github",
        )
    )
    native = native_bf16_products(torch.device("cpu"))
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "not set")
    print(
        f"\nbfloat16 / float32: {ratio:.2f} (median of {options.rounds} alternating rounds); "
        f"bfloat16 units in /proc/cpuinfo: {'yes' if native else 'no'}; "
        f"ONEDNN_MAX_CPU_ISA: {cap}; torch {torch.__version__}, 1 thread"
    )
    verdict = "gains from" if ratio > 1 else "would be slowed down by"
    print(f"This machine {verdict} --precision bf16's products.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
