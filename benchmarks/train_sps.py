"""End-to-end steady training throughput of the real trainer: reference vs fast update path,
CleanRL's own script vs the fast path, or N fast-path runs sharing one device.

Runs `python -m sacbench.train --threads 1` as a child process per (env, path), e.g. 7,000 steps
with learning_starts 5,000, reads charts/steady_SPS back from the run's event files (steps per
second over each 100-step window; the first window, which still holds the random-action phase,
is dropped) and reports the median, the peak resident memory of the child (os.wait4), and the
ratio fast / reference. The paths alternate (reference, fast, fast, reference, ...) so drifting
machine load hits both alike. It also prints the replay buffer's memory at the default 1M
capacity against the float32 size of the fields it stores.

On virtual machines whose speed drifts by 10-20% over minutes, `--paired` is steadier: each
repeat starts the reference and the fast trainer at the same time, one per core, and compares
only the 100-step windows that both processes spent training (so the reference's tail, which
runs alone once the fast run has finished, does not count). The two share the memory system
while they overlap, so the absolute SPS are lower than a lone run's; the ratio of each pair is
reported, and their median. The fast path's fused update (the trainer's default on a CPU) is
loaded (compiled on first use) before any trainer starts, so that no trainer spends its first
minute compiling while the other trains; `--extra --no-fused-update` times the eager update.

With `--cleanrl-checkout DIR` the other side is CleanRL's own script instead of the reference
path: DIR/cleanrl/sac_continuous_action.py (DIR a clone of vwxyzjn/cleanrl), run by
`--cleanrl-python` (an interpreter with CleanRL's packages: docs/variants.md, "Benchmarking
CleanRL's own script side by side" makes one) in a folder of its own, with DIR on PYTHONPATH,
OMP_NUM_THREADS=1 and the same budget (--env-id, --seed, --total-timesteps, --learning-starts,
--buffer-size, --no-cuda). It logs no charts/steady_SPS, so its windows are the 100 steps between
two consecutive charts/SPS points over their event wall times (all of them after
learning_starts).

With `--baseline-environment NAME=VALUE` the other side is the fast path itself, run with that
environment variable set: a switch of the fast path (SACBENCH_ADAM_SUBNORMALS=keep,
SACBENCH_FLOAT32_PRODUCTS=onednn) timed against its default, both with the --extra flags.

With `--shared-device cuda|cpu` it compares no two sides: for each N of `--runs` it starts N
fast-path trainers (seeds 1..N, `--compile --cudagraphs` on cuda unless `--eager`) at the same
time on that device, one device for all of them, and reports
- per-run SPS: the median of one run's steady_SPS over its windows that lie wholly in the span
  where all N runs were training (for N = 1: all its windows); the median over the N runs and
  their min-max;
- aggregate SPS: the sum of the N per-run SPS, what the device delivers to all N together, and
  its ratio to N = 1;
- the largest child's peak RSS.
`--one-core` pins every trainer to one CPU (the first this process may use).

    python -m benchmarks.train_sps
    python -m benchmarks.train_sps --paired --repeats 3
    python -m benchmarks.train_sps --envs HalfCheetah-v4 --repeats 2 --total-timesteps 8000
    python -m benchmarks.train_sps --paired --repeats 3 \
        --cleanrl-checkout ~/cleanrl --cleanrl-python ~/cleanrl-venv/bin/python
    python -m benchmarks.train_sps --paired --repeats 3 \
        --baseline-environment SACBENCH_ADAM_SUBNORMALS=keep
    python -m benchmarks.train_sps --shared-device cuda --runs 1 2 4 8
    python -m benchmarks.train_sps --shared-device cpu --runs 1 2 --one-core
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
    CLEANRL_SCRIPT,
    FAST_BASELINE,
    check_budget,
    cleanrl_environment,
    cpu_kind,
    finish_trainer,
    shared_window_rates,
    start_trainer,
    steady_windows,
)
from sacbench.provenance import gpu_model
from sacbench.training.envs import EnvError, env_spaces
from sacbench.training.replay import ReplayBuffer

CLEANRL_ENVIRONMENT_DOCS = 'docs/variants.md, "Benchmarking CleanRL\'s own script side by side"'
CLEANRL_CAPTION = "; CleanRL's script on OMP_NUM_THREADS=1, windows from its charts/SPS wall times"
GPU_FLAGS = ("--compile", "--cudagraphs")
# Per mode: the tasks and the budget when the command line names none.
DEFAULT_ENVS = {"compare": ["HalfCheetah-v4", "Humanoid-v4"], "shared": ["HalfCheetah-v4"]}
DEFAULT_TOTAL_TIMESTEPS = {"compare": 7_000, "shared": 15_000}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--envs",
        nargs="+",
        help=f"default: {' '.join(DEFAULT_ENVS['compare'])}; with --shared-device, "
        f"{' '.join(DEFAULT_ENVS['shared'])}",
    )
    parser.add_argument(
        "--total-timesteps",
        type=int,
        help=f"default: {DEFAULT_TOTAL_TIMESTEPS['compare']}; with --shared-device, "
        f"{DEFAULT_TOTAL_TIMESTEPS['shared']}",
    )
    parser.add_argument("--learning-starts", type=int, default=5_000)
    parser.add_argument("--buffer-size", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs per (env, path)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--paired",
        action="store_true",
        help="run reference and fast at the same time (needs 2 cores); compare overlapping windows",
    )
    parser.add_argument(
        "--cleanrl-checkout",
        type=Path,
        help="a clone of vwxyzjn/cleanrl: compare the fast path with its "
        "cleanrl/sac_continuous_action.py instead of the reference path",
    )
    parser.add_argument(
        "--cleanrl-python",
        type=Path,
        help="the interpreter that runs CleanRL's script (default: this one)",
    )
    parser.add_argument(
        "--baseline-environment",
        metavar="NAME=VALUE",
        help="compare the fast path with itself run with this environment variable set, "
        "instead of with the reference path",
    )
    parser.add_argument(
        "--shared-device",
        choices=["cuda", "cpu"],
        help="instead of comparing two sides: N fast-path trainers at once on this device, "
        "for each N of --runs",
    )
    parser.add_argument(
        "--runs", nargs="+", type=int, help="with --shared-device: numbers of runs (default 1 4 8)"
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help=f"with --shared-device cuda: leave out the default {' '.join(GPU_FLAGS)}",
    )
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="with --shared-device: pin every trainer to one CPU (the first allowed)",
    )
    parser.add_argument(
        "--extra",
        nargs=argparse.REMAINDER,
        default=[],
        help="more trainer flags, for the fast path",
    )
    args = parser.parse_args(argv)
    mode = "compare" if args.shared_device is None else "shared"
    args.envs = args.envs or DEFAULT_ENVS[mode]
    if args.total_timesteps is None:
        args.total_timesteps = DEFAULT_TOTAL_TIMESTEPS[mode]
    for env_id in args.envs:
        try:
            env_spaces(env_id)
        except EnvError as error:
            parser.error(f"--envs: {error}")
    check_budget(parser, total_timesteps=args.total_timesteps, learning_starts=args.learning_starts)
    if args.shared_device is not None:
        check_shared(parser, args)
        return args
    for flag, given in (
        ("--runs", args.runs),
        ("--eager", args.eager),
        ("--one-core", args.one_core),
    ):
        if given:
            parser.error(f"{flag} applies to --shared-device only")
    if args.repeats <= 0:
        parser.error(f"--repeats must be positive, got {args.repeats}")
    if args.paired and (os.cpu_count() or 1) < 2:
        parser.error("--paired runs two trainers at once and needs at least 2 CPUs")
    check_cleanrl(parser, args)
    if args.baseline_environment is not None:
        name, equals, _ = args.baseline_environment.partition("=")
        if not (name and equals):
            parser.error(
                f"--baseline-environment must be NAME=VALUE, got {args.baseline_environment!r}"
            )
        if args.cleanrl_checkout is not None:
            parser.error("--baseline-environment and --cleanrl-checkout choose two baselines")
    args.baseline = (
        "cleanrl"
        if args.cleanrl_checkout is not None
        else FAST_BASELINE
        if args.baseline_environment is not None
        else "reference"
    )
    return args


def check_shared(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--shared-device's own arguments, and none of the comparison's."""
    compared = {
        "--paired": args.paired,
        "--repeats": args.repeats != 1,
        "--cleanrl-checkout": args.cleanrl_checkout is not None,
        "--cleanrl-python": args.cleanrl_python is not None,
        "--baseline-environment": args.baseline_environment is not None,
    }
    for flag, given in compared.items():
        if given:
            parser.error(f"{flag} compares two sides; --shared-device runs one (the fast path)")
    args.runs = args.runs or [1, 4, 8]
    too_few = [n for n in args.runs if n < 1]
    if too_few:
        parser.error(f"--runs: each number of runs must be at least 1, got {too_few[0]}")
    if len(set(args.runs)) != len(args.runs):
        parser.error(f"--runs: each number of runs once, got {' '.join(map(str, args.runs))}")
    if args.eager and args.shared_device != "cuda":
        parser.error("--eager applies to --shared-device cuda only (cpu runs are eager already)")
    if args.shared_device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error(
                f"--shared-device cuda: torch.cuda.is_available() is False on this machine "
                f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); run this on a GPU "
                "node, or pass --shared-device cpu to measure the CPU"
            )


