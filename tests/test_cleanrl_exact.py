"""--cleanrl-exact: its pieces, its runs, and the comparison benchmarks/cleanrl_exact.py makes.

The comparison against CleanRL's own script needs a checkout of vwxyzjn/cleanrl and the script's
interpreter (Gymnasium 0.29, mujoco 2.3.3, NumPy 1): it runs only when
SACBENCH_CLEANRL_CHECKOUT and SACBENCH_CLEANRL_PYTHON name them (docs/cleanrl-exact.md).
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from benchmarks.cleanrl_exact import compare_scalars, main, report_lines
from sacbench.events import read_run_scalars
from sacbench.sac.args import Args, run_defining_args, validate_args
from sacbench.training.cleanrl_exact import (
    CleanRLExactReplayBuffer,
    episode_return_after,
    use_numpy1_control_cost,
)
from sacbench.training.envs import make_env
from sacbench.training.loop import build_learner_and_buffer, train
from sacbench.training.replay import ReplayBuffer
from sacbench.training.rng import seed_everything

# ---- the comparison, on event files written by the real writer ------------------------------


def write_run(run_dir: Path, points: dict[str, dict[int, float]]) -> Path:
    writer = SummaryWriter(str(run_dir))
    for tag, values in points.items():
        for step, value in values.items():
            writer.add_scalar(tag, value, step)
    writer.close()
    return run_dir


def two_tags(loss_at_300: float) -> dict[str, dict[int, float]]:
    return {
        "charts/episodic_return": {99: -12.5, 199: 30.25},
        "losses/qf1_loss": {200: 4.0, 300: loss_at_300, 400: 1.5},
    }


def test_equal_runs_compare_equal_at_every_step(tmp_path: Path):
    theirs = read_run_scalars(write_run(tmp_path / "a", two_tags(2.0)))
    ours = read_run_scalars(write_run(tmp_path / "b", two_tags(2.0)))
    tags = ("charts/episodic_return", "losses/qf1_loss")
    comparison = compare_scalars(theirs, ours, tags=tags)
    assert comparison.separation_step is None
    assert [(tag.points, tag.max_equal_difference) for tag in comparison.tags] == [(2, 0), (3, 0)]
    assert report_lines("Hopper-v4", comparison, learning_starts=100)[-1] == (
        "  equal at every logged step, through step 400"
    )


def test_rounding_is_equal_and_a_larger_difference_is_where_the_runs_separate(tmp_path: Path):
    rounded = two_tags(2.0)
    rounded["losses/qf1_loss"][200] = float(np.nextafter(np.float32(4.0), np.float32(5.0)))
    theirs = read_run_scalars(write_run(tmp_path / "a", two_tags(2.0)))
    ours = read_run_scalars(write_run(tmp_path / "b", {**rounded, "losses/qf1_loss": {
        **rounded["losses/qf1_loss"], 300: 2.001}}))  # fmt: skip
    comparison = compare_scalars(theirs, ours, tags=("charts/episodic_return", "losses/qf1_loss"))
    loss = comparison.tags[1]
    assert loss.separation_step == 300
    assert loss.max_equal_difference == pytest.approx(2**-23, rel=1e-3)  # one float32 ulp at 4
    assert comparison.separation_step == 300
    assert report_lines("Hopper-v4", comparison, learning_starts=100)[-1] == (
        "  equal at every logged step through step 200 (100 updates); the runs separate at step 300"
    )
    differences = comparison.differences.set_index(["tag", "step"]).relative_difference
    assert differences["losses/qf1_loss", 300] == pytest.approx(
        0.001 / 2.001, rel=1e-4
    )  # 2.001 stored in float32


def test_a_point_only_one_run_logged_separates_the_runs(tmp_path: Path):
    shorter = two_tags(2.0)
    del shorter["charts/episodic_return"][199]
    theirs = read_run_scalars(write_run(tmp_path / "a", two_tags(2.0)))
    ours = read_run_scalars(write_run(tmp_path / "b", shorter))
    comparison = compare_scalars(theirs, ours, tags=("charts/episodic_return", "losses/qf1_loss"))
    assert comparison.separation_step == 199
    differences = comparison.differences.set_index(["tag", "step"]).relative_difference
    assert math.isinf(differences["charts/episodic_return", 199])


def test_a_tag_neither_run_logged_is_an_error_naming_it(tmp_path: Path):
    runs = [read_run_scalars(write_run(tmp_path / name, two_tags(2.0))) for name in "ab"]
    with pytest.raises(ValueError, match="losses/alpha_loss"):
        compare_scalars(*runs, tags=("losses/alpha_loss",))


# ---- the exact mode's pieces ----------------------------------------------------------------


def test_the_flag_is_refused_off_the_reference_path_before_any_file_is_made(tmp_path: Path):
    args = Args(cleanrl_exact=True, run_dir=str(tmp_path / "run"))
    assert any("--cleanrl-exact" in problem and "--update-path fast" in problem
               for problem in validate_args(args))  # fmt: skip
    with pytest.raises(ValueError, match="--cleanrl-exact"):
        train(args)
    assert not (tmp_path / "run").exists()
    assert not validate_args(dataclasses.replace(args, update_path="reference"))


def test_the_flag_defines_the_run():
    assert run_defining_args(Args(cleanrl_exact=True))["cleanrl_exact"] is True


def test_batches_are_drawn_as_the_scripts_buffer_draws_them():
    buffers = {
        kind: kind(capacity=1000, obs_dim=3, action_dim=2, seed=7)
        for kind in (ReplayBuffer, CleanRLExactReplayBuffer)
    }
    for buffer in buffers.values():
        for row in range(600):
            buffer.add(observation=np.full(3, row), next_observation=np.zeros(3),
                       action=np.zeros(2), reward=0.0, terminated=False)  # fmt: skip
    np.random.seed(7)
    exact = [CleanRLExactReplayBuffer.sample_indices(buffers[CleanRLExactReplayBuffer], 64)
             for _ in range(2)]  # fmt: skip
    script = np.random.RandomState(7)  # the global generator as np.random.seed(7) leaves it
    for indices in exact:
        expected = script.randint(0, 600, size=64)
        script.randint(0, high=1, size=(64,))  # the env indices, as the script's buffer draws
        assert indices.tolist() == expected.tolist()
    # The default path draws from the buffer's own generator: other rows, other order.
    assert buffers[ReplayBuffer].sample_indices(64).tolist() != exact[0].tolist()


def test_episode_returns_are_summed_as_gymnasium_0_29_sums_them():
    rewards = np.random.default_rng(3).normal(-0.3, 1.0, size=1000)
    float32_array = np.zeros(1, dtype=np.float32)
    exact, default = 0.0, 0.0
    for reward in rewards:
        float32_array[0] = np.float32(float32_array[0]) + np.float32(reward)
        exact = episode_return_after(exact, float(reward), cleanrl_exact=True)
        default = episode_return_after(default, float(reward), cleanrl_exact=False)
    assert exact == float(float32_array[0])
    assert default == pytest.approx(float(np.sum(rewards)), rel=1e-12)
    assert exact != default


def test_the_control_cost_is_numpy_1s_float64_product():
    env = make_env("HalfCheetah-v4", seed=1)
    action = np.array([0.3, -0.7, 0.11, 0.9, -0.5, 0.01], dtype=np.float32)
    numpy2_cost = env.unwrapped.control_cost(action)
    assert use_numpy1_control_cost(env, "HalfCheetah-v4")
    squares = float(np.sum(np.square(action)))  # float32 sum of float32 squares, as NumPy 1
    assert env.unwrapped.control_cost(action) == 0.1 * squares
    assert type(numpy2_cost) is np.float32 and float(numpy2_cost) != 0.1 * squares
    env.close()
    pendulum = gym.make("InvertedPendulum-v4")
    assert not use_numpy1_control_cost(pendulum, "InvertedPendulum-v4")
    pendulum.close()


def test_the_networks_are_built_in_the_scripts_order_from_the_seed():
    args = Args(update_path="reference", cleanrl_exact=True, device="cpu", seed=5, buffer_size=10)
    env = make_env("Hopper-v4", seed=5)
    seed_everything(5, torch_deterministic=True)
    learner, buffer = build_learner_and_buffer(args, env, torch.device("cpu"))
    after_building = torch.get_rng_state()
    env.close()
    assert isinstance(buffer, CleanRLExactReplayBuffer)
    # The script's nn.Linear modules, in its order: actor, qf1, qf2, qf1_target, qf2_target.
    torch.manual_seed(5)
    actor = [torch.nn.Linear(11, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 3),
             torch.nn.Linear(256, 3)]  # fmt: skip
    critics = [[torch.nn.Linear(14, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 1)]
               for _ in range(4)]  # fmt: skip
    # The targets' own initial draws are spent, then replaced by copies of the critics.
    assert torch.equal(torch.get_rng_state(), after_building)
    built = [learner.actor, learner.qf1, learner.qf2, learner.qf1_target, learner.qf2_target]
    for module, layers in zip(built, [actor, *critics[:2], *critics[:2]], strict=True):
        expected = [parameter for layer in layers for parameter in layer.parameters()]
        assert all(torch.equal(a, b) for a, b in zip(module.parameters(), expected, strict=True))


EXACT_RUN = {"env_id": "Hopper-v4", "total_timesteps": 301, "learning_starts": 150,
             "batch_size": 32, "buffer_size": 1000, "update_path": "reference",
             "eval_episodes": 0, "checkpoint_interval": 0, "device": "cpu"}  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pd.DataFrame]:
    """Two exact-mode runs and a default one, trained in this process (no interpreter start)."""
    root = tmp_path_factory.mktemp("cleanrl-exact")
    runs = {"exact": True, "again": True, "default": False}
    for name, exact in runs.items():
        assert train(Args(**EXACT_RUN, cleanrl_exact=exact, run_dir=str(root / name))) == 0
    return {name: read_run_scalars(root / name) for name in runs}


def losses(scalars: pd.DataFrame) -> pd.DataFrame:
    return scalars[scalars.tag.str.startswith(("losses/", "charts/episodic"))][
        ["tag", "step", "value"]
    ].reset_index(drop=True)


def test_two_exact_runs_are_identical(trained: dict[str, pd.DataFrame]):
    pd.testing.assert_frame_equal(losses(trained["exact"]), losses(trained["again"]))
    assert (losses(trained["exact"]).tag == "losses/qf1_loss").sum() == 2  # steps 200 and 300


def test_exact_and_default_runs_share_the_random_phase_and_then_draw_other_batches(
    trained: dict[str, pd.DataFrame],
):
    exact, default = losses(trained["exact"]), losses(trained["default"])
    early = exact.tag.eq("charts/episodic_length") & exact.step.lt(150)
    assert early.any()
    pd.testing.assert_frame_equal(
        exact[early], default[default.tag.eq("charts/episodic_length") & default.step.lt(150)]
    )
    exact_loss = exact[exact.tag == "losses/qf1_loss"].value.to_numpy()
    default_loss = default[default.tag == "losses/qf1_loss"].value.to_numpy()
    assert not np.array_equal(exact_loss, default_loss)


# ---- against CleanRL's own script (opt-in) --------------------------------------------------

CHECKOUT = os.environ.get("SACBENCH_CLEANRL_CHECKOUT")
PYTHON = os.environ.get("SACBENCH_CLEANRL_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(
    not (CHECKOUT and PYTHON),
    reason="set SACBENCH_CLEANRL_CHECKOUT (vwxyzjn/cleanrl at fe8d8a03) and "
    "SACBENCH_CLEANRL_PYTHON (its interpreter, docs/cleanrl-exact.md) to compare with the script",
)
def test_the_exact_mode_equals_cleanrls_script_step_for_step(tmp_path: Path, capsys):
    assert CHECKOUT and PYTHON
    argv = ["--cleanrl-checkout", CHECKOUT, "--cleanrl-python", PYTHON, "--env-ids",
            "Hopper-v4", "--total-timesteps", "1500", "--learning-starts", "1000",
            "--out-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    assert "equal at every logged step, through step" in capsys.readouterr().out
