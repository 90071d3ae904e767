"""checkpoint/state.pt is read without running code: weights_only, a numpy allow-list for format 1,
a MuJoCo-only unpickler for the env state. Real MuJoCo data and real RNG states throughout.

Resumes from format-2 and format-1 files by the real trainer: tests/test_train_run.py.
"""

from __future__ import annotations

import io
import os
import pickle
import random
import signal
import subprocess
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from sacbench.training.checkpoint import FORMAT, LEGACY_NUMPY_GLOBALS, load_state, write_state
from sacbench.training.envs import (
    MJ_DATA_PICKLE_GLOBALS,
    capture_env_state,
    load_mj_data,
    make_env,
    restore_env_state,
)
from sacbench.training.errors import RunDirError
from sacbench.training.rng import restore_rng_states, rng_states
from sacbench.training.run_dir import KILL_POINT_VARIABLE
from tests.trainer_runs import run_trainer, train_command, write_format_1_state


class _RunsACommand:
    """Unpickling this runs `touch MARKER`: what a planted checkpoint could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _state(**extra) -> dict:
    """A state with what load_state checks for, and numpy data as the loop holds it."""
    np.random.seed(3)
    random.seed(4)
    torch.manual_seed(5)
    np.random.standard_normal()  # numpy caches the second Gaussian: has_gauss=1 is kept too
    return {
        "global_step": 250,
        "buffer": {"added": 250, "chunks": []},
        "observation": np.linspace(-1, 1, 11, dtype=np.float32),
        "rng": rng_states(),
        **extra,
    }


def _unsafe_globals(path: Path) -> set[str]:
    return set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))


def _draws() -> tuple:
    return random.random(), np.random.standard_normal(3).tolist(), torch.rand(3).tolist()


def test_format_2_holds_no_numpy_pickle_and_round_trips_exactly(tmp_path):
    path = tmp_path / "state.pt"
    state = _state()
    write_state(path, state)

    assert _unsafe_globals(path) == set()  # torch.load(weights_only=True) alone reads it
    assert torch.load(path, weights_only=True)["format"] == FORMAT == 2
    loaded = load_state(path)
    assert "format" not in loaded
    assert loaded["observation"].dtype == np.float32
    assert loaded["observation"].tobytes() == state["observation"].tobytes()
    saved_numpy, loaded_numpy = state["rng"]["numpy"], loaded["rng"]["numpy"]
    assert loaded_numpy[1].dtype == np.uint32 and np.array_equal(loaded_numpy[1], saved_numpy[1])
    assert loaded_numpy[0] == "MT19937" and loaded_numpy[2:] == saved_numpy[2:]
    assert saved_numpy[3] == 1  # the cached Gaussian is part of what was checked
    expected = _draws()
    restore_rng_states(loaded["rng"])
    assert _draws() == expected


def test_format_1_loads_with_only_the_numpy_array_reconstructors(tmp_path):
    path = tmp_path / "state.pt"
    state = _state()
    write_format_1_state(path, dict(state))

    allowed = {f"{item.__module__}.{item.__qualname__}" for item in LEGACY_NUMPY_GLOBALS}
    assert "numpy.ndarray" in _unsafe_globals(path) <= allowed  # really numpy pickles
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)  # ... which weights_only alone refuses
    loaded = load_state(path)
    assert loaded["observation"].tobytes() == state["observation"].tobytes()
    expected = _draws()
    restore_rng_states(loaded["rng"])
    assert _draws() == expected


def test_checkpoint_naming_os_system_is_refused_unrun(tmp_path):
    path = tmp_path / "state.pt"
    marker = tmp_path / "ran"
    torch.save(_state(planted=_RunsACommand(marker)), path)

    with pytest.raises(RunDirError, match="cannot be loaded") as raised:
        load_state(path)
    assert str(path) in str(raised.value)
    assert "system" in str(raised.value)  # names what was refused
    assert "weights_only` set to `False`" not in str(raised.value)  # torch's advice is dropped
    assert not marker.exists()


def test_checkpoint_of_an_unknown_format_is_refused(tmp_path):
    path = tmp_path / "state.pt"
    torch.save({"global_step": 1, "buffer": {}, "format": FORMAT + 1}, path)
    with pytest.raises(RunDirError, match=f"{path}.* has format {FORMAT + 1}"):
        load_state(path)


def _stepped_hopper():
    env = make_env("Hopper-v4", seed=1)
    env.reset(seed=1)
    for _ in range(30):
        env.step(env.action_space.sample())
    return env


def test_mj_data_pickle_uses_only_allowed_globals():
    """Fails when a mujoco release pickles MjData with other globals: then the allow-list in
    envs.py (and this test) need a look, rather than every resume failing."""
    data = _stepped_hopper().unwrapped.data
    named: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            named.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO(pickle.dumps(data))).load()
    assert ("mujoco._structs", "MjData") in named
    assert named <= MJ_DATA_PICKLE_GLOBALS, f"{mujoco.__version__} pickles MjData with {named}"


def test_env_state_round_trips_through_the_restricted_unpickler(tmp_path):
    original = _stepped_hopper()
    state = capture_env_state(original)
    restored = make_env("Hopper-v4", seed=2)
    restored.reset(seed=2)
    restore_env_state(restored, state, source=tmp_path / "state.pt")
    for field in ("qpos", "qvel", "qacc_warmstart", "xipos", "cfrc_ext"):
        assert np.array_equal(getattr(restored.unwrapped.data, field),
                              getattr(original.unwrapped.data, field)), field  # fmt: skip
    action = original.action_space.sample()
    (observation, reward, *ends), (expected_observation, expected_reward, *expected_ends) = (
        restored.step(action)[:4],
        original.step(action)[:4],
    )
    assert np.array_equal(observation, expected_observation)
    assert (reward, ends) == (expected_reward, expected_ends)


def test_mj_data_pickle_naming_os_system_is_refused_unrun(tmp_path):
    marker = tmp_path / "ran"
    source = tmp_path / "state.pt"
    refusal = "only mujoco._structs.MjData may be unpickled there"
    with pytest.raises(RunDirError, match=refusal) as raised:
        load_mj_data(pickle.dumps(_RunsACommand(marker)), source=source)
    assert str(source) in str(raised.value) and "system" in str(raised.value)
    assert not marker.exists()


def test_trainer_refuses_a_planted_mj_data_and_keeps_the_checkpoint(tmp_path):
    """The whole path: a run in flight whose checkpoint's MuJoCo blob was replaced."""
    run_dir, marker = tmp_path / "run", tmp_path / "ran"
    short = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "300", "--learning-starts",
             "200", "--batch-size", "16", "--checkpoint-interval", "100")  # fmt: skip
    killed = subprocess.run(
        train_command(run_dir, *short),
        env={**os.environ, KILL_POINT_VARIABLE: "before-final-state", "PYTHONWARNINGS": "ignore"},
        capture_output=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    state_path = run_dir / "checkpoint" / "state.pt"
    state = load_state(state_path)
    assert state["global_step"] == 200
    state["env"]["mj_data"] = pickle.dumps(_RunsACommand(marker))
    write_state(state_path, state)
    planted = state_path.read_bytes()

    completed = run_trainer(run_dir, *short, check=False)

    assert completed.returncode == 2, completed.stderr
    assert f"checkpoint {state_path} cannot be loaded" in completed.stderr
    assert "names posix.system" in completed.stderr
    assert not marker.exists()
    assert state_path.read_bytes() == planted
