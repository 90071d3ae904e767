"""Published numbers: CleanRL's SAC benchmark at tag pr-424, with their true units.

CleanRL's ``docs/benchmark/sac_runtimes.md`` is often read as steps per second. It is not: the
values are wall-clock MINUTES per 1,000,000-step run, as openrlbenchmark computes them (the mean
over seeds of W&B's ``_runtime``, then the mean of the last 10% of those seed-averaged rows,
which reads about 0.95x the final wall-clock; docs/results.md, "Runtimes: `sac_runtimes.md`").
The returns are, per run, the mean of its last 100 ``charts/episodic_return`` values, then mean
± std (ddof=0) over seeds 1, 2 and 3.

The random-policy returns anchor the min-max normalisation of the aggregate statistics; they were
measured here with :func:`measure_random_returns` (``python -m sacbench.published``).

"Reference" in sacbench names CleanRL's literal update path (``--update-path reference``), never
these numbers.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import numpy as np

# How tables and plots name these numbers; no variant may take it.
LABEL = "pr-424"
PR424_STEPS = 1_000_000
PR424_SEEDS = (1, 2, 3)
PR424_SOFTWARE = "gymnasium 0.28.1, mujoco 2.3.3, torch 1.12.1; 1 GPU (model not recorded), 10 CPUs"


@dataclass(frozen=True)
class Pr424Result:
    runtime_minutes: float
    """openrlbenchmark's runtime, wall-clock minutes per 1M-step run (mean over 3 seeds)"""
    return_mean: float
    """mean over seeds of each run's mean of its last 100 episodic returns"""
    return_std: float
    """population std (ddof=0) over seeds of the same per-run means"""

    @property
    def implied_sps(self) -> float:
        """Environment steps per second implied by the runtime: 1e6 / (minutes * 60).

        The runtime reads about 0.95x the final wall-clock, so the true average throughput of
        those runs was about 0.95x this figure.
        """
        return PR424_STEPS / (self.runtime_minutes * 60.0)


PR424: dict[str, Pr424Result] = {
    "HalfCheetah-v4": Pr424Result(174.778, 9634.89, 1423.73),
    "Walker2d-v4": Pr424Result(161.161, 3591.45, 911.33),
    "Hopper-v4": Pr424Result(173.242, 2310.46, 342.82),
    "InvertedPendulum-v4": Pr424Result(179.042, 909.37, 55.66),
    "Humanoid-v4": Pr424Result(177.31, 4996.29, 686.40),
    "Pusher-v4": Pr424Result(172.123, -22.45, 0.51),
}

# Mean undiscounted return of a uniform-random policy (actions drawn from the action space),
# 100 episodes per task, seed 0, gymnasium 1.4.0 + mujoco 2.3.7: the 0 of the normalised score.
RANDOM_EPISODES = 100
RANDOM_SEED = 0
RANDOM_RETURNS: dict[str, float] = {
    "HalfCheetah-v4": -276.58,
    "Walker2d-v4": 2.61,
    "Hopper-v4": 19.89,
    "InvertedPendulum-v4": 6.23,
    "Humanoid-v4": 120.81,
    "Pusher-v4": -149.19,
}


def normalization_anchors(env_id: str) -> tuple[float, float]:
    """(random return, pr-424 return) for ``env_id``: the 0 and the 1 of its normalised score."""
    if env_id not in PR424 or env_id not in RANDOM_RETURNS:
        raise KeyError(
            f"no normalisation anchors for {env_id!r}: normalised scores need a pr-424 return and "
            f"a random-policy return; known tasks: {', '.join(PR424)}"
        )
    return RANDOM_RETURNS[env_id], PR424[env_id].return_mean


def measure_random_returns(*, env_id: str, episodes: int, seed: int) -> float:
    """Mean return of uniform-random actions over ``episodes`` episodes (reproducible by seed)."""
    import gymnasium as gym

    if episodes <= 0:
        raise ValueError(f"episodes must be positive, got {episodes}")
    env = gym.make(env_id)
    env.action_space.seed(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description="Measure the random-policy returns used above.")
    parser.add_argument("--episodes", type=int, default=RANDOM_EPISODES)
    parser.add_argument("--seed", type=int, default=RANDOM_SEED)
    parser.add_argument("--env-ids", nargs="+", default=list(PR424))
    options = parser.parse_args()
    measured = {
        env_id: measure_random_returns(env_id=env_id, episodes=options.episodes, seed=options.seed)
        for env_id in options.env_ids
    }
    print(json.dumps(measured, indent=2))


if __name__ == "__main__":
    main()
