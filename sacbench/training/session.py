"""One process's training session: what it trains with, the loop's state, and checkpoint capture."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sacbench.sac.args import Args
from sacbench.sac.learners import Learner
from sacbench.training.envs import capture_env_state, restore_env_state
from sacbench.training.progress import RunProgress
from sacbench.training.replay import ReplayBuffer
from sacbench.training.rng import restore_rng_states, rng_states
from sacbench.training.run_dir import RunDir


@dataclass
class LoopState:
    """What the loop carries from step to step, and a checkpoint carries across processes."""

    step: int  # the session's first step
    start_time: float  # time.time() at the run's start, earlier sessions' time included
    observation: np.ndarray
    episode_return: float
    episode_length: int
    event_files: list[dict[str, Any]]  # each event file's name and checkpointed size
    # Seconds spent evaluating, earlier sessions' included; start_time is moved forward by them,
    # so that the elapsed time counts training only.
    eval_seconds: float = 0.0


@dataclass
class Session:
    """The objects one process trains with."""

    args: Args
    run_dir: RunDir
    env: gym.Env
    learner: Learner
    buffer: ReplayBuffer
    device: torch.device
    progress: RunProgress
    state: LoopState


def fresh_state(env: gym.Env, *, seed: int) -> LoopState:
    start_time = time.time()  # before the first reset, as CleanRL
    observation, _ = env.reset(seed=seed)
    return LoopState(
        step=0,
        start_time=start_time,
        observation=observation,
        episode_return=0.0,
        episode_length=0,
        event_files=[],
    )


def resume_state(
    checkpoint: dict[str, Any],
    *,
    seed: int,
    env: gym.Env,
    learner: Learner,
    buffer: ReplayBuffer,
    run_dir: RunDir,
) -> LoopState:
    """Restore learner, buffer, env and RNGs from `checkpoint`; the loop state to go on from."""
    start_time = time.time() - checkpoint["elapsed_seconds"]
    learner.load_state_dict(checkpoint["learner"])
    run_dir.load_buffer(buffer, checkpoint)
    buffer.rng.bit_generator.state = checkpoint["buffer_rng"]
    # Satisfies the wrappers' reset-before-step check; the state is then overwritten.
    env.reset(seed=seed)
    restore_env_state(env, checkpoint["env"], source=run_dir.state_path)
    restore_rng_states(checkpoint["rng"])
    event_files = checkpoint["event_files"]
    run_dir.trim_event_files(event_files)
    return LoopState(
        step=checkpoint["global_step"],
        start_time=start_time,
        observation=checkpoint["observation"],
        episode_return=checkpoint["episode_return"],
        episode_length=checkpoint["episode_length"],
        event_files=event_files,
        eval_seconds=checkpoint.get("eval_seconds", 0.0),  # absent before evaluation existed
    )


def capture_checkpoint(
    session: Session,
    *,
    global_step: int,
    elapsed_seconds: float,
    rng: dict[str, Any] | None = None,
) -> None:
    """Checkpoint after `global_step` steps; the event log must be flushed first. `rng`: the
    run's generator states, when they are not the process's (a seed trained in a batch)."""
    state = session.state
    state.event_files = session.run_dir.record_event_offsets(state.event_files)
    session.run_dir.save_checkpoint(
        {
            "global_step": global_step,
            "elapsed_seconds": elapsed_seconds,
            "learner": session.learner.state_dict(),
            "buffer_rng": session.buffer.rng.bit_generator.state,
            "env": capture_env_state(session.env),
            "rng": rng_states() if rng is None else rng,
            "observation": state.observation,
            "episode_return": state.episode_return,
            "episode_length": state.episode_length,
            "event_files": state.event_files,
            "eval_seconds": state.eval_seconds,
            "progress": session.progress.checkpoint_state(),
        },
        buffer=session.buffer,
    )
    session.progress.record_checkpoint(global_step=global_step)
