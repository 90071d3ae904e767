"""--cleanrl-exact: the reference path's run, drawing and summing as CleanRL's script does.

CleanRL's cleanrl/sac_continuous_action.py (vwxyzjn/cleanrl at fe8d8a03), run with the same seed
and arguments, computes the same losses and returns as a run with this mode, step for step, up to
where the two MuJoCo builds' trajectories part (docs/cleanrl-exact.md). The reference path
already matches the script in most of what that takes:

- torch's global generator, seeded by the seed (sacbench.training.rng), builds the actor, qf1,
  qf2, qf1_target and qf2_target in the script's order, as the script's nn.Linear modules
  (sacbench.sac.reference_learner), and gives every rsample, acting included;
- the action space is seeded by the seed, as the script's make_env seeds it, for the random phase
  (sacbench.training.envs.make_env);
- observations are stored in float32, and a truncated episode's final observation is stored as
  its next observation (sacbench.training.envs.step_env).

Three things remain, and this module holds them:

- The script's replay buffer (cleanrl_utils.buffers.ReplayBuffer, SB3's) samples from numpy's
  global generator (seeded by the seed): first the rows, np.random.randint(0, size, batch_size),
  then each row's env index, np.random.randint(0, n_envs, batch_size) with n_envs 1. The default
  path draws its rows from a generator of the buffer's own instead.
- The script's environment runs under NumPy 1 (its venv pins numpy<2), sacbench's under NumPy 2,
  whose type promotion (NEP 50) computes a v4 task's control cost, weight * sum(action**2) of the
  float32 action, in float32 rather than float64: the rewards then differ in their last bits
  (1 in 5 of HalfCheetah-v4's float32 rewards). use_numpy1_control_cost restores NumPy 1's
  arithmetic on the tasks whose cost squares the action; the trajectories themselves, MuJoCo
  2.3.3's and 2.3.7's, are the same to the bit on these tasks.
- Gymnasium 0.29's RecordEpisodeStatistics, whose episode return the script logs, adds each
  reward into a float32 array: the reward is rounded to float32 and so is every partial sum.

Where the script stores a terminated episode's next observation, it stores the reset observation
(its vector env has already reset); sacbench stores the final one. No number differs for it: a
termination's target is its reward alone, since (1 - 1) * gamma times a finite value is zero.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from sacbench.training.replay import ReplayBuffer

# The script runs one env (its num_envs default); its buffer draws an env index per row anyway.
CLEANRL_NUM_ENVS = 1


class CleanRLExactReplayBuffer(ReplayBuffer):
    """sacbench's replay buffer, its batches drawn as the script's buffer draws them."""

    def sample_indices(self, batch_size: int) -> torch.Tensor:
        if self.size == 0:
            raise ValueError("ReplayBuffer.sample: the buffer is empty")
        # Rows are ring positions in both buffers: while not full, 0..added-1; once full, the
        # script samples randint(0, buffer_size), all of the ring, as size then is.
        rows = np.random.randint(0, self.size, size=batch_size)
        np.random.randint(0, high=CLEANRL_NUM_ENVS, size=(batch_size,))  # env indices: all 0
        return torch.from_numpy(rows).to(self.storage.device, non_blocking=True)


def replay_buffer_class(*, cleanrl_exact: bool) -> type[ReplayBuffer]:
    return CleanRLExactReplayBuffer if cleanrl_exact else ReplayBuffer


def episode_return_after(episode_return: float, reward: float, *, cleanrl_exact: bool) -> float:
    """The episode's return once `reward` is added: in float64, or, in CleanRL-exact mode, as
    Gymnasium 0.29's RecordEpisodeStatistics adds it (float32 sum of the float32 reward)."""
    if cleanrl_exact:
        return float(np.float32(episode_return) + np.float32(reward))
    return episode_return + reward


# The v4 tasks whose control cost is Gymnasium's `_ctrl_cost_weight * np.sum(np.square(action))`
# of the float32 action (Humanoid-v4's squares the float64 data.ctrl, the same under both NumPys;
# InvertedPendulum-v4 has none; Pusher-v4's 0.1 * reward_ctrl is not a method to replace).
ACTION_SQUARING_CONTROL_COST: frozenset[str] = frozenset(
    {"HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4"}
)


def use_numpy1_control_cost(env: gym.Env, env_id: str) -> bool:
    """Make `env` compute its control cost as under NumPy 1: the float32 sum of the float32
    squares, then multiplied by the weight in float64. True when the task has such a cost."""
    if env_id not in ACTION_SQUARING_CONTROL_COST:
        return False
    unwrapped = env.unwrapped
    weight = getattr(unwrapped, "_ctrl_cost_weight", None)
    if weight is None or not callable(getattr(unwrapped, "control_cost", None)):
        raise ValueError(
            f"--cleanrl-exact: {env_id} has no control_cost method and _ctrl_cost_weight in "
            f"this Gymnasium; sacbench cannot compute its control cost as CleanRL's NumPy 1 does"
        )

    def numpy1_control_cost(action: np.ndarray) -> float:
        return float(weight) * float(np.sum(np.square(action)))

    unwrapped.control_cost = numpy1_control_cost  # type: ignore[attr-defined]
    return True
