"""Evaluation, saved policies and videos (issue #12), on real runs of the real trainer.

- the deterministic policy is one pure function of the actor, shared by both update paths;
- evaluation leaves training untouched (same scalars with and without it), logs one point per
  episode at the number of steps done, keeps its time out of the training time, and keeps its
  schedule exact across kills;
- --save-model writes a CPU-only file that `python -m sacbench.evaluate` loads without the
  trainer and that replays the run's final evaluation exactly, for both update paths;
- --capture-video films the first episode of each evaluation (rendered headless), and the videos
  read back with one frame per step;
- run dirs recorded before these arguments existed are the same runs, not trained again.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from sacbench.events import EventLogError, read_run_scalars
from sacbench.sac.algorithm import deterministic_action, sample_action
from sacbench.sac.args import (
    DEFAULTS_OF_UNRECORDED_FIELDS,
    SESSION_FIELDS,
    Args,
    validate_args,
)
from sacbench.sac.fast_learner import FastLearner
from sacbench.sac.policy import policy_forward
from sacbench.sac.reference_learner import ReferenceLearner
from sacbench.tags import EVAL_EPISODE_TAGS, EVAL_TAGS
from sacbench.training.evaluate_cli import evaluate_saved_policy, main
from sacbench.training.evaluation import (
    Evaluator,
    deterministic_policy,
    episode_seed,
    evaluation_due,
)
from sacbench.training.policy_file import POLICY_FORMAT_VERSION, load_policy, save_policy
from sacbench.training.run_dir import KILL_POINT_VARIABLE
from tests.trainer_runs import read_scalars, reproducible, run_trainer, train_in_process

CPU = torch.device("cpu")
LOW, HIGH = np.array([-2.0, -0.5], dtype=np.float32), np.array([1.0, 3.0], dtype=np.float32)

# One InvertedPendulum-v4 run: 1200 steps, training from step 1000; checkpoints every 200 steps.
BASE = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "1200", "--learning-starts",
        "1000", "--batch-size", "64", "--checkpoint-interval", "200")  # fmt: skip
# Evaluations after 400, 800 and 1200 steps (400 and 800 coincide with checkpoints).
EVAL = (*BASE, "--eval-frequency", "400", "--eval-episodes", "2")
EVAL_STEPS = [400, 800, 1200]
REFERENCE = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "500", "--learning-starts",
             "200", "--batch-size", "16", "--update-path", "reference")  # fmt: skip


# ---- the deterministic policy and the seeds (no training) --------------------------------------


def test_deterministic_action_is_the_squashed_mean_on_both_update_paths():
    torch.manual_seed(0)
    args = Args(batch_size=8)
    reference = ReferenceLearner(obs_dim=3, action_low=LOW, action_high=HIGH, args=args, device=CPU)
    fast = FastLearner.from_reference(reference, device=CPU)
    observations = torch.randn(5, 3)
    state = torch.get_rng_state()
    action = deterministic_action(reference.actor, observations)
    assert torch.equal(torch.get_rng_state(), state), "the deterministic action drew numbers"
    # CleanRL's get_action returns it as its third value; the fast path's own forward agrees.
    torch.manual_seed(1)
    assert torch.equal(action, sample_action(reference.actor, observations)[2])
    fast_mean = policy_forward(fast.actor, observations).mean
    fast_action = torch.tanh(fast_mean) * fast.actor.action_scale + fast.actor.action_bias
    torch.testing.assert_close(deterministic_action(fast.actor, observations), fast_action)
    torch.testing.assert_close(deterministic_action(fast.actor, observations), action)
    assert (action >= torch.as_tensor(LOW)).all() and (action <= torch.as_tensor(HIGH)).all()


def test_episode_seeds_depend_on_seed_step_and_episode_only():
    seeds = {
        episode_seed(seed=seed, step=step, episode=episode)
        for seed in (1, 2)
        for step in (0, 400, 1_000_000)
        for episode in range(10)
    }
    assert len(seeds) == 60
    assert episode_seed(seed=1, step=400, episode=3) == episode_seed(seed=1, step=400, episode=3)
    assert 1 not in {episode_seed(seed=1, step=0, episode=episode) for episode in range(10)}
    with pytest.raises(ValueError, match="step must be a non-negative integer, got -1"):
        episode_seed(seed=1, step=-1, episode=0)


def test_evaluations_are_due_every_frequency_steps_and_after_the_last():
    due = [n for n in range(1, 1201) if evaluation_due(n, eval_frequency=400, total_timesteps=1200)]
    assert due == EVAL_STEPS
    assert [n for n in range(1, 1001) if evaluation_due(n, eval_frequency=0, total_timesteps=1000)]
    assert evaluation_due(1000, eval_frequency=300, total_timesteps=1000)


def test_evaluation_arguments_are_checked_and_classified():
    problems = validate_args(Args(eval_frequency=-1, eval_episodes=0, capture_video=True))
    assert "--eval-frequency must be a non-negative integer, got -1" in problems
    assert "--capture-video records evaluation episodes: it needs --eval-episodes > 0" in problems
    assert {"capture_video", "save_model"} <= SESSION_FIELDS
    # Fields that define a run, at the defaults that older run dirs stand for.
    assert not set(DEFAULTS_OF_UNRECORDED_FIELDS) & SESSION_FIELDS
    for name, value in DEFAULTS_OF_UNRECORDED_FIELDS.items():
        assert getattr(Args(), name) == value


def test_an_evaluation_leaves_the_global_generators_and_repeats_exactly():
    torch.manual_seed(0)
    actor = ReferenceLearner(obs_dim=4, action_low=LOW[:1], action_high=HIGH[:1], args=Args(),
                             device=CPU).actor  # fmt: skip
    random.seed(3)
    np.random.seed(3)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    evaluator = Evaluator(env_id="InvertedPendulum-v4", seed=1, episodes=3)
    try:
        first = evaluator.run(deterministic_policy(actor, CPU), step=400, video=None, replace=False)
        again = evaluator.run(deterministic_policy(actor, CPU), step=400, video=None, replace=False)
        later = evaluator.run(deterministic_policy(actor, CPU), step=800, video=None, replace=False)
    finally:
        evaluator.close()
    after = (random.getstate(), np.random.get_state()[1], torch.get_rng_state())
    assert before[0] == after[0] and np.array_equal(before[1], after[1])
    assert torch.equal(before[2], after[2])
    assert first.episodes == again.episodes  # a repeated evaluation (after a resume) is the same
    assert [episode.seed for episode in later.episodes] == [
        episode_seed(seed=1, step=800, episode=index) for index in range(3)
    ]
    assert all(episode.length >= 1 for episode in first.episodes)


def test_event_reader_takes_an_evaluations_points_at_one_step_from_one_file(tmp_path: Path):
    run_dir = tmp_path / "run"
    writer = SummaryWriter(str(run_dir))
    for value in (1.0, 2.0, 3.0):
        writer.add_scalar("eval/episodic_return", value, 500)
    writer.close()
    scalars = read_run_scalars(run_dir)
    assert scalars.value.tolist() == [1.0, 2.0, 3.0] and set(scalars.step) == {500}
    time.sleep(1.05)  # the next file's name (its Unix second) sorts after the first's
    writer = SummaryWriter(str(run_dir))
    writer.add_scalar("eval/episodic_return", 4.0, 500)  # the same evaluation, logged again
    writer.close()
    with pytest.raises(EventLogError, match="eval/episodic_return at step 500"):
        read_run_scalars(run_dir)


# ---- the policy file ---------------------------------------------------------------------------


def test_policy_file_holds_cpu_tensors_and_rebuilds_the_actor(tmp_path: Path):
    torch.manual_seed(0)
    reference = ReferenceLearner(obs_dim=3, action_low=LOW, action_high=HIGH, args=Args(),
                                 device=CPU)  # fmt: skip
    path = tmp_path / "policy.cleanrl_model"
    save_policy(path, actor=reference.actor, env_id="InvertedPendulum-v4", seed=4, global_step=7)
    payload = torch.load(path, map_location="cpu", weights_only=True)
    assert payload["format_version"] == POLICY_FORMAT_VERSION
    sizes = (payload["obs_dim"], payload["action_dim"], payload["hidden_sizes"])
    assert sizes == (3, 2, [256, 256])
    np.testing.assert_allclose(payload["action_low"], LOW)
    np.testing.assert_allclose(payload["action_high"], HIGH)
    assert all(tensor.device.type == "cpu" for tensor in payload["actor"].values())
    saved = load_policy(path)
    assert (saved.env_id, saved.seed, saved.global_step) == ("InvertedPendulum-v4", 4, 7)
    observations = torch.randn(4, 3)
    assert torch.equal(
        deterministic_action(saved.actor, observations),
        deterministic_action(reference.actor, observations),
    )


def test_bad_policy_files_are_named(tmp_path: Path, capsys):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.cleanrl_model")
    (tmp_path / "junk.cleanrl_model").write_bytes(b"not a pickle")
    torch.manual_seed(0)
    actor = ReferenceLearner(obs_dim=4, action_low=LOW[:1], action_high=HIGH[:1], args=Args(),
                             device=CPU).actor  # fmt: skip
    newer = tmp_path / "newer.cleanrl_model"
    save_policy(newer, actor=actor, env_id="InvertedPendulum-v4", seed=1, global_step=1,
                format_version=POLICY_FORMAT_VERSION + 1)  # fmt: skip
    (tmp_path / "empty").mkdir()
    cases = {
        tmp_path / "missing": "no such run dir or policy file",
        tmp_path / "empty": "holds no *.cleanrl_model file: train with --save-model",
        tmp_path / "other.cleanrl_model": "is not a sacbench policy file",
        tmp_path / "junk.cleanrl_model": "cannot be loaded",
        newer: f"format_version {POLICY_FORMAT_VERSION + 1}",
        tmp_path: "holds several policy files",
    }
    for target, message in cases.items():
        assert main([str(target)]) == 2
        error = capsys.readouterr().err
        assert message in error and str(target) in error, error
    with pytest.raises(SystemExit):
        main([str(newer), "--episodes", "0"])
    assert "expected a positive integer, got 0" in capsys.readouterr().err


# ---- real runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Finished runs: without evaluation, with evaluation (filmed, model saved), and on the
    reference path with the default final evaluation (model saved)."""
    root = tmp_path_factory.mktemp("evaluation")
    launched = time.time()
    run_trainer(root / "eval", *EVAL, "--capture-video", "--save-model")
    (root / "launched").write_text(repr(launched))
    # The runs that film nothing train in this process; a filmed run needs a process of its own,
    # with MUJOCO_GL set before MuJoCo loads.
    assert train_in_process(root / "none", *BASE, "--eval-episodes", "0") == 0
    assert train_in_process(root / "reference", *REFERENCE, "--save-model") == 0
    return {name: root / name for name in ("eval", "none", "reference")} | {"root": root}


