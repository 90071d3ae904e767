"""The fast path's losses as differentiable functions: the autograd formulation of its gradients.

sacbench.sac.fast_learner takes torch.autograd.grad of these (and torch.compile compiles them
with --compile); sacbench.sac.handwritten computes the same gradients written out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch

from sacbench import private_api
from sacbench.sac.algorithm import Actor, Batch, actor_loss_fn, alpha_loss_fn, soft_q_target
from sacbench.sac.ensemble import EnsembleCritic
from sacbench.sac.formulation import ActorPass, FastNetworks, Policy
from sacbench.sac.policy import policy_forward, sample_action_fast, squashed_sample


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


class AutogradFormulation:
    """The gradients of critic_step_losses and actor_step_loss through torch.autograd.grad
    (sacbench.sac.formulation.Formulation). It holds only the loss callables, compiled with
    --compile; the networks and optimizers stay the learner's."""

    def __init__(self, *, compile: bool, cudagraphs: bool, device: torch.device) -> None:
        self._critic_losses: Callable[..., tuple[torch.Tensor, torch.Tensor]] = critic_step_losses
        self._actor_loss: Callable[..., torch.Tensor] = actor_step_loss
        if compile:
            # Inductor's own random kernels would draw other numbers than eager mode; falling
            # back to eager randn keeps the random stream, and so the run, identical.
            private_api.eager_random_in_compiled_code()
            mode = "reduce-overhead" if cudagraphs and device.type == "cuda" else None
            self._critic_losses = torch.compile(critic_step_losses, mode=mode)
            self._actor_loss = torch.compile(actor_step_loss, mode=mode)

    def critic_gradients(
        self, nets: FastNetworks, batch: Batch, *, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The critics' gradients and [5] metrics; draws the next actions (one normal draw)."""
        loss, metrics = self._critic_losses(
            actor=nets.actor,
            critic=nets.critic,
            target_critic=nets.target_critic,
            observations=batch.observations,
            actions=batch.actions,
            next_observations=batch.next_observations,
            rewards=batch.rewards,
            terminations=batch.terminations,
            alpha=alpha,
            gamma=gamma,
        )
        return torch.autograd.grad(loss, nets.critic_parameters), metrics

    def begin_actor_updates(
        self, nets: FastNetworks, observations: torch.Tensor, *, count: int
    ) -> ActorPass:
        """The critics do not change during the actor updates, so neither does their first
        layer's product with the observations: computed once when there are several."""
        observation_part = (
            nets.critic.observation_part(observations, detach_weights=True) if count > 1 else None
        )
        return ActorPass(None, observation_part)

    def actor_gradients(
        self,
        nets: FastNetworks,
        observations: torch.Tensor,
        actor_pass: ActorPass,
        *,
        alpha: torch.Tensor | float,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The actor's gradients and detached loss; draws the actions (one normal draw)."""
        if actor_pass.policy is None:
            policy = policy_forward(nets.actor, observations)
            mean, log_std = policy.mean, policy.log_std
        else:  # from updated_policy, with its graph
            mean, log_std = cast(tuple[torch.Tensor, torch.Tensor], actor_pass.policy)
        loss = self._actor_loss(
            actor=nets.actor,
            critic=nets.critic,
            observations=observations,
            mean=mean,
            log_std=log_std,
            alpha=alpha,
            observation_part=actor_pass.observation_part,
        )
        return torch.autograd.grad(loss, nets.actor_parameters), loss.detach()

    def updated_policy(
        self, nets: FastNetworks, observations: torch.Tensor, *, keep_graph: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of the updated actor, recorded for the next actor update's backward
        pass when `keep_graph`."""
        with torch.set_grad_enabled(keep_graph):
            policy = policy_forward(nets.actor, observations)
        return policy.mean, policy.log_std

    def alpha_loss(
        self,
        nets: FastNetworks,
        policy: Policy,
        *,
        log_alpha: torch.Tensor,
        target_entropy: float,
    ) -> torch.Tensor:
        """The temperature loss on the updated actor's actions (one normal draw), no graph."""
        mean, log_std = cast(tuple[torch.Tensor, torch.Tensor], policy)  # from updated_policy
        with torch.no_grad():
            log_pi = squashed_sample(nets.actor, mean.detach(), log_std.detach()).log_prob
            return alpha_loss_fn(log_alpha=log_alpha, log_pi=log_pi, target_entropy=target_entropy)
