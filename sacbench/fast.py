"""The fast update path: the same SAC mathematics as the reference path, computed with less work.

What differs from CleanRL's literal computation (sacbench.train.ReferenceLearner), and why:
- both critics (and both targets) are one ensemble whose weights are stacked along a leading
  member axis, so each layer is one batched matrix multiply and one backward pass;
- the actor loss reads the critics through detached weights: CleanRL computes gradients of the
  critic weights there that no optimizer uses;
- the log-probability of the squashed Gaussian is written out (no Distribution object) from the
  same standard-normal draw, so the random stream is consumed exactly as in the reference path;
- Adam runs fused (one kernel per optimizer instead of one per parameter);
- the target update is one in-place lerp over all target tensors;
- alpha stays a tensor on the device: no .item() host sync inside the update.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from sacbench.args import Args
from sacbench.replay import Batch
from sacbench.train import (
    Actor,
    ReferenceLearner,
    UpdateSchedule,
    actor_loss_fn,
    alpha_loss_fn,
    soft_q_target,
)

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class EnsembleCritic(nn.Module):
    """`members` Q-networks (concat -> 256 -> ReLU -> 256 -> ReLU -> 1) evaluated together.

    forward returns Q-values shaped [members, B].
    """

    def __init__(self, *, obs_dim: int, action_dim: int, members: int = 2, hidden: int = 256):
        super().__init__()
        sizes = [(obs_dim + action_dim, hidden), (hidden, hidden), (hidden, 1)]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in sizes:
            # nn.Linear's own initialisation, one member at a time, stored as [in, out].
            layers = [nn.Linear(fan_in, fan_out) for _ in range(members)]
            self.weights.append(
                nn.Parameter(torch.stack([lay.weight.T for lay in layers]).detach())
            )
            self.biases.append(
                nn.Parameter(torch.stack([lay.bias[None, :] for lay in layers]).detach())
            )

    def forward(
        self, observations: torch.Tensor, actions: torch.Tensor, *, detach_weights: bool = False
    ) -> torch.Tensor:
        x = torch.cat([observations, actions], dim=1)
        members = self.weights[0].shape[0]
        h = x.unsqueeze(0).expand(members, *x.shape)
        last = len(self.weights) - 1
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            if detach_weights:
                weight, bias = weight.detach(), bias.detach()
            h = torch.baddbmm(bias, h, weight)
            if index < last:
                h = F.relu(h)
        return h.squeeze(-1)

    @torch.no_grad()
    def load_from_pair(self, first: nn.Module, second: nn.Module) -> None:
        """Copy two sacbench.train.SoftQNetwork modules into members 0 and 1."""
        for layer_index, name in enumerate(("fc1", "fc2", "fc3")):
            for member, network in enumerate((first, second)):
                linear = getattr(network, name)
                self.weights[layer_index][member].copy_(linear.weight.T)
                self.biases[layer_index][member].copy_(linear.bias[None, :])


def sample_action_fast(
    actor: Actor, observations: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(action, log_prob [B, 1]) - the same draw and value as sacbench.train.sample_action."""
    mean, log_std = actor(observations)
    noise = torch.randn_like(mean)
    x_t = mean + noise * log_std.exp()
    y_t = torch.tanh(x_t)
    action = y_t * actor.action_scale + actor.action_bias
    log_prob = -0.5 * noise.pow(2) - log_std - HALF_LOG_2PI
    log_prob = log_prob - torch.log(actor.action_scale * (1 - y_t.pow(2)) + 1e-6)
    return action, log_prob.sum(1, keepdim=True)


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
    *, actor: Actor, critic: EnsembleCritic, observations: torch.Tensor, alpha: torch.Tensor | float
) -> torch.Tensor:
    pi, log_pi = sample_action_fast(actor, observations)
    min_q_pi = critic(observations, pi, detach_weights=True).min(dim=0).values
    return actor_loss_fn(alpha=alpha, log_pi=log_pi, min_q_pi=min_q_pi.view(-1, 1))


def _adam(parameters: list[torch.Tensor], *, lr: float) -> torch.optim.Adam:
    return torch.optim.Adam(parameters, lr=lr, fused=True)


