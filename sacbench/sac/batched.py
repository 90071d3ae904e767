"""Several seeds of one task updated as one batched computation: the algorithm-layer half of
training seeds together in one process.

BatchedLearner holds S seeds' networks and optimizers stacked along a leading seed axis (actor
weights [S, out, in] in nn.Linear's layout, critics [S * 2, in, out] with seed s's two members
at rows 2s and 2s + 1, log_alpha [S]) and performs one SAC step for all of them at once from S
stacked batches ([S, B, ...]): each layer of all seeds is one batched matrix multiply, and each
optimizer is one fused Adam call over the stacked tensors (Adam is elementwise and every seed
takes the same steps, so one step count serves all).

Each seed computes the fast path's autograd formulation (sacbench.sac.autograd) with the same
operations in the same order, so seed s in a batch computes what FastLearner computes for it
alone: the products give the same bits (tests/test_batched.py; the fused Adam kernel rounds a
stacked tensor's vectorised part and a short tensor's tail differently, in the last bit):
- the losses are summed over seeds before torch.autograd.grad; the seeds' parameters are
  disjoint slices, so the gradient of each slice is that seed's own loss gradient;
- every random draw of seed s comes from its own torch.Generator, in FastLearner's order (the
  next actions of the critic target; then per actor update the actions, and the alpha draw when
  alpha is tuned), so a seed consumes the same numbers as alone from the default generator.
  `act` draws per seed in the same way, as the training loop's action step would need.

On one CPU thread this is not faster than the seeds' separate updates: the update is bound by
its matrix products, which run no faster batched (docs/performance.md, "Batched seeds"). What
it removes is per-call overhead (S seeds' operations as one call each), which is what bounds a
small network's step on a GPU; not measured here, no GPU was lent.

The seed-batch trainer (sacbench.training.seed_batch, `python -m sacbench.train_seeds`) trains
with it, giving each seed its own run dir, event file, checkpoint and completion record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn

from sacbench import private_api
from sacbench.sac.adam import adam_step, prepared_adam
from sacbench.sac.algorithm import Batch, UpdateSchedule, soft_q_target
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.policy import HALF_LOG_2PI, LOG_STD_HALF_RANGE, LOG_STD_MIN

ACTOR_LAYERS = ("fc1", "fc2", "fc_mean", "fc_logstd")
# Args that must agree across the seeds of one batch (everything but the seed and the names).
SHARED_ARGS = ("gamma", "tau", "policy_lr", "q_lr", "policy_frequency",
               "target_network_frequency", "alpha", "autotune", "batch_size")  # fmt: skip


class StackedLinear(torch.autograd.Function):
    """nn.Linear for every seed at once: x [S, B, in], weight [S, out, in] (nn.Linear's layout),
    bias [S, 1, out] -> [S, B, out].

    Forward is baddbmm on the transposed weight, which gives each seed the bits addmm gives it
    alone. The backward pass is written out because autograd's bmm backward computes the weight
    gradient as x^T g ([S, in, out], then transposed): other rounding than addmm's g^T x for the
    narrow heads, and memory in the transposed layout, which the fused Adam kernel (it walks
    the parameter's memory) would misread. Here it is g^T x, in the weight's own layout.
    """

    @staticmethod
    def forward(
        ctx: Any, inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(inputs, weight)
        return torch.baddbmm(bias, inputs, weight.transpose(1, 2))

    @staticmethod
    def backward(
        ctx: Any, gradient: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        inputs, weight = ctx.saved_tensors
        input_gradient = torch.bmm(gradient, weight) if ctx.needs_input_grad[0] else None
        weight_gradient = torch.bmm(gradient.transpose(1, 2), inputs)
        return input_gradient, weight_gradient, gradient.sum(1, keepdim=True)


def stack_batches(batches: Sequence[Batch]) -> Batch:
    """One Batch whose tensors carry a leading seed axis ([S, B, ...]), from S seeds' batches."""
    if not batches:
        raise ValueError("stack_batches needs at least one batch, got none")
    fields = ("observations", "next_observations", "actions", "rewards", "terminations")
    for name in fields:
        shapes = {tuple(getattr(batch, name).shape) for batch in batches}
        if len(shapes) > 1:
            raise ValueError(f"stack_batches: the batches' {name} differ in shape: {shapes}")
    return Batch(**{name: torch.stack([getattr(b, name) for b in batches]) for name in fields})


class BatchedLearner:
    """S seeds' fast-path networks and optimizers, stacked; `update` steps all seeds at once.

    Build it from S FastLearners (`learners`: their current networks, optimizer states, alpha
    and last metrics are copied, so seed s starts exactly where learner s stands) and one
    generator per seed (`generators`: seed s's random draws come from generators[s] only).
    `seed_state_dict(s)` gives seed s's state in FastLearner.state_dict's format.
    """

    def __init__(
        self, *, learners: Sequence[FastLearner], generators: Sequence[torch.Generator]
    ) -> None:
        _check_learners(learners, generators)
        first = learners[0]
        self.seeds = len(learners)
        self.args: Args = first.args
        self.device = first.device
        self.generators = list(generators)
        self.obs_dim = first.critic.obs_dim
        self.action_dim = first.actor.fc_mean.out_features
        self.action_scale = first.actor.action_scale.clone()
        self.action_bias = first.actor.action_bias.clone()
        self.target_entropy = first.target_entropy
        self.actor_parameters = _stacked_parameters(
            [list(learner.actor.parameters()) for learner in learners], ACTOR_LAYOUTS
        )
        self.critic_parameters = _stacked_parameters(
            [list(learner.critic.parameters()) for learner in learners], CRITIC_LAYOUTS
        )
        self.target_parameters = [
            tensor.detach()
            for tensor in _stacked_parameters(
                [list(learner.target_critic.parameters()) for learner in learners],
                CRITIC_LAYOUTS,
            )
        ]
        (self.log_alpha,) = _stacked_parameters(
            [[learner.log_alpha] for learner in learners], ALPHA_LAYOUTS
        )
        self.q_optimizer = prepared_adam(self.critic_parameters, lr=self.args.q_lr)
        self.actor_optimizer = prepared_adam(self.actor_parameters, lr=self.args.policy_lr)
        self.alpha_optimizer = prepared_adam([self.log_alpha], lr=self.args.q_lr)
        for name, layouts in self._optimizer_layouts().items():
            _stack_adam_state(
                getattr(self, name), [getattr(learner, name) for learner in learners], layouts
            )
        self.alpha: torch.Tensor | float = (
            self.log_alpha.detach().exp() if self.args.autotune else self.args.alpha
        )
        self.last: dict[str, torch.Tensor] = _stacked_last_metrics(learners)

    # ---- the update ------------------------------------------------------------------------

    def update(self, batch: Batch, schedule: UpdateSchedule) -> dict[str, torch.Tensor]:
        """One step's updates for every seed (FastLearner.update's order); metrics shaped [S]."""
        self._check_batch(batch)
        loss, metrics = self._critic_loss(batch)
        adam_step(self.q_optimizer, torch.autograd.grad(loss, self.critic_parameters))
        self.last["critic_metrics"] = metrics
        if schedule.actor_updates:
            self._actor_and_alpha_updates(batch.observations, count=schedule.actor_updates)
        if schedule.target_update:
            with torch.no_grad():
                private_api.foreach_lerp_(
                    self.target_parameters, self.critic_parameters, self.args.tau
                )
        return self.metrics()

    def _critic_loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(the critic losses summed over seeds, [S, 5] metrics: q1, q2, loss1, loss2, loss/2);
        draws each seed's next actions."""
        seeds, size = batch.rewards.shape
        with torch.no_grad():
            mean, log_std = self._actor_forward(batch.next_observations)
            next_actions, next_log_pi = self._squashed_sample(mean, log_std)
            next_q = self._critic_forward(
                self.target_parameters, batch.next_observations, next_actions
            ).view(seeds, 2, size)
            target = soft_q_target(
                rewards=batch.rewards,
                terminations=batch.terminations,
                next_q1=next_q[:, 0],
                next_q2=next_q[:, 1],
                next_log_pi=next_log_pi.view(seeds, size),
                alpha=self._alpha_column(2),
                gamma=self.args.gamma,
            )
        q = self._critic_forward(self.critic_parameters, batch.observations, batch.actions)
        q = q.view(seeds, 2, size)
        per_member = (q - target[:, None]).pow(2).mean(dim=2)  # [S, 2]
        per_seed = per_member.sum(dim=1)
        metrics = torch.stack(
            [q[:, 0].mean(1), q[:, 1].mean(1), per_member[:, 0], per_member[:, 1], per_seed / 2.0],
            dim=1,
        ).detach()
        return per_seed.sum(), metrics

    def _actor_and_alpha_updates(self, observations: torch.Tensor, *, count: int) -> None:
        """FastLearner's `count` actor updates, each followed by its alpha update when tuned."""
        observation_part = (
            self._observation_part(observations, detach_weights=True) if count > 1 else None
        )
        policy = None
        for update in range(count):
            mean, log_std = policy if policy is not None else self._actor_forward(observations)
            actions, log_pi = self._squashed_sample(mean, log_std)
            q_pi = self._critic_forward(
                self.critic_parameters, observations, actions, detach_weights=True,
                observation_part=observation_part,
            ).view(self.seeds, 2, -1)  # fmt: skip
            min_q_pi = q_pi.min(dim=1).values.unsqueeze(-1)  # [S, B, 1]
            actor_loss = (self._alpha_column(3) * log_pi - min_q_pi).mean(dim=(1, 2))
            gradients = torch.autograd.grad(actor_loss.sum(), self.actor_parameters)
            adam_step(self.actor_optimizer, gradients)
            self.last["actor_loss"] = actor_loss.detach()
            another_follows = update + 1 < count
            if not (self.args.autotune or another_follows):
                break
            # The updated actor's output: for the alpha loss and the next actor update.
            with torch.set_grad_enabled(another_follows):
                mean, log_std = self._actor_forward(observations)
            policy = (mean, log_std) if another_follows else None
            if self.args.autotune:
                self._alpha_update(mean.detach(), log_std.detach())

    @torch.no_grad()
    def _alpha_update(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        """The temperature loss per seed on the updated actor's actions (one draw per seed);
        its gradient in log_alpha is the loss itself."""
        _, log_pi = self._squashed_sample(mean, log_std)
        scale = -self.log_alpha.detach().exp().view(self.seeds, 1, 1)
        alpha_loss = (scale * (log_pi + self.target_entropy)).mean(dim=(1, 2))
        adam_step(self.alpha_optimizer, (alpha_loss,))
        self.alpha = self.log_alpha.detach().exp()
        self.last["alpha_loss"] = alpha_loss

    def _alpha_column(self, dims: int) -> torch.Tensor | float:
        """Alpha broadcastable over [S, ...] with `dims` dimensions (a float when fixed)."""
        if isinstance(self.alpha, torch.Tensor):
            return self.alpha.view(self.seeds, *([1] * (dims - 1)))
        return self.alpha

    # ---- the networks, batched over seeds ----------------------------------------------------

    def _actor_forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) [S, B, A] of every seed's actor on its observations [S, B, obs]."""
        w1, b1, w2, b2, w_mean, b_mean, w_log_std, b_log_std = self.actor_parameters
        hidden1 = StackedLinear.apply(observations, w1, b1).relu_()
        hidden2 = StackedLinear.apply(hidden1, w2, b2).relu_()
        mean = StackedLinear.apply(hidden2, w_mean, b_mean)
        log_std_tanh = StackedLinear.apply(hidden2, w_log_std, b_log_std).tanh_()
        return mean, LOG_STD_MIN + LOG_STD_HALF_RANGE * (log_std_tanh + 1)

    def _draw_noise(self, shape: torch.Size) -> torch.Tensor:
        """One standard-normal draw per seed, each from that seed's own generator."""
        return torch.stack(
            [
                torch.randn(shape[1:], generator=generator, device=self.device)
                for generator in self.generators
            ]
        )

    def _squashed_sample(
        self, mean: torch.Tensor, log_std: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, log_prob [S, B, 1]): sacbench.sac.policy.squashed_sample's arithmetic, with
        each seed's draw from its own generator."""
        noise = self._draw_noise(mean.shape)
        squashed = torch.addcmul(mean, noise, log_std.exp()).tanh_()
        action = torch.addcmul(self.action_bias, squashed, self.action_scale)
        jacobian = torch.mul(1 - squashed.square(), self.action_scale).add_(1e-6)
        per_dimension = torch.addcmul(log_std, noise, noise, value=0.5).add_(jacobian.log())
        log_prob = torch.sum(per_dimension, -1, keepdim=True).neg_()
        return action, log_prob - noise.shape[-1] * HALF_LOG_2PI

    def _members(self, inputs: torch.Tensor) -> torch.Tensor:
        """[S, B, n] -> [S * 2, B, n]: each seed's input for both of its critic members."""
        seeds, size, width = inputs.shape
        return inputs.unsqueeze(1).expand(seeds, 2, size, width).reshape(seeds * 2, size, width)

    def _observation_part(
        self, observations: torch.Tensor, *, detach_weights: bool = False
    ) -> torch.Tensor:
        """The critics' first-layer bias plus observation product, [S * 2, B, hidden]."""
        w1, b1 = self.critic_parameters[0], self.critic_parameters[3]
        if detach_weights:
            w1, b1 = w1.detach(), b1.detach()
        return torch.baddbmm(b1, self._members(observations), w1[:, : self.obs_dim])

    def _critic_forward(
        self,
        parameters: list[torch.Tensor],
        observations: torch.Tensor,
        actions: torch.Tensor,
        *,
        detach_weights: bool = False,
        observation_part: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Q-values [S * 2, B]: sacbench.sac.ensemble.EnsembleCritic.forward for every seed."""
        w1, w2, w3, b1, b2, b3 = parameters
        if detach_weights:
            w1, w2, w3, b1, b2, b3 = (t.detach() for t in (w1, w2, w3, b1, b2, b3))
        if actions.requires_grad:  # the actor loss: input gradient for the actions only
            if observation_part is None:
                observation_part = self._observation_part(observations, detach_weights=True)
            h = torch.baddbmm(observation_part, self._members(actions), w1[:, self.obs_dim :])
        else:
            h = torch.baddbmm(b1, self._members(torch.cat([observations, actions], -1)), w1)
        h = torch.baddbmm(b2, h.relu_(), w2).relu_()
        members, size = h.shape[0], h.shape[1]
        return (h * w3.transpose(1, 2)).sum(-1) + b3.view(members, 1).expand(members, size)

    @torch.no_grad()
    def act(self, observations: torch.Tensor) -> torch.Tensor:
        """Every seed's sampled actions [S, N, A] for its observations [S, N, obs]."""
        if observations.dim() != 3 or observations.shape[0] != self.seeds:
            raise ValueError(
                f"act: observations must be [seeds={self.seeds}, N, {self.obs_dim}], "
                f"got {list(observations.shape)}"
            )
        mean, log_std = self._actor_forward(observations)
        return self._squashed_sample(mean, log_std)[0]

    # ---- checks, metrics and per-seed state --------------------------------------------------

    def _check_batch(self, batch: Batch) -> None:
        """Reject a batch that is not S seeds' batches of this task's shapes, naming the field."""
        seeds, size = batch.rewards.shape if batch.rewards.dim() == 2 else (None, None)
        expected = {
            "observations": (self.seeds, size, self.obs_dim),
            "next_observations": (self.seeds, size, self.obs_dim),
            "actions": (self.seeds, size, self.action_dim),
            "rewards": (self.seeds, size),
            "terminations": (self.seeds, size),
        }
        for name, shape in expected.items():
            got = tuple(getattr(batch, name).shape)
            if got != shape or seeds is None:
                want = [dim if dim is not None else "B" for dim in shape]
                raise ValueError(
                    f"batch.{name} must be shaped {want} (seeds, batch size, ...; stack the "
                    f"seeds' batches with stack_batches), got {list(got)}"
                )

    def metrics(self) -> dict[str, torch.Tensor]:
        """FastLearner.metrics's tags, each a tensor [S] (seed s at index s)."""
        out: dict[str, torch.Tensor] = {}
        if "critic_metrics" in self.last:
            q1, q2, l1, l2, half = self.last["critic_metrics"].unbind(dim=1)
            out.update(qf1_values=q1, qf2_values=q2, qf1_loss=l1, qf2_loss=l2, qf_loss=half)
        for name in ("actor_loss", "alpha_loss"):
            if name in self.last:
                out[name] = self.last[name]
        alpha = self.alpha
        out["alpha"] = (
            alpha.clone() if isinstance(alpha, torch.Tensor) else torch.full((self.seeds,), alpha)
        )
        return out

    def seed_state_dict(self, seed: int) -> dict[str, Any]:
        """Seed `seed`'s state in FastLearner.state_dict's format (FastLearner.load_state_dict
        continues it alone): networks, optimizer states, log_alpha, alpha and last metrics."""
        if not isinstance(seed, int) or not 0 <= seed < self.seeds:
            raise ValueError(f"seed must be an index in [0, {self.seeds}), got {seed!r}")
        actor = {
            "action_scale": self.action_scale.clone(),
            "action_bias": self.action_bias.clone(),
        }
        names = [f"{layer}.{kind}" for layer in ACTOR_LAYERS for kind in ("weight", "bias")]
        for name, tensor, layout in zip(names, self.actor_parameters, ACTOR_LAYOUTS, strict=True):
            actor[name] = layout.slot(tensor.detach(), seed)
        alpha = self.alpha
        state: dict[str, Any] = {
            "path": "fast",
            "actor": actor,
            "critic": _critic_state(self.critic_parameters, seed),
            "target_critic": _critic_state(self.target_parameters, seed),
            "log_alpha": self.log_alpha.detach()[seed : seed + 1].clone(),
            "alpha": alpha[seed : seed + 1].clone() if isinstance(alpha, torch.Tensor) else alpha,
            "last": {name: value[seed].clone() for name, value in self.last.items()},
        }
        for name, layouts in self._optimizer_layouts().items():
            state[name] = _seed_adam_state(getattr(self, name), seed, layouts)
        return state

    @staticmethod
    def _optimizer_layouts() -> dict[str, list[_Layout]]:
        return {
            "q_optimizer": CRITIC_LAYOUTS,
            "actor_optimizer": ACTOR_LAYOUTS,
            "alpha_optimizer": ALPHA_LAYOUTS,
        }


# ---- stacking and slicing ------------------------------------------------------------------


def _check_learners(learners: Sequence[FastLearner], generators: Sequence[torch.Generator]) -> None:
    """Reject learners that cannot share one batched step, naming what differs."""
    if len(learners) < 1:
        raise ValueError("learners: a BatchedLearner needs at least one seed's FastLearner")
    if len(generators) != len(learners):
        raise ValueError(
            f"generators: one per seed, got {len(generators)} for {len(learners)} learners"
        )
    if len({id(generator) for generator in generators}) != len(generators):
        raise ValueError("generators: each seed needs its own generator, got a shared one")
    first = learners[0]
    for index, learner in enumerate(learners):
        if not isinstance(learner, FastLearner):
            raise TypeError(f"learners[{index}] must be a FastLearner, got {type(learner)}")
        if learner.args.compile:
            raise ValueError(f"learners[{index}]: --compile is not supported batched")
        for name in SHARED_ARGS:
            if getattr(learner.args, name) != getattr(first.args, name):
                raise ValueError(
                    f"learners[{index}].args.{name} is {getattr(learner.args, name)!r}, "
                    f"learners[0]'s {getattr(first.args, name)!r}: seeds must share it"
                )
        sizes = (learner.critic.obs_dim, learner.actor.fc_mean.out_features, learner.device)
        if sizes != (first.critic.obs_dim, first.actor.fc_mean.out_features, first.device):
            raise ValueError(f"learners[{index}]: (obs_dim, action_dim, device) {sizes} differ")
        if not torch.equal(learner.actor.action_scale, first.actor.action_scale) or not (
            torch.equal(learner.actor.action_bias, first.actor.action_bias)
        ):
            raise ValueError(f"learners[{index}]: action bounds differ from learners[0]'s")
        if generators[index].device.type != torch.device(first.device).type:
            raise ValueError(
                f"generators[{index}] is on {generators[index].device}, the learners on "
                f"{first.device}: each seed's draws must come from a generator on its device"
            )


class _Layout:
    """How one stacked parameter holds its seeds' tensors: `stack` builds it from the seeds'
    tensors (FastLearner's layout), `slot` gives seed s's tensor back in that layout."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "actor weight", "actor bias", "critic" or "alpha"

    def stack(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        if self.kind == "actor weight":  # [out, in] -> [S, out, in]
            return torch.stack(tensors)
        if self.kind == "actor bias":  # [out] -> [S, 1, out]
            return torch.stack([tensor[None, :] for tensor in tensors])
        return torch.cat(tensors)  # critic [2, ...] -> [S * 2, ...]; alpha [1] -> [S]

    def slot(self, stacked: torch.Tensor, seed: int) -> torch.Tensor:
        if self.kind == "actor weight":
            return stacked[seed].clone()
        if self.kind == "actor bias":
            return stacked[seed, 0].clone()
        members = 2 if self.kind == "critic" else 1
        return stacked[members * seed : members * (seed + 1)].clone()


ACTOR_LAYOUTS = [_Layout("actor weight"), _Layout("actor bias")] * len(ACTOR_LAYERS)
CRITIC_LAYOUTS = [_Layout("critic")] * 6
ALPHA_LAYOUTS = [_Layout("alpha")]


def _stacked_last_metrics(learners: Sequence[FastLearner]) -> dict[str, torch.Tensor]:
    """The learners' last metrics (what `metrics` reports until an update replaces them),
    stacked along the seed axis; learners that have reported different ones are refused."""
    names = set(learners[0].last)
    for index, learner in enumerate(learners):
        if set(learner.last) != names:
            raise ValueError(
                f"learners[{index}] has last metrics {sorted(learner.last)}, learners[0] "
                f"{sorted(names)}: seeds of one batch must stand at the same step"
            )
    return {name: torch.stack([learner.last[name] for learner in learners]) for name in names}


def _stacked_parameters(
    per_seed: list[list[torch.Tensor]], layouts: list[_Layout]
) -> list[torch.Tensor]:
    """The seeds' parameters (each seed's list in FastLearner's order) stacked per layout."""
    return [
        nn.Parameter(layout.stack([tensor.detach() for tensor in tensors]))
        for layout, tensors in zip(layouts, zip(*per_seed, strict=True), strict=True)
    ]


def _critic_state(parameters: list[torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Seed `seed`'s EnsembleCritic state dict."""
    names = [f"weights.{i}" for i in range(3)] + [f"biases.{i}" for i in range(3)]
    return {
        name: layout.slot(tensor.detach(), seed)
        for name, tensor, layout in zip(names, parameters, CRITIC_LAYOUTS, strict=True)
    }


@torch.no_grad()
def _stack_adam_state(
    optimizer: torch.optim.Adam, sources: list[torch.optim.Adam], layouts: list[_Layout]
) -> None:
    """Copy the seeds' Adam states into the stacked optimizer; their step counts must agree
    (one count serves every seed)."""
    per_seed = [source.param_groups[0]["params"] for source in sources]
    stacked = optimizer.param_groups[0]["params"]
    for index, (parameter, layout) in enumerate(zip(stacked, layouts, strict=True)):
        states = [
            source.state[params[index]] for source, params in zip(sources, per_seed, strict=True)
        ]
        steps = {float(state["step"]) for state in states}
        if len(steps) != 1:
            raise ValueError(f"learners: their optimizers took different step counts {steps}")
        target = optimizer.state[parameter]
        target["step"].fill_(steps.pop())
        for key in ("exp_avg", "exp_avg_sq"):
            target[key].copy_(layout.stack([state[key] for state in states]))


def _seed_adam_state(
    optimizer: torch.optim.Adam, seed: int, layouts: list[_Layout]
) -> dict[str, Any]:
    """Seed `seed`'s share of a stacked optimizer, as torch.optim.Adam.state_dict() gives it."""
    whole = optimizer.state_dict()
    whole["state"] = {
        index: {
            "step": state["step"].clone(),
            "exp_avg": layouts[index].slot(state["exp_avg"], seed),
            "exp_avg_sq": layouts[index].slot(state["exp_avg_sq"], seed),
        }
        for index, state in whole["state"].items()
    }
    return whole
