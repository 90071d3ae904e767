"""Update throughput of the reference and fast SAC update paths, in one process, on one thread.

Three learners: the reference path (CleanRL's computation), the fast path with its gradients
written by hand (the default, sacbench.sac.handwritten) and the fast path through autograd
("fast-autograd", the formulation --compile compiles). All start from the same networks
(FastLearner.from_reference), see the same batches in the same order (sampled from one
ReplayBuffer filled with random transitions of the task's shape) and run in alternating rounds,
so a change in machine load hits them alike. Each round times
`--updates` consecutive updates of each learner, with CleanRL's schedule (policy_frequency 2: an
actor and an alpha update pair twice every other step). The ratio is the median over rounds of
the per-round ratio path / reference.

    python benchmarks/update_throughput.py                      # HalfCheetah-v4 and Humanoid-v4
    python benchmarks/update_throughput.py --compile            # add a torch.compile column
    python benchmarks/update_throughput.py --bf16               # add --precision bf16 rows
    python benchmarks/update_throughput.py --fused              # add a --fused-update row
    python benchmarks/update_throughput.py --fused --bf16       # ... and each in bf16 too
    python benchmarks/update_throughput.py --envs Hopper-v4 --rounds 9
    python benchmarks/update_throughput.py --against /path/to/other/checkout  # A/B of two trees
    python benchmarks/update_throughput.py --fused --against . \
        --against-env GLIBC_TUNABLES=glibc.malloc.hugetlb=1       # A/B of a process setting

`--against TREE` compares two implementations of the fast path instead: this checkout's and the
one in TREE (another git worktree, e.g. of main). Each runs in its own worker process whose
PYTHONPATH puts its tree first; the parent tells them in turn to time one round, so only one
computes at a time and both meet the same machine speed. The ratio is again the median of the
per-round ratios, this checkout / TREE (with `--fused`, of their `--fused-update`). Both start
from the same networks and see the same batches and random draws, so their parameters must agree
to float rounding at the end (printed). `--against-env NAME=VALUE` (repeatable) starts the TREE
worker with these environment variables too: with `--against .` it measures a setting that a
process reads only at its start (glibc's tunables, MKL's and oneDNN's variables) against this
checkout without it. Each worker also reports how much of its memory the kernel backs with
transparent huge pages (AnonHugePages), so that a huge-page setting is seen to take effect.

Wall time is what a run experiences; CPU time (the thread's own) is less disturbed by other
processes on a shared machine, so both are printed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.learners import Learner
from sacbench.sac.reference_learner import ReferenceLearner
from sacbench.training.envs import make_env
from sacbench.training.replay import ReplayBuffer

LEARNING_STARTS = 5_000
THIS_TREE = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v4", "Humanoid-v4"])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--policy-frequency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7, help="alternating timed rounds")
    parser.add_argument("--updates", type=int, default=40, help="updates per learner per round")
    parser.add_argument("--warmup", type=int, default=10, help="untimed updates per learner")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--compile", action="store_true", help="also time fast-autograd compiled")
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="also time both fast formulations (with --fused, all three) with --precision bf16 "
        "(docs/performance.md)",
    )
    parser.add_argument(
        "--fused",
        action="store_true",
        help="also time --fused-update (the hand-written update in C++; needs g++ and ninja); "
        "with --against, compare the two trees' --fused-update",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--against",
        type=Path,
        metavar="TREE",
        help="compare this checkout's fast path with the one in TREE (a source tree of sacbench)",
    )
    parser.add_argument(
        "--against-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the --against worker only (repeatable)",
    )
    parser.add_argument(
        "--worker", metavar="ENV", help=argparse.SUPPRESS
    )  # internal: see --against
    args = parser.parse_args(argv)
    if args.against is not None and not (args.against / "sacbench" / "__init__.py").is_file():
        parser.error(f"--against {args.against}: no sacbench package there (sacbench/__init__.py)")
    if args.against is not None and args.compile:
        parser.error("--against compares the eager fast paths: drop --compile")
    if args.against_env and args.against is None:
        parser.error("--against-env sets the --against worker's environment: give --against too")
    for setting in args.against_env:
        name, equals, _ = setting.partition("=")
        if not (equals and name.isidentifier()):
            parser.error(f"--against-env {setting!r}: expected NAME=VALUE")
    for name in ("batch_size", "policy_frequency", "rounds", "updates", "threads"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be non-negative, got {args.warmup}")
    return args


def random_batches(
    *, env_id: str, count: int, batch_size: int, seed: int
) -> tuple[list[Batch], np.ndarray, np.ndarray]:
    """`count` batches sampled from a buffer of random transitions shaped like `env_id`'s."""
    env = make_env(env_id, seed=seed)
    low, high = env.action_space.low, env.action_space.high
    obs_dim = int(np.prod(env.observation_space.shape))
    env.close()
    rng = np.random.default_rng(seed)
    capacity = 20 * batch_size
    buffer = ReplayBuffer(
        capacity=capacity, obs_dim=obs_dim, action_dim=len(low), seed=seed, device="cpu"
    )
    for _ in range(capacity):
        buffer.add(
            observation=rng.standard_normal(obs_dim).astype(np.float32),
            next_observation=rng.standard_normal(obs_dim).astype(np.float32),
            action=rng.uniform(low, high).astype(np.float32),
            reward=float(rng.standard_normal()),
            terminated=bool(rng.random() < 0.01),
        )
    return [buffer.sample(batch_size) for _ in range(count)], low, high