class FastLearner:
    def __init__(
        self,
        *,
        obs_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        args: Args,
        device: torch.device,
    ) -> None:
        action_dim = len(action_low)
        self.args = args
        self.device = device
        self.actor = Actor(obs_dim=obs_dim, action_low=action_low, action_high=action_high).to(
            device
        )
        self.critic = EnsembleCritic(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.target_critic = EnsembleCritic(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.target_critic.load_state_dict(self.critic.state_dict())
        self.target_critic.requires_grad_(False)
        self.q_optimizer = _adam(list(self.critic.parameters()), lr=args.q_lr)
        self.actor_optimizer = _adam(list(self.actor.parameters()), lr=args.policy_lr)
        self.target_entropy = -float(action_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.alpha_optimizer = _adam([self.log_alpha], lr=args.q_lr)
        self.alpha: torch.Tensor | float = (
            self.log_alpha.detach().exp() if args.autotune else args.alpha
        )
        self.last: dict[str, torch.Tensor] = {}
        self._critic_losses = critic_step_losses
        self._actor_loss = actor_step_loss
        if args.compile:
            mode = "reduce-overhead" if args.cudagraphs and device.type == "cuda" else None
            self._critic_losses = torch.compile(critic_step_losses, mode=mode)
            self._actor_loss = torch.compile(actor_step_loss, mode=mode)

    @classmethod
    def from_reference(cls, reference: ReferenceLearner, *, device: torch.device) -> FastLearner:
        """A fast learner holding exactly the reference learner's networks (for equivalence)."""
        actor = reference.actor
        fast = cls(
            obs_dim=actor.fc1.in_features,
            action_low=(actor.action_bias - actor.action_scale).cpu().numpy(),
            action_high=(actor.action_bias + actor.action_scale).cpu().numpy(),
            args=reference.args,
            device=device,
        )
        fast.actor.load_state_dict(actor.state_dict())
        fast.critic.load_from_pair(reference.qf1, reference.qf2)
        fast.target_critic.load_from_pair(reference.qf1_target, reference.qf2_target)
        with torch.no_grad():
            fast.log_alpha.copy_(reference.log_alpha)
        fast.alpha = fast.log_alpha.detach().exp() if reference.args.autotune else reference.alpha
        return fast

    @torch.no_grad()
    def act(self, observations: torch.Tensor) -> torch.Tensor:
        action, _ = sample_action_fast(self.actor, observations)
        return action

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]:
        args = self.args
        qf_loss, metrics = self._critic_losses(
            actor=self.actor,
            critic=self.critic,
            target_critic=self.target_critic,
            observations=batch.observations,
            actions=batch.actions,
            next_observations=batch.next_observations,
            rewards=batch.rewards,
            terminations=batch.terminations,
            alpha=self.alpha,
            gamma=args.gamma,
        )
        self.q_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        self.q_optimizer.step()
        self.last["critic_metrics"] = metrics

        for _ in range(schedule.actor_updates):
            actor_loss = self._actor_loss(
                actor=self.actor,
                critic=self.critic,
                observations=batch.observations,
                alpha=self.alpha,
            )
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_optimizer.step()
            self.last["actor_loss"] = actor_loss.detach()
            if args.autotune:
                with torch.no_grad():
                    _, log_pi = sample_action_fast(self.actor, batch.observations)
                alpha_loss = alpha_loss_fn(
                    log_alpha=self.log_alpha, log_pi=log_pi, target_entropy=self.target_entropy
                )
                self.alpha_optimizer.zero_grad(set_to_none=True)
                alpha_loss.backward()
                self.alpha_optimizer.step()
                self.alpha = self.log_alpha.detach().exp()
                self.last["alpha_loss"] = alpha_loss.detach()

        if schedule.target_update:
            with torch.no_grad():
                torch._foreach_lerp_(
                    list(self.target_critic.parameters()), list(self.critic.parameters()), args.tau
                )
        return self.metrics()

    def metrics(self) -> dict[str, torch.Tensor]:
        """CleanRL's loss tags; the critic ones are unpacked from one stacked tensor."""
        out: dict[str, torch.Tensor] = {}
        if "critic_metrics" in self.last:
            q1, q2, l1, l2, half = self.last["critic_metrics"].unbind()
            out.update(qf1_values=q1, qf2_values=q2, qf1_loss=l1, qf2_loss=l2, qf_loss=half)
        for name in ("actor_loss", "alpha_loss"):
            if name in self.last:
                out[name] = self.last[name]
        alpha = self.alpha
        out["alpha"] = alpha.reshape(()) if isinstance(alpha, torch.Tensor) else torch.tensor(alpha)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "path": "fast",
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "target_critic": self.target_critic.state_dict(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "alpha": self.alpha,
            "last": dict(self.last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "critic", "target_critic"):
            getattr(self, name).load_state_dict(state[name])
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        alpha = state["alpha"]
        self.alpha = alpha.to(self.device) if isinstance(alpha, torch.Tensor) else alpha
        self.last = {key: value.to(self.device) for key, value in state["last"].items()}
