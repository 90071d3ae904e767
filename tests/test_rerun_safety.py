"""Reruns are safe, whatever removed a run's completion record (issue #10).

Every case runs real Snakemake over a copy of one finished tiny benchmark (two InvertedPendulum-v4
runs of 500 steps) and ends with valid, complete runs and correct tables:
- `--forcerun train`, `--forcerun` of one run, a changed session setting (checkpoint interval,
  device, threads) and a complete.json deleted by hand each restore the completion record from
  the run's final state without training anything: the event files are untouched and the tables
  equal the first run's;
- a changed setting that defines the run retrains it, after moving the old run dir aside;
- a train job killed at any point of its completion is finished by the next `snakemake`, and its
  scalars equal those of a run that was never killed.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sacbench.atomic import new_file_mode
from sacbench.tags import CLOCK_TAGS, EVAL_EPISODE_TAGS
from sacbench.training.checkpoint import load_state
from sacbench.training.run_dir import KILL_POINT_VARIABLE, KILL_POINTS
from tests.trainer_runs import read_scalars, reproducible, train_in_process, write_format_1_state
from tests.workflow_copies import run_verbatim, workflow_copy, write_config

pytestmark = pytest.mark.slow

CONFIG = {
    "env_ids": ["InvertedPendulum-v4"],
    "seeds": [1, 2],
    "train": {
        "total_timesteps": 500,
        "learning_starts": 100,
        "batch_size": 32,
        "buffer_size": 500,
        "checkpoint_interval": 150,
    },
}
RUNS = {seed: f"results/runs/sac_continuous_action/InvertedPendulum-v4/{seed}" for seed in (1, 2)}
TABLES = ("results/sac_runtimes.csv", "results/sac.csv", "results/sac_aggregate.csv")
# What every Snakemake run here asks for: the tables, which need every run and its extraction.
# The plots are left out because no case here checks them, and they cost more than the tables.
TARGETS = " ".join(TABLES)


def snakemake(workdir: Path, arguments: str = "", **kwargs) -> str:
    # The targets go first: --forcerun takes every argument that follows it.
    result = run_verbatim(workdir, f"snakemake --cores 2 {TARGETS} {arguments}", **kwargs)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stderr


def fingerprint(run_dir: Path) -> dict[str, str]:
    """Every event file by its content: a retrained or re-logged run changes it."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(run_dir.glob("*tfevents*"))
    }


def train_log(workdir: Path, seed: int) -> str:
    path = workdir / f"results/logs/train/sac_continuous_action/InvertedPendulum-v4/{seed}.log"
    return path.read_text()


def assert_valid_complete_run(run_dir: Path, *, total_timesteps: int = 500) -> None:
    complete = json.loads((run_dir / "complete.json").read_text())
    assert complete["global_step"] == total_timesteps and complete["elapsed_seconds"] > 0
    metadata = json.loads((run_dir / "metadata.json").read_text())
    assert metadata["exit_status"] == "completed"
    for record in ("complete.json", "metadata.json", "progress.json"):
        assert (run_dir / record).stat().st_mode & 0o777 == new_file_mode(), f"{record} mode"
    assert not list((run_dir / "checkpoint").glob("rows-*.npz")), "buffer chunks left behind"
    scalars = read_scalars(run_dir)
    for tag, series in scalars.items():
        steps = [step for step, _ in series]
        if tag in EVAL_EPISODE_TAGS:  # one point per episode of the final evaluation, logged once
            assert steps == [total_timesteps] * 10, f"{tag}: {steps}"
        else:
            assert len(steps) == len(set(steps)), f"{tag}: a step logged twice"
    assert max(step for step, _ in scalars["charts/elapsed_seconds"]) == total_timesteps - 1


def tables(workdir: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_csv(workdir / name) for name in TABLES}


