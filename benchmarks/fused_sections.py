"""Where the fused update's time goes (--fused-update), timed in place, without a profiler.

torch.profiler inflates the elementwise work it records several times over (docs/performance.md),
so the trainer's own build of fused_update.cpp times itself: while its section timing is on
(set_section_times), each section of the update (every matrix product, every fused elementwise
pass, the Adam steps, the target update, the draws) adds its wall time and call count to a
table. Two learners from the same seed, one with the timing on and one with it off, run
CleanRL's schedule (policy_frequency 2, batch 256, one thread) on random batches in alternating
rounds; the script prints
- per section: ms per update, calls per update, µs per call, share of the update's wall time;
- the totals per kind (product, pass, optimizer, other) and what no section covers: the Python
  around the call and the C++ between sections (row gathers, TD targets, allocations);
- the 256^3 products' time per call in place against a lone 256x256x256 matmul on warm operands,
  timed in the same run: what the surroundings (operands fetched from L3 or memory) cost them;
- the update's product work, counted by torch.profiler from the ATen products the C++ calls (two
  more updates, sections untimed; only their shapes are used), its rate in place, and what the
  products and the update would take at the lone matmul's rate;
- both learners' ms per update, so the timers' own cost shows;
- where oneDNN's matmul runs, the untimed ms per update with each library of float32
  products (ATen's, i.e. MKL's, and oneDNN's) in alternating rounds, and their ratio: the
  figure behind fused.float32_products_library's choice on this CPU.

    python -m benchmarks.fused_sections                      # HalfCheetah-v4 shapes
    python -m benchmarks.fused_sections --env Humanoid-v4
    python -m benchmarks.fused_sections --precision bf16     # the long products in bfloat16

With `--precision bf16` (where the CPU has bfloat16 units) the long products' sections include
rounding their operands and widening their results, and the lone product they are set against
is a bfloat16 one on operands already rounded.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import torch
from tabulate import tabulate
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import (
    GEMM_OPS,
    LEARNING_STARTS,
    alternating_rounds,
    cpu_kind,
    gemm_flops,
    random_batches,
    refuse_bad_counts_and_env,
    run_updates,
    seeded_fast_learner,
)
from sacbench.sac.cpu_features import cpu_flags, onednn_matmul_missing, read_cpuinfo
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.fused import (
    FLOAT32_PRODUCTS_LIBRARIES,
    FusedFormulation,
    float32_products_through,
    fused_update_extension,
)
from sacbench.training.envs import env_spaces

KINDS = ("product", "pass", "optimizer", "other")
CUBE = "(256^3)"  # the label of every 256x256x256 product


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="HalfCheetah-v4", help="its sizes shape the update")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9, help="alternating timed rounds")
    parser.add_argument("--updates", type=int, default=40, help="updates per learner per round")
    parser.add_argument("--warmup", type=int, default=20, help="untimed updates per learner")
    parser.add_argument(
        "--precision", choices=["fp32", "bf16"], default="fp32", help="the trainer's --precision"
    )
    options = parser.parse_args(argv)
    refuse_bad_counts_and_env(parser, options, ("batch_size", "rounds", "updates", "warmup"))
    return options


def fused_learner(
    extension: object, *, obs_dim: int, action_dim: int, batch_size: int, bf16_products: bool
) -> FastLearner:
    learner = seeded_fast_learner(obs_dim=obs_dim, action_dim=action_dim, batch_size=batch_size)
    # The one-call update, on this build.
    learner.formulation = FusedFormulation(extension, bf16_products=bf16_products)
    return learner


def lone_cube_matmul_us(dtype: torch.dtype = torch.float32) -> float:
    """A 256x256x256 matmul in `dtype` on warm operands: best of 5 loops of about 20 ms each
    (a bfloat16 one runs 50 times slower where torch emulates it)."""
    left, right = torch.randn(256, 256, dtype=dtype), torch.randn(256, 256, dtype=dtype)
    out = torch.empty(256, 256, dtype=dtype)
    started = time.perf_counter()
    torch.mm(left, right, out=out)
    repeats = max(1, round(0.02 / (time.perf_counter() - started)))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeats):
            torch.mm(left, right, out=out)
        best = min(best, (time.perf_counter() - started) / repeats)
    return best * 1e6


def product_mflop_per_update(learner: FastLearner, batches: list, steps: range) -> float:
    """The matrix-product work of the learner's updates over `steps`, per update: every ATen
    product they call, counted from its shapes (torch.profiler records the calls the C++ makes
    too). With CleanRL's schedule, count an even number of steps. The products run through ATen
    while counted: the profiler does not see oneDNN's, which the C++ calls directly where
    fused.float32_products_library chooses them (the work is the same)."""
    extension = getattr(learner.formulation, "extension", None)  # None: an eager learner
    products = (
        float32_products_through(extension, "aten") if extension else contextlib.nullcontext()
    )
    with products, profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        run_updates(learner, batches, steps)
    flop = 0.0
    for event in profiler.events():
        if event.name in GEMM_OPS:
            flop += gemm_flops(event.name, event.input_shapes)
    return flop / len(steps) / 1e6


def section_rows(
    table: dict[str, tuple[float, int]], *, updates: int, update_ms: float
) -> list[list[object]]:
    rows = []
    for name, (seconds, calls) in sorted(table.items(), key=lambda item: -item[1][0]):
        ms = seconds / updates * 1e3
        rows.append([name, ms, calls / updates, seconds / calls * 1e6, f"{ms / update_ms:.1%}"])
    return rows


def kind_totals(table: dict[str, tuple[float, int]], *, updates: int) -> dict[str, float]:
    """ms per update by kind of section (product, pass, optimizer, other)."""
    totals = dict.fromkeys(KINDS, 0.0)
    for name, (seconds, _) in table.items():
        kind = name.split(":")[0]
        if kind not in totals:
            raise ValueError(f"section {name!r} names no kind of {KINDS}")
        totals[kind] += seconds / updates * 1e3
    return totals


def kind_rows(table: dict[str, tuple[float, int]], *, updates: int, update_ms: float) -> list:
    totals = kind_totals(table, updates=updates)
    rows = [[kind, ms, f"{ms / update_ms:.1%}"] for kind, ms in totals.items()]
    uncovered = update_ms - sum(totals.values())
    rows.append(["in no section (Python, C++ between sections)", uncovered,
                 f"{uncovered / update_ms:.1%}"])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(1)
    spaces = env_spaces(options.env)
    shapes = {"obs_dim": spaces.observation_size, "action_dim": spaces.action_size}
    build = fused_update_extension()
    bf16 = options.precision == "bf16"
    plain, timed = (
        fused_learner(build, batch_size=options.batch_size, bf16_products=bf16, **shapes)
        for _ in range(2)
    )
    batches = random_batches(batch_size=options.batch_size, **shapes)

    def run(learner: FastLearner, span: range) -> None:
        build.set_section_times(learner is timed)
        run_updates(learner, batches, span)

    first = LEARNING_STARTS + 2  # an even step: each round starts with actor updates
    for learner in (plain, timed):
        run(learner, range(first, first + options.warmup))
    build.reset_section_times()
    steps = range(first, first + options.updates)
    plain_ms, timed_ms = alternating_rounds(
        plain, timed, steps=steps, rounds=options.rounds, run=run
    )
    build.set_section_times(False)
    table = build.section_times()
    updates = options.updates * options.rounds
    update_ms = sum(timed_ms) / len(timed_ms)  # the mean: the sections' totals are sums too
    cube_us = [seconds / calls * 1e6 for name, (seconds, calls) in table.items() if CUBE in name]
    lone_us = lone_cube_matmul_us(torch.bfloat16 if bf16 else torch.float32)
    print(f"{options.env} shapes (obs {shapes['obs_dim']}, act {shapes['action_dim']}), batch "
          f"{options.batch_size}, 1 thread, --fused-update (one call per training step), "
          f"--precision {options.precision}, float32 products through "
          f"{build.float32_products()}, {options.rounds} rounds of {options.updates} "
          "updates")  # fmt: skip
    print(tabulate(section_rows(table, updates=updates, update_ms=update_ms),
                   headers=["section", "ms / update", "calls / update", "µs / call", "share"],
                   floatfmt=".3f", tablefmt="github"))  # fmt: skip
    print()
    print(tabulate(kind_rows(table, updates=updates, update_ms=update_ms),
                   headers=["kind", "ms / update", "share"], floatfmt=".3f",
                   tablefmt="github"))  # fmt: skip
    print()
    print(
        f"256^3 products in place: {min(cube_us):.0f}-{max(cube_us):.0f} µs per call by "
        f"section; a lone {options.precision} 256^3 matmul on warm operands: {lone_us:.0f} µs "
        f"({statistics.median(cube_us) / lone_us:.2f}x in place, median section)"
    )
    product_ms = kind_totals(table, updates=updates)["product"]
    mflop = product_mflop_per_update(plain, batches, range(first, first + 2))
    lone_gflops = 2 * 256**3 / lone_us / 1e3
    at_lone_ms = mflop / lone_gflops
    print(
        f"the update's products: {mflop:.1f} MFLOP, {product_ms:.2f} ms in place "
        f"({mflop / product_ms:.0f} GFLOP/s); at the lone 256^3 matmul's {lone_gflops:.0f} "
        f"GFLOP/s {at_lone_ms:.2f} ms, and the update {update_ms - product_ms + at_lone_ms:.2f} ms"
    )
    print(
        f"ms per update, medians of {options.rounds} alternating rounds: sections untimed "
        f"{statistics.median(plain_ms):.2f}, timed {statistics.median(timed_ms):.2f}"
    )
    if onednn_matmul_missing(cpu_flags(read_cpuinfo())) is None:
        library_ms = library_rounds(plain.formulation.extension, batches, shapes, options)
        aten_ms, onednn_ms = (statistics.median(library_ms[name]) for name in ("aten", "onednn"))
        print(
            f"ms per update by float32 products' library, medians of {options.rounds} "
            f"alternating rounds: aten (MKL) {aten_ms:.2f}, onednn {onednn_ms:.2f}; aten is "
            f"{onednn_ms / aten_ms:.2f}x as fast as onednn; chosen here: "
            f"{plain.formulation.extension.float32_products()}"
        )
    else:
        print("float32 products' library: aten (oneDNN's matmul does not run on this CPU)")
    print(f"torch {torch.__version__}; load average {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print(cpu_kind())
    return 0


def library_rounds(
    extension: object, batches: list, shapes: dict[str, int], options: argparse.Namespace
) -> dict[str, list[float]]:
    """ms per update of two learners from one seed, sections untimed, one multiplying its
    float32 products through each library, in alternating rounds."""
    bf16 = options.precision == "bf16"
    learners = {
        library: fused_learner(
            extension, batch_size=options.batch_size, bf16_products=bf16, **shapes
        )
        for library in FLOAT32_PRODUCTS_LIBRARIES
    }

    def run(library: str, steps: range) -> None:
        with float32_products_through(extension, library):
            run_updates(learners[library], batches, steps)

    first = LEARNING_STARTS + 2
    for library in learners:
        run(library, range(first, first + options.warmup))
    aten_ms, onednn_ms = alternating_rounds(
        "aten", "onednn", steps=range(first, first + options.updates), rounds=options.rounds,
        run=run,
    )  # fmt: skip
    return {"aten": aten_ms, "onednn": onednn_ms}


if __name__ == "__main__":
    raise SystemExit(main())
