"""Real short training runs of `python -m sacbench.train`: tags, cadence, SPS, metadata, resume."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sacbench.events import read_run_scalars
from sacbench.tags import EPISODE_TAGS, EVAL_EPISODE_TAGS, EVAL_TAGS, LOSS_TAGS, TIME_TAGS
from sacbench.training.checkpoint import load_state
from sacbench.training.cli import main
from sacbench.training.run_dir import RunDir
from tests.trainer_runs import (
    SHORT_RUN,
    read_scalars,
    reproducible,
    run_trainer,
    start_trainer,
    train_in_process,
    write_format_1_state,
)

pytestmark = pytest.mark.slow

RUN = (*SHORT_RUN, "--checkpoint-interval", "200", "--update-path", "fast")
# CleanRL's literal update path, on a smaller task: its resume is as exact as the fast path's.
REFERENCE_RUN = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "500",
                 "--learning-starts", "200", "--batch-size", "16", "--checkpoint-interval", "100",
                 "--update-path", "reference")  # fmt: skip


# --precision bf16 on the same small task: a checkpoint resumes it as exactly as a float32 run.
BF16_RUN = (*REFERENCE_RUN[:-2], "--update-path", "fast", "--precision", "bf16")


@pytest.fixture(scope="module")
def timed_run(tmp_path_factory) -> tuple[Path, float]:
    """A finished run of RUN, and the time.time() just before its process was started."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    launched = time.time()
    run_trainer(run_dir, *RUN)
    return run_dir, launched


@pytest.fixture(scope="module")
def finished_run(timed_run) -> Path:
    return timed_run[0]


@pytest.fixture(scope="module")
def finished_reference_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished-reference") / "run"
    assert train_in_process(run_dir, *REFERENCE_RUN) == 0
    return run_dir


def test_every_tag_is_written_at_cleanrl_cadence(finished_run):
    scalars = read_scalars(finished_run)
    assert set(scalars) == {*LOSS_TAGS, *EPISODE_TAGS, *TIME_TAGS, *EVAL_TAGS}
    # The final evaluation (10 episodes by default), at the number of steps done.
    for tag in EVAL_EPISODE_TAGS:
        assert [step for step, _ in scalars[tag]] == [1500] * 10, tag
    assert [step for step, _ in scalars["charts/eval_seconds"]] == [1500]
    # Losses and SPS every 100 steps once global_step > learning_starts (1000) of 1500 steps.
    for tag in (*LOSS_TAGS, "charts/SPS", "charts/steady_SPS"):
        assert [step for step, _ in scalars[tag]] == [1100, 1200, 1300, 1400], tag
    # One return per finished episode, logged at the episode's last step.
    lengths = [int(value) for _, value in scalars["charts/episodic_length"]]
    return_steps = [step for step, _ in scalars["charts/episodic_return"]]
    assert len(lengths) == len(return_steps) >= 10
    cumulative = 0
    for length, step in zip(lengths, return_steps, strict=True):
        cumulative += length
        assert step == cumulative - 1
    assert cumulative <= 1500


def test_sps_is_cleanrl_formula_over_the_time_since_the_start(timed_run):
    finished_run, launched = timed_run
    scalars = read_run_scalars(finished_run)
    elapsed = dict(scalars.loc[scalars.tag == "charts/elapsed_seconds", ["step", "value"]].values)
    sps_points = scalars[scalars.tag == "charts/SPS"]
    assert list(sps_points.step) == [1100, 1200, 1300, 1400]
    # The event writer stamps every point with its own clock: the trainer's elapsed time at a
    # step must lie between that stamp minus the first point's (the run had started by then)
    # and that stamp minus the moment the process was launched. The slack covers the writes
    # between the trainer's reading of the clock and the writer's.
    first_stamp = scalars.wall_time.min()
    for point in sps_points.itertuples():
        seconds = elapsed[point.step]
        assert point.value == int(point.step / seconds)
        assert point.wall_time - first_stamp - 0.25 <= seconds, point
        assert seconds <= point.wall_time - launched + 0.25, point
    assert max(elapsed) == 1499  # the final step's elapsed time is recorded too
    complete = json.loads((finished_run / "complete.json").read_text())
    assert complete["global_step"] == 1500
    assert complete["elapsed_seconds"] == pytest.approx(elapsed[1499], rel=1e-3)


