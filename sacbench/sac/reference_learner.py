"""CleanRL's update path, literally: the yardstick the fast path is tested against.

It stays its own class, sharing none of the fast path's machinery, so that a test comparing the two
compares CleanRL's computation with ours.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sacbench.sac.algorithm import (
    Actor,
    Batch,
    SoftQNetwork,
    UpdateSchedule,
    actor_loss_fn,
    alpha_loss_fn,
    critic_losses,
    polyak_update,
    sample_action,
    soft_q_target,
)
from sacbench.sac.args import Args


class ReferenceLearner:
    """CleanRL's per-step computation, literally: two critic modules, per-parameter Adam, a
    separate no-grad actor forward for the alpha loss, alpha read back with .item()."""

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
        self.actor = Actor(obs_dim=obs_dim, action_low=action_low, action_high=action_high).to(
            device
        )
        self.qf1 = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf2 = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf1_target = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf2_target = SoftQNetwork(obs_dim=obs_dim, action_dim=action_dim).to(device)
        self.qf1_target.load_state_dict(self.qf1.state_dict())
        self.qf2_target.load_state_dict(self.qf2.state_dict())
        self.q_optimizer = torch.optim.Adam(
            list(self.qf1.parameters()) + list(self.qf2.parameters()), lr=args.q_lr
        )
        self.actor_optimizer = torch.optim.Adam(list(self.actor.parameters()), lr=args.policy_lr)
        self.target_entropy = -float(action_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=args.q_lr)
        self.alpha = self.log_alpha.exp().item() if args.autotune else args.alpha
        self.last: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def act(self, observations: torch.Tensor) -> torch.Tensor:
        action, _, _ = sample_action(self.actor, observations)
        return action

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]:
        args = self.args
        with torch.no_grad():
            next_actions, next_log_pi, _ = sample_action(self.actor, batch.next_observations)
            next_q1 = self.qf1_target(batch.next_observations, next_actions).view(-1)
            next_q2 = self.qf2_target(batch.next_observations, next_actions).view(-1)
            target = soft_q_target(
                rewards=batch.rewards,
                terminations=batch.terminations,
                next_q1=next_q1,
                next_q2=next_q2,
                next_log_pi=next_log_pi.view(-1),
                alpha=self.alpha,
                gamma=args.gamma,
            )
        q1 = self.qf1(batch.observations, batch.actions).view(-1)
        q2 = self.qf2(batch.observations, batch.actions).view(-1)
        qf1_loss, qf2_loss = critic_losses(q1, q2, target)
        qf_loss = qf1_loss + qf2_loss
        self.q_optimizer.zero_grad()
        qf_loss.backward()
        self.q_optimizer.step()
        self.last.update(
            qf1_values=q1.mean().detach(),
            qf2_values=q2.mean().detach(),
            qf1_loss=qf1_loss.detach(),
            qf2_loss=qf2_loss.detach(),
            qf_loss=qf_loss.detach() / 2.0,
        )

        for _ in range(schedule.actor_updates):
            pi, log_pi, _ = sample_action(self.actor, batch.observations)
            min_q_pi = torch.min(self.qf1(batch.observations, pi), self.qf2(batch.observations, pi))
            actor_loss = actor_loss_fn(alpha=self.alpha, log_pi=log_pi, min_q_pi=min_q_pi)
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            self.last["actor_loss"] = actor_loss.detach()
            if args.autotune:
                with torch.no_grad():
                    _, log_pi, _ = sample_action(self.actor, batch.observations)
                alpha_loss = alpha_loss_fn(
                    log_alpha=self.log_alpha, log_pi=log_pi, target_entropy=self.target_entropy
                )
                self.alpha_optimizer.zero_grad()
                alpha_loss.backward()
                self.alpha_optimizer.step()
                self.alpha = self.log_alpha.exp().item()
                self.last["alpha_loss"] = alpha_loss.detach()

        if schedule.target_update:
            polyak_update(self.qf1_target.parameters(), self.qf1.parameters(), tau=args.tau)
            polyak_update(self.qf2_target.parameters(), self.qf2.parameters(), tau=args.tau)
        self.last["alpha"] = torch.tensor(self.alpha)
        return self.last

    def state_dict(self) -> dict[str, Any]:
        return {
            "path": "reference",
            "actor": self.actor.state_dict(),
            "qf1": self.qf1.state_dict(),
            "qf2": self.qf2.state_dict(),
            "qf1_target": self.qf1_target.state_dict(),
            "qf2_target": self.qf2_target.state_dict(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "alpha": self.alpha,
            "last": dict(self.last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("actor", "qf1", "qf2", "qf1_target", "qf2_target"):
            getattr(self, name).load_state_dict(state[name])
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.alpha = state["alpha"]
        self.last = dict(state["last"])
