"""Synthetic run dirs for the results tests, written the way the trainer writes them.

Events go through the real ``torch.utils.tensorboard.SummaryWriter`` with explicit wall times, so
every scalar is known exactly; metadata.json and complete.json follow docs/contracts.md. The
logging cadence copies the trainer's: losses, charts/SPS, charts/steady_SPS and
charts/elapsed_seconds at every global_step divisible by 100 once training has started
(global_step > learning_starts), charts/elapsed_seconds once more at the final step, the
episode tags at the last step of every finished episode, and, when the run evaluates, each
evaluation episode's eval/episodic_return and eval/episodic_length at the step of its evaluation
(every ``eval_frequency`` steps, and the final evaluation at step total_timesteps).

The values are simple functions of the step, the seed and an env's ``difficulty`` so that the
golden tables stay stable and a test can recompute any cell by hand.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from torch.utils.tensorboard import SummaryWriter

from sacbench.private_api import event_file_path
from sacbench.tags import EVAL_LENGTH_TAG, EVAL_RETURN_TAG, LOSS_TAGS

LOG_EVERY = 100
START_WALL_TIME = 1_700_000_000.0
# The trainer's --update-path each variant's metadata.json records. The golden set's `baseline`
# variant trains on CleanRL's literal update ("reference"); a fixture variant is named apart
# from the update path so that "reference" means one thing. Other variant names (the tests' `a`,
# `b`, ...) record the trainer's default path.
UPDATE_PATHS = {"fast": "fast", "baseline": "reference"}
# What each session of a run records it ran (sacbench.sac.learners.update_record), by update path.
UPDATE_RECORDS: dict[str, dict[str, object]] = {
    "fast": {"path": "fast", "gradients": "fused", "float32_products_library": "aten",
             "bf16_products": False},
    "reference": {"path": "reference", "float32_products_library": "aten", "bf16_products": False},
}  # fmt: skip


@dataclass(frozen=True)
class SyntheticRun:
    """One run's shape; the defaults make a 2,000-step smoke run with ten 150-step episodes."""

    env_id: str = "Hopper-v4"
    seed: int = 1
    total_timesteps: int = 2_000
    learning_starts: int = 500
    episode_length: int = 150
    # Return of episode i: base_return + return_slope * i + 10 * seed.
    base_return: float = 100.0
    return_slope: float = 5.0
    # Environment steps per second while training; the random-action phase runs 4x faster.
    training_sps: float = 200.0
    startup_seconds: float = 3.0
    # A one-off cost of the first training steps (as torch.compile's), inside the first window.
    first_update_seconds: float = 0.0
    # Steps at which the run was checkpointed and resumed (the second session starts there).
    resume_at: tuple[int, ...] = ()
    downtime_seconds: float = 600.0
    write_sps: bool = True
    write_episodes: bool = True
    # Off for long runs whose losses no test reads (they are most of the events).
    write_losses: bool = True
    # Evaluations as the trainer's --eval-frequency and --eval-episodes (0: none); an
    # evaluation's episode k at step s returns eval_return(s, k).
    eval_frequency: int = 0
    eval_episodes: int = 0
    eval_slope: float = 0.1
    cpu_model: str = "Synthetic CPU @ 3.00GHz"
    gpu_model: str | None = None
    torch_threads: int = 1
    extra_args: dict[str, object] = field(default_factory=dict)

    # ---- the values the trainer would log -------------------------------------------------------

    def elapsed_seconds(self, step: int) -> float:
        """Training-job seconds after ``step`` steps (downtime between sessions excluded)."""
        random_steps = min(step, self.learning_starts)
        training_steps = max(step - self.learning_starts, 0)
        return (
            self.startup_seconds
            + random_steps / (4.0 * self.training_sps)
            + (self.first_update_seconds if training_steps > 0 else 0.0)
            + training_steps / (self.training_sps + self.seed)
        )

    def wall_time(self, step: int) -> float:
        sessions_before = sum(1 for resume in self.resume_at if resume <= step)
        return (
            START_WALL_TIME + self.elapsed_seconds(step) + sessions_before * (self.downtime_seconds)
        )

    def log_steps(self) -> list[int]:
        return [
            step
            for step in range(self.learning_starts + 1, self.total_timesteps)
            if step % LOG_EVERY == 0
        ]

    def episode_end_steps(self) -> list[int]:
        return list(range(self.episode_length - 1, self.total_timesteps, self.episode_length))

    def episode_return(self, index: int) -> float:
        return self.base_return + self.return_slope * index + 10.0 * self.seed

    def eval_steps(self) -> list[int]:
        """Steps done at each evaluation: every eval_frequency steps, then the final one."""
        if self.eval_episodes == 0:
            return []
        periodic = range(self.eval_frequency, self.total_timesteps, self.eval_frequency or 1)
        return [*(periodic if self.eval_frequency else []), self.total_timesteps]

    def eval_return(self, step: int, episode: int) -> float:
        """Episodes spread symmetrically around base_return + eval_slope * step + 10 * seed."""
        spread = 2.0 * episode - (self.eval_episodes - 1)
        return self.base_return + self.eval_slope * step + 10.0 * self.seed + spread

    def _evaluation_rows(self, step: int) -> list[tuple[str, int, float, float]]:
        rows = []
        for episode in range(self.eval_episodes):
            wall_time = self.wall_time(step)
            rows.append((EVAL_RETURN_TAG, step, wall_time, self.eval_return(step, episode)))
            rows.append((EVAL_LENGTH_TAG, step, wall_time, float(self.episode_length)))
        return rows

    def scalars(self) -> list[tuple[str, int, float, float]]:
        """(tag, step, wall_time, value) in the order the trainer writes them."""
        rows: list[tuple[str, int, float, float]] = []
        log_steps = set(self.log_steps())
        episode_ends = {step: index for index, step in enumerate(self.episode_end_steps())}
        eval_steps = set(self.eval_steps()) - {self.total_timesteps}
        # As the trainer: the first steady_SPS window starts with the first training step.
        previous_log = self.learning_starts
        # Only steps that log anything, so that a 1M-step run is quick to write.
        for step in sorted(log_steps | set(episode_ends) | eval_steps):
            wall_time = self.wall_time(step)
            if step in eval_steps:
                rows += self._evaluation_rows(step)
            if self.write_episodes and step in episode_ends:
                index = episode_ends[step]
                rows.append(("charts/episodic_return", step, wall_time, self.episode_return(index)))
                rows.append(("charts/episodic_length", step, wall_time, float(self.episode_length)))
            if step in log_steps:
                if self.write_losses:
                    for number, tag in enumerate(LOSS_TAGS):
                        rows.append((tag, step, wall_time, (number + 1) / (1.0 + step / 1000.0)))
                elapsed = self.elapsed_seconds(step)
                if self.write_sps:
                    window = self.elapsed_seconds(step) - self.elapsed_seconds(previous_log)
                    rows.append(("charts/SPS", step, wall_time, float(int(step / elapsed))))
                    rows.append(
                        ("charts/steady_SPS", step, wall_time, (step - previous_log) / window)
                    )
                rows.append(("charts/elapsed_seconds", step, wall_time, elapsed))
                previous_log = step
        final = self.total_timesteps - 1
        rows.append(
            ("charts/elapsed_seconds", final, self.wall_time(final), self.elapsed_seconds(final))
        )
        if self.eval_episodes:
            rows += self._evaluation_rows(self.total_timesteps)
        return rows

    def expected_frame(self) -> pd.DataFrame:
        """What extraction must return: float32 values (as stored), sorted by tag and step."""
        rows = self.scalars()
        frame = pd.DataFrame(
            {
                "tag": pd.Series([row[0] for row in rows], dtype=object),
                "step": np.asarray([row[1] for row in rows], dtype=np.int64),
                "wall_time": np.asarray([row[2] for row in rows], dtype=np.float64),
                "value": np.asarray([row[3] for row in rows], dtype=np.float32).astype(np.float64),
            }
        )
        return frame.sort_values(["tag", "step"], kind="stable").reset_index(drop=True)

    # ---- files ----------------------------------------------------------------------------------

    def metadata(self, *, variant: str) -> dict[str, object]:
        boundaries = [0, *self.resume_at, self.total_timesteps]
        sessions = [
            {
                "started_at": f"2023-11-14T22:{index:02d}:00+00:00",
                "ended_at": f"2023-11-14T22:{index:02d}:59+00:00",
                "start_step": start,
                "end_step": end,
                "exit_status": "completed" if end == self.total_timesteps else "signal SIGTERM",
                "update": UPDATE_RECORDS[UPDATE_PATHS.get(variant, "fast")],
            }
            for index, (start, end) in enumerate(zip(boundaries, boundaries[1:], strict=False))
        ]
        return {
            "args": {
                "exp_name": "sac_continuous_action",
                "env_id": self.env_id,
                "seed": self.seed,
                "total_timesteps": self.total_timesteps,
                "learning_starts": self.learning_starts,
                "update_path": UPDATE_PATHS.get(variant, "fast"),
                "threads": self.torch_threads,
                "eval_frequency": self.eval_frequency,
                "eval_episodes": self.eval_episodes,
                **self.extra_args,
            },
            "sacbench": {
                "version": "0.1.0",
                "git_describe": "v0.1.0-3-gabc1234",
                "git_commit": "abc1234def5678abc1234def5678abc1234def56",
                "git_dirty": False,
            },
            "versions": {
                "python": "3.11.7",
                "torch": "2.13.0",
                "gymnasium": "1.4.0",
                "mujoco": "2.3.7",
                "numpy": "2.4.6",
            },
            "host": {
                "hostname": "node01",
                "cpu_model": self.cpu_model,
                "gpu_model": self.gpu_model,
                "torch_threads": self.torch_threads,
                "device": "cpu" if self.gpu_model is None else "cuda",
            },
            "sessions": sessions,
            "started_at": sessions[0]["started_at"],
            "ended_at": sessions[-1]["ended_at"],
            "exit_status": "completed",
        }

    def complete(self) -> dict[str, object]:
        return {
            "global_step": self.total_timesteps,
            "elapsed_seconds": self.elapsed_seconds(self.total_timesteps),
            "finished_at": "2023-11-14T23:00:00+00:00",
        }


