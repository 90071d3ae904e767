"""Soft Actor-Critic's mathematics in one module, after CleanRL's sac_continuous_action.py.

Read top to bottom, each piece is what one part of CleanRL's script computes:
1. the networks: SoftQNetwork and Actor (CleanRL's classes of the same names), and the squashed
   Gaussian policy, sample_action (CleanRL's Actor.get_action);
2. the losses as pure functions of tensors: the soft Q target and the critics' MSE (the
   "next_q_value" and "qf_loss" lines of the training loop), the actor loss, the temperature loss
   (autotune), and the Polyak target update;
3. the update schedule: which of those updates a global step performs (CleanRL's
   `global_step > learning_starts`, `% policy_frequency` and `% target_network_frequency` tests);
4. Batch, the replay sample the learners consume.

The learners that apply these (sacbench.sac.reference_learner literally, sacbench.sac.fast_learner
with less work) and the loop that drives them (sacbench.training.loop) live elsewhere, so that
this module depends on torch alone (and on sacbench.tags for the log cadence, LOG_EVERY,
which the config check and the results share).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from sacbench.tags import LOG_EVERY

LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0


# ==== 1. Networks ================================================================================


class SoftQNetwork(nn.Module):
    """Q(s, a): concat -> 256 -> ReLU -> 256 -> ReLU -> 1."""

    def __init__(self, *, obs_dim: int, action_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + action_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([observations, actions], dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Actor(nn.Module):
    """256 -> ReLU -> 256 -> ReLU -> (mean, log_std) of a tanh-squashed Gaussian."""

    def __init__(self, *, obs_dim: int, action_low: np.ndarray, action_high: np.ndarray) -> None:
        super().__init__()
        action_dim = len(action_low)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, action_dim)
        self.fc_logstd = nn.Linear(256, action_dim)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        low = torch.as_tensor(action_low, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.fc1(observations))
        x = F.relu(self.fc2(x))
        return self.fc_mean(x), squash_log_std(self.fc_logstd(x))


def squash_log_std(raw: torch.Tensor) -> torch.Tensor:
    """Map an unbounded head output into [LOG_STD_MIN, LOG_STD_MAX] (CleanRL's formula)."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(raw) + 1)


def sample_action(
    actor: Actor, observations: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(action, log_prob [B, 1], deterministic action), rescaled to the action bounds.

    The log-probability includes the tanh change of variables,
    log(action_scale * (1 - tanh(x)^2) + 1e-6), summed over action dimensions.
    """
    mean, log_std = actor(observations)
    normal = torch.distributions.Normal(mean, log_std.exp())
    x_t = normal.rsample()  # reparameterised: gradients flow to mean and log_std
    y_t = torch.tanh(x_t)
    action = scale_to_bounds(actor, y_t)
    log_prob = normal.log_prob(x_t)
    log_prob = log_prob - torch.log(actor.action_scale * (1 - y_t.pow(2)) + 1e-6)
    log_prob = log_prob.sum(1, keepdim=True)
    return action, log_prob, scale_to_bounds(actor, torch.tanh(mean))


def scale_to_bounds(actor: Actor, squashed: torch.Tensor) -> torch.Tensor:
    """Map a tanh-squashed action in [-1, 1] onto the env's action bounds."""
    return squashed * actor.action_scale + actor.action_bias


def deterministic_action(actor: Actor, observations: torch.Tensor) -> torch.Tensor:
    """The policy without exploration noise, for evaluation: tanh of the Gaussian's mean, scaled
    to the action bounds (the third value of CleanRL's get_action). Draws no random numbers."""
    mean, _ = actor(observations)
    return scale_to_bounds(actor, torch.tanh(mean))


# ==== 2. Losses (pure functions) ================================================================


def soft_q_target(
    *,
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_log_pi: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> torch.Tensor:
    """r + gamma * (1 - terminated) * (min(Q1', Q2') - alpha * log_pi'), all shaped [B].

    Only termination stops bootstrapping: a time-limit truncation still bootstraps from the true
    final observation, which the buffer stores.
    """
    min_next_q = torch.minimum(next_q1, next_q2) - alpha * next_log_pi
    return rewards + (1 - terminations) * gamma * min_next_q


def critic_losses(
    q1: torch.Tensor, q2: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return F.mse_loss(q1, target), F.mse_loss(q2, target)


def actor_loss_fn(
    *, alpha: torch.Tensor | float, log_pi: torch.Tensor, min_q_pi: torch.Tensor
) -> torch.Tensor:
    return (alpha * log_pi - min_q_pi).mean()


def alpha_loss_fn(
    *, log_alpha: torch.Tensor, log_pi: torch.Tensor, target_entropy: float
) -> torch.Tensor:
    """Temperature loss; log_pi must come from the actor *after* its update, without gradient."""
    return (-log_alpha.exp() * (log_pi + target_entropy)).mean()


@torch.no_grad()
def polyak_update(
    target_parameters: Iterator[torch.Tensor] | list[torch.Tensor],
    parameters: Iterator[torch.Tensor] | list[torch.Tensor],
    *,
    tau: float,
) -> None:
    """target <- tau * online + (1 - tau) * target."""
    for target, online in zip(target_parameters, parameters, strict=True):
        target.data.copy_(tau * online.data + (1 - tau) * target.data)


# ==== 3. Update schedule ========================================================================


@dataclass(frozen=True)
class UpdateSchedule:
    """Which updates step `global_step` performs (CleanRL's schedule)."""

    train: bool  # global_step > learning_starts: one critic update
    actor_updates: int  # policy_frequency actor (+alpha) updates every policy_frequency steps
    target_update: bool  # every target_network_frequency steps
    log: bool  # every LOG_EVERY steps once training has started


def update_schedule(
    global_step: int, *, learning_starts: int, policy_frequency: int, target_network_frequency: int
) -> UpdateSchedule:
    train = global_step > learning_starts
    return UpdateSchedule(
        train=train,
        actor_updates=policy_frequency if train and global_step % policy_frequency == 0 else 0,
        target_update=train and global_step % target_network_frequency == 0,
        log=train and global_step % LOG_EVERY == 0,
    )


# ==== 4. The replay sample ====================================================================


@dataclass(frozen=True)
class Batch:
    observations: torch.Tensor  # [B, obs_dim]
    next_observations: torch.Tensor  # [B, obs_dim]
    actions: torch.Tensor  # [B, act_dim]
    rewards: torch.Tensor  # [B]
    terminations: torch.Tensor  # [B], 1.0 where the episode terminated (not truncated)