def check_cleanrl(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Before any trainer starts: CleanRL's script is where --cleanrl-checkout says, and it
    starts under --cleanrl-python (its --help imports everything its training imports)."""
    if args.cleanrl_checkout is None:
        if args.cleanrl_python is not None:
            parser.error(
                "--cleanrl-python needs --cleanrl-checkout (the clone whose script it runs)"
            )
        return
    args.cleanrl_checkout = args.cleanrl_checkout.expanduser().resolve()
    script = args.cleanrl_checkout / CLEANRL_SCRIPT
    if not script.is_file():
        parser.error(
            f"--cleanrl-checkout {args.cleanrl_checkout}: no {CLEANRL_SCRIPT} there "
            "(expected a clone of vwxyzjn/cleanrl)"
        )
    python = args.cleanrl_python or Path(sys.executable)
    args.cleanrl_python = python = Path(os.path.expanduser(python))
    if not (python.is_file() and os.access(python, os.X_OK)):
        parser.error(f"--cleanrl-python {python}: not an executable file")
    probe = subprocess.run(
        [str(python), str(script), "--help"],
        cwd=tempfile.gettempdir(),
        env=cleanrl_environment(args.cleanrl_checkout),
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        parser.error(
            f"--cleanrl-python {python} cannot start {script} (`--help` exited "
            f"{probe.returncode}; {CLEANRL_ENVIRONMENT_DOCS} makes its environment):\n"
            f"{probe.stderr[-1500:]}"
        )
    # CleanRL's script is written for Gymnasium 0.29's vector envs, whose infos hold each ended
    # episode's final_observation; under Gymnasium 1.x it stops at the first truncation (or,
    # where episodes end by termination first, trains on other transitions than it does).
    gymnasium_version = subprocess.run(
        [str(python), "-c", "import gymnasium; print(gymnasium.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if "final_observation" in script.read_text() and gymnasium_version[:2] not in ("", "0."):
        parser.error(
            f"{script} reads the vector env's infos['final_observation'], written for Gymnasium "
            f"0.29, but --cleanrl-python {python} has Gymnasium {gymnasium_version}: give it "
            f"an interpreter with CleanRL's own packages ({CLEANRL_ENVIRONMENT_DOCS})"
        )


def run_trainer(
    run_dir: Path, *, env_id: str, path: str, options: argparse.Namespace
) -> tuple[float, int, float]:
    """(median steady SPS, peak RSS in bytes, wall seconds) of one trainer process."""
    started = time.time()
    peak_rss = finish_trainer(
        start_trainer(run_dir, env_id=env_id, path=path, options=options), run_dir
    )
    rates = [rate for _, _, rate in steady_windows(run_dir)]
    return statistics.median(rates), peak_rss, time.time() - started


def run_pair(
    scratch: Path, *, env_id: str, repeat: int, options: argparse.Namespace
) -> dict[str, tuple[float, int, float]]:
    """The baseline and the fast path at once; per path (median steady SPS over the windows both
    spent training, peak RSS, wall seconds)."""
    started = time.time()
    paths = sides(options)
    run_dirs = {path: scratch / f"{env_id}-{path}-paired-{repeat}" for path in paths}
    children = {
        path: start_trainer(run_dirs[path], env_id=env_id, path=path, options=options)
        for path in paths
    }
    peak = {path: finish_trainer(children[path], run_dirs[path]) for path in paths}
    wall = time.time() - started
    shared = shared_window_rates([steady_windows(run_dirs[path]) for path in paths])
    if not all(shared):
        raise SystemExit(
            f"{env_id}: the two runs never trained at the same time for a whole window; "
            "raise --total-timesteps"
        )
    return {
        path: (statistics.median(rates), peak[path], wall)
        for path, rates in zip(paths, shared, strict=True)
    }


def sides(options: argparse.Namespace) -> tuple[str, str]:
    """(the baseline, "fast"): the order in which a pair starts and a table lists them."""
    return options.baseline, "fast"


def side_label(path: str, options: argparse.Namespace) -> str:
    """How the table names a side: the fast path with its extra flags, CleanRL's script with
    its checkout's commit."""
    if path == "fast":
        return " ".join([path, *options.extra])
    if path == FAST_BASELINE:
        return " ".join(["fast", *options.extra, f"with {options.baseline_environment}"])
    if path == "cleanrl":
        try:
            commit = subprocess.run(
                ["git", "-C", str(options.cleanrl_checkout), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        except OSError:  # no git here
            commit = ""
        return f"CleanRL's {CLEANRL_SCRIPT.name} ({commit or 'commit unknown'})"
    return path


def buffer_memory_rows(env_ids: list[str], capacity: int) -> list[list[object]]:
    rows = []
    for env_id in env_ids:
        spaces = env_spaces(env_id)
        obs_dim, action_dim = spaces.observation_size, spaces.action_size
        buffer = ReplayBuffer(capacity=capacity, obs_dim=obs_dim, action_dim=action_dim, seed=0)
        # obs, next_obs, action, reward, termination: each one float32 per element.
        fields = capacity * (2 * obs_dim + action_dim + 1 + 1) * 4
        rows.append(
            [
                env_id,
                capacity,
                f"{buffer.nbytes() / 2**20:.1f}",
                f"{fields / 2**20:.1f}",
                f"{buffer.nbytes() / fields:.3f}",
            ]
        )
        del buffer
    return rows


def build_fused_update_first(extra: list[str]) -> float | None:
    """Where the fast path runs the fused update (the trainer's default on a CPU: no
    --no-fused-update or --compile among its flags), load (on first use, compile) its C++ here,
    before any trainer starts, and return the seconds it took; otherwise None. A trainer that
    compiled it would spend 20-40 seconds doing so while the other trained: a paired run could
    then share no training window, and a lone run would count the build in its wall time. Where
    it cannot be built, the trainers run the eager hand-written update, as the trainer says."""
    if "--no-fused-update" in extra or "--compile" in extra:
        return None
    from sacbench.sac.fused import FusedUpdateUnavailable, fused_update_extension

    started = time.perf_counter()
    try:
        fused_update_extension()
    except FusedUpdateUnavailable as error:
        print(f"{error}: the fast path runs the eager hand-written update")
        return None
    return time.perf_counter() - started


# ---- --shared-device: N trainers at once on one device ------------------------------------------


def shared_trainer_flags(options: argparse.Namespace) -> list[str]:
    """Flags after common.trainer_command's: device, the GPU path's, evaluation off, --extra."""
    compiled = options.shared_device == "cuda" and not options.eager
    gpu = list(GPU_FLAGS) if compiled else []
    # The final evaluation runs after the last window; it would only lengthen the benchmark.
    return ["--device", options.shared_device, *gpu, "--eval-episodes", "0", *options.extra]


def run_options(options: argparse.Namespace, *, seed: int) -> argparse.Namespace:
    """What common.trainer_command reads, for one run of the fast path on the shared device."""
    return argparse.Namespace(
        **{**vars(options), "seed": seed, "extra": shared_trainer_flags(options)}
    )


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


def run_together(
    scratch: Path, *, env_id: str, runs: int, options: argparse.Namespace
) -> SharedResult:
    """Start `runs` trainers at once, wait for all; stop the rest if one fails."""
    started = time.time()
    run_dirs = [scratch / f"{env_id}-N{runs}-seed{seed}" for seed in range(1, runs + 1)]
    children: list[subprocess.Popen] = []
    try:
        for seed, run_dir in enumerate(run_dirs, start=1):
            run = run_options(options, seed=seed)
            children.append(
                start_trainer(
                    run_dir, env_id=env_id, path="fast", options=run, cpus=pinned_cpus(options)
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
            f"{env_id}, N={runs}: the runs never all trained at the same time for a whole "
            "100-step window (one started too late or finished too early); raise "
            "--total-timesteps"
        )
    return SharedResult(
        runs=runs,
        per_run_sps=[statistics.median(rates) for rates in shared],
        peak_rss=peak_rss,
        wall_seconds=wall,
    )


def shared_table(results: dict[str, list[SharedResult]]) -> str:
    """The table of N runs sharing the device, per task."""
    rows = []
    for env_id, env_results in results.items():
        one_run = next((r.aggregate_sps for r in env_results if r.runs == 1), None)
        for result in env_results:
            sps = result.per_run_sps
            rows.append(
                [
                    env_id,
                    result.runs,
                    f"{statistics.median(sps):.1f}",
                    f"{min(sps):.1f}-{max(sps):.1f}",
                    f"{result.aggregate_sps:.1f}",
                    "-" if one_run is None else f"{result.aggregate_sps / one_run:.2f}",
                    f"{max(result.peak_rss) / 2**20:.0f}",
                    f"{result.wall_seconds:.0f}",
                ]
            )
    headers = ["env", "N", "per-run SPS (median)", "per-run min-max", "aggregate SPS",
               "aggregate / N=1", "peak RSS per child (MiB)", "wall (s)"]  # fmt: skip
    return tabulate(
        rows,
        headers=headers,
        tablefmt="github",
        disable_numparse=True,
        colalign=["left"] + ["right"] * (len(headers) - 1),
    )


def shared_footnote(options: argparse.Namespace, *, loads: tuple[float, float]) -> str:
    device = options.shared_device
    name = gpu_model("cuda") if device == "cuda" else f"{os.cpu_count()} CPUs, named below"
    flags = " ".join(shared_trainer_flags(options))
    lines = [
        f"device: {device} ({name}); load average before/after {loads[0]:.2f}/{loads[1]:.2f}"
        + ("; every trainer pinned to one CPU" if options.one_core else ""),
        cpu_kind(),
        f"{options.total_timesteps} steps, learning_starts {options.learning_starts}, buffer "
        f"{options.buffer_size}; each run: python -m sacbench.train --threads 1 --update-path "
        f"fast {flags} --seed <1..N>",
        "per-run SPS: the median of one run's charts/steady_SPS over its 100-step windows "
        "that lie wholly in the span where all N runs were training (each run's first "
        "window dropped)",
        "aggregate SPS: the sum of the N per-run SPS; peak RSS: the largest child's",
    ]
    return "\n".join(lines)


def shared_summary(result: SharedResult) -> str:
    seeds = f"seed 1{f'..{result.runs}' if result.runs > 1 else ''}"
    return (
        f"steady SPS per run ({seeds}) "
        f"{', '.join(f'{sps:.1f}' for sps in result.per_run_sps)}; aggregate "
        f"{result.aggregate_sps:.1f}; {result.wall_seconds:.0f} s"
    )


def main_shared(options: argparse.Namespace) -> int:
    load_before = os.getloadavg()[0]
    results: dict[str, list[SharedResult]] = {}
    with tempfile.TemporaryDirectory(prefix="sacbench-shared-sps-") as scratch:
        for env_id in options.envs:
            for runs in options.runs:
                result = run_together(Path(scratch), env_id=env_id, runs=runs, options=options)
                results.setdefault(env_id, []).append(result)
                print(f"{env_id} N={runs}: {shared_summary(result)}", flush=True)
    print()
    print(shared_table(results))
    print()
    print(shared_footnote(options, loads=(load_before, os.getloadavg()[0])))
    return 0


# ---- the comparison of two sides -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    # The fused update is a CPU path: trainers on a GPU never build it.
    on_gpu = options.shared_device == "cuda"
    built_seconds = None if on_gpu else build_fused_update_first(options.extra)
    if built_seconds is not None:
        print(f"the fused update's C++ loaded (built if it had to be) in {built_seconds:.0f} s")
    if options.shared_device is not None:
        return main_shared(options)
    baseline, paths = options.baseline, sides(options)
    load_before = os.getloadavg()
    results: dict[tuple[str, str], list[tuple[float, int, float]]] = {}
    pair_ratios: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="sacbench-sps-") as scratch:
        for env_id in options.envs:
            for repeat in range(options.repeats):
                if options.paired:
                    pair = run_pair(Path(scratch), env_id=env_id, repeat=repeat, options=options)
                    for path, result in pair.items():
                        results.setdefault((env_id, path), []).append(result)
                    ratio = pair["fast"][0] / pair[baseline][0]
                    pair_ratios.setdefault(env_id, []).append(ratio)
                    print(
                        f"{env_id} pair #{repeat}: steady SPS {baseline} "
                        f"{pair[baseline][0]:.1f}, fast {pair['fast'][0]:.1f} "
                        f"(x{ratio:.2f}), {pair['fast'][2]:.0f} s",
                        flush=True,
                    )
                    continue
                order = paths if repeat % 2 == 0 else paths[::-1]
                for path in order:
                    run_dir = Path(scratch) / f"{env_id}-{path}-{repeat}"
                    result = run_trainer(run_dir, env_id=env_id, path=path, options=options)
                    results.setdefault((env_id, path), []).append(result)
                    print(
                        f"{env_id} {path} #{repeat}: steady SPS {result[0]:.1f}, "
                        f"peak RSS {result[1] / 2**20:.0f} MiB, {result[2]:.0f} s",
                        flush=True,
                    )
    load_after = os.getloadavg()
    rows = []
    for env_id in options.envs:
        baseline_sps = statistics.median(r[0] for r in results[(env_id, baseline)])
        for path in paths:
            runs = results[(env_id, path)]
            sps = statistics.median(r[0] for r in runs)
            # Paired: the median of the per-pair ratios; otherwise the ratio of the medians.
            ratio = (
                (statistics.median(pair_ratios[env_id]) if path == "fast" else 1.0)
                if options.paired
                else sps / baseline_sps
            )
            rows.append(
                [
                    env_id,
                    side_label(path, options),
                    f"{sps:.1f}",
                    f"{ratio:.2f}",
                    f"{max(r[1] for r in runs) / 2**20:.0f}",
                ]
            )
    print()
    print(
        tabulate(
            rows,
            headers=["env", "update path", "steady SPS", f"x {baseline}", "peak RSS (MiB)"],
            tablefmt="github",
        )
    )
    print(
        f"\n{options.total_timesteps} steps, learning_starts {options.learning_starts}, "
        f"1 thread, median of charts/steady_SPS over the training windows, "
        f"{options.repeats} run(s) per cell"
        f"{' (paired: both sides at once, overlapping windows only)' if options.paired else ''}"
        f"{CLEANRL_CAPTION if baseline == 'cleanrl' else ''}"
        f"; load average before/after "
        f"{load_before[0]:.2f}/{load_after[0]:.2f} on {os.cpu_count()} CPUs"
    )
    print(cpu_kind())
    print("\nReplay buffer memory (preallocated; pages are touched as rows are written):")
    print(
        tabulate(
            buffer_memory_rows(options.envs, options.buffer_size),
            headers=["env", "capacity", "buffer MiB", "float32 fields MiB", "ratio"],
            tablefmt="github",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
