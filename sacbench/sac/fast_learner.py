"""The fast update path: the same SAC mathematics as the reference path, computed with less work.

The networks and optimizers live here (FastLearner); each step's gradients come from one of two
formulations over that same state: written out by hand (sacbench.sac.handwritten, the default), or
the loss functions of sacbench.sac.autograd through torch.autograd (what --compile compiles).

What differs from CleanRL's literal computation (sacbench.sac.reference_learner), and why
(docs/performance.md has the measurement behind each choice):
- both critics (and both targets) are one ensemble whose weights are stacked along a leading
  member axis, so each hidden layer is one batched matrix multiply and one backward pass;
- the critics' output layer (256 -> 1) is a multiply and a sum: as a batched matrix multiply
  with one output column it runs several times slower than the arithmetic needs;
- the actor loss reads the critics through detached weights (CleanRL computes gradients of the
  critic weights there that no optimizer uses), and feeds the observation part and the action
  part of the critics' first layer separately, so backward computes an input gradient for the
  actions only instead of for the whole concatenated input;
- the log-probability of the squashed Gaussian is written out (no Distribution object) from the
  same standard-normal draw, so the random stream is consumed exactly as in the reference path;
- gradients go straight into the fused Adam kernel (sacbench.sac.adam), skipping torch.optim's
  per-call bookkeeping; the temperature's gradient is written out (d/dlog_alpha of
  -exp(log_alpha) * c is the loss itself), so it needs no graph;
- with policy_frequency > 1, the forward pass of the updated actor that the alpha loss needs is
  also the forward pass of the next actor update (the actor's weights do not change in
  between), saving one actor forward per extra actor update;
- the critics' first-layer product with the observations is computed once for all actor
  updates of a step (the critics do not change between them);
- the target update is one in-place lerp over all target tensors;
- alpha stays a tensor on the device: no .item() host sync inside the update.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import numpy as np
import torch

from sacbench import private_api
from sacbench.sac.adam import adam_step, create_missing_adam_state, prepared_adam
from sacbench.sac.algorithm import Actor, Batch, UpdateSchedule, alpha_loss_fn
from sacbench.sac.args import Args
from sacbench.sac.autograd import actor_step_loss, critic_step_losses
from sacbench.sac.ensemble import EnsembleCritic
from sacbench.sac.handwritten import handwritten_update
from sacbench.sac.policy import policy_outputs, sample_action_fast, squashed_sample
from sacbench.sac.reference_learner import ReferenceLearner

Gradients = Literal["handwritten", "autograd"]


class FastLearner:
    """The fast path's networks and optimizers, and one step's updates on them.

    `gradients` picks how the update's gradients are computed, over the same state:
    "handwritten" (sacbench.sac.handwritten, the default in eager mode: no autograd graph, and
    the actor loss backpropagated through each sample's smaller critic only) or "autograd"
    (the loss functions of sacbench.sac.autograd through torch.autograd.grad; what --compile
    compiles, since the handwritten form gathers rows by data-dependent counts).
    """

    def __init__(
        self,
        *,
        obs_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        args: Args,
        device: torch.device,
        gradients: Gradients | None = None,
    ) -> None:
        if gradients is None:
            gradients = "autograd" if args.compile else "handwritten"
        if gradients not in get_args(Gradients):
            raise ValueError(f"gradients must be one of {get_args(Gradients)}, got {gradients!r}")
        if args.compile and gradients != "autograd":
            raise ValueError("--compile compiles the autograd formulation: gradients='autograd'")
        self.gradients: Gradients = gradients
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
        self._critic_parameters = list(self.critic.parameters())
        self._target_parameters = list(self.target_critic.parameters())
        self._actor_parameters = list(self.actor.parameters())
        self.q_optimizer = prepared_adam(self._critic_parameters, lr=args.q_lr)
        self.actor_optimizer = prepared_adam(self._actor_parameters, lr=args.policy_lr)
        self.target_entropy = -float(action_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True, device=device)
        self.alpha_optimizer = prepared_adam([self.log_alpha], lr=args.q_lr)
        self.alpha: torch.Tensor | float = (
            self.log_alpha.detach().exp() if args.autotune else args.alpha
        )
        self.last: dict[str, torch.Tensor] = {}
        self._critic_losses = critic_step_losses
        self._actor_loss = actor_step_loss
        if args.compile:
            # Inductor's own random kernels would draw other numbers than eager mode; falling
            # back to eager randn keeps the random stream, and so the run, identical.
            private_api.eager_random_in_compiled_code()
            mode = "reduce-overhead" if args.cudagraphs and device.type == "cuda" else None
            self._critic_losses = torch.compile(critic_step_losses, mode=mode)
            self._actor_loss = torch.compile(actor_step_loss, mode=mode)

    @classmethod
    def from_reference(
        cls,
        reference: ReferenceLearner,
        *,
        device: torch.device,
        gradients: Gradients | None = None,
    ) -> FastLearner:
        """A fast learner holding exactly the reference learner's networks (for equivalence)."""
        actor = reference.actor
        fast = cls(
            obs_dim=actor.fc1.in_features,
            action_low=(actor.action_bias - actor.action_scale).cpu().numpy(),
            action_high=(actor.action_bias + actor.action_scale).cpu().numpy(),
            args=reference.args,
            device=device,
            gradients=gradients,
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
        if self.gradients == "handwritten":
            handwritten_update(self, batch, schedule)
            return self.metrics()
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
        adam_step(self.q_optimizer, torch.autograd.grad(qf_loss, self._critic_parameters))
        self.last["critic_metrics"] = metrics

        observations = batch.observations
        policy: tuple[torch.Tensor, torch.Tensor] | None = None
        # The critics do not change during the actor updates, so neither does their first
        # layer's product with the observations: computed once for all of them.
        observation_part = (
            self.critic.observation_part(observations, detach_weights=True)
            if schedule.actor_updates > 1
            else None
        )
        for actor_update in range(schedule.actor_updates):
            mean, log_std = (
                policy if policy is not None else policy_outputs(self.actor, observations)
            )
            actor_loss = self._actor_loss(
                actor=self.actor,
                critic=self.critic,
                observations=observations,
                mean=mean,
                log_std=log_std,
                alpha=self.alpha,
                observation_part=observation_part,
            )
            adam_step(self.actor_optimizer, torch.autograd.grad(actor_loss, self._actor_parameters))
            self.last["actor_loss"] = actor_loss.detach()
            policy = None
            if args.autotune:
                # The alpha loss needs the updated actor's output on these observations; unless
                # this was the last actor update, the next one starts from the same output, so
                # record its graph once here.
                another_follows = actor_update + 1 < schedule.actor_updates
                with torch.set_grad_enabled(another_follows):
                    mean, log_std = policy_outputs(self.actor, observations)
                if another_follows:
                    policy = (mean, log_std)
                with torch.no_grad():
                    log_pi = squashed_sample(self.actor, mean.detach(), log_std.detach()).log_prob
                    alpha_loss = alpha_loss_fn(
                        log_alpha=self.log_alpha, log_pi=log_pi, target_entropy=self.target_entropy
                    )
                    # d/dlog_alpha of mean(-exp(log_alpha) * c) is that same mean: the loss.
                    adam_step(self.alpha_optimizer, (alpha_loss.reshape(1),))
                    self.alpha = self.log_alpha.detach().exp()
                self.last["alpha_loss"] = alpha_loss

        if schedule.target_update:
            self.update_targets()
        return self.metrics()

    @torch.no_grad()
    def update_targets(self) -> None:
        """target <- target + tau * (online - target), for every critic tensor in one call."""
        private_api.foreach_lerp_(self._target_parameters, self._critic_parameters, self.args.tau)

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
        for name in ("q_optimizer", "actor_optimizer", "alpha_optimizer"):
            optimizer = getattr(self, name)
            optimizer.load_state_dict(state[name])
            create_missing_adam_state(optimizer)  # a state saved before the first step
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        alpha = state["alpha"]
        self.alpha = alpha.to(self.device) if isinstance(alpha, torch.Tensor) else alpha
        self.last = {key: value.to(self.device) for key, value in state["last"].items()}
