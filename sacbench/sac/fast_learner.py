"""The fast update path: the same SAC mathematics as the reference path, computed with less work.

The networks and optimizers live here (FastLearner); each step's gradients come from one of two
formulations over that same state: written out by hand (sacbench.sac.handwritten, the default), or
the loss functions of sacbench.sac.autograd through torch.autograd (what --compile compiles).
Both are side-effect-free (sacbench.sac.formulation): they return gradients and metrics, and
FastLearner alone steps the optimizers and assigns alpha, in one update loop shared by both.

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

import dataclasses
from typing import Any, Literal, get_args

import numpy as np
import torch

from sacbench import private_api
from sacbench.sac.adam import adam_step, create_missing_adam_state, prepared_adam
from sacbench.sac.algorithm import LOG_STD_MIN, Actor, Batch, UpdateSchedule
from sacbench.sac.args import Args
from sacbench.sac.autograd import AutogradFormulation
from sacbench.sac.ensemble import EnsembleCritic
from sacbench.sac.formulation import FastNetworks, Formulation
from sacbench.sac.fused import FusedFormulation, actor_tensors, adam_arguments
from sacbench.sac.handwritten import HandwrittenFormulation
from sacbench.sac.mixed_precision import MixedPrecision
from sacbench.sac.policy import HALF_LOG_2PI, LOG_STD_HALF_RANGE, sample_action_fast
from sacbench.sac.reference_learner import ReferenceLearner

Gradients = Literal["handwritten", "autograd", "fused"]


def formulation_for(
    gradients: Gradients, *, args: Args, device: torch.device
) -> Formulation | FusedFormulation:
    """The formulation that computes the update's gradients (FastLearner's `gradients`)."""
    if args.compile and gradients != "autograd":
        raise ValueError("--compile compiles the autograd formulation: gradients='autograd'")
    bf16 = args.precision == "bf16"
    if gradients == "handwritten":
        # Its long products only (sacbench.sac.products): thin ones gain nothing from bfloat16
        # on a CPU.
        return HandwrittenFormulation(torch.bfloat16 if bf16 else None)
    if gradients == "fused":
        if device.type != "cpu":
            raise ValueError(f"the fused update runs on the CPU, not {device.type}")
        # The long products in bfloat16 with --precision bf16, as the handwritten formulation's.
        return FusedFormulation.build(bf16_products=bf16)
    autograd = AutogradFormulation(compile=args.compile, cudagraphs=args.cudagraphs, device=device)
    return MixedPrecision(autograd, device=device) if bf16 else autograd


class FastLearner:
    """The fast path's networks and optimizers, and one step's updates on them.

    `gradients` picks how the update's gradients are computed, over the same state:
    "handwritten" (sacbench.sac.handwritten, the default here: no autograd graph, and
    the actor loss backpropagated through each sample's smaller critic only), "autograd"
    (the loss functions of sacbench.sac.autograd through torch.autograd.grad; what --compile
    compiles, since the handwritten form gathers rows by data-dependent counts) or "fused"
    (the hand-written update in C++, its elementwise work fused; sacbench.sac.fused; what the
    trainer runs on a CPU where it builds: sacbench.sac.learners.fast_gradients). With
    `args.precision == "bf16"` either runs its products in bfloat16 and keeps everything the
    optimizers hold in float32 (sacbench.sac.mixed_precision).
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
        if gradients is None:  # the trainer's choice is sacbench.sac.learners.fast_gradients
            gradients = "autograd" if args.compile else "handwritten"
        if gradients not in get_args(Gradients):
            raise ValueError(f"gradients must be one of {get_args(Gradients)}, got {gradients!r}")
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
        self.networks = FastNetworks(
            actor=self.actor,
            critic=self.critic,
            target_critic=self.target_critic,
            critic_parameters=self._critic_parameters,
            actor_parameters=self._actor_parameters,
        )
        self.formulation = formulation_for(gradients, args=args, device=device)
        self._fused_arguments: tuple[list[Any], ...] | None = None  # _fused_update's, once
        self._fused_actor: list[torch.Tensor] | None = None  # act's, once

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
        if isinstance(self.formulation, FusedFormulation):
            if self._fused_actor is None:
                self._fused_actor = actor_tensors(self.actor)
            return self.formulation.act(self._fused_actor, observations)
        action, _ = sample_action_fast(self.actor, observations)
        return action

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]:
        """One step's updates: the critics, the scheduled actor (and alpha) updates, the targets.
        The formulation computes the gradients; only this class applies them (the fused update
        applies them in C++, in one call, as this loop does: FusedFormulation)."""
        if isinstance(self.formulation, FusedFormulation):
            return self._fused_update(batch, schedule)
        gradients, metrics = self.formulation.critic_gradients(
            self.networks, batch, alpha=self.alpha, gamma=self.args.gamma
        )
        adam_step(self.q_optimizer, gradients)
        self.last["critic_metrics"] = metrics
        if schedule.actor_updates:
            self._actor_and_alpha_updates(batch.observations, count=schedule.actor_updates)
        if schedule.target_update:
            self.update_targets()
        return self.metrics()

    def _actor_and_alpha_updates(self, observations: torch.Tensor, *, count: int) -> None:
        """`count` actor updates, each followed by its alpha update when alpha is tuned."""
        formulation, networks = self.formulation, self.networks
        actor_pass = formulation.begin_actor_updates(networks, observations, count=count)
        for update in range(count):
            gradients, actor_loss = formulation.actor_gradients(
                networks, observations, actor_pass, alpha=self.alpha
            )
            adam_step(self.actor_optimizer, gradients)
            self.last["actor_loss"] = actor_loss
            another_follows = update + 1 < count
            if not (self.args.autotune or another_follows):
                break
            # The updated actor's output on these observations: for the alpha loss, and the
            # forward pass of the next actor update (the actor does not change in between).
            policy = formulation.updated_policy(networks, observations, keep_graph=another_follows)
            actor_pass = dataclasses.replace(actor_pass, policy=policy if another_follows else None)
            if self.args.autotune:
                alpha_loss = formulation.alpha_loss(
                    networks, policy, log_alpha=self.log_alpha, target_entropy=self.target_entropy
                )
                # d/dlog_alpha of mean(-exp(log_alpha) * c) is that same mean: the loss.
                adam_step(self.alpha_optimizer, (alpha_loss.reshape(1),))
                self.alpha = self.log_alpha.detach().exp()
                self.last["alpha_loss"] = alpha_loss

    def _fused_update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]:
        """update() as one call of fused_update.cpp's `update`, on the tensors this learner and
        its optimizers hold (collected once, again after load_state_dict)."""
        if self._fused_arguments is None:
            critic_adam = adam_arguments(self.q_optimizer)
            actor_adam = adam_arguments(self.actor_optimizer)
            alpha_adam = adam_arguments(self.alpha_optimizer)
            self._fused_arguments = (
                actor_tensors(self.actor),
                [tensor.detach() for tensor in self._critic_parameters],
                [tensor.detach() for tensor in self._target_parameters],
                *critic_adam,
                *actor_adam,
                *alpha_adam,
            )
        args = self.args
        metrics, actor_loss, alpha_loss, alpha = self.formulation.extension.update(
            *self._fused_arguments,
            # The C++ reads dense rows; the replay buffer's batches are dense already (no copy),
            # a caller's may be strided views.
            batch.observations.contiguous(),
            batch.actions.contiguous(),
            batch.next_observations.contiguous(),
            batch.rewards.contiguous(),
            batch.terminations.contiguous(),
            float(self.alpha),
            args.autotune,
            self.target_entropy,
            args.gamma,
            args.tau,
            schedule.actor_updates,
            schedule.target_update,
            LOG_STD_MIN,
            LOG_STD_HALF_RANGE,
            HALF_LOG_2PI,
            self.formulation.bf16_products,
        )
        self.last["critic_metrics"] = metrics
        for name, value in (("actor_loss", actor_loss), ("alpha_loss", alpha_loss)):
            if value is not None:
                self.last[name] = value
        if alpha is not None:
            self.alpha = alpha
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
        self._fused_arguments = None  # the optimizers hold new state tensors now
        alpha = state["alpha"]
        self.alpha = alpha.to(self.device) if isinstance(alpha, torch.Tensor) else alpha
        self.last = {key: value.to(self.device) for key, value in state["last"].items()}
