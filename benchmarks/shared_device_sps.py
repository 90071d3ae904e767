"""Steady training SPS of N trainers sharing one device: per run and in aggregate.

For each N of `--runs`, starts N real trainers (`python -m sacbench.train --threads 1`, fast
update path, seeds 1..N, each with its own run dir in a temporary folder) at the same time on
`--device` (cuda: the same GPU for all of them, with `--compile --cudagraphs` unless `--eager`),
waits for all of them, and reads each run's charts/steady_SPS back from its event files (steps
per second over each 100-step window; a run's first window, which holds start-up, the
random-action phase and any compilation, is dropped).

Definitions (printed under the table as well):

- shared span: from the latest start of any run's first kept window to the earliest end of
  any run's last window, i.e. the time in which all N runs were training;
- per-run SPS: the median of one run's steady_SPS over its windows that lie wholly inside the
  shared span (for N = 1: all its kept windows); the table gives the median over the N runs and
  their min-max;
- aggregate SPS: the sum of the N per-run SPS, i.e. the steps per second the device delivers
  to all N runs together while they all train;
- peak RSS: the largest peak resident memory of one child (os.wait4).

With `--one-core`, every trainer is pinned to one CPU (the first this process may use).

    python -m benchmarks.shared_device_sps --device cuda --runs 1 2 4 8
    python -m benchmarks.shared_device_sps --device cpu --runs 1 2 --one-core
    python -m benchmarks.shared_device_sps --device cpu --env Hopper-v4 --runs 1 2 \\
        --total-timesteps 3000 --learning-starts 1000 --extra --batch-size 64
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from benchmarks.common import (
    check_budget,
    finish_trainer,
    shared_window_rates,
    start_trainer,
    steady_windows,
)
from sacbench.provenance import cpu_model, gpu_model
from sacbench.training.envs import EnvError, env_spaces

GPU_FLAGS = ("--compile", "--cudagraphs")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="HalfCheetah-v4")
    parser.add_argument(
        "--runs", nargs="+", type=int, default=[1, 4, 8], help="numbers of runs sharing the device"
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--eager",
        action="store_true",
        help=f"on cuda, leave out the default {' '.join(GPU_FLAGS)}",
    )
    parser.add_argument("--total-timesteps", type=int, default=15_000)
    parser.add_argument("--learning-starts", type=int, default=5_000)
    parser.add_argument("--buffer-size", type=int, default=1_000_000)
    parser.add_argument(
        "--one-core", action="store_true", help="pin every trainer to one CPU (the first allowed)"
    )
    parser.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="more trainer flags (last)"
    )
    args = parser.parse_args(argv)
    try:
        env_spaces(args.env)
    except EnvError as error:
        parser.error(f"--env: {error}")
    too_few = [n for n in args.runs if n < 1]
    if too_few:
        parser.error(f"--runs: each number of runs must be at least 1, got {too_few[0]}")
    if len(set(args.runs)) != len(args.runs):
        parser.error(f"--runs: each number of runs once, got {' '.join(map(str, args.runs))}")
    check_budget(parser, total_timesteps=args.total_timesteps, learning_starts=args.learning_starts)
    if args.eager and args.device != "cuda":
        parser.error("--eager applies to --device cuda only (cpu runs are eager already)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error(
                f"--device cuda: torch.cuda.is_available() is False on this machine (torch "
                f"{torch.__version__}, CUDA build {torch.version.cuda}); run this on a GPU "
                "node, or pass --device cpu to measure the CPU"
            )
    return args


def trainer_flags(options: argparse.Namespace) -> list[str]:
    """Flags after common.trainer_command's: device, the GPU path's, evaluation off, --extra."""
    compiled = options.device == "cuda" and not options.eager
    gpu = list(GPU_FLAGS) if compiled else []
    # The final evaluation runs after the last window; it would only lengthen the benchmark.
    return ["--device", options.device, *gpu, "--eval-episodes", "0", *options.extra]


def run_options(options: argparse.Namespace, *, seed: int) -> argparse.Namespace:
    """What common.trainer_command reads, for one run of the fast path."""
    flags = trainer_flags(options)
    return argparse.Namespace(**{**vars(options), "seed": seed, "extra": flags})


def pinned_cpus(options: argparse.Namespace) -> set[int] | None:
    """--one-core: the one CPU every trainer is pinned to; otherwise None (no pinning)."""
    return {min(os.sched_getaffinity(0))} if options.one_core else None


@dataclass(frozen=True)
class SharedResult:
    """One N: each run's SPS over the shared span (seed order), peak RSS, wall seconds."""

    runs: int
    per_run_sps: list[float]
    peak_rss: list[int]
    wall_seconds: float

    @property
    def aggregate_sps(self) -> float:
        return sum(self.per_run_sps)


