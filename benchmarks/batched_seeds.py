"""Per-seed update throughput of S seeds batched in one BatchedLearner vs S FastLearners alone.

For each task and each S, in one process on one thread: S FastLearners (the default hand-written
fast path, and the autograd one the batched learner computes per seed), each timed for
`--updates` consecutive updates one after another, as separate runs of the seeds would do them,
and one BatchedLearner holding the same S seeds' initial networks (built from S FastLearners
made like the alone ones), timed for `--updates` steps of all S seeds (stacking the S batches
included). The rounds alternate, so a change in machine load hits both sides alike; the ratio is
the median over rounds of the per-round ratio batched / alone of per-seed updates per second
(benchmarks/update_throughput.py's median_ratio). Batches are random transitions of the task's
shape (update_throughput.random_batches), CleanRL's schedule with policy_frequency 2.

    python benchmarks/batched_seeds.py      # HalfCheetah-v4 and Humanoid-v4, S = 2 4 8
    python benchmarks/batched_seeds.py --seeds 4 --rounds 9 --envs Hopper-v4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the sibling module

from update_throughput import LEARNING_STARTS, median_ratio, random_batches  # noqa: E402

from sacbench.sac.algorithm import Batch, update_schedule  # noqa: E402
from sacbench.sac.args import Args  # noqa: E402
from sacbench.sac.batched import BatchedLearner, stack_batches  # noqa: E402
from sacbench.sac.fast_learner import FastLearner  # noqa: E402

ALONE_PATHS = {"fast": "handwritten", "fast-autograd": "autograd"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v4", "Humanoid-v4"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[2, 4, 8], help="values of S")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--policy-frequency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7, help="alternating timed rounds")
    parser.add_argument("--updates", type=int, default=20, help="steps per seed per round")
    parser.add_argument("--warmup", type=int, default=4, help="untimed steps per side")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=1, help="the first seed; S seeds from it")
    options = parser.parse_args(argv)
    for name in ("batch_size", "policy_frequency", "rounds", "updates", "threads"):
        if getattr(options, name) <= 0:
            parser.error(
                f"--{name.replace('_', '-')} must be positive, got {getattr(options, name)}"
            )
    if options.warmup < 0:
        parser.error(f"--warmup must be non-negative, got {options.warmup}")
    bad = [count for count in options.seeds if count < 1]
    if bad:
        parser.error(f"--seeds: each S must be at least 1, got {bad}")
    return options


class Sides:
    """The alone learners (per path) and the batched learner of one (task, S), with the step
    each side has reached and the batches they share (seed s reads batch (step + 7 s) mod n)."""

    def __init__(self, *, env_id: str, seeds: int, options: argparse.Namespace) -> None:
        self.batches, low, high = random_batches(
            env_id=env_id, count=32, batch_size=options.batch_size, seed=options.seed
        )
        self.shape = f"{self.batches[0].observations.shape[1]}/{len(low)}"
        self.seeds, self.policy_frequency = seeds, options.policy_frequency

        def learner(seed: int, gradients: str) -> FastLearner:
            torch.manual_seed(seed)
            args = Args(env_id=env_id, seed=seed, batch_size=options.batch_size,
                        policy_frequency=options.policy_frequency)  # fmt: skip
            obs_dim = self.batches[0].observations.shape[1]
            return FastLearner(obs_dim=obs_dim, action_low=low, action_high=high, args=args,
                               device=torch.device("cpu"), gradients=gradients)  # type: ignore[arg-type]  # fmt: skip

        seed_ids = range(options.seed, options.seed + seeds)
        self.alone = {
            path: [learner(seed, gradients) for seed in seed_ids]
            for path, gradients in ALONE_PATHS.items()
        }
        self.batched = BatchedLearner(
            learners=[learner(seed, "autograd") for seed in seed_ids],
            generators=[torch.Generator().manual_seed(seed) for seed in seed_ids],
        )
        self.next_step = dict.fromkeys([*self.alone, "batched"], LEARNING_STARTS + 1)

    def batch(self, step: int, seed_index: int) -> Batch:
        return self.batches[(step + 7 * seed_index) % len(self.batches)]

    def run(self, side: str, count: int) -> tuple[float, float]:
        """(wall, thread CPU) seconds for `count` steps of every seed on `side`."""
        first = self.next_step[side]
        self.next_step[side] += count
        schedules = [
            update_schedule(step, learning_starts=LEARNING_STARTS,
                            policy_frequency=self.policy_frequency, target_network_frequency=1)
            for step in range(first, first + count)
        ]  # fmt: skip
        wall, cpu = time.perf_counter(), time.thread_time()
        if side == "batched":
            for step, schedule in zip(range(first, first + count), schedules, strict=True):
                stacked = stack_batches([self.batch(step, s) for s in range(self.seeds)])
                self.batched.update(stacked, schedule)
        else:
            for index, learner in enumerate(self.alone[side]):
                for step, schedule in zip(range(first, first + count), schedules, strict=True):
                    learner.update(self.batch(step, index), schedule)
        return time.perf_counter() - wall, time.thread_time() - cpu


def benchmark(env_id: str, seeds: int, options: argparse.Namespace) -> list[list[object]]:
    """Rows (one per side) of per-seed updates/s and the ratios batched / alone."""
    sides = Sides(env_id=env_id, seeds=seeds, options=options)
    names = [*sides.alone, "batched"]
    for name in names:
        sides.run(name, options.warmup)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(options.rounds):
        shift = round_index % len(names)  # rotate the order: no side always follows another
        for name in names[shift:] + names[:shift]:
            wall_seconds, cpu_seconds = sides.run(name, options.updates)
            wall[name].append(seeds * options.updates / wall_seconds)
            cpu[name].append(seeds * options.updates / cpu_seconds)
    rows: list[list[object]] = []
    for name in names:
        label = f"batched (S={seeds})" if name == "batched" else f"{name} alone x{seeds}"
        ratios = ["", "", "", ""]
        if name == "batched":
            ratios = [
                f"{median_ratio(times[name], times[alone]):.2f}"
                for times in (wall, cpu)
                for alone in ALONE_PATHS
            ]
        medians = [f"{statistics.median(times[name]):.1f}" for times in (wall, cpu)]
        rows.append([env_id, sides.shape, label, *medians, *ratios])
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(options.threads)
    load_before = os.getloadavg()
    rows: list[list[object]] = []
    for env_id in options.envs:
        for seeds in options.seeds:
            rows.extend(benchmark(env_id, seeds, options))
    load_after = os.getloadavg()
    headers = ["env", "obs/act", "side", "per-seed updates/s (wall)", "per-seed updates/s (CPU)",
               "batched / fast (wall)", "batched / fast-autograd (wall)",
               "batched / fast (CPU)", "batched / fast-autograd (CPU)"]  # fmt: skip
    print(tabulate(rows, headers=headers, tablefmt="github"))
    print(
        f"\nbatch {options.batch_size}, policy_frequency {options.policy_frequency}, "
        f"{options.threads} thread(s), {options.rounds} rounds x {options.updates} steps per "
        f"seed, torch {torch.__version__}, load average before/after "
        f"{load_before[0]:.2f}/{load_after[0]:.2f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