def test_hyperparameters_text_and_metadata(finished_run):
    (event_file,) = finished_run.glob("*tfevents*")
    accumulator = EventAccumulator(str(event_file), size_guidance={"tensors": 0})
    accumulator.Reload()
    assert "hyperparameters/text_summary" in accumulator.Tags()["tensors"]
    metadata = json.loads((finished_run / "metadata.json").read_text())
    assert metadata["args"]["env_id"] == "Hopper-v4"
    assert metadata["args"]["batch_size"] == 64
    assert metadata["args"]["learning_starts"] == 1000
    assert set(metadata["versions"]) >= {"python", "torch", "gymnasium", "mujoco", "numpy"}
    assert metadata["versions"]["mujoco"] == "2.3.7"
    assert set(metadata["sacbench"]) == {"version", "git_describe", "git_commit", "git_dirty"}
    host = metadata["host"]
    assert host["gpu_model"] is None and host["torch_threads"] == 1 and host["cpu_model"]
    assert metadata["exit_status"] == "completed" and metadata["ended_at"]
    (session,) = metadata["sessions"]
    assert session["start_step"] == 0 and session["end_step"] == 1500


def test_same_seed_gives_identical_scalars(finished_run, tmp_path):
    # Here in this process, there in a process of its own: the same scalars.
    assert train_in_process(tmp_path / "again", *RUN) == 0
    assert reproducible(read_scalars(tmp_path / "again")) == reproducible(
        read_scalars(finished_run)
    )


def test_finished_run_is_not_trained_again(finished_run, capsys):
    before = {path.name: path.stat().st_mtime_ns for path in finished_run.rglob("*")}
    assert train_in_process(finished_run, *RUN) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert {path.name: path.stat().st_mtime_ns for path in finished_run.rglob("*")} == before


def test_run_dir_with_other_args_is_refused_and_left_alone(finished_run, capsys):
    before = sorted(path.name for path in finished_run.rglob("*"))
    assert train_in_process(finished_run, *RUN, "--batch-size", "32", "--seed", "7") == 2
    refusal = capsys.readouterr().err
    assert "batch_size: recorded 64, asked 32" in refusal
    assert "seed: recorded 1, asked 7" in refusal
    assert sorted(path.name for path in finished_run.rglob("*")) == before


def test_overwrite_moves_the_old_run_aside(tmp_path):
    run_dir = tmp_path / "run"
    short = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "300", "--learning-starts",
             "200", "--batch-size", "16")  # fmt: skip
    assert train_in_process(run_dir, *short) == 0
    assert train_in_process(run_dir, *short, "--gamma", "0.9", "--overwrite") == 0
    (moved,) = tmp_path.glob("run.replaced-*")
    assert (moved / "complete.json").exists()
    assert json.loads((run_dir / "metadata.json").read_text())["args"]["gamma"] == 0.9


# ---- kill and resume --------------------------------------------------------------------------


def _signal_when(process: subprocess.Popen, *, at_step: int, signal_number: int) -> list[str]:
    """Send the signal once the trainer reports a step >= at_step; return what it printed."""
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if line.startswith("global_step=") and int(line.split(",")[0].split("=")[1]) >= at_step:
            process.send_signal(signal_number)
            break
    lines.extend(process.stdout.read().splitlines(keepends=True))
    process.wait(timeout=120)
    return lines


@pytest.mark.parametrize(
    ("signal_number", "at_step"),
    [
        (signal.SIGTERM, 400),  # random-action phase, mid-episode
        (signal.SIGTERM, 1150),  # training phase
        (signal.SIGUSR1, 1330),  # what Slurm sends before a time limit
        (signal.SIGKILL, 1300),  # no warning: resumes at 1200, a log step, from the checkpoint
    ],
    ids=["sigterm-random-phase", "sigterm-training", "sigusr1", "sigkill-after-checkpoint"],
)
def test_killed_and_resumed_run_equals_uninterrupted(
    finished_run, tmp_path, signal_number, at_step
):
    _assert_killed_and_resumed_run_equals(
        finished_run, tmp_path / "run", RUN, signal_number=signal_number, at_step=at_step
    )


