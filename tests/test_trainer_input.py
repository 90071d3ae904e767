"""Bad input is refused before training, with the offending value named; checkpoints are robust;
the actions switch from random to the policy's at learning_starts."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import subprocess
import sys

import numpy as np
import psutil
import pytest
import torch

from sacbench.sac.algorithm import Actor
from sacbench.sac.args import Args, validate_args
from sacbench.sac.learners import make_learner
from sacbench.training.checkpoint import load_state
from sacbench.training.cli import main
from sacbench.training.envs import BENCHMARK_ENV_IDS, EnvError, check_env_id, env_spaces, make_env
from sacbench.training.loop import train
from sacbench.training.replay import ReplayBuffer
from sacbench.training.rng import seed_everything
from sacbench.training.run_dir import KILL_POINT_VARIABLE, RunDir, RunDirError
from tests.trainer_runs import run_trainer, train_in_process

CPU = torch.device("cpu")


def test_unknown_env_id_lists_the_benchmark_ids(capsys, tmp_path):
    assert main(["--env-id", "HalfCheetah-v9", "--run-dir", str(tmp_path / "r")]) == 2
    message = capsys.readouterr().err
    assert "'HalfCheetah-v9'" in message
    for env_id in BENCHMARK_ENV_IDS:
        assert env_id in message
    assert not (tmp_path / "r").exists()


def test_discrete_action_space_is_refused(capsys, tmp_path):
    with pytest.raises(EnvError, match="CartPole-v1 has a Discrete action space"):
        make_env("CartPole-v1", seed=1)
    assert main(["--env-id", "CartPole-v1", "--run-dir", str(tmp_path / "r")]) == 2
    assert "Discrete action space" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_pusher_with_mujoco_3_names_the_pin(monkeypatch):
    # mujoco 3 cannot be installed beside the pinned 2.3.7, so only its version string is faked.
    real_version = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "3.1.0" if name == "mujoco" else real_version(name),
    )
    with pytest.raises(EnvError, match=r"Pusher-v4 needs mujoco<3.*mujoco==2\.3\.7"):
        check_env_id("Pusher-v4")
    check_env_id("Hopper-v4")  # the other tasks do not care


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("total_timesteps", 0, "--total-timesteps"),
        ("batch_size", -4, "--batch-size"),
        ("buffer_size", 0, "--buffer-size"),
        ("gamma", 1.5, "--gamma"),
        ("tau", -0.1, "--tau"),
        ("learning_starts", -1, "--learning-starts"),
    ],
)
def test_non_positive_sizes_are_named(field, value, flag, tmp_path):
    args = Args(run_dir=str(tmp_path / "r"), **{field: value})
    problems = validate_args(args)
    assert any(flag in problem and repr(value) in problem for problem in problems), problems
    with pytest.raises(ValueError, match=flag):
        train(args)
    assert not (tmp_path / "r").exists()


def test_the_command_line_refuses_invalid_values_before_loading_torch(tmp_path):
    """`python -m sacbench.train` names every invalid value and exits 2 before torch and the
    env libraries load (about 1.5 s of a start), leaving no run dir."""
    run_dir = tmp_path / "r"
    probe = (
        "import sys; from sacbench.training.cli import main; status = main(sys.argv[1:]); "
        "print(status, sorted({'torch', 'gymnasium', 'mujoco'} & set(sys.modules)))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe, "--run-dir", str(run_dir), "--total-timesteps", "0",
         "--batch-size", "-4"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert completed.stdout.split("\n")[0] == "2 []", completed.stdout + completed.stderr
    assert completed.stderr.startswith("sacbench.train: error: invalid arguments:")
    assert "--total-timesteps" in completed.stderr and "--batch-size" in completed.stderr
    assert not run_dir.exists()


def test_learning_starts_past_the_end_warns_but_runs(tmp_path):
    completed = run_trainer(
        tmp_path / "r",
        "--env-id", "InvertedPendulum-v4", "--total-timesteps", "50", "--learning-starts", "50",
    )  # fmt: skip
    assert "no training update will run" in completed.stderr
    assert (tmp_path / "r" / "complete.json").exists()


def test_corrupt_checkpoint_is_named_and_kept(tmp_path, capsys):
    run_dir = tmp_path / "r"
    short = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "300", "--learning-starts",
             "200", "--batch-size", "16")  # fmt: skip
    assert train_in_process(run_dir, *short) == 0
    # Pretend the job died before finishing: no completion record, the last session running.
    # (A finished run's damaged final state is repaired from its metadata and events instead:
    # tests/test_faults.py.)
    (run_dir / "complete.json").unlink()
    metadata = json.loads((run_dir / "metadata.json").read_text())
    metadata["sessions"][-1].update(exit_status="running", end_step=None)
    (run_dir / "metadata.json").write_text(json.dumps(metadata))
    state = run_dir / "checkpoint" / "state.pt"
    state.parent.mkdir(exist_ok=True)
    state.write_bytes(b"not a checkpoint")
    assert train_in_process(run_dir, *short) == 2
    refusal = capsys.readouterr().err
    assert str(state) in refusal and "cannot be loaded" in refusal
    assert state.read_bytes() == b"not a checkpoint"


def test_missing_buffer_chunk_is_named(tmp_path):
    buffer = ReplayBuffer(capacity=50, obs_dim=3, action_dim=2, seed=0)
    _fill(buffer, 30)
    run_dir = RunDir(tmp_path)
    run_dir.checkpoint_dir.mkdir()
    run_dir.save_checkpoint({"global_step": 30}, buffer=buffer)
    (chunk,) = run_dir.checkpoint_dir.glob("rows-*.npz")
    chunk.unlink()
    with pytest.raises(RunDirError, match=chunk.name):
        run_dir.load_buffer(
            ReplayBuffer(capacity=50, obs_dim=3, action_dim=2, seed=0), run_dir.load_checkpoint()
        )


# ---- random actions, then the policy's --------------------------------------------------------


@pytest.mark.parametrize("update_path", ["fast", "reference"])
def test_actions_are_random_before_learning_starts_and_the_policys_from_it_on(
    tmp_path, monkeypatch, update_path
):
    # Steps 0-19 act at random, step 20 (= learning_starts) is the policy's first action, and
    # the first update comes at step 21, after the checkpoint that holds steps 0-20. Dying just
    # before the final state keeps that checkpoint.
    env_id, seed, learning_starts = "InvertedPendulum-v4", 1, 20
    run_dir = tmp_path / "r"
    monkeypatch.setenv(KILL_POINT_VARIABLE, "before-final-state")
    completed = run_trainer(run_dir, "--env-id", env_id, "--seed", str(seed),
                            "--total-timesteps", "23", "--learning-starts", str(learning_starts),
                            "--batch-size", "8", "--buffer-size", "100",
                            "--checkpoint-interval", "21", "--update-path", update_path,
                            check=False)  # fmt: skip
    assert completed.returncode == -9, completed.stderr
    saved = RunDir(run_dir)
    checkpoint = saved.load_checkpoint()
    assert checkpoint["global_step"] == learning_starts + 1
    spaces = env_spaces(env_id)
    obs_dim, action_dim = spaces.observation_size, spaces.action_size
    buffer = ReplayBuffer(capacity=100, obs_dim=obs_dim, action_dim=action_dim, seed=seed)
    saved.load_buffer(buffer, checkpoint)
    stored = buffer.split(buffer.storage[: learning_starts + 1])

    # Before learning_starts: the env's action space sampled with the run's seed.
    twin = make_env(env_id, seed=seed)
    samples = np.stack([twin.action_space.sample() for _ in range(learning_starts + 1)])
    np.testing.assert_array_equal(stored.actions[:learning_starts].numpy(), samples[:-1])
    assert not np.array_equal(stored.actions[learning_starts].numpy(), samples[-1])

    # At learning_starts: the actor's sample, by hand. Nothing draws from torch's generator
    # between the networks' initialisation and that action, so its noise can be drawn again.
    seed_everything(seed, torch_deterministic=True)
    space = twin.action_space
    args = Args(env_id=env_id, seed=seed, update_path=update_path)
    make_learner(args=args, obs_dim=obs_dim, action_low=space.low, action_high=space.high,
                 device=CPU)  # fmt: skip
    noise = torch.randn(1, action_dim)
    actor = Actor(obs_dim=obs_dim, action_low=space.low, action_high=space.high)
    actor.load_state_dict(checkpoint["learner"]["actor"])  # no update has run yet
    with torch.no_grad():
        mean, log_std = actor(stored.observations[learning_starts:])
    by_hand = torch.tanh(mean + log_std.exp() * noise) * actor.action_scale + actor.action_bias
    torch.testing.assert_close(stored.actions[learning_starts:], by_hand)


# ---- replay buffer ----------------------------------------------------------------------------


def _fill(buffer: ReplayBuffer, count: int, *, episode_length: int = 7, start: int = 0) -> None:
    """Transitions whose next_obs is the following obs except at episode ends, like a real env."""
    rng = np.random.default_rng(start)
    observation = rng.normal(size=buffer.obs_dim).astype(np.float32)
    for index in range(start, start + count):
        next_observation = rng.normal(size=buffer.obs_dim).astype(np.float32)
        done = (index + 1) % episode_length == 0
        buffer.add(
            observation=observation,
            next_observation=next_observation,
            action=rng.uniform(-1, 1, size=buffer.action_dim).astype(np.float32),
            reward=float(index + 1),  # never 0.0, so an unfilled (all-zero) row shows
            terminated=done and index % 2 == 0,
        )
        observation = (
            rng.normal(size=buffer.obs_dim).astype(np.float32) if done else next_observation
        )


def test_buffer_memory_is_the_float32_size_of_its_fields():
    buffer = ReplayBuffer(capacity=1000, obs_dim=17, action_dim=6, seed=0)
    fields = 1000 * (17 + 17 + 6 + 1 + 1) * 4  # obs, next_obs, action, reward, termination
    assert buffer.nbytes() == fields


def test_a_large_buffer_holds_memory_only_for_the_rows_written():
    """Humanoid-v4's default buffer (1M rows, 2.9 GiB): resident memory grows with the rows added,
    not with the capacity, and unwritten rows read as zeros."""
    process = psutil.Process()
    before = process.memory_info().rss
    buffer = ReplayBuffer(capacity=1_000_000, obs_dim=376, action_dim=17, seed=0)
    assert buffer.nbytes() == 1_000_000 * (2 * 376 + 17 + 2) * 4
    allocated = process.memory_info().rss - before
    _fill(buffer, 20_000)  # 20,000 rows of 3 KiB: about 59 MiB
    filled = process.memory_info().rss - before
    assert allocated < 16 * 2**20, f"{allocated / 2**20:.0f} MiB resident for an empty buffer"
    assert filled < 256 * 2**20, f"{filled / 2**20:.0f} MiB resident after 20,000 rows"
    assert buffer.storage[20_000:20_100].abs().sum() == 0
    assert buffer.storage[:20_000, 2 * 376 + 17].ne(0).all()  # every written row's reward


def test_buffer_sampling_is_seeded_and_within_filled_rows():
    first, second = (ReplayBuffer(capacity=100, obs_dim=3, action_dim=2, seed=4) for _ in range(2))
    _fill(first, 20)
    _fill(second, 20)
    # The indices are the seed's PCG64 draws over the filled rows only.
    expected = torch.from_numpy(np.random.Generator(np.random.PCG64(4)).integers(0, 20, 64))
    assert torch.equal(first.sample_indices(64), expected)
    assert torch.equal(second.sample_indices(64), expected)
    a, b = first.sample(10_000), second.sample(10_000)
    torch.testing.assert_close(a.observations, b.observations, rtol=0, atol=0)
    # Row i holds reward i + 1: an unfilled row (reward 0.0) or a row past the 20th never shows,
    # and every filled row is drawn.
    assert set(a.rewards.tolist()) == {float(i) for i in range(1, 21)}
    indices = first.sample_indices(10_000)
    assert indices.min() == 0 and indices.max() == 19


def test_a_sample_holds_the_drawn_rows_each_field_in_a_dense_tensor():
    buffer = ReplayBuffer(capacity=100, obs_dim=5, action_dim=3, seed=2)
    _fill(buffer, 40)
    drawn = torch.from_numpy(np.random.Generator(np.random.PCG64(2)).integers(0, 40, 32))
    batch = buffer.sample(32)
    rows = buffer.split(buffer.storage[drawn])
    for field in dataclasses.fields(batch):
        got = getattr(batch, field.name)
        # Dense, so that the fused update reads it as it is, without a copy of its own.
        assert got.is_contiguous(), field.name
        assert torch.equal(got, getattr(rows, field.name)), field.name


@pytest.mark.parametrize("capacity", [100, 23])  # 23 < rows added: the ring wraps
def test_incremental_checkpoints_restore_the_buffer_exactly(tmp_path, capacity):
    buffer = ReplayBuffer(capacity=capacity, obs_dim=4, action_dim=2, seed=0)
    run_dir = RunDir(tmp_path)
    run_dir.checkpoint_dir.mkdir()
    added = 0
    for count in (10, 15, 30):  # three checkpoints, each writing only the new rows
        _fill(buffer, count, start=added)
        added += count
        run_dir.save_checkpoint({"global_step": added}, buffer=buffer)
    chunks = sorted(path.name for path in run_dir.checkpoint_dir.glob("rows-*.npz"))
    if capacity == 100:
        assert len(chunks) == 3
    else:
        # Chunks whose rows were all overwritten are dropped once neither the checkpoint nor the
        # one before it (kept as state.prev.pt) needs them.
        needed = set(run_dir.load_checkpoint()["buffer"]["chunks"])
        needed |= set(load_state(run_dir.previous_state_path)["buffer"]["chunks"])
        assert set(chunks) == needed
        _fill(buffer, 40, start=added)
        added += 40
        run_dir.save_checkpoint({"global_step": added}, buffer=buffer)
        assert len(list(run_dir.checkpoint_dir.glob("rows-*.npz"))) < 3
    restored = ReplayBuffer(capacity=capacity, obs_dim=4, action_dim=2, seed=0)
    fresh = RunDir(tmp_path)
    fresh.load_buffer(restored, fresh.load_checkpoint())
    assert restored.added == buffer.added == added
    torch.testing.assert_close(restored.storage, buffer.storage, rtol=0, atol=0)


def test_checkpoint_chunk_does_not_store_repeated_next_observations(tmp_path):
    buffer = ReplayBuffer(capacity=100, obs_dim=50, action_dim=2, seed=0)
    _fill(buffer, 70, episode_length=10)
    name = buffer.save_new_rows(tmp_path, saved_until=0)
    with np.load(tmp_path / name) as archive:
        kept = archive["kept_next_obs"]
    assert len(kept) == 7  # one per episode end (the last row is an episode end too)


def test_select_action_switches_from_random_to_policy_at_learning_starts():
    # Steps before learning_starts sample the action space; from learning_starts on, the policy.
    import gymnasium as gym
    import numpy as np
    import torch

    from sacbench.training.loop import select_action

    class FixedPolicy:
        def act(self, observation: torch.Tensor) -> torch.Tensor:
            return torch.full((1, 2), 0.25)

    space = gym.spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)
    space.seed(0)
    common = dict(
        learning_starts=5,
        observation=np.zeros(3, dtype=np.float32),
        learner=FixedPolicy(),
        action_space=space,
        device=torch.device("cpu"),
    )
    random_action = select_action(4, **common)
    assert not np.allclose(random_action, 0.25) and space.contains(random_action)
    np.testing.assert_array_equal(select_action(5, **common), np.full(2, 0.25, np.float32))