def make_learners(
    *,
    obs_dim: int,
    low: np.ndarray,
    high: np.ndarray,
    args: Args,
    compile_too: bool,
    bf16_too: bool = False,
    fused_too: bool = False,
) -> dict[str, Learner]:
    torch.manual_seed(args.seed)
    reference = ReferenceLearner(
        obs_dim=obs_dim, action_low=low, action_high=high, args=args, device=torch.device("cpu")
    )
    cpu = torch.device("cpu")
    learners: dict[str, Learner] = {
        "reference": reference,
        "fast-autograd": FastLearner.from_reference(reference, device=cpu, gradients="autograd"),
        "fast": FastLearner.from_reference(reference, device=cpu, gradients="handwritten"),
    }
    if fused_too:
        learners["fast-fused"] = FastLearner.from_reference(
            reference, device=cpu, gradients="fused"
        )
    if bf16_too:
        bf16 = copy.copy(reference)  # the same networks, read with --precision bf16's args
        bf16.args = dataclasses.replace(args, precision="bf16")
        named = [("fast-bf16", "handwritten"), ("fast-autograd-bf16", "autograd")]
        named += [("fast-fused-bf16", "fused")] if fused_too else []
        for name, gradients in named:
            learners[name] = FastLearner.from_reference(bf16, device=cpu, gradients=gradients)
    if compile_too:
        compiled = FastLearner(
            obs_dim=obs_dim,
            action_low=low,
            action_high=high,
            args=dataclasses.replace(args, compile=True),
            device=torch.device("cpu"),
        )
        compiled.load_state_dict(copy.deepcopy(learners["fast-autograd"].state_dict()))
        learners["fast+compile"] = compiled
    return learners


def timed_updates(
    learner: Learner, batches: list[Batch], *, first_step: int, count: int, policy_frequency: int
) -> tuple[float, float]:
    """(wall seconds, thread CPU seconds) for `count` updates from global step `first_step`."""
    schedules = [
        update_schedule(
            first_step + offset,
            learning_starts=LEARNING_STARTS,
            policy_frequency=policy_frequency,
            target_network_frequency=1,
        )
        for offset in range(count)
    ]
    wall, cpu = time.perf_counter(), time.thread_time()
    for offset, schedule in enumerate(schedules):
        learner.update(batches[(first_step + offset) % len(batches)], schedule)
    return time.perf_counter() - wall, time.thread_time() - cpu


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    """The median over rounds of the per-round ratio ours / theirs (not a ratio of medians).

    Both learners of a round ran under the same machine load, so each round's ratio cancels it.
    """
    return statistics.median(mine / reference for mine, reference in zip(ours, theirs, strict=True))


