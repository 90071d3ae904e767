"""Evaluation: the deterministic policy (tanh of the mean) on an env of its own.

Seeds: training resets its env with --seed once, at the start. Episode i of the evaluation run
after N training steps resets the evaluation env with `episode_seed(seed=--seed, step=N,
episode=i)`, a number drawn from numpy's SeedSequence of those three values under a key of its
own, so evaluation seeds are set apart from the training env's and depend on nothing else:
no evaluation state needs checkpointing, and `python -m sacbench.evaluate` can replay the final
evaluation exactly.

Evaluation leaves training as it would have been without it: its env is not the training env, the
deterministic action draws no random numbers, and each evaluation puts the global generators
(Python's, numpy's, torch's) back as it found them, whatever the libraries it calls draw.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from sacbench.sac.algorithm import Actor, deterministic_action
from sacbench.training.envs import float32_observation, make_env
from sacbench.training.rng import restore_rng_states, rng_states
from sacbench.training.video import recording_env

# Sets evaluation's seeds apart from every other use of --seed ("eval" in ASCII).
EVAL_SEED_KEY = 0x6576616C

Policy = Callable[[np.ndarray], np.ndarray]


def episode_seed(*, seed: int, step: int, episode: int) -> int:
    """The reset seed of episode `episode` of the evaluation after `step` training steps."""
    for name, value in (("seed", seed), ("step", step), ("episode", episode)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    sequence = np.random.SeedSequence(entropy=seed, spawn_key=(EVAL_SEED_KEY, step, episode))
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


def evaluation_due(finished_steps: int, *, eval_frequency: int, total_timesteps: int) -> bool:
    """Whether an evaluation runs once `finished_steps` steps are done (the last step's always)."""
    if finished_steps == total_timesteps:
        return True
    return eval_frequency > 0 and finished_steps % eval_frequency == 0


def deterministic_policy(actor: Actor, device: torch.device) -> Policy:
    """observation -> the actor's deterministic action, as a numpy array."""

    def act(observation: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            observations = torch.as_tensor(observation, device=device)[None]
            return deterministic_action(actor, observations)[0].cpu().numpy()

    return act


@dataclass(frozen=True)
class Episode:
    seed: int
    episodic_return: float
    length: int


def run_episode(env: gym.Env, policy: Policy, *, seed: int) -> Episode:
    """One episode from a reset with `seed` until it terminates or is truncated."""
    observation, _ = env.reset(seed=seed)
    episodic_return, length = 0.0, 0
    while True:
        action = policy(float32_observation(observation))
        observation, reward, terminated, truncated, _ = env.step(action)
        episodic_return += float(reward)
        length += 1
        if terminated or truncated:
            return Episode(seed=seed, episodic_return=episodic_return, length=length)


@dataclass(frozen=True)
class Evaluation:
    step: int  # training steps done when it ran
    episodes: tuple[Episode, ...]
    seconds: float
    video: Path | None

    @property
    def returns(self) -> list[float]:
        return [episode.episodic_return for episode in self.episodes]

    @property
    def lengths(self) -> list[int]:
        return [episode.length for episode in self.episodes]


@contextmanager
def untouched_global_rngs() -> Iterator[None]:
    """Put Python's, numpy's and torch's global generators back as they were."""
    states = rng_states()
    try:
        yield
    finally:
        restore_rng_states(states)


class Evaluator:
    """`episodes` deterministic episodes per evaluation, on an env of its own."""

    def __init__(self, *, env_id: str, seed: int, episodes: int) -> None:
        if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes <= 0:
            raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
        self.env_id, self.seed, self.episodes = env_id, seed, episodes
        self.env = make_env(env_id, seed=seed)

    def run(self, policy: Policy, *, step: int, video: Path | None, replace: bool) -> Evaluation:
        """The evaluation after `step` training steps; its first episode filmed into `video`
        when given (replacing an existing file only when `replace`)."""
        started = time.time()
        with untouched_global_rngs():
            episodes = []
            for index in range(self.episodes):
                seed = episode_seed(seed=self.seed, step=step, episode=index)
                if index == 0 and video is not None:
                    with recording_env(self.env_id, video, replace=replace) as filmed:
                        episodes.append(run_episode(filmed, policy, seed=seed))
                else:
                    episodes.append(run_episode(self.env, policy, seed=seed))
        return Evaluation(step, tuple(episodes), time.time() - started, video)

    def close(self) -> None:
        self.env.close()
