"""The squashed Gaussian policy written out, shared by both fast gradient formulations.

sacbench.sac.algorithm.sample_action draws through torch.distributions; the forms here compute
the same values from the same standard-normal draw (so the random stream is consumed exactly as
there) and keep the intermediates the hand-written gradients need.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sacbench.sac.algorithm import LOG_STD_MAX, LOG_STD_MIN, Actor
from sacbench.sac.products import affine

HALF_LOG_2PI = 0.9189385332046727  # log(2 pi) / 2
LOG_STD_HALF_RANGE = 0.5 * (LOG_STD_MAX - LOG_STD_MIN)


@dataclass(frozen=True)
class PolicyForward:
    """The actor's activations on a batch of observations, kept for its backward pass."""

    observations: torch.Tensor
    hidden1: torch.Tensor
    hidden2: torch.Tensor
    mean: torch.Tensor
    log_std_tanh: torch.Tensor  # tanh of the log-std head's output
    log_std: torch.Tensor


def policy_forward(
    actor: Actor, observations: torch.Tensor, *, product_dtype: torch.dtype | None = None
) -> PolicyForward:
    """sacbench.sac.algorithm.Actor.forward, keeping what the backward pass needs (and
    differentiable: the activations are computed in place where their backward does not read the
    input). `product_dtype`: the precision of the products (sacbench.sac.products)."""
    hidden1 = affine(actor.fc1.bias, observations, actor.fc1.weight.t(), dtype=product_dtype)
    hidden1 = hidden1.relu_()
    hidden2 = affine(actor.fc2.bias, hidden1, actor.fc2.weight.t(), dtype=product_dtype).relu_()
    # Heads in the weights' precision even under torch.autocast (sacbench.sac.mixed_precision),
    # whose products return bfloat16: the sampling and the log-probabilities stay float32.
    dtype = actor.fc_mean.weight.dtype
    mean = torch.addmm(actor.fc_mean.bias, hidden2, actor.fc_mean.weight.t()).to(dtype)
    log_std_head = torch.addmm(actor.fc_logstd.bias, hidden2, actor.fc_logstd.weight.t())
    log_std_tanh = log_std_head.to(dtype).tanh_()
    log_std = LOG_STD_MIN + LOG_STD_HALF_RANGE * (log_std_tanh + 1)
    return PolicyForward(observations, hidden1, hidden2, mean, log_std_tanh, log_std)


@dataclass(frozen=True)
class SquashedSample:
    """One reparameterised draw from the squashed Gaussian, with what its gradient needs."""

    action: torch.Tensor
    log_prob: torch.Tensor  # [B, 1]
    noise: torch.Tensor
    std: torch.Tensor
    squashed: torch.Tensor  # y = tanh(mean + std * noise)
    one_minus_squared: torch.Tensor  # 1 - y^2
    jacobian: torch.Tensor  # action_scale * (1 - y^2) + 1e-6, whose log log_prob subtracts


def squashed_sample(actor: Actor, mean: torch.Tensor, log_std: torch.Tensor) -> SquashedSample:
    """One standard-normal draw shaped like `mean`: the same draw and value as
    sacbench.sac.algorithm.sample_action, with log N(x; mean, std) written out, so that
    log_prob = -sum_j (noise^2 / 2 + log_std + log(jacobian)) - action_dim * log(2 pi) / 2.

    Differentiable too (the autograd formulation in sacbench.sac.autograd records it): the in-place
    operations only overwrite results that their own backward does not read."""
    noise = torch.randn_like(mean)
    std = log_std.exp()
    squashed = torch.addcmul(mean, noise, std).tanh_()
    action = torch.addcmul(actor.action_bias, squashed, actor.action_scale)
    one_minus_squared = 1 - squashed.square()
    jacobian = torch.mul(one_minus_squared, actor.action_scale).add_(1e-6)
    per_dimension = torch.addcmul(log_std, noise, noise, value=0.5).add_(jacobian.log())
    log_prob = torch.sum(per_dimension, 1, keepdim=True).neg_()
    log_prob -= noise.shape[1] * HALF_LOG_2PI
    return SquashedSample(action, log_prob, noise, std, squashed, one_minus_squared, jacobian)


def sample_action_fast(
    actor: Actor, observations: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(action, log_prob [B, 1]): the same draw and value as
    sacbench.sac.algorithm.sample_action."""
    policy = policy_forward(actor, observations)
    sample = squashed_sample(actor, policy.mean, policy.log_std)
    return sample.action, sample.log_prob
