"""The fast path's machinery: compiled updates, the direct fused Adam step, state round trips."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from sacbench.sac.adam import adam_step, prepared_adam
from sacbench.sac.algorithm import Batch, update_schedule
from sacbench.sac.args import Args
from sacbench.sac.fast_learner import FastLearner, Gradients

OBS_DIM, ACTION_DIM, BATCH = 5, 2, 16
LOW = np.array([-1.0, 0.0], dtype=np.float32)
HIGH = np.array([1.0, 3.0], dtype=np.float32)
CPU = torch.device("cpu")


def make_fast(gradients: Gradients | None = None, **overrides: object) -> FastLearner:
    torch.manual_seed(0)
    args = Args(batch_size=BATCH, **overrides)  # type: ignore[arg-type]
    return FastLearner(
        obs_dim=OBS_DIM,
        action_low=LOW,
        action_high=HIGH,
        args=args,
        device=CPU,
        gradients=gradients,
    )


def batches(count: int) -> list[Batch]:
    generator = torch.Generator().manual_seed(7)
    out = []
    for _ in range(count):
        unit = torch.rand(BATCH, ACTION_DIM, generator=generator)
        out.append(
            Batch(
                observations=torch.randn(BATCH, OBS_DIM, generator=generator),
                next_observations=torch.randn(BATCH, OBS_DIM, generator=generator),
                actions=torch.as_tensor(LOW) + unit * torch.as_tensor(HIGH - LOW),
                rewards=torch.randn(BATCH, generator=generator),
                terminations=(torch.rand(BATCH, generator=generator) < 0.3).float(),
            )
        )
    return out


def run_updates(learner: FastLearner, steps: range, data: list[Batch]) -> list[dict]:
    out = []
    for index, global_step in enumerate(steps):
        schedule = update_schedule(global_step, learning_starts=5000, policy_frequency=2,
                                   target_network_frequency=1)  # fmt: skip
        torch.manual_seed(100 + global_step)
        metrics = learner.update(data[index % len(data)], schedule)
        out.append({name: value.clone() for name, value in metrics.items()})
    return out


@pytest.mark.parametrize(
    ("args", "gradients", "message"),
    [
        (Args(compile=True), "handwritten", "gradients='autograd'"),
        (Args(), "by-hand", "'by-hand'"),
    ],
)
def test_fast_learner_refuses_gradients_it_cannot_run(args, gradients, message):
    with pytest.raises(ValueError, match=message):
        FastLearner(
            obs_dim=OBS_DIM,
            action_low=LOW,
            action_high=HIGH,
            device=CPU,
            args=args,
            gradients=gradients,
        )


def test_adam_step_matches_torch_adam_over_several_steps():
    torch.manual_seed(0)
    ours = [torch.randn(4, 3), torch.randn(3)]
    theirs = [tensor.clone().requires_grad_() for tensor in ours]
    optimizer = prepared_adam(ours, lr=1e-2)
    reference = torch.optim.Adam(theirs, lr=1e-2)
    for _ in range(5):
        gradients = tuple(torch.randn_like(tensor) for tensor in ours)
        adam_step(optimizer, gradients)
        for tensor, gradient in zip(theirs, gradients, strict=True):
            tensor.grad = gradient.clone()
        reference.step()
    for mine, torchs in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, torchs.detach(), rtol=1e-5, atol=1e-6)
    assert {int(state["step"]) for state in optimizer.state.values()} == {5}


def test_state_dict_round_trip_continues_identically():
    data = batches(4)
    original = make_fast()
    run_updates(original, range(5001, 5005), data)
    resumed = make_fast(seed=99)  # different initial networks, replaced by the loaded state
    # A deep copy stands in for the checkpoint file: optimizer states would share tensors.
    resumed.load_state_dict(copy.deepcopy(original.state_dict()))
    expected = run_updates(original, range(5005, 5009), data)
    got = run_updates(resumed, range(5005, 5009), data)
    for ours, theirs in zip(got, expected, strict=True):
        assert ours.keys() == theirs.keys()
        for name in ours:
            torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0)


def test_state_saved_before_any_update_loads_and_trains():
    fresh = make_fast()
    state = fresh.state_dict()
    for name in ("q_optimizer", "actor_optimizer", "alpha_optimizer"):
        state[name]["state"] = {}  # as torch.optim.Adam saves it before its first step
    learner = make_fast()
    learner.load_state_dict(state)
    run_updates(learner, range(5001, 5003), batches(2))
    steps = {int(s["step"]) for s in learner.q_optimizer.state_dict()["state"].values()}
    assert steps == {2}


@pytest.mark.slow
def test_compiled_fast_path_matches_eager_fast_path():
    """torch.compile (the GPU path's first half) runs on CPU and computes the same updates,
    with the same random draws, over steps with and without actor updates."""
    data = batches(3)
    eager = make_fast(gradients="autograd")  # the formulation --compile compiles
    compiled = FastLearner(
        obs_dim=OBS_DIM,
        action_low=LOW,
        action_high=HIGH,
        args=dataclasses.replace(eager.args, compile=True),
        device=CPU,
    )
    compiled.load_state_dict(copy.deepcopy(eager.state_dict()))
    expected = run_updates(eager, range(5001, 5007), data)
    got = run_updates(compiled, range(5001, 5007), data)
    for step, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours.keys() == theirs.keys()
        for name in ours:
            torch.testing.assert_close(
                ours[name], theirs[name], rtol=1e-4, atol=1e-5, msg=f"{name} at update {step}"
            )
    for ours, theirs in zip(compiled.actor.parameters(), eager.actor.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
