"""What the benchmarks share: starting real trainers and reading their steady windows, and
timing learners' updates on random batches in alternating rounds."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sacbench.events import read_run_scalars
from sacbench.provenance import cpu_model
from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args
from sacbench.sac.cpu_features import cpu_flags, read_cpuinfo
from sacbench.sac.fast_learner import FastLearner
from sacbench.tags import SPS_TAG, STEADY_SPS_TAG
from sacbench.training.envs import EnvError, env_spaces

# With --cleanrl-checkout, train_sps compares the fast path with this script of the checkout.
CLEANRL_SCRIPT = Path("cleanrl") / "sac_continuous_action.py"

# The flags that tell the CPU kinds apart where code is chosen by them (AVX2 only, AVX-512 with
# the BW that oneDNN's matmul needs, AVX512-BF16, AMX-BF16), as .ci/run prints them.
KIND_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16")


def cpu_kind(cpuinfo: str | None = None) -> str:
    """This CPU as a figure should name it: its model name, family and model, core count and
    the flags in KIND_FLAGS. A model name alone ("AMD EPYC Processor") does not tell the kinds
    apart."""
    cpuinfo = read_cpuinfo() if cpuinfo is None else cpuinfo

    def field(name: str) -> str | None:
        found = re.search(rf"^{name}\s*:\s*(.*)$", cpuinfo, re.M)
        return found.group(1).strip() if found else None

    flags = cpu_flags(cpuinfo)
    marks = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in KIND_FLAGS)
    if not flags:
        marks = "its flags unknown (no /proc/cpuinfo flags)"
    return (
        f"CPU: {field('model name') or cpu_model()}, family {field('cpu family') or '?'} model "
        f"{field('model') or '?'}, {os.cpu_count()} CPUs; {marks}"
    )


# ---- trainer processes ---------------------------------------------------------------------------


def cleanrl_environment(checkout: Path) -> dict[str, str]:
    """CleanRL's script on one thread, as sacbench's trainer with --threads 1, finding its
    cleanrl_utils package in the checkout."""
    inherited = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(checkout), *([inherited] if inherited else [])]),
    }


def check_budget(
    parser: argparse.ArgumentParser, *, total_timesteps: int, learning_starts: int
) -> None:
    """Refuse a budget too small for a steady_SPS window after the first (which is dropped)."""
    if total_timesteps <= learning_starts + 200:
        parser.error(
            f"--total-timesteps {total_timesteps} must exceed --learning-starts "
            f"{learning_starts} by more than 200 steps (two steady_SPS windows)"
        )


# train_sps's baseline with --baseline-environment: the fast path, run with one more environment
# variable (options.baseline_environment, "NAME=VALUE").
FAST_BASELINE = "fast-baseline"


def baseline_environment(options: argparse.Namespace) -> dict[str, str]:
    """The environment variable options.baseline_environment sets, as {NAME: VALUE}."""
    name, _, value = options.baseline_environment.partition("=")
    return {name: value}


def trainer_command(
    run_dir: Path,
    *,
    env_id: str,
    path: str,
    options: argparse.Namespace,
) -> list[str]:
    """The trainer's command line for one run of options.seed; for the path "cleanrl", CleanRL's
    script's (run in run_dir: see start_trainer)."""
    if path == "cleanrl":
        return [
            str(options.cleanrl_python),
            str(options.cleanrl_checkout / CLEANRL_SCRIPT),
            *("--env-id", env_id, "--seed", str(options.seed)),
            *("--total-timesteps", str(options.total_timesteps)),
            *("--learning-starts", str(options.learning_starts)),
            *("--buffer-size", str(options.buffer_size)),
            "--no-cuda",
        ]
    return [
        sys.executable,
        "-m",
        "sacbench.train",
        "--env-id",
        env_id,
        "--seed",
        str(options.seed),
        "--total-timesteps",
        str(options.total_timesteps),
        "--learning-starts",
        str(options.learning_starts),
        "--buffer-size",
        str(options.buffer_size),
        "--update-path",
        "fast" if path == FAST_BASELINE else path,
        "--threads",
        "1",
        "--checkpoint-interval",
        "0",
        "--run-dir",
        str(run_dir),
        *(options.extra if path in ("fast", FAST_BASELINE) else []),
    ]


def start_trainer(
    run_dir: Path,
    *,
    env_id: str,
    path: str,
    options: argparse.Namespace,
    log: Path | None = None,
    cpus: set[int] | None = None,
) -> subprocess.Popen:
    """Start trainer_command's process, its output into `log` (default: the run dir's name
    with .log), pinned to `cpus` when given. CleanRL's script runs in run_dir, where it writes
    runs/{run_name}/."""
    command = trainer_command(run_dir, env_id=env_id, path=path, options=options)
    cwd, env = None, None
    if path == "cleanrl":
        run_dir.mkdir(parents=True)
        cwd, env = run_dir, cleanrl_environment(options.cleanrl_checkout)
    elif path == FAST_BASELINE:
        env = {**os.environ, **baseline_environment(options)}
    with open(log or run_dir.with_suffix(".log"), "w") as output:
        return subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)),
        )


def finish_trainer(child: subprocess.Popen, run_dir: Path, *, log: Path | None = None) -> int:
    """Wait for the child; its peak RSS in bytes. Exits with the log's tail if it failed."""
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        log_text = (log or run_dir.with_suffix(".log")).read_text()[-2000:]
        raise SystemExit(
            f"{' '.join(map(str, child.args))} failed ({child.returncode}):\n{log_text}"
        )
    return usage.ru_maxrss * 1024