def test_a_signal_right_after_a_step_was_judged_not_due_stops_the_next_step_checkpointed(
    tmp_path, monkeypatch, capsys
):
    """A signal can arrive between the check for a checkpoint and the check for a stop. The
    step reads the signal once for both, so the run stops one step later, checkpointed there,
    and says so truly; it never stops without its checkpoint."""
    from sacbench.training import loop

    judged = loop.checkpoint_due
    signalled_at = 250

    def then_a_signal(args, stop_signal, finished_steps) -> bool:
        due = judged(args, stop_signal, finished_steps)
        if finished_steps == signalled_at:
            signal.raise_signal(signal.SIGUSR1)  # handled before this step's stop check
        return due

    monkeypatch.setattr(loop, "checkpoint_due", then_a_signal)
    run_dir = tmp_path / "run"
    no_periodic_checkpoint = (*REFERENCE_RUN[:-4], "--checkpoint-interval", "0")
    assert train_in_process(run_dir, *no_periodic_checkpoint) == 128 + signal.SIGUSR1
    stopped_at = signalled_at + 1
    assert load_state(run_dir / "checkpoint" / "state.pt")["global_step"] == stopped_at
    assert f"SIGUSR1 received: checkpointed at step {stopped_at}" in capsys.readouterr().out


def test_reference_path_killed_and_resumed_equals_uninterrupted(finished_reference_run, tmp_path):
    run_dir = tmp_path / "run"
    _assert_killed_and_resumed_run_equals(
        finished_reference_run, run_dir, REFERENCE_RUN, signal_number=signal.SIGTERM, at_step=330
    )
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["args"]["update_path"] == "reference"
    assert 330 < metadata["sessions"][1]["start_step"] < 400  # resumed mid-interval, training


def test_bf16_run_killed_and_resumed_equals_uninterrupted(tmp_path, capsys):
    finished = tmp_path / "finished"
    assert train_in_process(finished, *BF16_RUN) == 0
    losses = read_scalars(finished)["losses/qf_loss"]
    assert [step for step, _ in losses] == [300, 400]  # it trained (learning_starts 200)
    run_dir = tmp_path / "run"
    _assert_killed_and_resumed_run_equals(
        finished, run_dir, BF16_RUN, signal_number=signal.SIGTERM, at_step=330
    )
    args = json.loads((run_dir / "metadata.json").read_text())["args"]
    assert (args["update_path"], args["precision"]) == ("fast", "bf16")
    # A float32 run is another run: the bf16 run dir refuses it and stays as it is.
    capsys.readouterr()
    assert train_in_process(run_dir, *BF16_RUN[:-2], "--precision", "fp32") == 2
    assert "precision: recorded 'bf16', asked 'fp32'" in capsys.readouterr().err


def test_legacy_checkpoint_resumes(finished_run, tmp_path):
    """A format-1 state.pt (numpy arrays in the pickle), as runs in flight hold them."""
    run_dir = tmp_path / "run"

    def rewrite_as_format_1(state_path: Path) -> None:
        state = load_state(state_path)
        assert state["global_step"] > 1000  # resumes into the training phase
        write_format_1_state(state_path, state)
        assert "numpy.ndarray" in torch.serialization.get_unsafe_globals_in_checkpoint(
            str(state_path)
        )

    _assert_killed_and_resumed_run_equals(
        finished_run,
        run_dir,
        RUN,
        signal_number=signal.SIGTERM,
        at_step=1150,
        before_resume=rewrite_as_format_1,
    )
    assert torch.load(run_dir / "checkpoint" / "state.pt", weights_only=True)["format"] == 2


def _assert_killed_and_resumed_run_equals(
    finished: Path,
    run_dir: Path,
    run: tuple[str, ...],
    *,
    signal_number: int,
    at_step: int,
    before_resume: Callable[[Path], None] | None = None,
) -> None:
    """Kill the run at `at_step`, then resume it (after `before_resume` has seen its state.pt)."""
    process = start_trainer(run_dir, *run)
    output = _signal_when(process, at_step=at_step, signal_number=signal_number)
    assert process.returncode in (128 + signal_number, -signal_number), "".join(output)
    assert not (run_dir / "complete.json").exists()
    if signal_number != signal.SIGKILL:
        assert any("checkpointed at step" in line for line in output)
    if before_resume is not None:
        before_resume(run_dir / "checkpoint" / "state.pt")

    # The resume needs no process of its own: the signal went to the first session's.
    assert train_in_process(run_dir, *run) == 0

    resumed = read_scalars(run_dir)
    for tag, series in resumed.items():
        steps = [step for step, _ in series]
        # An evaluation's episodes share its step; the reader rejects one logged by two sessions.
        expected = sorted(steps) if tag in EVAL_EPISODE_TAGS else sorted(set(steps))
        assert steps == expected, f"{tag} has repeated or unordered steps"
    read_run_scalars(run_dir)
    assert reproducible(resumed) == reproducible(read_scalars(finished))
    assert all(value > 0 for _, value in resumed["charts/steady_SPS"])
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert len(metadata["sessions"]) == 2
    assert metadata["sessions"][-1]["exit_status"] == "completed"
    first_status = metadata["sessions"][0]["exit_status"]
    if signal_number == signal.SIGKILL:
        assert first_status == "running"  # a SIGKILL leaves no chance to record anything
    else:
        assert first_status == f"signal {signal.Signals(signal_number).name}"
    complete = json.loads((run_dir / "complete.json").read_text())
    assert complete["global_step"] == int(run[run.index("--total-timesteps") + 1])
    assert not list((run_dir / "checkpoint").glob("rows-*.npz"))  # buffer dropped once finished