def run_together(scratch: Path, *, runs: int, options: argparse.Namespace) -> SharedResult:
    """Start `runs` trainers at once, wait for all; stop the rest if one fails."""
    started = time.time()
    run_dirs = [scratch / f"N{runs}-seed{seed}" for seed in range(1, runs + 1)]
    children: list[subprocess.Popen] = []
    try:
        for seed, run_dir in enumerate(run_dirs, start=1):
            run = run_options(options, seed=seed)
            children.append(
                start_trainer(
                    run_dir, env_id=options.env, path="fast", options=run, cpus=pinned_cpus(options)
                )
            )
        peak_rss = [finish_trainer(*pair) for pair in zip(children, run_dirs, strict=True)]
    finally:
        for child in children:
            if child.returncode is None:
                child.terminate()
                child.wait()
    wall = time.time() - started
    shared = shared_window_rates([steady_windows(run_dir) for run_dir in run_dirs])
    if not all(shared):
        raise SystemExit(
            f"N={runs}: the runs never all trained at the same time for a whole 100-step window "
            "(one started too late or finished too early); raise --total-timesteps"
        )
    return SharedResult(
        runs=runs,
        per_run_sps=[statistics.median(rates) for rates in shared],
        peak_rss=peak_rss,
        wall_seconds=wall,
    )


def device_name(device: str) -> str:
    return gpu_model("cuda") if device == "cuda" else f"{cpu_model()}, {os.cpu_count()} CPUs"


def table(results: list[SharedResult]) -> str:
    """The table of N runs sharing the device."""
    one_run = next((result.aggregate_sps for result in results if result.runs == 1), None)
    rows = []
    for result in results:
        sps = result.per_run_sps
        rows.append(
            [
                result.runs,
                f"{statistics.median(sps):.1f}",
                f"{min(sps):.1f}-{max(sps):.1f}",
                f"{result.aggregate_sps:.1f}",
                "-" if one_run is None else f"{result.aggregate_sps / one_run:.2f}",
                f"{max(result.peak_rss) / 2**20:.0f}",
                f"{result.wall_seconds:.0f}",
            ]
        )
    headers = ["N", "per-run SPS (median)", "per-run min-max", "aggregate SPS",
               "aggregate / N=1", "peak RSS per child (MiB)", "wall (s)"]  # fmt: skip
    return tabulate(
        rows,
        headers=headers,
        tablefmt="github",
        disable_numparse=True,
        colalign=["right"] * len(headers),
    )


def footnote(options: argparse.Namespace, *, loads: tuple[float, float]) -> str:
    flags = " ".join(trainer_flags(options))
    lines = [
        f"device: {options.device} ({device_name(options.device)}); load average "
        f"before/after {loads[0]:.2f}/{loads[1]:.2f}"
        + ("; every trainer pinned to one CPU" if options.one_core else ""),
        f"{options.env}, {options.total_timesteps} steps, learning_starts "
        f"{options.learning_starts}, buffer {options.buffer_size}; each run: python -m "
        f"sacbench.train --threads 1 --update-path fast {flags} --seed <1..N>",
        "per-run SPS: the median of one run's charts/steady_SPS over its 100-step windows "
        "that lie wholly in the span where all N runs were training (each run's first "
        "window dropped)",
        "aggregate SPS: the sum of the N per-run SPS; peak RSS: the largest child's",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    load_before = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory(prefix="sacbench-shared-sps-") as scratch:
        for runs in options.runs:
            result = run_together(Path(scratch), runs=runs, options=options)
            results.append(result)
            print(f"N={runs}: {summary(result, what='run')}", flush=True)
    print()
    print(table(results))
    print()
    print(footnote(options, loads=(load_before, os.getloadavg()[0])))
    return 0


def summary(result: SharedResult, *, what: str) -> str:
    seeds = f"seed 1{f'..{result.runs}' if result.runs > 1 else ''}"
    return (
        f"steady SPS per {what} ({seeds}) "
        f"{', '.join(f'{sps:.1f}' for sps in result.per_run_sps)}; aggregate "
        f"{result.aggregate_sps:.1f}; {result.wall_seconds:.0f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
