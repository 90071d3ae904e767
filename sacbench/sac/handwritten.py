"""Hand-written gradients for the fast path: the same SAC update without torch.autograd.

Every network here is a two-hidden-layer ReLU MLP, so each gradient is a few matrix products
and masks, written out below. Compared with recording the computation for autograd, this
- builds no graph and keeps no saved tensors beyond the activations the products need;
- backpropagates the actor loss through each sample's smaller critic only: min(q1, q2) has a
  zero gradient for the other member, so per actor update the critics' hidden-layer input
  gradient is one [B, 256] x [256, 256] product split between the members instead of two;
- computes only the gradients an optimizer uses (no critic weight gradients in the actor step,
  no input gradients for observations).
The mathematics, the random draws and their order are those of sacbench.sac.autograd (and so of
CleanRL). tests/test_handwritten.py checks each gradient against autograd, and
tests/test_sac.py whole updates against the reference path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from sacbench.private_api import relu_backward, relu_backward_
from sacbench.sac.algorithm import Actor, Batch, alpha_loss_fn, soft_q_target
from sacbench.sac.formulation import ActorPass, FastNetworks, Policy
from sacbench.sac.policy import (
    LOG_STD_HALF_RANGE,
    PolicyForward,
    SquashedSample,
    policy_forward,
    squashed_sample,
)
from sacbench.sac.products import affine, product, shared_operand


def policy_gradients(
    actor: Actor,
    policy: PolicyForward,
    sample: SquashedSample,
    *,
    action_gradient: torch.Tensor,
    log_prob_gradient: torch.Tensor | float,
    product_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, ...]:
    """Gradients of a loss with d loss / d action = `action_gradient` [B, A] and d loss /
    d log_prob_b = `log_prob_gradient` (the same for every sample), in actor.parameters() order.
    `product_dtype`: the precision of the products (sacbench.sac.products).
    """
    scale = actor.action_scale
    # log_prob_b contains -sum_j log(scale (1 - y^2) + 1e-6), whose derivative in y is
    # 2 scale y / (scale (1 - y^2) + 1e-6); noise^2 / 2 is a constant of the parameters.
    d_squashed = action_gradient * scale + log_prob_gradient * (
        2 * scale * sample.squashed / sample.jacobian
    )
    d_mean = d_squashed.mul_(sample.one_minus_squared)
    d_log_std = d_mean * sample.std * sample.noise - log_prob_gradient
    d_head = d_log_std.mul_(LOG_STD_HALF_RANGE * (1 - policy.log_std_tanh.pow(2)))
    d_hidden2 = torch.mm(d_mean, actor.fc_mean.weight).addmm_(d_head, actor.fc_logstd.weight)
    relu_backward_(d_hidden2, policy.hidden2)
    # Both products below have sides (B, 256, 256): they round alike, so d_hidden2 once.
    d_hidden2_operand = shared_operand(d_hidden2, actor.fc2.weight, product_dtype)
    d_hidden1 = product(d_hidden2_operand, actor.fc2.weight, dtype=product_dtype)
    relu_backward_(d_hidden1, policy.hidden1)
    return (
        product(d_hidden1.t(), policy.observations, dtype=product_dtype),
        d_hidden1.sum(0),
        product(d_hidden2_operand.t(), policy.hidden1, dtype=product_dtype),
        d_hidden2.sum(0),
        torch.mm(d_mean.t(), policy.hidden2),
        d_mean.sum(0),
        torch.mm(d_head.t(), policy.hidden2),
        d_head.sum(0),
    )


@dataclass(frozen=True)
class CriticForward:
    """The ensemble's activations, [members, B, hidden] each, and its Q-values [members, B]."""

    hidden1: torch.Tensor
    hidden2: torch.Tensor
    q: torch.Tensor


def critic_forward(
    critic: torch.nn.Module,
    first_layer: torch.Tensor,
    *,
    product_dtype: torch.dtype | None = None,
) -> CriticForward:
    """The ensemble from its first layer's output before the ReLU (overwritten in place);
    `product_dtype`: the precision of the products (sacbench.sac.products)."""
    (_, w2, w3), (_, b2, b3) = critic.weights, critic.biases
    hidden1 = first_layer.relu_()
    hidden2 = affine(b2, hidden1, w2, dtype=product_dtype).relu_()
    # A batched product with one output column runs several times slower than multiply + sum.
    q = (hidden2 * w3.transpose(1, 2)).sum(2) + b3.view(-1, 1)
    return CriticForward(hidden1, hidden2, q)