def points(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    return read_scalars(run_dir).get(tag, [])


def count_frames(video: Path) -> int:
    with imageio.get_reader(video, "ffmpeg") as reader:
        return sum(1 for _ in reader)


def assert_has_episode_frames(video: Path, episode_length: int) -> None:
    """RecordVideo keeps the reset frame and one per step; moviepy 1.0.3 may repeat the last one
    (it samples a float-summed duration)."""
    assert episode_length + 1 <= count_frames(video) <= episode_length + 2, video


@pytest.mark.slow
def test_evaluation_leaves_the_training_scalars_unchanged(runs):
    with_eval, without = read_scalars(runs["eval"]), read_scalars(runs["none"])
    assert not set(without) & set(EVAL_TAGS)
    training = {tag: series for tag, series in with_eval.items() if tag not in EVAL_TAGS}
    assert reproducible(training) == reproducible(without)
    assert json.loads((runs["none"] / "complete.json").read_text())["eval_seconds"] == 0.0


@pytest.mark.slow
def test_each_evaluation_logs_its_episodes_at_the_steps_done(runs):
    scalars = read_scalars(runs["eval"])
    for tag in EVAL_EPISODE_TAGS:
        assert [step for step, _ in scalars[tag]] == [step for step in EVAL_STEPS for _ in "ab"]
    assert all(value >= 1 and value == int(value) for _, value in scalars["eval/episodic_length"])
    seconds = scalars["charts/eval_seconds"]
    assert [step for step, _ in seconds] == EVAL_STEPS
    totals = [value for _, value in seconds]  # the seconds spent evaluating so far
    assert totals[0] > 0 and totals == sorted(totals) and len(set(totals)) == 3
    complete = json.loads((runs["eval"] / "complete.json").read_text())
    assert complete["eval_seconds"] == pytest.approx(seconds[-1][1], rel=1e-6)
    read_run_scalars(runs["eval"])  # the pipeline's reader takes the shared steps


@pytest.mark.slow
def test_evaluation_time_is_left_out_of_the_training_time(runs):
    """charts/elapsed_seconds counts training only: with the evaluations' seconds added it stays
    within the time since the process was launched (it would exceed it by the evaluations'
    seconds, several here as each films a video, were they counted twice)."""
    launched = float((runs["root"] / "launched").read_text())
    scalars = read_run_scalars(runs["eval"])
    last = scalars[scalars.tag == "charts/elapsed_seconds"].iloc[-1]
    eval_seconds = json.loads((runs["eval"] / "complete.json").read_text())["eval_seconds"]
    assert eval_seconds > 0.5  # three filmed episodes
    assert last.value + eval_seconds <= last.wall_time - launched + 0.25
    sps = scalars[scalars.tag == "charts/SPS"]
    elapsed = dict(scalars.loc[scalars.tag == "charts/elapsed_seconds", ["step", "value"]].values)
    assert all(point.value == int(point.step / elapsed[point.step]) for point in sps.itertuples())


@pytest.mark.slow
def test_the_first_episode_of_each_evaluation_is_filmed(runs):
    videos = runs["eval"] / "videos"
    assert sorted(path.name for path in videos.iterdir()) == [
        "final.mp4", "step-400.mp4", "step-800.mp4"]  # fmt: skip
    lengths = points(runs["eval"], "eval/episodic_length")
    for name, step in (("step-400.mp4", 400), ("step-800.mp4", 800), ("final.mp4", 1200)):
        first_length = next(int(value) for at, value in lengths if at == step)
        assert_has_episode_frames(videos / name, first_length)
    assert count_frames(videos / "final.mp4") > 1


@pytest.mark.slow
@pytest.mark.parametrize(("run", "total_timesteps"), [("eval", 1200), ("reference", 500)])
def test_saved_policy_replays_the_final_evaluation(runs, run, total_timesteps):
    run_dir = runs[run]
    (model,) = run_dir.glob("*.cleanrl_model")
    assert model.name == "sac_continuous_action.cleanrl_model"
    payload = torch.load(model, map_location="cpu", weights_only=True)
    assert payload["update_path"] == ("reference" if run == "reference" else "fast")
    final = [
        value for step, value in points(run_dir, "eval/episodic_return") if step == total_timesteps
    ]
    assert len(final) == (2 if run == "eval" else 10)
    result = evaluate_saved_policy(run_dir, episodes=len(final), video=False)
    assert [float(np.float32(value)) for value in result.returns] == final


@pytest.mark.slow
def test_evaluate_command_prints_the_returns_and_never_overwrites_a_video(runs, tmp_path: Path):
    run_dir = tmp_path / "run"
    shutil.copytree(runs["eval"], run_dir)
    completed = subprocess.run(
        [sys.executable, "-m", "sacbench.evaluate", str(run_dir), "--episodes", "2", "--video"],
        capture_output=True,
        text=True,
        check=True,
    )
    final = [value for step, value in points(run_dir, "eval/episodic_return") if step == 1200]
    printed = [line for line in completed.stdout.splitlines() if line.startswith("episode ")]
    assert [float(line.split("return ")[1].split(",")[0]) for line in printed] == pytest.approx(
        final, abs=1e-3
    )
    assert f"video: {run_dir / 'videos' / 'evaluate-seed1.mp4'}" in completed.stdout
    again = evaluate_saved_policy(run_dir, episodes=1, video=True, seed=5)
    again_too = evaluate_saved_policy(run_dir, episodes=1, video=True, seed=5)
    assert again.video == run_dir / "videos" / "evaluate-seed5.mp4"
    assert again_too.video == run_dir / "videos" / "evaluate-seed5-2.mp4"
    assert_has_episode_frames(again_too.video, again_too.lengths[0])
    assert again.returns == again_too.returns
    assert [episode.seed for episode in again.episodes] == [
        episode_seed(seed=5, step=1200, episode=0)
    ]
    assert not list((run_dir / "videos").glob(".recording-*"))


# ---- resume and reruns --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill_point",
    # After the evaluation at 800 and before that step's checkpoint: resumed from 600, it
    # evaluates at 800 again but not at 400 (checkpointed after its evaluation). After the final
    # evaluation, before the final state: resumed from 1000, it evaluates at 1200 again only.
    ["after-evaluation-800", "before-final-state"],
)
def test_killed_run_keeps_the_evaluation_schedule(runs, tmp_path, monkeypatch, capsys, kill_point):
    run_dir = tmp_path / "run"
    monkeypatch.setenv(KILL_POINT_VARIABLE, kill_point)
    killed = run_trainer(run_dir, *EVAL, check=False)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    monkeypatch.delenv(KILL_POINT_VARIABLE)
    capsys.readouterr()

    # Resumed in this process: the kill point is unset, and this run films nothing.
    assert train_in_process(run_dir, *EVAL) == 0

    resumed = capsys.readouterr().out
    evaluated = [line for line in resumed.splitlines() if line.startswith("evaluation")]
    redone = [800, 1200] if kill_point == "after-evaluation-800" else [1200]
    assert [int(line.split()[2]) for line in evaluated] == redone
    scalars = read_scalars(run_dir)
    for tag in EVAL_EPISODE_TAGS:
        assert [step for step, _ in scalars[tag]] == [step for step in EVAL_STEPS for _ in "ab"]
    # Videos are a session setting: the filmed run's scalars are this run's.
    assert reproducible(scalars) == reproducible(read_scalars(runs["eval"]))
    read_run_scalars(run_dir)  # no (tag, step) logged by both sessions