def write_run_dir(run_dir: Path, run: SyntheticRun, *, variant: str = "fast") -> Path:
    """Write ``run``'s events (one file per session), metadata.json and complete.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = run.scalars()
    boundaries = [0, *run.resume_at, run.total_timesteps]
    for session, (start, end) in enumerate(zip(boundaries, boundaries[1:], strict=False)):
        writer = SummaryWriter(str(run_dir), filename_suffix=f".session{session}")
        if session == 0:
            writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n|seed|{run.seed}|")
        path = event_file_path(writer)
        checkpoint_size = None
        for tag, step, wall_time, value in rows:
            # The final evaluation comes after the last step, in the last session.
            if start <= step < end or step == end == run.total_timesteps:
                writer.add_scalar(tag, value, step, walltime=wall_time)
            elif end <= step < end + 3 * LOG_EVERY and checkpoint_size is None:
                # Like a killed session: it ran past its checkpoint, whose offset cuts it back.
                writer.flush()
                checkpoint_size = path.stat().st_size
            if end <= step < end + 3 * LOG_EVERY and end != run.total_timesteps:
                writer.add_scalar(tag, value, step, walltime=wall_time)
        writer.close()
        if checkpoint_size is not None:
            os.truncate(path, checkpoint_size)
    (run_dir / "metadata.json").write_text(json.dumps(run.metadata(variant=variant), indent=2))
    (run_dir / "complete.json").write_text(json.dumps(run.complete(), indent=2))
    return run_dir


def write_extracted(
    extracted_dir: Path, runs_dir: Path, run: SyntheticRun, *, variant: str
) -> Path:
    """Write a run dir under ``runs_dir`` and extract it to {variant}/{env_id}/{seed}.csv."""
    from sacbench.results.extract import extract_run

    run_dir = write_run_dir(runs_dir / variant / run.env_id / str(run.seed), run, variant=variant)
    output = extracted_dir / variant / run.env_id / f"{run.seed}.csv"
    extract_run(run_dir=run_dir, output_csv=output)
    return output


# ---- the fixed set behind the golden tables ------------------------------------------------------

GOLDEN_VARIANTS = ("fast", "baseline")
GOLDEN_ENV_IDS = ("Hopper-v4", "HalfCheetah-v4")
GOLDEN_SEEDS = (1, 2, 3)


def golden_run(variant: str, env_id: str, seed: int) -> SyntheticRun:
    """Differences a reader can check by eye: `fast` trains faster and learns a bit quicker;
    HalfCheetah has longer episodes and higher returns; fast/Hopper-v4 seed 2 was resumed. Every
    run evaluates 10 episodes every 500 steps and at the end (the final evaluation's mean is
    base_return + 0.1 * 2000 + 10 * seed, or 0.08 for `baseline`)."""
    hopper = env_id == "Hopper-v4"
    return SyntheticRun(
        env_id=env_id,
        seed=seed,
        episode_length=150 if hopper else 250,
        base_return=100.0 if hopper else 300.0,
        return_slope=5.0 if variant == "fast" else 4.0,
        training_sps=200.0 if variant == "fast" else 120.0,
        resume_at=(1000,) if (variant, env_id, seed) == ("fast", "Hopper-v4", 2) else (),
        eval_frequency=500,
        eval_episodes=10,
        eval_slope=0.1 if variant == "fast" else 0.08,
    )


def write_golden_set(root: Path) -> Path:
    """Write and extract the golden runs under ``root``; returns the extracted dir."""
    extracted = root / "extracted"
    for variant in GOLDEN_VARIANTS:
        for env_id in GOLDEN_ENV_IDS:
            for seed in GOLDEN_SEEDS:
                write_extracted(
                    extracted, root / "runs", golden_run(variant, env_id, seed), variant=variant
                )
    return extracted