def benchmark_env(env_id: str, options: argparse.Namespace) -> list[list[object]]:
    batches, low, high = random_batches(
        env_id=env_id, count=64, batch_size=options.batch_size, seed=options.seed
    )
    obs_dim = batches[0].observations.shape[1]
    args = Args(
        env_id=env_id,
        seed=options.seed,
        batch_size=options.batch_size,
        policy_frequency=options.policy_frequency,
    )
    learners = make_learners(
        obs_dim=obs_dim,
        low=low,
        high=high,
        args=args,
        compile_too=options.compile,
        bf16_too=options.bf16,
        fused_too=options.fused,
    )
    next_step = dict.fromkeys(learners, LEARNING_STARTS + 1)

    def run(name: str, count: int) -> tuple[float, float]:
        torch.manual_seed(options.seed + next_step[name])  # the same draws for every learner
        result = timed_updates(
            learners[name],
            batches,
            first_step=next_step[name],
            count=count,
            policy_frequency=options.policy_frequency,
        )
        next_step[name] += count
        return result

    for name in learners:
        run(name, options.warmup)
    wall: dict[str, list[float]] = {name: [] for name in learners}
    cpu: dict[str, list[float]] = {name: [] for name in learners}
    names = list(learners)
    for round_index in range(options.rounds):
        # Rotate the order so no learner always runs right after the same other one.
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            wall_seconds, cpu_seconds = run(name, options.updates)
            wall[name].append(options.updates / wall_seconds)
            cpu[name].append(options.updates / cpu_seconds)

    rows = []
    for name in names:
        rows.append(
            [
                env_id,
                f"{obs_dim}/{len(low)}",
                name,
                f"{statistics.median(wall[name]):.1f}",
                f"{statistics.median(cpu[name]):.1f}",
                f"{median_ratio(wall[name], wall['reference']):.2f}",
                f"{median_ratio(cpu[name], cpu['reference']):.2f}",
            ]
        )
    return rows


def fast_learner_for(env_id: str, options: argparse.Namespace) -> tuple[FastLearner, list[Batch]]:
    """The hand-written fast learner of `make_learners` (same seed, same initial networks) and
    the batches `benchmark_env` uses, for one --against worker."""
    batches, low, high = random_batches(
        env_id=env_id, count=64, batch_size=options.batch_size, seed=options.seed
    )
    args = Args(
        env_id=env_id,
        seed=options.seed,
        batch_size=options.batch_size,
        policy_frequency=options.policy_frequency,
    )
    torch.manual_seed(args.seed)
    cpu = torch.device("cpu")
    reference = ReferenceLearner(
        obs_dim=batches[0].observations.shape[1], action_low=low, action_high=high, args=args,
        device=cpu,
    )  # fmt: skip
    gradients = "fused" if options.fused else "handwritten"
    return FastLearner.from_reference(reference, device=cpu, gradients=gradients), batches


def worker(options: argparse.Namespace) -> int:
    """An --against worker: answers each stdin line "<count>" with the timings of `count`
    updates, and "save <path>" by saving the networks' parameters there."""
    import sacbench  # whichever tree PYTHONPATH put first

    torch.set_num_threads(options.threads)
    learner, batches = fast_learner_for(options.worker, options)
    shape = [batches[0].observations.shape[1], batches[0].actions.shape[1]]
    path = "fast-fused" if learner.gradients == "fused" else "fast"
    print(json.dumps({"sacbench": sacbench.__file__, "shape": shape, "path": path}), flush=True)
    next_step = LEARNING_STARTS + 1
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "save":
            networks = {"actor": learner.actor, "critic": learner.critic}
            torch.save({k: net.state_dict() for k, net in networks.items()}, argument)
            print(json.dumps({"saved": argument}), flush=True)
            continue
        count = int(command)
        torch.manual_seed(options.seed + next_step)  # the same draws in both trees
        wall, cpu = timed_updates(
            learner, batches, first_step=next_step, count=count,
            policy_frequency=options.policy_frequency,
        )  # fmt: skip
        next_step += count
        print(json.dumps({"wall": wall, "cpu": cpu, "huge_kib": huge_page_kib()}), flush=True)
    return 0


def huge_page_kib() -> int | None:
    """This process's anonymous memory backed by transparent huge pages, in KiB (Linux only)."""
    rollup = Path("/proc/self/smaps_rollup")
    if not rollup.exists():
        return None
    for line in rollup.read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return None


