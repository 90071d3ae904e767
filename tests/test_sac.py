"""Unit tests of the SAC pieces on CPU: policy, losses, schedule, both update paths."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from sacbench.sac.algorithm import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    Actor,
    Batch,
    polyak_update,
    sample_action,
    soft_q_target,
    squash_log_std,
    update_schedule,
)
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.policy import sample_action_fast
from sacbench.sac.reference_learner import ReferenceLearner
from sacbench.training.envs import make_env, step_env

OBS_DIM, ACTION_DIM, BATCH = 11, 3, 32
LOW = np.array([-1.0, -0.5, 0.0], dtype=np.float32)
HIGH = np.array([1.0, 2.5, 4.0], dtype=np.float32)
CPU = torch.device("cpu")


def random_batch(generator: torch.Generator) -> Batch:
    actions = torch.rand(BATCH, ACTION_DIM, generator=generator)
    return Batch(
        observations=torch.randn(BATCH, OBS_DIM, generator=generator),
        next_observations=torch.randn(BATCH, OBS_DIM, generator=generator),
        actions=torch.as_tensor(LOW) + actions * torch.as_tensor(HIGH - LOW),
        rewards=torch.randn(BATCH, generator=generator),
        terminations=(torch.rand(BATCH, generator=generator) < 0.3).float(),
    )


PATHS = ["reference", "fast", "fast-autograd"]


def learner_on(reference: ReferenceLearner, path: str) -> ReferenceLearner | FastLearner:
    """The reference learner itself, or a fast learner holding its networks."""
    if path == "reference":
        return reference
    gradients = "autograd" if path == "fast-autograd" else "handwritten"
    return FastLearner.from_reference(reference, device=CPU, gradients=gradients)


def make_reference(**overrides: object) -> ReferenceLearner:
    torch.manual_seed(0)
    args = Args(batch_size=BATCH, **overrides)  # type: ignore[arg-type]
    return ReferenceLearner(
        obs_dim=OBS_DIM, action_low=LOW, action_high=HIGH, args=args, device=CPU
    )


@pytest.mark.parametrize("sampler", [sample_action, sample_action_fast])
def test_actions_stay_in_bounds_and_log_probs_have_one_column(sampler):
    torch.manual_seed(3)
    actor = Actor(obs_dim=OBS_DIM, action_low=LOW, action_high=HIGH)
    with torch.no_grad():  # push the pre-tanh values far out so squashing is exercised
        actor.fc_mean.bias.fill_(50.0)
    result = sampler(actor, torch.randn(500, OBS_DIM) * 10)
    action, log_prob = result[0], result[1]
    assert action.shape == (500, ACTION_DIM)
    assert log_prob.shape == (500, 1)
    assert torch.all(action >= torch.as_tensor(LOW)) and torch.all(action <= torch.as_tensor(HIGH))
    assert torch.isfinite(log_prob).all()


def test_log_prob_matches_the_change_of_variables_by_hand():
    torch.manual_seed(4)
    actor = Actor(obs_dim=OBS_DIM, action_low=LOW, action_high=HIGH)
    observations = torch.randn(5, OBS_DIM)
    torch.manual_seed(9)
    action, log_prob, _ = sample_action(actor, observations)
    mean, log_std = actor(observations)
    pre_tanh = torch.atanh(
        ((action - actor.action_bias) / actor.action_scale).clamp(-0.999999, 0.999999)
    )
    std = log_std.exp()
    gaussian = -((pre_tanh - mean) ** 2) / (2 * std**2) - log_std - 0.5 * math.log(2 * math.pi)
    jacobian = torch.log(actor.action_scale * (1 - torch.tanh(pre_tanh) ** 2) + 1e-6)
    expected = (gaussian - jacobian).sum(1, keepdim=True)
    torch.testing.assert_close(log_prob, expected, rtol=1e-3, atol=1e-3)


def test_log_std_is_squashed_into_cleanrl_range():
    raw = torch.tensor([-1e6, -1.0, 0.0, 1.0, 1e6])
    squashed = squash_log_std(raw)
    assert squashed[0] == pytest.approx(LOG_STD_MIN)
    assert squashed[-1] == pytest.approx(LOG_STD_MAX)
    assert squashed[2] == pytest.approx(-1.5)  # -5 + 0.5 * 7 * 1
    assert torch.all(squashed[1:] >= squashed[:-1])


def test_target_stops_bootstrapping_on_termination_only():
    rewards = torch.tensor([1.0, 2.0])
    next_q = torch.tensor([10.0, 10.0])
    target = soft_q_target(
        rewards=rewards,
        terminations=torch.tensor([1.0, 0.0]),
        next_q1=next_q,
        next_q2=next_q + 5,
        next_log_pi=torch.tensor([-1.0, -1.0]),
        alpha=0.5,
        gamma=0.9,
    )
    assert target[0].item() == pytest.approx(1.0)
    assert target[1].item() == pytest.approx(2.0 + 0.9 * (10.0 + 0.5))


def test_truncated_episode_stores_true_final_observation_and_no_termination():
    actions = np.random.default_rng(0).uniform(-2, 2, (100, 7)).astype(np.float32)
    env = make_env("Pusher-v4", seed=1)  # 100-step time limit, never terminates
    env.reset(seed=1)
    transitions = [step_env(env, action=action) for action in actions]
    # A twin stepped by hand with the same actions: what each observation must be.
    twin = make_env("Pusher-v4", seed=1)
    twin.reset(seed=1)
    outcomes = [twin.step(action) for action in actions]
    final_observation, _, terminated, truncated, _ = outcomes[-1]
    assert truncated and not terminated
    reset_observation, _ = twin.reset()  # the same env RNG as step_env's reset

    last = transitions[-1]
    assert last.episode_over and not last.terminated and last.reward == outcomes[-1][1]
    # The stored next observation is the final one; the loop continues from a reset observation.
    np.testing.assert_array_equal(last.next_observation, final_observation.astype(np.float32))
    np.testing.assert_array_equal(last.continue_from, reset_observation.astype(np.float32))
    assert last.next_observation.dtype == last.continue_from.dtype == np.float32
    for transition, (observation, reward, *_) in zip(transitions[:-1], outcomes[:-1], strict=True):
        assert not transition.episode_over and not transition.terminated
        assert transition.reward == reward
        np.testing.assert_array_equal(transition.next_observation, observation.astype(np.float32))
        np.testing.assert_array_equal(transition.continue_from, transition.next_observation)


def test_terminated_episode_is_flagged():
    env = make_env("Hopper-v4", seed=1)
    env.reset(seed=1)
    for _ in range(1000):
        transition = step_env(env, action=env.action_space.high)  # falls over quickly
        if transition.episode_over:
            break
    assert transition.terminated and transition.episode_over


def test_polyak_update_is_tau_weighted():
    target = [torch.zeros(3), torch.ones(2)]
    online = [torch.ones(3), torch.full((2,), 3.0)]
    polyak_update(target, online, tau=0.1)
    torch.testing.assert_close(target[0], torch.full((3,), 0.1))
    torch.testing.assert_close(target[1], torch.full((2,), 0.1 * 3 + 0.9 * 1))


@pytest.mark.parametrize("path", PATHS)
def test_learner_target_update_is_polyak_with_tau(path):
    reference = make_reference(tau=0.25)
    learner = learner_on(reference, path)
    target_before = [p.detach().clone() for p in _critic_tensors(learner, target=True)]
    schedule = update_schedule(
        5002, learning_starts=5000, policy_frequency=2, target_network_frequency=1
    )
    learner.update(random_batch(torch.Generator().manual_seed(0)), schedule)
    for before, online, after in zip(
        target_before, _critic_tensors(learner), _critic_tensors(learner, target=True), strict=True
    ):
        torch.testing.assert_close(after, 0.25 * online.detach() + 0.75 * before)


def test_schedule_follows_cleanrl():
    kwargs = dict(learning_starts=10, policy_frequency=3, target_network_frequency=2)
    assert not update_schedule(10, **kwargs).train  # training starts *after* learning_starts
    steps = range(11, 23)
    actor_updates = [update_schedule(s, **kwargs).actor_updates for s in steps]
    assert actor_updates == [3 if s % 3 == 0 else 0 for s in steps]
    assert [update_schedule(s, **kwargs).target_update for s in steps] == [
        s % 2 == 0 for s in steps
    ]
    assert [s for s in range(0, 400) if update_schedule(s, **kwargs).log] == [100, 200, 300]


@pytest.mark.parametrize("path", PATHS)
def test_policy_frequency_actor_updates_every_policy_frequency_steps(path):
    reference = make_reference(policy_frequency=3)
    learner = learner_on(reference, path)
    generator = torch.Generator().manual_seed(1)
    for global_step in range(5001, 5013):  # 5001..5012: actor updates at 5001, 5004, 5007, 5010
        schedule = update_schedule(global_step, learning_starts=5000, policy_frequency=3,
                                   target_network_frequency=1)  # fmt: skip
        learner.update(random_batch(generator), schedule)
    actor_steps = {int(s["step"]) for s in learner.actor_optimizer.state_dict()["state"].values()}
    critic_steps = {int(s["step"]) for s in learner.q_optimizer.state_dict()["state"].values()}
    alpha_steps = {int(s["step"]) for s in learner.alpha_optimizer.state_dict()["state"].values()}
    assert actor_steps == {12} and alpha_steps == {12}  # 4 rounds x 3 updates
    assert critic_steps == {12}  # one critic update per step


@pytest.mark.parametrize("path", PATHS)
def test_alpha_loss_uses_log_pi_of_the_updated_actor(path):
    reference = make_reference()
    learner = learner_on(reference, path)
    actor_before = copy.deepcopy(learner.actor)
    log_alpha_before = learner.log_alpha.detach().clone()
    batch = random_batch(torch.Generator().manual_seed(2))
    schedule = update_schedule(
        5002, learning_starts=5000, policy_frequency=1, target_network_frequency=1
    )
    torch.manual_seed(123)
    metrics = learner.update(batch, schedule)
    # Replay the random stream: critic-target draw, actor draw, then the alpha draw.
    torch.manual_seed(123)
    torch.randn(BATCH, ACTION_DIM)
    torch.randn(BATCH, ACTION_DIM)
    noise = torch.randn(BATCH, ACTION_DIM)

    def alpha_loss_with(actor: Actor) -> float:
        with torch.no_grad():
            mean, log_std = actor(batch.observations)
            y = torch.tanh(mean + noise * log_std.exp())
            log_pi = (-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)) - torch.log(
                actor.action_scale * (1 - y**2) + 1e-6
            )
            log_pi = log_pi.sum(1)
        return float((-log_alpha_before.exp() * (log_pi + learner.target_entropy)).mean())

    reported = float(metrics["alpha_loss"])
    assert reported == pytest.approx(alpha_loss_with(learner.actor), rel=1e-4, abs=1e-5)
    assert abs(reported - alpha_loss_with(actor_before)) > 1e-4


@pytest.mark.parametrize("autotune", [True, False])
@pytest.mark.parametrize("gradients", ["handwritten", "autograd", "fused"])
def test_fast_and_reference_updates_are_equivalent(gradients, autotune):
    """The equivalence test of the speed issue: same state, same batches, several steps."""
    reference = make_reference(autotune=autotune, alpha=0.3)
    fast = FastLearner.from_reference(reference, device=CPU, gradients=gradients)
    generator = torch.Generator().manual_seed(5)
    for offset, global_step in enumerate(range(5001, 5009)):
        batch = random_batch(generator)
        schedule = update_schedule(global_step, learning_starts=5000, policy_frequency=2,
                                   target_network_frequency=1)  # fmt: skip
        torch.manual_seed(1000 + offset)
        reference_metrics = {k: v.clone() for k, v in reference.update(batch, schedule).items()}
        torch.manual_seed(1000 + offset)
        fast_metrics = fast.update(batch, schedule)
        assert set(reference_metrics) == set(fast_metrics)
        for name, value in reference_metrics.items():
            torch.testing.assert_close(fast_metrics[name], value.reshape(()), rtol=1e-4, atol=1e-5,
                                       msg=f"{name} at step {global_step}")  # fmt: skip
    for ours, theirs in zip(fast.actor.parameters(), reference.actor.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    for ours, theirs in zip(_critic_tensors(fast), _critic_tensors(reference), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast.log_alpha, reference.log_alpha, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gradients", ["handwritten", "autograd", "fused"])
def test_fixed_alpha_is_never_tuned(gradients):
    reference = make_reference(autotune=False, alpha=0.3)
    schedule = update_schedule(
        5002, learning_starts=5000, policy_frequency=2, target_network_frequency=1
    )
    metrics = reference.update(random_batch(torch.Generator().manual_seed(0)), schedule)
    assert "alpha_loss" not in metrics and float(metrics["alpha"]) == pytest.approx(0.3)
    fast = FastLearner.from_reference(
        make_reference(autotune=False, alpha=0.3), device=CPU, gradients=gradients
    )
    fast_metrics = fast.update(random_batch(torch.Generator().manual_seed(0)), schedule)
    assert "alpha_loss" not in fast_metrics and float(fast_metrics["alpha"]) == pytest.approx(0.3)


def test_reference_learner_state_round_trip_continues_identically(tmp_path):
    """The learner half of a resume on the reference path: a state saved as checkpoints are
    (a tensors-only file) and loaded into other networks continues bit for bit."""
    generator = torch.Generator().manual_seed(5)
    data = [random_batch(generator) for _ in range(4)]

    def run_updates(learner: ReferenceLearner, steps: range) -> list[dict[str, torch.Tensor]]:
        torch.manual_seed(3)
        metrics = []
        for step in steps:
            schedule = update_schedule(step, learning_starts=5000, policy_frequency=2,
                                       target_network_frequency=1)  # fmt: skip
            update = learner.update(data[step % len(data)], schedule)
            metrics.append({name: value.clone() for name, value in update.items()})
        return metrics

    original = make_reference()
    run_updates(original, range(5001, 5007))
    torch.save(original.state_dict(), tmp_path / "learner.pt")
    torch.manual_seed(99)  # other initial networks, replaced by the loaded state
    resumed = ReferenceLearner(obs_dim=OBS_DIM, action_low=LOW, action_high=HIGH,
                               args=original.args, device=CPU)  # fmt: skip
    resumed.load_state_dict(torch.load(tmp_path / "learner.pt", weights_only=True))
    expected = run_updates(original, range(5007, 5013))
    got = run_updates(resumed, range(5007, 5013))
    assert "alpha_loss" in expected[-1]
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.keys() == theirs.keys()
        for name in ours:
            torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0, msg=name)
    for ours, theirs in zip(_learner_tensors(resumed), _learner_tensors(original), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert resumed.alpha == original.alpha


def _learner_tensors(learner: ReferenceLearner) -> list[torch.Tensor]:
    """Every network parameter and buffer, and every optimizer state tensor, in one order."""
    state = learner.state_dict()
    tensors = [state["log_alpha"]]
    for name in ("actor", "qf1", "qf2", "qf1_target", "qf2_target"):
        tensors.extend(state[name].values())
    for name in ("q_optimizer", "actor_optimizer", "alpha_optimizer"):
        for parameter_state in state[name]["state"].values():
            tensors.extend(torch.as_tensor(value) for value in parameter_state.values())
    return tensors


def _critic_tensors(learner, *, target: bool = False) -> list[torch.Tensor]:
    """Critic tensors of either path in one layout: [w1, b1, w2, b2, w3, b3], members stacked."""
    if isinstance(learner, ReferenceLearner):
        pair = (learner.qf1_target, learner.qf2_target) if target else (learner.qf1, learner.qf2)
        out = []
        for name in ("fc1", "fc2", "fc3"):
            out.append(torch.stack([getattr(q, name).weight.T for q in pair]))
            out.append(torch.stack([getattr(q, name).bias[None] for q in pair]))
        return out
    critic = learner.target_critic if target else learner.critic
    return [t for pair in zip(critic.weights, critic.biases, strict=True) for t in pair]
