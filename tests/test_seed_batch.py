"""Real seed batches of `python -m sacbench.train_seeds`: each seed as alone, its own run dir,
kill and resume, and the refusals.

The alone side is the real `python -m sacbench.train` of each seed, whose default update is the
hand-written formulation; a batch computes the autograd formulation's arithmetic
(sacbench.sac.batched), so the two agree to rounding, which Adam's normalisation and the env
amplify over many updates (measured: up to 4e-3 in a weight after 100 updates). Hence a short
training phase here, 10 updates and one log point: on it a batch's seeds agree with their runs
alone to 1e-7 in the parameters and 2e-7 relative in every scalar (measured on Zen 3; the test
allows 1e-5 and 1e-4), while two different seeds differ by 0.6.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sacbench.training.checkpoint import load_state
from sacbench.training.seed_batch_cli import main as main_seed_batch
from tests.trainer_runs import read_scalars, reproducible, run_trainer, stop_once_it_prints

pytestmark = pytest.mark.slow

SEEDS = ("1", "2")
# 1,090 random steps, then 10 policy steps with an update each; the log point is step 1100.
SHORT = ("--env-id", "Hopper-v4", "--total-timesteps", "1101", "--learning-starts", "1090",
         "--batch-size", "64", "--eval-episodes", "0")  # fmt: skip
# Long enough to stop in the training phase: updates from step 1001, log points 1100 and 1200.
LONGER = ("--env-id", "Hopper-v4", "--total-timesteps", "1300", "--learning-starts", "1000",
          "--batch-size", "64", "--eval-episodes", "0", "--checkpoint-interval", "0")  # fmt: skip


def batch_command(run_dir_pattern: Path, *extra: str, seeds: tuple[str, ...] = SEEDS) -> list[str]:
    return [sys.executable, "-m", "sacbench.train_seeds", "--seeds", *seeds,
            "--run-dir", str(run_dir_pattern), *extra]  # fmt: skip


def run_batch(run_dir_pattern: Path, *extra: str, seeds: tuple[str, ...] = SEEDS):
    completed = subprocess.run(
        batch_command(run_dir_pattern, *extra, seeds=seeds), capture_output=True, text=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed


def learner_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    learner = load_state(run_dir / "checkpoint" / "state.pt")["learner"]
    return {
        f"{network}.{name}": tensor
        for network in ("actor", "critic", "target_critic")
        for name, tensor in learner[network].items()
    }


def largest_difference(one: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    assert one.keys() == other.keys()
    return max((one[name] - other[name]).abs().max().item() for name in one)


def test_each_seed_of_a_batch_trains_as_it_does_alone(tmp_path):
    run_batch(tmp_path / "batch" / "seed{seed}", *SHORT)
    for seed in SEEDS:
        run_trainer(tmp_path / "alone" / f"seed{seed}", "--seed", seed, *SHORT)

    for seed in SEEDS:
        batched, alone = tmp_path / "batch" / f"seed{seed}", tmp_path / "alone" / f"seed{seed}"
        batched_scalars, alone_scalars = (reproducible(read_scalars(d)) for d in (batched, alone))
        assert batched_scalars.keys() == alone_scalars.keys()
        assert [step for step, _ in batched_scalars["losses/qf_loss"]] == [1100]  # it trained
        for tag, series in alone_scalars.items():
            steps, values = zip(*series, strict=True)
            batched_steps, batched_values = zip(*batched_scalars[tag], strict=True)
            assert batched_steps == steps, tag  # the same episodes, ended at the same steps
            np.testing.assert_allclose(batched_values, values, rtol=1e-4, atol=1e-6, err_msg=tag)
        assert largest_difference(learner_parameters(batched), learner_parameters(alone)) < 1e-5

        complete = json.loads((batched / "complete.json").read_text())
        assert complete["global_step"] == 1101
        metadata = json.loads((batched / "metadata.json").read_text())
        assert metadata["args"]["seed"] == int(seed)
        assert metadata["args"]["run_dir"] == str(batched)
        assert metadata["sessions"][-1]["seed_batch"] == [1, 2]
    # The comparison can tell seeds apart: seed 1 in the batch against seed 2 alone.
    other_seed = largest_difference(
        learner_parameters(tmp_path / "batch" / "seed1"),
        learner_parameters(tmp_path / "alone" / "seed2"),
    )
    assert other_seed > 0.1


def test_a_stopped_batch_resumes_as_if_uninterrupted_and_each_seed_can_go_on_alone(tmp_path):
    run_batch(tmp_path / "whole" / "seed{seed}", *LONGER)
    pattern = tmp_path / "stopped" / "seed{seed}"
    status, output = stop_once_it_prints(
        batch_command(pattern, *LONGER),
        line_prefix="seed=2 global_step=1200, SPS=",
        cwd=tmp_path,
        env=dict(os.environ),
    )
    assert status == 128 + signal.SIGTERM, output
    stopped_at = load_state(tmp_path / "stopped" / "seed1" / "checkpoint" / "state.pt")
    step = stopped_at["global_step"]
    assert 1200 < step < 1300, output
    for seed in SEEDS:
        assert not (tmp_path / "stopped" / f"seed{seed}" / "complete.json").exists()

    # A seed that does not stand where the others do is refused before any run dir changes.
    refused = subprocess.run(
        batch_command(pattern, *LONGER, seeds=(*SEEDS, "3")), capture_output=True, text=True
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"seed 1 at step {step}" in refused.stderr and "seed 3 at step 0" in refused.stderr
    assert not (tmp_path / "stopped" / "seed3").exists()

    # Seed 2's checkpoint is an ordinary run's: `python -m sacbench.train` goes on from it alone.
    alone = tmp_path / "alone-after-stop" / "seed2"
    alone.parent.mkdir()
    subprocess.run(["cp", "-a", str(tmp_path / "stopped" / "seed2"), str(alone)], check=True)
    run_trainer(alone, "--seed", "2", *LONGER)
    sessions = json.loads((alone / "metadata.json").read_text())["sessions"]
    assert [session["start_step"] for session in sessions] == [0, step]
    whole_seed2 = reproducible(read_scalars(tmp_path / "whole" / "seed2"))
    alone_scalars = reproducible(read_scalars(alone))
    assert alone_scalars.keys() == whole_seed2.keys()
    for tag, series in whole_seed2.items():  # the batch's own events, up to the stop
        assert [p for p in alone_scalars[tag] if p[0] < step] == [p for p in series if p[0] < step]

    run_batch(pattern, *LONGER)
    for seed in SEEDS:
        resumed = read_scalars(tmp_path / "stopped" / f"seed{seed}")
        for tag, series in resumed.items():
            steps = [point_step for point_step, _ in series]
            assert steps == sorted(set(steps)), f"{tag} has repeated or unordered steps"
        assert reproducible(resumed) == reproducible(
            read_scalars(tmp_path / "whole" / f"seed{seed}")
        )
        metadata = json.loads((tmp_path / "stopped" / f"seed{seed}" / "metadata.json").read_text())
        statuses = [session["exit_status"] for session in metadata["sessions"]]
        assert statuses == ["signal SIGTERM", "completed"]
        assert (tmp_path / "stopped" / f"seed{seed}" / "complete.json").exists()


def test_a_batch_refuses_what_it_cannot_train_before_touching_any_run_dir(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main_seed_batch(["--seed", "3"]) == 2
    assert "--seed: a seed batch takes --seeds" in capsys.readouterr().err
    status = main_seed_batch(
        ["--seeds", "1", "1", "--run-dir", "runs/one", "--update-path", "reference",
         "--eval-frequency", "100", "--capture-video", "--precision", "bf16"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2
    for problem in (
        "--update-path 'reference': a seed batch computes the fast path",
        "--precision 'bf16': a seed batch computes in float32",
        "--eval-frequency 100: a seed batch runs no evaluation",
        "--capture-video True: a seed batch films nothing",
        "--seeds 1 1: each seed at most once",
        "--run-dir 'runs/one': needs {seed}",
    ):
        assert problem in err, err
    assert main_seed_batch(["--seeds", "1", "--env-id", "Hoper-v4"]) == 2
    assert "Hoper-v4" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