class Worker:
    """A worker process running this script with `tree` first on PYTHONPATH."""

    def __init__(
        self, tree: Path, env_id: str, options: argparse.Namespace, *, settings: list[str]
    ) -> None:
        flags = ["--batch-size", options.batch_size, "--policy-frequency", options.policy_frequency,
                 "--threads", options.threads, "--seed", options.seed]  # fmt: skip
        flags += ["--fused"] if options.fused else []
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", env_id, *map(str, flags)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                **dict(setting.split("=", 1) for setting in settings),
                "PYTHONPATH": str(tree.resolve()),
            },
        )
        self.ready = self._answer()
        self.label = " ".join([tree_label(tree), *settings])
        self.huge_kib: int | None = None

    def ask(self, line: str) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with status {self.process.wait()} (see stderr)")
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def tree_label(tree: Path) -> str:
    """The tree's commit (short hash, "+changes" when its work tree differs), or its path."""

    def git(*arguments: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *arguments], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return str(tree)
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def compare_trees(env_id: str, options: argparse.Namespace) -> tuple[list[list[object]], str]:
    """Alternating rounds of this checkout's fast path and --against's, each in its worker;
    the rows and a line saying which files ran, how far the parameters differ after the warmup
    updates (float rounding compounds over hundreds of updates, so later they drift apart as the
    paths do; tests/test_sac.py checks short runs against the reference path) and how the
    per-round ratios spread."""
    workers = [
        Worker(THIS_TREE, env_id, options, settings=[]),
        Worker(options.against, env_id, options, settings=options.against_env),
    ]
    try:
        for side in workers:
            side.ask(str(options.warmup)) if options.warmup else None
        difference = parameter_difference(workers)
        wall: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for round_index in range(options.rounds):
            for index in (0, 1) if round_index % 2 == 0 else (1, 0):
                answer = workers[index].ask(str(options.updates))
                workers[index].huge_kib = answer["huge_kib"]  # None off Linux
                wall[index].append(options.updates / answer["wall"])
                cpu[index].append(options.updates / answer["cpu"])
    finally:
        for side in workers:
            side.close()
    obs_dim, action_dim = workers[0].ready["shape"]
    # Each worker names the path it timed; an older tree's does not, and timed the hand-written one.
    rows = [
        [env_id, f"{obs_dim}/{action_dim}", f"{side.label} ({side.ready.get('path', 'fast')})",
         f"{statistics.median(wall[index]):.1f}", f"{statistics.median(cpu[index]):.1f}",
         f"{median_ratio(wall[index], wall[1]):.3f}", f"{median_ratio(cpu[index], cpu[1]):.3f}"]
        for index, side in enumerate(workers)
    ]  # fmt: skip
    files = " vs ".join(side.ready["sacbench"] for side in workers)
    huge = " vs ".join(
        "unknown" if kib is None else f"{kib / 1024:.0f} MiB"
        for kib in (side.huge_kib for side in workers)
    )
    quartiles = statistics.quantiles((a / b for a, b in zip(cpu[0], cpu[1], strict=True)), n=4)
    return rows, (
        f"{env_id}: {files}; parameters after {options.warmup} warmup updates differ by at most "
        f"{difference:.2e}; per-round CPU-time ratios, quartiles: "
        + " / ".join(f"{q:.3f}" for q in quartiles)
        + f"; memory in transparent huge pages at the last round: {huge}"
    )


def parameter_difference(workers: list[Worker]) -> float:
    """The largest absolute difference between the two workers' parameters now."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        states = []
        for index, side in enumerate(workers):
            path = Path(scratch) / f"{index}.pt"
            side.ask(f"save {path}")
            states.append(torch.load(path))
    return max(
        (states[0][net][key] - states[1][net][key]).abs().max().item()
        for net in states[0]
        for key in states[0][net]
    )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    if options.worker is not None:
        return worker(options)
    torch.set_num_threads(options.threads)
    load_before = os.getloadavg()
    rows: list[list[object]] = []
    notes: list[str] = []
    for env_id in options.envs:
        if options.against is None:
            rows.extend(benchmark_env(env_id, options))
        else:
            env_rows, note = compare_trees(env_id, options)
            rows.extend(env_rows)
            notes.append(note)
    load_after = os.getloadavg()
    versus = (
        "reference"
        if options.against is None
        else " ".join([tree_label(options.against), *options.against_env])
    )
    headers = ["env", "obs/act", "path", "updates/s (wall)", "updates/s (CPU)",
               f"x {versus} (wall)", f"x {versus} (CPU)"]  # fmt: skip
    print(tabulate(rows, headers=headers, tablefmt="github"))
    for note in notes:
        print(note)
    print(
        f"\nbatch {options.batch_size}, policy_frequency {options.policy_frequency}, "
        f"{options.threads} thread(s), {options.rounds} rounds x {options.updates} updates, "
        f"torch {torch.__version__}, load average before/after "
        f"{load_before[0]:.2f}/{load_after[0]:.2f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