def assert_tables_equal(workdir: Path, baseline: Path) -> None:
    for name, frame in tables(workdir).items():
        pd.testing.assert_frame_equal(frame, pd.read_csv(baseline / name), obj=name)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    workdir = workflow_copy(tmp_path_factory.mktemp("rerun"), CONFIG)
    snakemake(workdir)
    return workdir


@pytest.fixture
def rerun(finished: Path, tmp_path: Path) -> Path:
    """A copy of the finished benchmark, Snakemake's records included."""
    copy = tmp_path / "sacbench"
    shutil.copytree(finished, copy, symlinks=True)
    return copy


@pytest.mark.parametrize(
    "arguments, rerun_seeds",
    [
        ("--forcerun train", (1, 2)),
        (f"--forcerun {RUNS[2]}/complete.json", (2,)),
        ("--set-threads train=2", ()),
    ],
    ids=["forcerun-train", "forcerun-one-run", "other-threads"],
)
def test_forced_reruns_restore_the_record_without_training(
    rerun: Path, finished: Path, arguments: str, rerun_seeds: tuple[int, ...]
):
    before = {seed: fingerprint(rerun / RUNS[seed]) for seed in RUNS}

    output = snakemake(rerun, arguments)

    assert output.count("rule train:") == len(rerun_seeds)
    for seed in RUNS:
        assert fingerprint(rerun / RUNS[seed]) == before[seed], f"seed {seed} was retrained"
        assert_valid_complete_run(rerun / RUNS[seed])
    for seed in rerun_seeds:
        assert "its completion record was restored" in train_log(rerun, seed)
    assert_tables_equal(rerun, finished)


def test_changed_session_settings_do_not_retrain(rerun: Path, finished: Path):
    before = {seed: fingerprint(rerun / RUNS[seed]) for seed in RUNS}
    config = json.loads(json.dumps(CONFIG))
    config["train"].update(checkpoint_interval=50, device="cpu")
    write_config(rerun, config)

    output = snakemake(rerun, "--set-threads train=2")

    # The trainer flags changed, so Snakemake reruns the jobs; the trainer trains nothing.
    assert output.count("rule train:") == 2
    for seed in RUNS:
        assert fingerprint(rerun / RUNS[seed]) == before[seed]
        assert "nothing to do" in train_log(rerun, seed)
        assert_valid_complete_run(rerun / RUNS[seed])
    assert_tables_equal(rerun, finished)


def status_rows(workdir: Path) -> dict[int, dict]:
    """python -m sacbench.status --json: each seed's row."""
    completed = run_verbatim(workdir, "python -m sacbench.status --json")
    assert completed.returncode == 0, completed.stderr
    return {run["seed"]: run for run in json.loads(completed.stdout)["runs"]}


def test_completion_record_deleted_by_hand_is_restored(rerun: Path, finished: Path):
    before = fingerprint(rerun / RUNS[1])
    (rerun / RUNS[1] / "complete.json").unlink()

    # Every table is newer than the record that went: Snakemake has nothing to redo.
    assert "Nothing to be done" in snakemake(rerun)
    # The status names the command that restores it: asked for the run itself, Snakemake
    # reruns the train job, which restores the record.
    row = status_rows(rerun)[1]
    assert row["state"] == "done"
    command = re.fullmatch(r"complete.json missing: `(.+)` restores it, without training",
                           row["note"]).group(1)  # fmt: skip
    assert command == f"snakemake --cores 1 {RUNS[1]}/complete.json"
    restored = run_verbatim(rerun, command)
    assert restored.returncode == 0, restored.stderr[-4000:]
    output = restored.stderr

    assert output.count("rule train:") == 1
    assert "its completion record was restored" in train_log(rerun, 1)
    assert fingerprint(rerun / RUNS[1]) == before
    assert_valid_complete_run(rerun / RUNS[1])
    snakemake(rerun)
    assert_tables_equal(rerun, finished)


