"""Gymnasium MuJoCo tasks beyond the benchmark's six: the pinned packages run them, the trainer
accepts them (and refuses what it cannot train, naming the id), and a short run trains one."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pytest

from sacbench.tags import LOSS_TAGS
from sacbench.training.cli import main
from sacbench.training.envs import (
    EnvError,
    capture_env_state,
    check_env_id,
    env_spaces,
    make_env,
    restore_env_state,
    step_env,
)
from tests.trainer_runs import read_scalars, train_in_process

# The list: v5 versions of benchmark tasks, and tasks the benchmark does not have.
OTHER_TASKS = (
    "InvertedPendulum-v5",
    "HalfCheetah-v5",
    "Ant-v4",
    "Ant-v5",
    "Humanoid-v5",
    "Pusher-v5",
    "Swimmer-v4",
)


def test_the_pins_are_the_ones_these_tasks_are_checked_with():
    assert importlib.metadata.version("mujoco") == "2.3.7"
    assert importlib.metadata.version("gymnasium").startswith("1.4.")


def _steps(env, actions: np.ndarray) -> list[np.ndarray]:
    return [step_env(env, action=action).next_observation for action in actions]


@pytest.mark.parametrize("env_id", OTHER_TASKS)
def test_task_resets_steps_and_resumes_exactly(env_id: str):
    env = make_env(env_id, seed=3)
    spaces = env_spaces(env_id)
    observation, _ = env.reset(seed=3)
    assert observation.shape == (spaces.observation_size,)
    assert env.action_space.shape == (spaces.action_size,)
    actions = np.stack([env.action_space.sample() for _ in range(40)])
    first = _steps(env, actions[:20])
    assert all(np.all(np.isfinite(o)) and o.shape == observation.shape for o in first)
    assert not np.array_equal(first[0], first[-1])  # the simulation moves
    # What a checkpoint keeps continues the episode bit for bit in a fresh env.
    state = capture_env_state(env)
    expected = _steps(env, actions[20:])
    twin = make_env(env_id, seed=3)
    twin.reset(seed=99)
    restore_env_state(twin, state, source=Path("unused-in-memory-state"))
    np.testing.assert_array_equal(np.stack(_steps(twin, actions[20:])), np.stack(expected))
    env.close()
    twin.close()


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("Hoper-v5", r"unknown env id 'Hoper-v5' \(did you mean 'Hopper-v5'"),
        ("CartPole-v1", r"CartPole-v1 has a Discrete action space; SAC needs a continuous"),
        ("Ant-v3", r"Ant-v3 is registered but cannot be made .*ImportError"),
        ("Pendulum-v1", r"Pendulum-v1 is not a MuJoCo env"),
    ],
)
def test_what_cannot_be_trained_is_refused_naming_the_id(env_id, message, capsys, tmp_path):
    with pytest.raises(EnvError, match=message):
        check_env_id(env_id)
    assert main(["--env-id", env_id, "--run-dir", str(tmp_path / "r")]) == 2
    assert env_id in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_short_run_on_a_v5_task_reaches_the_update(tmp_path):
    run_dir = tmp_path / "ant"
    assert train_in_process(run_dir, "--env-id", "Ant-v5", "--seed", "1", "--total-timesteps",
                            "1200", "--learning-starts", "1000", "--batch-size", "64",
                            "--buffer-size", "1200", "--checkpoint-interval", "0",
                            "--eval-episodes", "1") == 0  # fmt: skip
    scalars = read_scalars(run_dir)
    for tag in LOSS_TAGS:
        assert [step for step, _ in scalars[tag]] == [1100], tag
    assert all(np.isfinite(value) for tag in LOSS_TAGS for _, value in scalars[tag])
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["args"]["env_id"] == "Ant-v5"
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 1200