def critic_inputs(observations: torch.Tensor, actions: torch.Tensor, members: int) -> torch.Tensor:
    """The concatenated input, expanded (not copied) along the member axis."""
    inputs = torch.cat([observations, actions], dim=1)
    return inputs.expand(members, *inputs.shape)


def critic_values(
    critic: torch.nn.Module,
    observations: torch.Tensor,
    actions: torch.Tensor,
    *,
    product_dtype: torch.dtype | None = None,
) -> CriticForward:
    w1, b1 = critic.weights[0], critic.biases[0]
    inputs = critic_inputs(observations, actions, w1.shape[0])
    first_layer = affine(b1, inputs, w1, dtype=product_dtype)
    return critic_forward(critic, first_layer, product_dtype=product_dtype)


def critic_loss_gradients(
    critic: torch.nn.Module,
    inputs: torch.Tensor,
    forward: CriticForward,
    targets: torch.Tensor,
    *,
    product_dtype: torch.dtype | None = None,
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Gradients of sum over members of mean_b (q - target)^2, in critic.parameters() order
    (weights, then biases), and the [5] metrics q1, q2, loss1, loss2, loss / 2; `product_dtype`:
    the precision of the products (sacbench.sac.products)."""
    (_, w2, w3) = critic.weights
    members, batch = forward.q.shape
    error = forward.q - targets
    per_member = error.pow(2).mean(1)
    d_q = error.mul_(2.0 / batch).unsqueeze(2)  # [members, B, 1]
    d_hidden2 = d_q * w3.transpose(1, 2)
    relu_backward_(d_hidden2, forward.hidden2)
    # Both products below have sides (B, 256, 256): they round alike, so d_hidden2 once.
    d_hidden2_operand = shared_operand(d_hidden2, w2.transpose(1, 2), product_dtype)
    d_hidden1 = product(d_hidden2_operand, w2.transpose(1, 2), dtype=product_dtype)
    relu_backward_(d_hidden1, forward.hidden1)
    gradients = (
        product(inputs.transpose(1, 2), d_hidden1, dtype=product_dtype),
        product(forward.hidden1.transpose(1, 2), d_hidden2_operand, dtype=product_dtype),
        (forward.hidden2 * d_q).sum(1).unsqueeze(2),
        d_hidden1.sum(1, keepdim=True),
        d_hidden2.sum(1, keepdim=True),
        d_q.sum(1, keepdim=True),
    )
    metrics = torch.cat([forward.q.mean(1), per_member, per_member.sum(0, keepdim=True) / 2])
    return gradients, metrics


def min_critic_action_gradient(
    critic: torch.nn.Module,
    forward: CriticForward,
    *,
    action_dim: int,
    scale: float,
    product_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(min over members of q [B], d(scale * sum_b min_q_b)/d action [B, action_dim]).

    Each sample's gradient flows through the member that attains its minimum only; the rows
    of each member are gathered so that each product covers just those rows.
    """
    (w1, w2, w3) = critic.weights
    min_q, member_of_row = forward.q.min(0)
    batch = min_q.shape[0]
    # Built transposed: [action_dim, rows] products are faster than [rows, action_dim] ones.
    action_gradient_t = forward.q.new_empty(action_dim, batch)
    for member in range(w1.shape[0]):
        rows = (member_of_row == member).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        d_hidden2 = relu_backward(
            (w3[member].t() * scale).expand(rows.numel(), -1),
            forward.hidden2[member].index_select(0, rows),
        )
        d_hidden1 = product(d_hidden2, w2[member].t(), dtype=product_dtype)
        relu_backward_(d_hidden1, forward.hidden1[member].index_select(0, rows))
        action_gradient_t.index_copy_(1, rows, torch.mm(w1[member, -action_dim:], d_hidden1.t()))
    return min_q, action_gradient_t.t()


# ---- the formulation (sacbench.sac.formulation.Formulation) ------------------------------------
# Each method reads the networks and returns gradients, metrics or forward caches; FastLearner
# applies them. Random draws: one standard-normal draw per squashed_sample call, in CleanRL's order.


@dataclass(frozen=True)
class HandwrittenFormulation:
    """The gradients above, step by step; `product_dtype` is the precision of the products
    (sacbench.sac.products; None: float32, the default; torch.bfloat16 for --precision bf16)."""

    product_dtype: torch.dtype | None = None

    @torch.no_grad()
    def critic_gradients(
        self, nets: FastNetworks, batch: Batch, *, alpha: torch.Tensor | float, gamma: float
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The critics' gradients and [5] metrics; draws the next actions (one normal draw)."""
        actor, critic, target_critic = nets.actor, nets.critic, nets.target_critic
        members, product_dtype = critic.weights[0].shape[0], self.product_dtype
        next_policy = policy_forward(actor, batch.next_observations, product_dtype=product_dtype)
        next_sample = squashed_sample(actor, next_policy.mean, next_policy.log_std)
        next_q = critic_values(
            target_critic, batch.next_observations, next_sample.action, product_dtype=product_dtype
        ).q
        targets = soft_q_target(
            rewards=batch.rewards,
            terminations=batch.terminations,
            next_q1=next_q[0],
            next_q2=next_q[1],
            next_log_pi=next_sample.log_prob.view(-1),
            alpha=alpha,
            gamma=gamma,
        )
        inputs = critic_inputs(batch.observations, batch.actions, members)
        first_layer = affine(critic.biases[0], inputs, critic.weights[0], dtype=product_dtype)
        forward = critic_forward(critic, first_layer, product_dtype=product_dtype)
        return critic_loss_gradients(critic, inputs, forward, targets, product_dtype=product_dtype)

    @torch.no_grad()
    def begin_actor_updates(
        self, nets: FastNetworks, observations: torch.Tensor, *, count: int
    ) -> ActorPass:
        """The actor's forward pass for the first actor update, and the critics' first-layer
        product with the observations, computed once: the critics do not change during the
        actor updates."""
        product_dtype = self.product_dtype
        return ActorPass(
            policy_forward(nets.actor, observations, product_dtype=product_dtype),
            nets.critic.observation_part(observations, product_dtype=product_dtype),
        )

    @torch.no_grad()
    def actor_gradients(
        self,
        nets: FastNetworks,
        observations: torch.Tensor,
        actor_pass: ActorPass,
        *,
        alpha: torch.Tensor | float,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The actor's gradients and loss, backpropagated through each sample's smaller critic;
        draws the actions (one normal draw)."""
        actor, critic = nets.actor, nets.critic
        members, action_dim = critic.weights[0].shape[0], actor.fc_mean.out_features
        batch_size = observations.shape[0]
        # begin_actor_updates and updated_policy of this class fill both fields.
        policy = cast(PolicyForward, actor_pass.policy)
        sample = squashed_sample(actor, policy.mean, policy.log_std)
        first_layer = torch.baddbmm(
            cast(torch.Tensor, actor_pass.observation_part),
            sample.action.expand(members, *sample.action.shape),
            critic.weights[0][:, -action_dim:],
        )
        # actor loss = mean_b(alpha * log_pi_b - min_q_b)
        min_q, action_gradient = min_critic_action_gradient(
            critic,
            critic_forward(critic, first_layer, product_dtype=self.product_dtype),
            action_dim=action_dim,
            scale=-1.0 / batch_size,
            product_dtype=self.product_dtype,
        )
        actor_loss = (alpha * sample.log_prob.view(-1) - min_q).mean()
        gradients = policy_gradients(
            actor,
            policy,
            sample,
            action_gradient=action_gradient,
            log_prob_gradient=alpha / batch_size,
            product_dtype=self.product_dtype,
        )
        return gradients, actor_loss

    @torch.no_grad()
    def updated_policy(
        self, nets: FastNetworks, observations: torch.Tensor, *, keep_graph: bool
    ) -> PolicyForward:
        """The updated actor's output: for the alpha loss, and the forward pass of the next
        actor update (the actor does not change in between). No graph is ever needed here."""
        return policy_forward(nets.actor, observations, product_dtype=self.product_dtype)

    @torch.no_grad()
    def alpha_loss(
        self,
        nets: FastNetworks,
        policy: Policy,
        *,
        log_alpha: torch.Tensor,
        target_entropy: float,
    ) -> torch.Tensor:
        """The temperature loss on the updated actor's actions (one normal draw)."""
        forward = cast(PolicyForward, policy)  # from updated_policy
        log_pi = squashed_sample(nets.actor, forward.mean, forward.log_std).log_prob
        return alpha_loss_fn(log_alpha=log_alpha, log_pi=log_pi, target_entropy=target_entropy)