def test_changed_run_defining_setting_retrains_and_keeps_the_old_run(rerun: Path):
    config = json.loads(json.dumps(CONFIG))
    config["train"]["gamma"] = 0.98
    write_config(rerun, config)
    # Before the rerun, the status shows the finished runs as another config's.
    for row in status_rows(rerun).values():
        assert row["state"] == "differs" and row["percent"] is None
        assert row["differs"] == {"gamma": {"run": 0.99, "config": 0.98}}

    output = snakemake(rerun)

    assert output.count("rule train:") == 2
    for seed in RUNS:
        run_dir = rerun / RUNS[seed]
        assert_valid_complete_run(run_dir)
        assert json.loads((run_dir / "metadata.json").read_text())["args"]["gamma"] == 0.98
        (moved,) = run_dir.parent.glob(f"{seed}.replaced-*")
        assert json.loads((moved / "metadata.json").read_text())["args"]["gamma"] == 0.99
        assert (moved / "complete.json").exists()
    assert {row["state"] for row in status_rows(rerun).values()} == {"done"}
    returns = pd.read_csv(rerun / "results/sac.csv")
    assert len(returns) >= 1


@pytest.mark.parametrize("kill_point", KILL_POINTS)
def test_job_killed_while_completing_is_finished_by_the_next_run(
    kill_point: str, finished: Path, tmp_path: Path
):
    config = {**CONFIG, "seeds": [1]}
    workdir = workflow_copy(tmp_path, config)

    killed = run_verbatim(
        workdir, f"snakemake --cores 2 {TARGETS}", extra_env={KILL_POINT_VARIABLE: kill_point}
    )
    assert killed.returncode != 0, "the train job should have died"
    assert not (workdir / RUNS[1] / "complete.json").exists()

    snakemake(workdir)

    run_dir = workdir / RUNS[1]
    assert_valid_complete_run(run_dir)
    assert reproducible(read_scalars(run_dir)) == reproducible(read_scalars(finished / RUNS[1]))
    extracted = "results/extracted/sac_continuous_action/InvertedPendulum-v4/1.csv"
    assert reproducible_rows(workdir / extracted).equals(reproducible_rows(finished / extracted))
    assert (workdir / "results/sac.md").is_file()


def reproducible_rows(extracted_csv: Path) -> pd.DataFrame:
    frame = pd.read_csv(extracted_csv)
    frame = frame[~frame["tag"].isin(CLOCK_TAGS)].drop(columns="wall_time")
    return frame.sort_values(["tag", "step"]).reset_index(drop=True)


# ---- the trainer alone -------------------------------------------------------------------------

SHORT = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "400", "--learning-starts",
         "100", "--batch-size", "16", "--checkpoint-interval", "150")  # fmt: skip


def test_a_finished_run_of_an_older_sacbench_is_repaired_not_retrained(tmp_path: Path, capsys):
    """Run dirs finished before the final state existed: the last checkpoint is a periodic
    one whose buffer chunks completion deleted. Asked again, they must not fail forever."""
    run_dir = tmp_path / "run"
    assert train_in_process(run_dir, *SHORT) == 0
    record = json.loads((run_dir / "complete.json").read_text())
    # Make it look like sacbench 0.1.0 left it: format 1, no final marks, no complete.json.
    state_path = run_dir / "checkpoint" / "state.pt"
    state = load_state(state_path)
    for key in ("finished", "completion"):
        state.pop(key)
    state["global_step"] = 300
    state["buffer"] = {"added": 300, "chunks": ["rows-000000000000-000000000300.npz"]}
    write_format_1_state(state_path, state)
    (run_dir / "complete.json").unlink()
    before = fingerprint(run_dir)

    capsys.readouterr()
    assert train_in_process(run_dir, *SHORT) == 0

    assert "its completion record was restored" in capsys.readouterr().out
    assert fingerprint(run_dir) == before
    restored = json.loads((run_dir / "complete.json").read_text())
    assert restored["global_step"] == 400
    assert restored["elapsed_seconds"] == pytest.approx(record["elapsed_seconds"], rel=1e-6)
