"""Helpers for trainer tests: run the real CLI in a subprocess and read its real event files."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sacbench.tags import CLOCK_TAGS  # clock-dependent; everything else is reproducible

SHORT_RUN = (
    "--env-id", "Hopper-v4",
    "--total-timesteps", "1500",
    "--learning-starts", "1000",
    "--batch-size", "64",
)  # fmt: skip


def train_command(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sacbench.train", "--run-dir", str(run_dir), *extra]


def run_trainer(run_dir: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        train_command(run_dir, *extra), capture_output=True, text=True, env=_quiet_env()
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"trainer exited {completed.returncode}:\n{completed.stdout}\n{completed.stderr}"
        )
    return completed


def train_in_process(run_dir: Path, *extra: str) -> int:
    """The trainer as `python -m sacbench.train --run-dir RUN_DIR EXTRA...` runs it, in this
    process; its exit status. For tests that need no process of their own (no signal, no start-up
    timing, no MUJOCO_GL set before MuJoCo loads): each saves about 1.5 s of CPU, mostly
    `import torch`."""
    from sacbench.training.cli import main

    return main(["--run-dir", str(run_dir), *extra])


def start_trainer(run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        train_command(run_dir, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_quiet_env(),
    )


def wait_for_step(run_dir: Path, step: int, *, process: subprocess.Popen, timeout: float = 120):
    """Block until the event log shows a scalar at or past `step` (flushed by a checkpoint)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"trainer ended early:\n{process.stdout.read()}")
        if (run_dir / "checkpoint" / "state.pt").exists() and last_logged_step(run_dir) >= step:
            return
        time.sleep(0.2)
    raise AssertionError(f"no step {step} in {run_dir} after {timeout} s")


def last_logged_step(run_dir: Path) -> int:
    scalars = read_scalars(run_dir)
    return max((step for series in scalars.values() for step, _ in series), default=-1)


def kill(process: subprocess.Popen, signal_number: int) -> int:
    process.send_signal(signal_number)
    return process.wait(timeout=120)


def process_runs(pid: int) -> bool:
    """Whether process `pid` runs: it exists and is not a zombie waiting to be reaped (by its
    parent, or by PID 1, which on these machines reaps seconds late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def stop_once_it_prints(
    command: list[str],
    *,
    line_prefix: str,
    cwd: Path,
    env: dict[str, str],
    from_step: int = 0,
) -> tuple[int, str]:
    """Start `command`, send SIGTERM once a line of its output starts with `line_prefix` (and,
    with from_step, names a global_step=N with N >= from_step: an episode's line), and return
    its exit status and its whole output (stdout and stderr together)."""
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert process.stdout is not None
    for line in process.stdout:
        step = re.search(r"global_step=(\d+)", line)
        if line.startswith(line_prefix) and (
            from_step == 0 or (step is not None and int(step.group(1)) >= from_step)
        ):
            break
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    return process.returncode, output


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of every event file in the dir, in file order: duplicates stay visible."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(run_dir.glob("*tfevents*")):
        accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend(
                (event.step, event.value) for event in accumulator.Scalars(tag)
            )
    return scalars


def reproducible(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    return {tag: series for tag, series in scalars.items() if tag not in CLOCK_TAGS}


def write_format_1_state(path: Path, state: dict[str, Any]) -> None:
    """Write `state`, as load_state returns it, the way sacbench wrote checkpoints before format
    2 (as runs still in flight hold them): torch.save of the dict as it is, with the observation
    and numpy's MT19937 key as numpy arrays, and no "format" key."""
    assert "format" not in state
    if "observation" in state:
        assert isinstance(state["observation"], np.ndarray)
        algorithm, key, *_ = state["rng"]["numpy"]
        assert algorithm == "MT19937" and isinstance(key, np.ndarray) and key.dtype == np.uint32
    torch.save(state, path)


def _quiet_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    return env


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGUSR1": signal.SIGUSR1, "SIGKILL": signal.SIGKILL}
