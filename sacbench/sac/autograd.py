"""The fast path's losses as differentiable functions: the autograd formulation of its gradients.

sacbench.sac.fast_learner takes torch.autograd.grad of these (and torch.compile compiles them
with --compile); sacbench.sac.handwritten computes the same gradients written out.
"""

from __future__ import annotations

import torch

from sacbench.sac.algorithm import Actor, actor_loss_fn, soft_q_target
from sacbench.sac.ensemble import EnsembleCritic
from sacbench.sac.policy import sample_action_fast, squashed_sample


def critic_step_losses(
    *,
    actor: Actor,
    critic: EnsembleCritic,
    target_critic: EnsembleCritic,
    observations: torch.Tensor,
    actions: torch.Tensor,
    next_observations: torch.Tensor,
    rewards: torch.Tensor,
    terminations: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed critic loss to backpropagate, [5] detached metrics: q1, q2, l1, l2, l/2)."""
    with torch.no_grad():
        next_actions, next_log_pi = sample_action_fast(actor, next_observations)
        next_q = target_critic(next_observations, next_actions)
        target = soft_q_target(
            rewards=rewards,
            terminations=terminations,
            next_q1=next_q[0],
            next_q2=next_q[1],
            next_log_pi=next_log_pi.view(-1),
            alpha=alpha,
            gamma=gamma,
        )
    q = critic(observations, actions)
    per_member = (q - target).pow(2).mean(dim=1)
    loss = per_member.sum()
    metrics = torch.stack(
        [q[0].mean(), q[1].mean(), per_member[0], per_member[1], loss / 2.0]
    ).detach()
    return loss, metrics


def actor_step_loss(
    *,
    actor: Actor,
    critic: EnsembleCritic,
    observations: torch.Tensor,
    mean: torch.Tensor,
    log_std: torch.Tensor,
    alpha: torch.Tensor | float,
    observation_part: torch.Tensor | None = None,
) -> torch.Tensor:
    """The actor loss, given the actor's (mean, log_std) on `observations` (with their graph)."""
    sample = squashed_sample(actor, mean, log_std)
    pi, log_pi = sample.action, sample.log_prob
    q_pi = critic(observations, pi, detach_weights=True, observation_part=observation_part)
    min_q_pi = q_pi.min(dim=0).values
    return actor_loss_fn(alpha=alpha, log_pi=log_pi, min_q_pi=min_q_pi.view(-1, 1))