@pytest.mark.slow
def test_run_dir_recorded_before_evaluation_existed_is_not_trained_again(runs, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(runs["reference"], run_dir)
    metadata = json.loads((run_dir / "metadata.json").read_text())
    for name in DEFAULTS_OF_UNRECORDED_FIELDS:
        del metadata["args"][name]
    (run_dir / "metadata.json").write_text(json.dumps(metadata))
    before = {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")}

    assert train_in_process(run_dir, *REFERENCE) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert train_in_process(run_dir, *REFERENCE, "--eval-episodes", "3") == 2
    assert "eval_episodes: recorded 10, asked 3" in capsys.readouterr().err
    assert {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")} == before


@pytest.mark.slow
def test_finished_run_asked_for_its_model_and_video_gets_them_without_training(runs, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(runs["reference"], run_dir)
    (model,) = run_dir.glob("*.cleanrl_model")
    model.unlink()
    before = {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")}

    completed = run_trainer(run_dir, *REFERENCE, "--save-model", "--capture-video")

    assert "nothing to do" in completed.stdout and "saved the final actor" in completed.stdout
    assert {path.name: path.read_bytes() for path in run_dir.glob("*tfevents*")} == before
    final = [value for step, value in points(run_dir, "eval/episodic_return") if step == 500]
    replayed = evaluate_saved_policy(run_dir, episodes=10, video=False).returns
    assert [float(np.float32(value)) for value in replayed] == final
    first_length = int(next(v for s, v in points(run_dir, "eval/episodic_length") if s == 500))
    assert_has_episode_frames(run_dir / "videos" / "final.mp4", first_length)


@pytest.mark.slow
def test_a_machine_that_cannot_render_fails_before_training(tmp_path, monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "glfw")  # a valid backend that needs a display there is none of
    monkeypatch.delenv("DISPLAY", raising=False)
    completed = run_trainer(tmp_path / "run", *BASE, "--capture-video", check=False)
    assert completed.returncode == 2
    assert "cannot render InvertedPendulum-v4 with MUJOCO_GL=glfw" in completed.stderr
    assert not (tmp_path / "run").exists()