def steady_windows(run_dir: Path) -> list[tuple[float, float, float]]:
    """(start wall time, end wall time, steps/s) of each training window after the first; for a
    run without charts/steady_SPS (CleanRL's script), of each pair of consecutive charts/SPS
    points, which it logs every 100 steps once it trains."""
    scalars = read_run_scalars(run_dir)
    steady = scalars[scalars["tag"] == STEADY_SPS_TAG].sort_values("step")
    if steady.empty:
        points = scalars[scalars["tag"] == SPS_TAG].sort_values("step")
        times, steps = list(points["wall_time"]), list(points["step"])
        return [
            (times[i - 1], times[i], (steps[i] - steps[i - 1]) / (times[i] - times[i - 1]))
            for i in range(1, len(times))
        ]
    ends = list(steady["wall_time"])
    rates = list(steady["value"])
    # The first window still holds the random-action phase; each later one starts where the
    # previous one ended.
    return [(ends[i - 1], ends[i], rates[i]) for i in range(1, len(ends))]


def shared_window_rates(
    windows_per_run: list[list[tuple[float, float, float]]],
) -> list[list[float]]:
    """Per run, the steps/s of its steady windows that lie wholly inside the span where every
    run was training: from the latest start of a run's first steady window to the earliest end
    of a run's last one. A run's list is empty when none of its windows fits."""
    span_start = max(windows[0][0] for windows in windows_per_run)
    span_end = min(windows[-1][1] for windows in windows_per_run)
    return [
        [rate for start, end, rate in windows if start >= span_start and end <= span_end]
        for windows in windows_per_run
    ]


# ---- updates on random batches ------------------------------------------------------------------

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm")
LEARNING_STARTS = 5_000


def seeded_fast_learner(*, obs_dim: int, action_dim: int, batch_size: int) -> FastLearner:
    """A fast learner from seed 1, actions in [-1, 1]: two of them start from the same networks
    (one per side of an A/B timing)."""
    torch.manual_seed(1)
    return FastLearner(
        obs_dim=obs_dim,
        action_low=-np.ones(action_dim, dtype=np.float32),
        action_high=np.ones(action_dim, dtype=np.float32),
        args=Args(batch_size=batch_size),
        device=torch.device("cpu"),
    )


def refuse_bad_counts_and_env(
    parser: argparse.ArgumentParser, options: argparse.Namespace, counts: tuple[str, ...]
) -> None:
    """parser.error naming the first of `counts` (option names) that is not positive, or an
    --env that gymnasium cannot make."""
    for name in counts:
        if getattr(options, name) <= 0:
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} must be positive, got {getattr(options, name)}")
    try:
        env_spaces(options.env)
    except EnvError as error:
        parser.error(f"--env: {error}")


def gemm_flops(name: str, shapes: list[list[int]]) -> float:
    """2*M*N*K (times the batch) from the recorded input shapes of one GEMM call."""
    if name in ("aten::mm", "aten::addmm", "aten::addmm_"):
        a, b = (shapes[0], shapes[1]) if name == "aten::mm" else (shapes[1], shapes[2])
        return 2.0 * a[0] * a[1] * b[1]
    a, b = (shapes[1], shapes[2]) if name == "aten::baddbmm" else (shapes[0], shapes[1])
    return 2.0 * a[0] * a[1] * a[2] * b[2]


def random_batch(
    *,
    obs_dim: int,
    action_dim: int,
    batch_size: int,
    generator: torch.Generator,
    termination_rate: float = 0.01,
) -> Batch:
    """Standard-normal observations and rewards, uniform actions in [-1, 1] (also used by the
    tests that need a batch of given sizes)."""
    return Batch(
        observations=torch.randn(batch_size, obs_dim, generator=generator),
        next_observations=torch.randn(batch_size, obs_dim, generator=generator),
        actions=torch.rand(batch_size, action_dim, generator=generator) * 2 - 1,
        rewards=torch.randn(batch_size, generator=generator),
        terminations=(torch.rand(batch_size, generator=generator) < termination_rate).float(),
    )


def random_batches(
    *, obs_dim: int, action_dim: int, batch_size: int, count: int = 8, seed: int = 2
) -> list[Batch]:
    """`count` random batches from one generator: the batches the timed updates cycle through."""
    generator = torch.Generator().manual_seed(seed)
    return [
        random_batch(
            obs_dim=obs_dim, action_dim=action_dim, batch_size=batch_size, generator=generator
        )
        for _ in range(count)
    ]


def run_updates(learner: Any, batches: list[Batch], steps: range) -> None:
    """The updates of `steps` on CleanRL's schedule (policy_frequency 2), cycling the batches."""
    for step in steps:
        schedule = update_schedule(
            step, learning_starts=LEARNING_STARTS, policy_frequency=2, target_network_frequency=1
        )
        learner.update(batches[step % len(batches)], schedule)


def alternating_rounds(
    first: Any,
    second: Any,
    *,
    steps: range,
    rounds: int,
    run: Callable[[Any, range], None],
) -> tuple[list[float], list[float]]:
    """Milliseconds per update of each learner in each of `rounds` rounds of `steps`, the two
    taking turns to go first (so drifting machine speed hits both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for round_index in range(rounds):
        order = [(first, times[0]), (second, times[1])]
        for learner, spent in order if round_index % 2 == 0 else reversed(order):
            started = time.perf_counter()
            run(learner, steps)
            spent.append((time.perf_counter() - started) / len(steps) * 1e3)
    return times