def test_last_step_on_the_log_cadence_is_logged_once(tmp_path):
    assert train_in_process(tmp_path / "r", "--env-id", "InvertedPendulum-v4",
                            "--total-timesteps", "301", "--learning-starts", "200",
                            "--batch-size", "16") == 0  # fmt: skip
    elapsed = read_scalars(tmp_path / "r")["charts/elapsed_seconds"]
    assert [step for step, _ in elapsed] == [300]


# ---- fixed entropy coefficient ----------------------------------------------------------------


@pytest.mark.parametrize("update_path", ["fast", "reference"])
def test_run_with_fixed_alpha_keeps_it_and_writes_no_alpha_loss(tmp_path, update_path):
    run_dir = tmp_path / "r"
    assert train_in_process(run_dir, "--env-id", "InvertedPendulum-v4", "--total-timesteps",
                            "450", "--learning-starts", "200", "--batch-size", "16",
                            "--no-autotune", "--alpha", "0.3",
                            "--update-path", update_path) == 0  # fmt: skip
    assert json.loads((run_dir / "complete.json").read_text())["global_step"] == 450
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["args"]["autotune"] is False and metadata["args"]["alpha"] == 0.3
    scalars = read_scalars(run_dir)
    # CleanRL writes losses/alpha_loss only when it tunes alpha.
    assert set(scalars) == {*LOSS_TAGS, *EPISODE_TAGS, *TIME_TAGS, *EVAL_TAGS} - {
        "losses/alpha_loss"
    }
    assert scalars["losses/alpha"] == [(300, float(np.float32(0.3))), (400, float(np.float32(0.3)))]
    assert [step for step, _ in scalars["losses/actor_loss"]] == [300, 400]  # the actor trained
    learner = RunDir(run_dir).load_checkpoint()["learner"]
    assert learner["path"] == update_path
    assert float(learner["alpha"]) == 0.3 and float(learner["log_alpha"]) == 0.0
    assert "alpha_loss" not in learner["last"]


def test_without_run_dir_it_trains_into_cleanrls_run_name_and_a_second_start_finds_it(
    tmp_path, monkeypatch, capsys
):
    """In this process (no second interpreter start-up): as CleanRL's script is used, with no
    --run-dir; resuming an interrupted run dir is tested above."""
    monkeypatch.chdir(tmp_path)
    command = ["--env-id", "InvertedPendulum-v4", "--seed", "2", "--total-timesteps", "250",
               "--learning-starts", "100", "--batch-size", "16",
               "--eval-episodes", "0"]  # fmt: skip
    assert main(command) == 0
    first = capsys.readouterr().out
    name = "InvertedPendulum-v4__sac_continuous_action__2"
    assert first.startswith(f"run dir: runs/{name} (no --run-dir: ")
    # CleanRL's line per episode stays; its SPS line every 100 steps is gone.
    assert re.search(r"^global_step=\d+, episodic_return=", first, re.MULTILINE)
    assert not re.search(r"SPS=\d+$", first, re.MULTILINE)
    assert [path.name for path in (tmp_path / "runs").iterdir()] == [name]
    complete = json.loads((tmp_path / "runs" / name / "complete.json").read_text())
    assert complete["global_step"] == 250
    assert main(command) == 0
    assert f"runs/{name} holds a run that finished all 250 steps" in capsys.readouterr().out
