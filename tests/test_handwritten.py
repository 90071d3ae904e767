"""The hand-written gradients of sacbench.sac.handwritten against torch.autograd, piece by piece.

The autograd side is computed from the reference definitions (sacbench.sac.algorithm.sample_action,
EnsembleCritic.forward, F.mse_loss), not from the hand-written forward passes, so a wrong
formula on either side shows up as a mismatch. Both run in float64: near tanh saturation the
log-probability's gradient is ill-conditioned, and float32 rounding would hide small errors
behind a loose tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sacbench.sac.algorithm import Actor, sample_action
from sacbench.sac.ensemble import EnsembleCritic
from sacbench.sac.handwritten import (
    critic_forward,
    critic_inputs,
    critic_loss_gradients,
    min_critic_action_gradient,
    policy_gradients,
)
from sacbench.sac.policy import policy_forward, squashed_sample

OBS_DIM, ACTION_DIM, BATCH = 7, 3, 48
LOW = np.array([-1.0, -0.5, 0.0], dtype=np.float32)
HIGH = np.array([1.0, 2.5, 4.0], dtype=np.float32)
TOLERANCE = dict(rtol=1e-9, atol=1e-9)


def make_actor() -> Actor:
    torch.manual_seed(0)
    actor = Actor(obs_dim=OBS_DIM, action_low=LOW, action_high=HIGH)
    with torch.no_grad():  # spread the log-std head so its tanh is not near-linear
        actor.fc_logstd.weight.mul_(20.0)
    return actor.double()


def make_critic() -> EnsembleCritic:
    torch.manual_seed(1)
    return EnsembleCritic(obs_dim=OBS_DIM, action_dim=ACTION_DIM).double()


@pytest.mark.parametrize("log_prob_weight", [0.0, 0.37])
def test_policy_gradients_match_autograd_through_the_reference_sampler(log_prob_weight):
    actor = make_actor()
    observations = torch.randn(BATCH, OBS_DIM, dtype=torch.float64)
    action_weight = torch.randn(BATCH, ACTION_DIM, dtype=torch.float64)
    torch.manual_seed(5)
    action, log_prob, _ = sample_action(actor, observations)
    loss = (action * action_weight).sum() + log_prob_weight * log_prob.sum()
    expected = torch.autograd.grad(loss, list(actor.parameters()))

    torch.manual_seed(5)  # the same standard-normal draw
    with torch.no_grad():
        policy = policy_forward(actor, observations)
        sample = squashed_sample(actor, policy.mean, policy.log_std)
        got = policy_gradients(
            actor,
            policy,
            sample,
            action_gradient=action_weight,
            log_prob_gradient=log_prob_weight,
        )
    torch.testing.assert_close(sample.action, action.detach(), **TOLERANCE)
    torch.testing.assert_close(sample.log_prob, log_prob.detach(), **TOLERANCE)
    assert len(got) == len(expected)
    for name, ours, theirs in zip(
        [n for n, _ in actor.named_parameters()], got, expected, strict=True
    ):
        torch.testing.assert_close(ours, theirs, **TOLERANCE, msg=name)


def test_critic_loss_gradients_match_autograd_of_both_mse_losses():
    critic = make_critic()
    observations, actions = (
        torch.randn(BATCH, OBS_DIM, dtype=torch.float64),
        torch.randn(BATCH, ACTION_DIM, dtype=torch.float64),
    )
    targets = torch.randn(BATCH, dtype=torch.float64)
    q = critic(observations, actions)
    losses = [F.mse_loss(q[member], targets) for member in range(2)]
    expected = torch.autograd.grad(losses[0] + losses[1], list(critic.parameters()))

    with torch.no_grad():
        inputs = critic_inputs(observations, actions, 2)
        first_layer = torch.baddbmm(critic.biases[0], inputs, critic.weights[0])
        forward = critic_forward(critic, first_layer)
        got, metrics = critic_loss_gradients(critic, inputs, forward, targets)
    for name, ours, theirs in zip(
        [n for n, _ in critic.named_parameters()], got, expected, strict=True
    ):
        assert ours.shape == theirs.shape, name
        torch.testing.assert_close(ours, theirs, **TOLERANCE, msg=name)
    q1, q2, loss1, loss2, half = metrics.tolist()
    assert (q1, q2) == pytest.approx([q[0].mean().item(), q[1].mean().item()], rel=1e-5)
    assert (loss1, loss2) == pytest.approx([loss.item() for loss in losses], rel=1e-5)
    assert half == pytest.approx((losses[0] + losses[1]).item() / 2, rel=1e-5)


@pytest.mark.parametrize("member_offset", [0.0, 100.0, -100.0])
def test_min_critic_action_gradient_matches_autograd_of_the_minimum(member_offset):
    """Mixed rows, and every row's minimum in one member (the other member has no rows)."""
    critic = make_critic()
    with torch.no_grad():
        critic.biases[2][1].add_(member_offset)
    observations = torch.randn(BATCH, OBS_DIM, dtype=torch.float64)
    actions = torch.randn(BATCH, ACTION_DIM, dtype=torch.float64, requires_grad=True)
    q = critic(observations, actions)
    scale = -1.0 / BATCH
    (expected,) = torch.autograd.grad(scale * q.min(0).values.sum(), actions)

    with torch.no_grad():
        inputs = critic_inputs(observations, actions.detach(), 2)
        forward = critic_forward(critic, torch.baddbmm(critic.biases[0], inputs, critic.weights[0]))
        members_used = set(forward.q.argmin(0).tolist())
        min_q, got = min_critic_action_gradient(critic, forward, action_dim=ACTION_DIM, scale=scale)
    assert members_used == ({0, 1} if member_offset == 0 else {1 if member_offset < 0 else 0})
    torch.testing.assert_close(min_q, q.min(0).values.detach(), **TOLERANCE)
    torch.testing.assert_close(got, expected, **TOLERANCE)
